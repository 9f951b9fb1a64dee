"""This machine's GPUs (NVML): name, memory, clocks, PCIe / NVLink topology; or a plain 'none here'."""
from __future__ import annotations

import pandas as pd
import streamlit as st

from app import state

from app.gpu_info import read_gpus

st.title("This machine's GPUs")
state.page_start()
st.caption("Where the fix demos would run (`python -m accel.demo FIX --device cuda`).")
info = read_gpus()
if not info["ok"]:
    st.info(info["reason"] + " Traces can still be analysed here; demos run on CPU.")
    st.stop()

st.markdown(f"Driver {info['driver']} · {len(info['gpus'])} GPU(s)")
st.dataframe(pd.DataFrame(info["gpus"]), hide_index=True, width="stretch", column_config={
    "memory_total_gib": st.column_config.NumberColumn("memory GiB", format="%.1f"),
    "memory_used_gib": st.column_config.NumberColumn("used GiB", format="%.1f"),
})
if len(info["gpus"]) > 1:
    st.subheader("Topology (how each pair of GPUs is connected)")
    names = [f"GPU {g['index']}" for g in info["gpus"]]
    st.dataframe(pd.DataFrame(info["topology"], index=names, columns=names), width="stretch")
