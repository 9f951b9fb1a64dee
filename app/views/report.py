"""Report: the run's review as self-contained HTML (charts embedded), Markdown and JSON."""
from __future__ import annotations

import json

import pandas as pd
import streamlit as st

from analyzers.read import queries
from analyzers.store import runs as run_store
from app import charts, fixinfo, review, state, ui

st.title("Report")
run_id = ui.need_run()
if run_id is None:
    st.stop()

try:
    from analyzers.read.report import build_report, render_html, render_markdown
except ImportError as exc:
    st.error(f"The report module is not available in this checkout ({exc}).")
    st.stop()

report = build_report(state.cur(), run_id)
rows = review.review_rows(report.get("findings", []), run_store.get_marks(state.cur(), run_id))
run = report.get("run") or {}
n_findings, n_ranks = len(report.get("findings", [])), len(report.get("ranks", []))
st.markdown(f"Review of **{ui.md(run.get('name', run_id))}**: {ui.count(n_findings, 'finding')}, "
            f"{ui.count(n_ranks, 'rank')}, {len(rows)} marked on the Findings page.")


# Queried here, in the script run: html_with_charts runs later, when the button is clicked and
# outside this thread, so it must not touch the session's cursor.
per_rank = state.rank_breakdown(state.db_path(), run_id)
steps = state.step_breakdown(state.db_path(), run_id)
waterfall = queries.whatif_waterfall(state.whatif(run_id))


def html_with_charts() -> str:
    """render_html's page plus the review marks and the dashboard's charts (plotly.js inlined once,
    so the file opens offline)."""
    figures = []
    if len(per_rank):
        figures.append(charts.breakdown_bars(per_rank, "Where a step's time goes, per rank (mean ms per step)"))
    if len(steps):
        figures.append(charts.heatmap(steps, "step_ms", "Step time per rank and step (ms)"))
    if len(waterfall) > 1:
        figures.append(charts.whatif_waterfall(waterfall, {f["id"]: ui.kind_title(f["kind"])
                                                          for f in report.get("findings", [])}))
    blocks = [fig.to_html(full_html=False, include_plotlyjs="inline" if i == 0 else False)
              for i, fig in enumerate(figures)]
    charts_html = '<section class="charts"><h2>Charts</h2>' + "".join(blocks) + "</section>" if blocks else ""
    return review.insert_before_body_end(render_html(report), review.review_html(rows) + charts_html)


markdown = render_markdown(report) + review.review_markdown(rows)
left, middle, right = st.columns(3)
left.download_button("Download HTML report", data=html_with_charts, file_name=f"tracedoctor_{run_id[:8]}.html",
                     mime="text/html", icon=":material/download:", type="primary")
middle.download_button("Download Markdown report", data=markdown, file_name=f"tracedoctor_{run_id[:8]}.md",
                       mime="text/markdown", icon=":material/download:")
right.download_button("Download JSON (CLI contract)", data=json.dumps(report, indent=2, default=str),
                      file_name=f"tracedoctor_{run_id[:8]}.json", mime="application/json",
                      icon=":material/download:")

st.subheader("Findings in this report")
if report.get("findings"):
    # the same titles as the Findings page and the HTML report: best fit first, as the report lists them
    ui.table(pd.DataFrame([{"#": i, "finding": ui.kind_title(f["kind"]), "severity": f["severity"],
                            "rank": f["rank"], "step": f["step"], "ms/step": f["cost_ms_per_step"],
                            "% of step": f["cost_pct"], "memory": ui.human_bytes(f.get("cost_bytes")),
                            "step after fix": (f.get("whatif") or {}).get("step_ms_after"),
                            "fixes": ", ".join(fixinfo.fix_details(fix_id)["title"] for fix_id in f["fixes"])}
                           for i, f in enumerate(report["findings"], start=1)]),
             column_config={"ms/step": st.column_config.NumberColumn(format="%.3f"),
                            "% of step": st.column_config.NumberColumn(format="%.1f"),
                            "step after fix": st.column_config.NumberColumn(
                                "step after fixing it alone", format="%.2f ms",
                                help="replayed (what-if): the measured step minus the saving; empty: no prediction"),
                            "fixes": st.column_config.TextColumn("fixes (best fit first)", width="large")})
else:
    st.success("No findings.")
st.subheader("Review marks")
if rows:
    ui.table(pd.DataFrame(rows))
else:
    st.caption("No finding marked yet (mark them on the Findings page).")
with st.expander("Markdown source"):
    st.code(markdown, language="markdown")
