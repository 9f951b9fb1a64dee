"""Small presentation helpers shared by the pages (text only; no numbers computed here)."""
from __future__ import annotations

import re
from typing import Any

import streamlit as st

from analyzers.report import no_autolink
from app import state

KIND_TITLES = {
    "launch_gap": "GPU idle between kernel launches",
    "host_sync": "Host synchronisation stalls the GPU",
    "runtime_stall": "Slow CUDA runtime calls (allocator, start-up) stall the GPU",
    "fp32_matmul": "Matmuls and convolutions in FP32 on CUDA cores, not tensor cores",
    "h2d_stall": "Host-to-device copies stall the GPU",
    "dataloader_stall": "The data loader starves the training loop",
    "rank_imbalance": "Unbalanced ranks (a straggler)",
    "comm_exposed": "Communication not hidden behind compute",
}
MARK_LABELS = {None: "not reviewed", "to_fix": "to fix", "fixed": "fixed", "wont_fix": "won't fix"}
SEVERITY_BADGES = {"high": ":red-badge[high]", "medium": ":orange-badge[medium]", "low": ":gray-badge[low]"}


def severity(value: str) -> str:
    """A colored Markdown badge for a severity (unknown values escaped)."""
    return SEVERITY_BADGES.get(value, md(value))

_MARKDOWN_SPECIALS = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$])")


def md(text: Any) -> str:
    """Trace text made inert for st.markdown: every Markdown/HTML special character escaped, and
    no URL left for GFM to link."""
    return no_autolink(_MARKDOWN_SPECIALS.sub(r"\\\1", str(text)))


def count(n: int, noun: str) -> str:
    """'1 finding', '3 findings'."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def kind_title(kind: str) -> str:
    return KIND_TITLES.get(kind, kind.replace("_", " "))


def where(finding: dict[str, Any], origin_ns: int | None = None) -> str:
    """rank · step · stream · window, the window in ms after origin_ns (the run's first event)."""
    parts = ["all ranks" if finding.get("rank") is None else f"rank {finding['rank']}"]
    if finding.get("step") is not None:
        parts.append(f"step {finding['step']}")
    if finding.get("stream") is not None:
        parts.append(f"stream {finding['stream']}")
    if finding.get("start_ns") is not None and finding.get("end_ns") is not None:
        origin = finding["start_ns"] if origin_ns is None else origin_ns
        start_ms = (finding["start_ns"] - origin) / 1e6
        end_ms = (finding["end_ns"] - origin) / 1e6
        parts.append(f"window {start_ms:,.3f}–{end_ms:,.3f} ms into the trace" if origin_ns is not None
                     else f"window of {end_ms - start_ms:,.3f} ms")
    return " · ".join(parts)


def need_run() -> str | None:
    """The current run id, or a friendly pointer to the Load page (returns None then)."""
    run_id = state.page_start()
    if run_id is None:
        st.info("No run loaded yet. Open **Load traces** to upload profiler traces "
                "(one file per rank) or type a directory path.")
        st.page_link("views/load.py", label="Load traces", icon=":material/upload_file:")
    return run_id
