"""h2d_stall on real traces: ResNet-50's pageable host-to-device copies (../shared/traces, skipped
without them). Both runs, 0 and 4 DataLoader workers, feed the GPU through pageable host memory
(19.3 MB per step, ~9 GB/s on the 0-worker run), but the copy is ~1-3% of the step: reported only
when the threshold is lowered."""
from __future__ import annotations

import pytest

from tests.support.analysis import by_kind


def test_h2d_copies_are_pageable_and_small_share(resnet):
    h2d0 = by_kind(resnet[0]["all"])["h2d_stall"]
    h2d4 = by_kind(resnet[4]["all"])["h2d_stall"]
    assert h2d0.metrics["pageable_share"] == 1.0
    assert h2d0.metrics["mb_per_step"] == pytest.approx(19.268, abs=0.001)
    assert h2d0.metrics["achieved_gbps"] == pytest.approx(9.08, abs=0.05)
    assert h2d0.metrics["achieved_gbps"] < h2d0.metrics["link_gbps"]
    assert h2d0.cost_pct == pytest.approx(1.37, abs=0.05)
    assert h2d4.cost_pct < 5.0
    # no compute overlaps the copies: all their time is exposed
    assert h2d0.metrics["h2d_overlap_pct"] == 0.0
    assert resnet[0]["ranks"][0]["h2d_time_ms"] == pytest.approx(h2d0.metrics["copy_ms_per_step"], abs=0.001)
