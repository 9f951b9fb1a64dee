"""The fused Triton kernel's correctness tests, run on the CPU through Triton's interpreter.

tests/accel/test_accel_kernels.py checks the kernel (forward, backward, the regenerated dropout mask,
gradcheck, bfloat16) against eager PyTorch in float64 on a GPU. triton.jit decides at import
time whether kernels are compiled or interpreted, so on a machine without a GPU those tests run
again here, in a child pytest with TRITON_INTERPRET=1: the same kernel code, executed by
Triton's numpy interpreter. It checks the arithmetic and the Philox mask, not speed.
"""
from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys

import pytest
import torch

from tests.support.paths import REPO_ROOT as REPO


@pytest.mark.skipif(importlib.util.find_spec("triton") is None, reason="Triton is not installed")
@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is here: test_accel_kernels.py runs the kernel itself")
def test_fused_kernel_tests_pass_under_the_triton_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:cacheprovider", "-rs",
         "tests/accel/test_accel_kernels.py", "-k", "fused_kernel or says_why"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = proc.stdout.strip().splitlines()[-1]
    # every selected test ran: the 3 float64 cases, gradcheck + bf16, the wrong-device refusal
    assert re.search(r"\b5 passed\b", summary) and "skipped" not in summary, tail
