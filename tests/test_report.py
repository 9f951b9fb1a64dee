"""build_report follows the CLI JSON contract; Markdown and HTML renderings are complete and
escape every trace-derived string."""
from __future__ import annotations

import html
import json

import pytest

from analyzers.read.fixes import computed_finding_contract
from analyzers.execution.pipeline import analyze_run
from analyzers.common.model import FileError
from analyzers.read.report import build_report, render_html, render_markdown
from analyzers.store.runs import set_mark
from analyzers.store.database import connect

from analysis_support import hand_written_store
from test_launch_gap import synthetic_events

EVIL = '<script>alert("x")</script>|**bold**'
RUN_KEYS = {"run_id", "name", "world_size", "ranks", "files", "start_us",   # start_us: additive, for "ms into the trace"
            "workload", "engine", "workload_evidence",                    # additive: what the run does
            "step_unit",                                                   # additive: what a step is
            "whatif"}                                                      # additive: the replayed what-if
RANK_KEYS = {"rank", "steps", "step_time_ms", "idle_pct", "compute_pct", "non_compute_pct", "comm_time_ms",
             "comm_overlap_pct", "h2d_time_ms", "memory"}   # memory: additive, None without [memory] events
FINDING_KEYS = {"id", "kind", "severity", "rank", "step", "stream", "start_us", "end_us", "cost_ms_per_step",
                "cost_pct", "summary", "metrics", "fixes", "fixes_ruled_out", "fixes_unknown", "review", "ranks", "caused_by",
                "cost_bytes", "cost_pct_of_device_memory",   # additive: memory findings' cost
                "whatif"}                                    # additive: the step after this fix alone


@pytest.fixture()
def report():
    rows = synthetic_events()
    for r in rows:        # a hostile kernel name must come out escaped wherever it shows up
        if r["kind"] == "kernel" and r["name"] == "vectorized_elementwise_kernel":
            r["name"] = EVIL
    con = hand_written_store(rows, name=EVIL, file_name=EVIL + ".json")
    findings = analyze_run(con, "syn", {"MIN_FINDING_PCT": 0.0})
    rep = build_report(con, "syn", errors=[FileError(EVIL, "not JSON: " + EVIL)])
    con.close()
    return rep, findings


def test_review_marks_reach_json_markdown_and_html_escaped():
    con = hand_written_store(synthetic_events(), name="r", file_name="r0.json")
    first, second = analyze_run(con, "syn", {"MIN_FINDING_PCT": 0.0})[:2]
    set_mark(con, "syn", first.finding_id, "wont_fix", "owner: " + EVIL)
    rep = build_report(con, "syn")
    by_id = {f["id"]: f for f in rep["findings"]}
    assert by_id[first.finding_id]["review"] == {"status": "wont_fix", "note": "owner: " + EVIL}
    assert by_id[second.finding_id]["review"] is None
    assert "- **Review:** won't fix — owner: " in render_markdown(rep)    # named as the dashboard names it
    page = render_html(rep)
    assert "<b>Review:</b> won&#x27;t fix — owner: " + html.escape(EVIL) in page
    assert EVIL not in page
    con.close()


def test_report_follows_the_contract(report):
    rep, findings = report
    assert set(rep) == {"run", "errors", "ranks", "memory_snapshots", "findings", "notes"}
    assert set(rep["run"]) == RUN_KEYS
    assert rep["run"]["ranks"] == [0] and rep["run"]["files"] == [EVIL + ".json"]
    assert rep["errors"] == [{"file": EVIL, "error": "not JSON: " + EVIL}]
    assert [set(r) for r in rep["ranks"]] == [RANK_KEYS]
    assert rep["ranks"][0]["steps"] == 2 and rep["ranks"][0]["step_time_ms"] == pytest.approx(10.0)
    assert all(set(f) == FINDING_KEYS for f in rep["findings"])
    assert [f["id"] for f in rep["findings"]] == [f.finding_id for f in findings]
    # the stored report adds the what-if replay's prediction, which a just-computed finding lacks
    assert {k: v for k, v in rep["findings"][0].items() if k != "whatif"} == computed_finding_contract(findings[0])
    assert rep["findings"][0]["whatif"] is None or rep["findings"][0]["whatif"]["saving_ms"] >= 0
    assert rep["findings"][0]["cost_ms_per_step"] == pytest.approx(1.505)
    json.dumps(rep)   # plain JSON all the way down


