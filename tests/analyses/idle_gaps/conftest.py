"""Real traces loaded once for the idle-gap kinds' tests (../shared/traces; skipped without them):
real, five small traces analysed with no reporting threshold; resnet, ResNet-50 with 0 and 4
DataLoader workers, analysed with and without it."""
from __future__ import annotations

import pytest

from analyzers.analysis.metrics import rank_summary
from analyzers.execution.pipeline import analyze_run, run_analyses
from analyzers.ingest import ingest_paths
from analyzers.store.database import connect


@pytest.fixture(scope="package")
def real(shared_traces):
    con = connect(":memory:")
    out = {}
    for name in ("alexnet_single_gpu", "triton_single_kernel", "cpu_only_rank34", "no_distributed_info_cpu_ops",
                 "rocm_mi250_minitoy"):
        res = ingest_paths(con, [shared_traces / f"{name}.json.gz"], name=name)
        out[name] = run_analyses(con, res.run_id, {"MIN_FINDING_PCT": 0.0})
    yield out
    con.close()


@pytest.fixture(scope="package")
def resnet(shared_traces):
    con = connect(":memory:")
    out = {}
    for workers in (0, 4):
        res = ingest_paths(con, [shared_traces / f"resnet50_num_workers_{workers}.json.gz"])
        out[workers] = {
            "default": analyze_run(con, res.run_id),
            "all": run_analyses(con, res.run_id, {"MIN_FINDING_PCT": 0.0})[0],
            "ranks": rank_summary(con, res.run_id),
        }
    yield out
    con.close()
