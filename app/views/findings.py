"""Findings ranked by cost per step: what, where, how much, the evidence, the fix, the review mark."""
from __future__ import annotations

import streamlit as st

from analyzers.store import runs as run_store
from analyzers.analysis.kinds import analysis_specs
from app import auth, charts, fixinfo, state, ui

SPECS = analysis_specs()   # each kind's evidence series: which step-breakdown column, its label
MARK_CHOICES = [None, "to_fix", "fixed", "wont_fix"]

st.title("Findings")
run_id = ui.need_run()
if run_id is None:
    st.stop()

found = state.findings(run_id)
ui.show_notes(run_id)
if not found:
    st.success("No findings for this run: nothing costs enough GPU time per step to report.")
    st.stop()

kinds = sorted({f["kind"] for f in found})
chosen = st.multiselect("Kinds", kinds, default=kinds, format_func=ui.kind_title)
found = [f for f in found if f["kind"] in chosen]
cpu_only = state.is_cpu_only(run_id)
st.caption(f"{ui.count(len(found), 'finding')}, costliest first. Cost = "
           f"{'time' if cpu_only else 'GPU time'} lost per step, the most a fix can save.")

steps = state.step_breakdown(state.db_path(), run_id)
origin = (state.time_bounds(state.db_path(), run_id) or (None, None))[0]
per_rank = state.rank_breakdown(state.db_path(), run_id)


def evidence(finding: dict) -> None:
    spec = SPECS.get(finding["kind"])
    if spec is None:    # a kind this version no longer has (a finding stored by an older one)
        column, title, per_rank_chart, differs = "idle_ms", "GPU idle per step", False, ""
    else:
        column, title = spec.evidence.column, spec.evidence.label
        per_rank_chart, differs = spec.evidence.per_rank, ui.evidence_difference(spec.evidence.differs, finding["metrics"])
    if per_rank_chart and len(per_rank) > 1 and not cpu_only:
        # Step times are equal across ranks (collectives wait for the slowest); the work is not.
        st.plotly_chart(charts.per_rank_bars(per_rank[column], per_rank["rank"], title, highlight_rank=finding["rank"]),
                        width="stretch", key=f"ev-{finding['id']}")
    if cpu_only:   # no GPU in the trace: its idle and compute columns say nothing; the steps do
        column, title, differs = "step_ms", "Step time", ""
    rank = finding["rank"] if finding["rank"] is not None else (steps["rank"].min() if len(steps) else None)
    rank_steps = steps[steps["rank"] == rank] if rank is not None else steps.iloc[0:0]
    if not per_rank_chart and len(rank_steps):
        st.plotly_chart(charts.per_step_bars(rank_steps, column, f"{title} (rank {rank})", finding["step"]),
                        width="stretch", key=f"ev-{finding['id']}")
        clock = ("Host ProfilerSteps (no GPU in this trace)." if cpu_only
                 else "Steps on the GPU clock (the window in which the GPU ran each step).")
        st.caption(f"{clock} {ui.md(differs)}")
    for key, series in charts.metric_series(finding["metrics"])[:2]:
        st.plotly_chart(charts.metric_bars(key, series), width="stretch", key=f"ev-{finding['id']}-{key}")
    if finding["metrics"]:
        st.caption("Measured evidence (metrics), click to unfold:")
        st.json(finding["metrics"], expanded=False)


def fixes(finding: dict) -> None:
    if not finding["fixes"]:
        st.caption("No fix in the library addresses this finding yet.")
        return
    ruled_out = finding.get("fixes_ruled_out") or {}
    unknown = finding.get("fixes_unknown") or {}
    tabs = st.tabs([fixinfo.fix_details(f)["title"] + (" (unlikely here)" if f in ruled_out else
                                                       " (not measured here)" if f in unknown else "")
                    for f in finding["fixes"]])
    for tab, fix_id in zip(tabs, finding["fixes"]):
        with tab:
            fix = fixinfo.fix_details(fix_id)
            code = fixinfo.pasteable(fix_id, finding["metrics"])
            if fix_id in ruled_out:
                st.warning("Probably not the fix here: " + ui.md(ruled_out[fix_id]), icon=":material/info:")
            elif fix_id in unknown:
                st.info("Whether it fits cannot be told from this trace: " + ui.md(unknown[fix_id]),
                        icon=":material/help:")
            if fix["description"]:
                st.markdown(fix["description"])
            if fix["needs"]:
                st.caption("Needs: " + ", ".join(fix["needs"]))
            if code["snippet"]:
                st.code(code["snippet"], language="python")
                names = "; ".join(f"`{name}`: {what}" for name, what in code["placeholders"].items())
                st.caption((f"Your program's names: {names}. " if names else "")
                           + f"How to get `accel`: {code['install']}.")
            st.markdown("Profile it before and after on your machine:")
            st.code(fix["demo"], language="bash")
            gains = fixinfo.gain_tables(fix_id)
            if gains:
                st.markdown("Measured in `accel/BENCHMARKS.md`:")
            for table in gains:
                # a static table wraps its cells, so every column shows at the card's width (a
                # scrolling grid would cut the long workload texts and hide the columns after them)
                st.table(table, hide_index=True, border="horizontal")