def test_markdown_reads_well_and_keeps_tables_intact(report):
    rep, _ = report
    md = render_markdown(rep)
    assert "## Top findings" in md and "## Per-rank figures" in md
    assert "| 1 | medium | The data loader starves the training loop | rank 0, step 1" in md
    assert "| Tune DataLoader workers, pinning and prefetch from the trace (+1 more) |" in md   # the best fix, titled
    assert "(`dataloader_tuning`)" in md     # its id beside the title, in a code span (shown as typed)
    assert "<script>" not in md
    # every table row has the header's number of cells (a pipe in trace text is escaped)
    for block in md.split("\n\n"):
        rows = [l for l in block.splitlines() if l.startswith("|")]
        if rows:
            widths = {len(l.replace("\\|", "").split("|")) for l in rows}
            assert len(widths) == 1, block


def test_html_is_self_contained_and_escaped(report):
    rep, _ = report
    page = render_html(rep)
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    assert "<script" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "src=" not in page and "http" not in page   # nothing fetched from elsewhere
    assert page.count('class="finding"') == len(rep["findings"])


def test_unknown_run_reports_an_error():
    con = connect(":memory:")
    rep = build_report(con, "nope")
    assert rep["run"] is None and rep["findings"] == [] and "nope" in rep["errors"][0]["error"]
    render_markdown(rep), render_html(rep)
    con.close()


def test_report_carries_the_analyses_notes(monkeypatch):
    """Notes an analysis adds during analyze_run reach the report built on the same connection."""
    import analyzers.analysis.kinds.launch_gap as launch_gap
    original = launch_gap.find

    def noting_find(con, run_id, ctx):
        ctx.notes.append("launch analysis says hello <b>")
        return original(con, run_id, ctx)

    monkeypatch.setattr(launch_gap, "find", noting_find)
    con = connect(":memory:")
    con.execute("INSERT INTO runs (run_id, name, created_at, content_hash, world_size) VALUES ('cpu', 'cpu', now(), 'x', 1)")
    con.execute("INSERT INTO ranks (run_id, rank, file_name, file_hash) VALUES ('cpu', 0, 'cpu.json', 'x')")
    assert build_report(con, "cpu")["notes"][0].startswith("The trace has no GPU activity")
    analyze_run(con, "cpu")
    notes = build_report(con, "cpu")["notes"]
    assert notes[0].startswith("The trace has no GPU activity")
    assert "launch analysis says hello <b>" in notes
    assert "hello &lt;b&gt;" in render_html(build_report(con, "cpu"))
    con.close()


def test_report_keeps_null_values_as_null():
    # the report reads the findings through queries.findings(raw=True): what is NULL in the store
    # stays null in the JSON (the dashboard's shape turns it into "" / 0 for display)
    con = hand_written_store(synthetic_events(), name="r", file_name="r0.json")
    first = analyze_run(con, "syn", {"MIN_FINDING_PCT": 0.0})[0]
    set_mark(con, "syn", first.finding_id, "to_fix", None)
    con.execute("UPDATE findings SET summary = NULL WHERE finding_id = ?", [first.finding_id])
    got = {f["id"]: f for f in build_report(con, "syn")["findings"]}[first.finding_id]
    assert got["review"] == {"status": "to_fix", "note": None} and got["summary"] is None
    con.close()


def test_markdown_cells_make_no_links_from_trace_text():
    from analyzers.read.report import _md_cell
    cell = _md_cell("[click](javascript:alert(1)) a|b <img>")
    assert "[click]" not in cell and "\\[click\\]" in cell
    assert "\\|" in cell and "<img>" not in cell
    # nor links a GFM renderer makes by itself (autolink literals), nor emphasis or code spans
    cell = _md_cell("void k<T*>() `x` see http://evil.example/a www.evil.org me@evil.org")
    for linkable in ("http://", "www.", "me@"):
        assert linkable not in cell
    assert "\\*" in cell and "\\`x\\`" in cell
    assert cell.replace("\u200b", "").replace("\\", "").replace("&lt;", "<").replace("&gt;", ">") == \
        "void k<T*>() `x` see http://evil.example/a www.evil.org me@evil.org"   # the text itself unchanged


def test_dashboard_markdown_leaves_no_url_for_streamlit_to_link():
    from app.ui import md
    shown = md('run http://evil.example/x","x") www.evil.com a@b.com')
    assert "http://" not in shown and "www." not in shown and "a@" not in shown