def mark_form(finding: dict) -> None:
    with st.form(key=f"mark-{run_id}-{finding['id']}", border=False):
        left, right, button = st.columns([1, 3, 1], vertical_alignment="bottom")
        status = left.selectbox("Review", MARK_CHOICES, index=MARK_CHOICES.index(finding["mark_status"])
                                if finding["mark_status"] in MARK_CHOICES else 0, format_func=ui.MARK_LABELS.get)
        note = right.text_input("Note", value=finding["mark_note"], max_chars=500)
        if button.form_submit_button("Save mark"):
            state.write(run_store.set_mark, run_id, finding["id"], status, note, actor=auth.actor())
            st.toast(f"Marked {ui.md(finding['id'])}: {ui.MARK_LABELS[status]}")
            st.rerun()


OPEN_CARDS = 3  # the costliest findings open; the rest folded, so the page stays scannable
by_id = {f["id"]: f for f in state.findings(run_id)}
whatif_doc = state.whatif(run_id)
predictions = (whatif_doc or {}).get("findings") or {}   # every finding, for naming a consequence's cause

for position, finding in enumerate(found, start=1):
    cost_text, share_text = ui.cost_words(finding)
    folded_label = (f"{position}. {ui.kind_title(finding['kind'])} — {cost_text} "
                    f"({share_text}) · {ui.md(ui.where(finding))}")
    card = st.container(border=True) if position <= OPEN_CARDS else st.expander(folded_label)
    with card:
        head, cost = st.columns([4, 1])
        head.subheader(f"{position}. {ui.kind_title(finding['kind'])} {ui.severity(finding['severity'])}")
        if finding.get("caused_by"):
            head.warning(f"A consequence of **{ui.kind_title(by_id.get(finding['caused_by'], {}).get('kind', ''))}** "
                         f"(finding {ui.md(finding['caused_by'])}): fix that one; this cost is the same time seen "
                         "from the waiting ranks and is not counted again.", icon=":material/link:")
        head.markdown(ui.md(finding["summary"]))
        head.caption(ui.md(ui.where(finding, origin)) + f" · id {ui.md(finding['id'])}")
        if finding["metrics"].get("cost_bytes") is not None:
            cost.metric("Memory", cost_text, share_text, delta_color="off", delta_arrow="off")
        else:
            cost.metric("Cost per step", f"{finding['cost_ms_per_step']:,.2f} ms", share_text,
                        delta_color="off", delta_arrow="off")
        if finding["mark_status"]:
            cost.caption(f"Review: **{ui.MARK_LABELS[finding['mark_status']]}**")
        prediction = predictions.get(finding["id"])
        if prediction and prediction["saving_ms"] < 0.005:
            cost.caption(f"Fixing it alone saves nothing in the replay: the step waits on other work "
                         f"({prediction['on_critical_path_ms']:,.2f} ms per step of what it changes is on the "
                         "critical path). It can still matter after the fixes before it (Overview).")
        elif prediction:
            cost.metric("Step after fixing it alone", f"{prediction['step_ms_after']:,.2f} ms",
                        f"-{prediction['saving_ms']:,.2f} ms", delta_color="inverse",
                        help=f"replayed with this fix: {prediction['fix']}; "
                             f"{prediction['on_critical_path_ms']:,.2f} ms per step of what it changes lies on "
                             "the critical path")
            with cost.popover("Assumptions"):
                for assumption in prediction["assumptions"]:
                    st.markdown("- " + ui.md(assumption))
        elif whatif_doc:
            cost.caption("What fixing it saves: no prediction (no fix model for this kind"
                         + (", or a consequence)" if finding.get("caused_by") else ")"))
        # evidence, then the fix below it at the card's full width: its code needs every column
        evidence_col, fix_col = st.container(), st.container()
        with evidence_col:
            evidence(finding)
            if finding["start_ns"] is not None and st.button("Show in timeline", key=f"tl-{finding['id']}",
                                                             icon=":material/timeline:"):
                st.session_state["timeline_focus"] = finding["id"]
                st.switch_page("views/timeline.py")
            if finding["start_ns"] is not None and st.button("Kernels in this window", key=f"kn-{finding['id']}",
                                                             icon=":material/bar_chart:"):
                st.session_state["kernels_focus"] = finding["id"]
                st.switch_page("views/kernels.py")
        with fix_col:
            st.markdown("**Fix**")
            fixes(finding)
        mark_form(finding)