RLO = "\u202e"


def _store_with_op_named(op_name: str, run_name: str = "r"):
    """The hand-written trace with its host-sync op (reported in the host_sync summary) renamed."""
    rows = synthetic_events()
    for r in rows:
        if r["name"] == "aten::item":
            r["name"] = op_name
    con = hand_written_store(rows, name=run_name, file_name="r0.json")
    analyze_run(con, "syn", {"MIN_FINDING_PCT": 0.0})
    return con


def test_markdown_links_no_trace_text_but_keeps_the_teams_own_links():
    con = _store_with_op_named("aten::item http://evil.example/op", run_name="job www.evil.org me@evil.org")
    first = build_report(con, "syn")["findings"][0]
    set_mark(con, "syn", first["id"], "to_fix", "see https://tickets.example/T-1_2#c3")
    rep = build_report(con, "syn")
    assert any("http://evil.example/op" in f["summary"] for f in rep["findings"])
    md = render_markdown(rep)
    for linkable in ("http://evil", "www.evil", "me@evil"):     # title, summaries: trace text
        assert linkable not in md
    assert "https://tickets.example/T-1_2#c3" in md              # the team's note: a working link
    con.close()


def test_nul_esc_and_bidi_overrides_never_reach_a_report_raw():
    hostile = "op\x00\x1b[2J" + RLO + "gnp.exe"
    con = _store_with_op_named(hostile, run_name=hostile)
    rep = build_report(con, "syn", errors=[FileError(hostile + ".json", "not JSON: " + hostile)])
    # shown as escapes (in Markdown, their backslashes escaped in turn so they render as typed)
    for page, shown in ((render_markdown(rep), r"\\x1b\[2J\\u202egnp.exe"), (render_html(rep), r"\x1b[2J\u202egnp.exe")):
        for raw in ("\x00", "\x1b", RLO):
            assert raw not in page
        assert shown in page
    con.close()


def test_a_huge_op_name_is_clipped_in_summaries_and_reports():
    huge = "aten::" + "x" * 200_000
    con = _store_with_op_named(huge)
    rep = build_report(con, "syn")
    assert any("aten::xxx" in f["summary"] and "…" in f["summary"] for f in rep["findings"])
    assert len(json.dumps(rep)) < 30_000
    assert len(render_markdown(rep)) < 30_000 and len(render_html(rep)) < 30_000
    con.close()


# --- titles, fix code and the team's links (issue 15) --------------------------------------------

TICKET = "https://jira.example.com/browse/TD-1_2?q=a&b=*x*~y%20z#c(3)"   # every character a renderer might eat


def _hand_report(note: str | None = None, run_name: str = "r") -> dict:
    """A report of a straggler and the comm wait it causes, the first marked for fixing."""
    from analyzers.read.fixes import computed_finding_contract
    from analyzers.common.model import Finding

    cause = Finding(kind="rank_imbalance", severity="high", rank=3, step=1, stream=None, t_start_ns=0, t_end_ns=10,
                    cost_ns=6.2e6, cost_pct=20.0,
                    summary="Rank 3 is the straggler.", finding_id="rank_imbalance",
                    metrics={"imbalance_source": "input", "shapes_compared": True, "shape_differs": True})
    effect = Finding(kind="comm_exposed", severity="medium", rank=0, step=1, stream=None, t_start_ns=0, t_end_ns=10,
                     cost_ns=3e6, cost_pct=10.0,
                     summary="Ranks wait in all-reduce.", finding_id="comm_exposed:r0",
                     metrics={"mean_msg_bytes": 1024, "collectives_per_step": 48},
                     caused_by="rank_imbalance")
    findings = [computed_finding_contract(f, {"has_gpu": True, "ranks": 4}) for f in (cause, effect)]
    findings[0]["review"] = {"status": "to_fix", "note": note}
    return {"run": {"run_id": "r", "name": run_name, "world_size": 4, "ranks": [0, 1, 2, 3], "files": [],
                    "start_us": 0.0}, "errors": [], "ranks": [], "findings": findings, "notes": []}


def _links(page: str) -> list[tuple[str, str]]:
    """(href, text) of every <a> in an HTML page, entities decoded as a browser does."""
    from html.parser import HTMLParser

    class Links(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found, self.href = [], None

        def handle_starttag(self, tag, attrs):
            if tag == "a":
                self.href, self.text = dict(attrs).get("href"), ""

        def handle_data(self, data):
            if self.href is not None:
                self.text += data

        def handle_endtag(self, tag):
            if tag == "a" and self.href is not None:
                self.found.append((self.href, self.text))
                self.href = None

    parser = Links()
    parser.feed(page)
    return parser.found


def test_reports_name_kinds_marks_and_causes_as_the_dashboard_does():
    from app.ui import MARK_LABELS, kind_title
    rep = _hand_report()
    for page, text in ((render_markdown(rep), lambda s: s.replace("\\", "")), (render_html(rep), html.unescape)):
        shown = text(page)
        assert kind_title("rank_imbalance") in shown and kind_title("comm_exposed") in shown
        assert "Review: " + MARK_LABELS["to_fix"] in shown.replace("*", "").replace("<b>", "").replace("</b>", "")
        assert "to_fix" not in shown
        assert f"a consequence of {kind_title('rank_imbalance')} (finding rank_imbalance)" in shown
        assert "Balance tokens per rank with a length-aware distributed sampler" in shown   # fix titles


def test_reports_carry_each_fix_code_escaped_with_its_metrics_and_the_demo_command():
    from accel import registry
    rep = _hand_report()
    page, md = render_html(rep), render_markdown(rep)
    for fix_id, metrics in (("balanced_sampler", rep["findings"][0]["metrics"]),
                            ("ddp_bucket_tuning", rep["findings"][1]["metrics"])):
        code = registry.get(fix_id).snippet_for(metrics)
        assert f"<pre><code>{html.escape(code)}</code></pre>" in page
        assert f"```python\n{code.rstrip()}\n```" in md
        assert f"python -m accel.demo {fix_id} --out DIR" in page and f"python -m accel.demo {fix_id} --out DIR" in md
    assert "metrics = {'collectives_per_step': 48, 'mean_msg_bytes': 1024}" in md   # the finding's own numbers
    assert "pip install -e ." in md and "pip install -e ." in page                 # how to get accel
    assert "<code>local_rank</code>" in page and "`local_rank`" in md              # the user's names explained


def test_a_teams_link_survives_byte_for_byte_while_trace_urls_stay_dead():
    trace_url = "http://evil.example/steal_(x)?a=1"
    rep = _hand_report(note=f"ticket {TICKET}, owner ana", run_name=f"job {trace_url}")
    rep["findings"][1]["summary"] = f"op {trace_url} waits"
    md, page = render_markdown(rep), render_html(rep)
    # Markdown: the note's URL is an <autolink>, whose characters a renderer takes literally
    assert f"<{TICKET}>" in md and md.count("<http") == 1
    assert "http://evil" not in md                       # the trace's URL is broken: no autolink
    # HTML: the one link on the page is the note's, its href and text the URL exactly
    assert _links(page) == [(TICKET, TICKET)]
    assert "evil.example" in page and 'href="http://evil' not in page


def test_a_note_without_links_and_one_with_markup_stay_inert():
    from analyzers.common.safe_text import note_html, note_markdown
    assert note_markdown("see [x](javascript:alert(1)) <b>") == "see \\[x\\](javascript:alert(1)) \\<b\\>"
    assert _links(note_html('<a href="javascript:x">y</a> https://ok.example/a.')) == [
        ("https://ok.example/a", "https://ok.example/a")]            # the sentence's full stop is not the URL's
    assert note_markdown("(see https://en.wikipedia.org/wiki/Foo_(bar))") == "(see <https://en.wikipedia.org/wiki/Foo_(bar)>)"


def test_the_report_pages_review_section_keeps_the_teams_link_whole():
    from app import review
    rows = review.review_rows([{"id": "launch_gap", "kind": "launch_gap"}],
                              {"launch_gap": {"status": "to_fix", "note": f"see {TICKET} | owner <b>ana</b>"}})
    md = review.review_markdown(rows)
    assert f"<{TICKET}>" in md and "\u200b" not in md
    row = [line for line in md.splitlines() if line.startswith("| launch")][0]
    assert len(row.replace("\\|", "").split("|")) == 6          # the note's pipe does not split the row
    assert _links(review.review_html(rows)) == [(TICKET, TICKET)]
    assert "&lt;b&gt;ana" in review.review_html(rows)
