"""fp32_matmul: matrix multiplies and convolutions run in plain FP32 on CUDA cores instead of
tensor cores (TF32 on Ampere and newer, FP16/BF16 mixed precision on Volta and newer).

Cost: per step, the FP32 SIMT GEMM/convolution kernel time times (1 - 1/TENSOR_CORE_SPEEDUP):
what the same math would save at tensor-core speed, an upper bound (small or memory-bound GEMMs
gain less). Only kernel time inside the rank's steps counts (on the GPU clock, lib/gpu_steps.sql),
so ProfilerSteps and inferred iterations give the same figure and start-up is no step's cost.
Kernels are found by name (fp32_matmul.sql). What tensor cores the GPU
has (TF32 from sm_80, FP16 from sm_70, none before) comes from deviceProperties (computeMajor,
the name), else from the architecture cuBLAS/cuDNN put in the kernel names: it decides which fix
comes first, and a GPU without tensor cores gets a note instead of a finding. Where TF32 kernels
already run beside the FP32 ones, TF32 is on and the fix is elsewhere (shapes, autocast).
"""
from __future__ import annotations

import re
from typing import Any

import duckdb

from analyzers.analysis.kinds import query, rounded, to_ms
from analyzers.common.model import AnalysisSpec, EvidenceSeries, Finding

SPEC = AnalysisSpec(
    kind="fp32_matmul",
    title="Matmuls and convolutions in FP32 on CUDA cores, not tensor cores",
    evidence=EvidenceSeries("compute_ms", "GPU compute per step",
                            "{fp32_matmul_ms_per_step:.2f} ms/step of it is FP32 matmuls on CUDA cores; the finding's cost is the part tensor cores would save (assumed {assumed_tensor_core_speedup:g}x faster)."),
    metric_keys=frozenset({"assumed_tensor_core_speedup", "fp32_matmul_ms_per_step",
                           "kernels_per_step", "share_of_compute", "tf32_capable", "tf32_in_use",
                           "top_kernels"}),
)
KIND = SPEC.kind

# GPU names by tensor-core generation (deviceProperties' name; computeMajor where present wins).
_TF32_GPUS = re.compile(r"\b(A\d{1,3}G?|H\d{2,3}|GH\d{3}|B\d{3}|GB\d{3}|L\d{1,2}S?|L40S?|RTX (?:A\d{4}|\d{4} Ada|30\d0|40\d0|50\d0)"
                        r"|GeForce RTX (?:30|40|50)\d0)", re.I)
_FP16_TC_GPUS = re.compile(r"\b(V100|T4|Titan V|TITAN RTX|Quadro RTX|RTX 20\d0|Quadro GV100)", re.I)
_NO_TC_GPUS = re.compile(r"\b(P100|P40|P4|P6|K80|K40|M60|M40|Titan X|GTX)", re.I)
_NOT_CUDA = re.compile(r"\b(AMD|Instinct|Radeon|MI\d{2,3})", re.I)
_ARCH_OF_PREFIX = {"maxwell": 5.0, "pascal": 6.0, "volta": 7.0, "turing": 7.5, "ampere": 8.0, "ada": 8.9,
                   "hopper": 9.0}


def short_name(kernel: str) -> str:
    """A kernel's name without 'void ', namespaces, template arguments and parameters."""
    text = re.sub(r"^void\s+", "", kernel)
    name = text.split("<", 1)[0].split("(", 1)[0].rsplit("::", 1)[-1]
    inner = re.match(r"[\w:]+<\s*([\w:]+)", text)
    if name in ("Kernel", "kernel", "Kernel2") and inner:   # cutlass::Kernel<cutlass_80_simt_sgemm_...>
        name = inner.group(1).rsplit("::", 1)[-1]
    return name or kernel[:60]


def _arch(prefix: str) -> float | None:
    if prefix in _ARCH_OF_PREFIX:
        return _ARCH_OF_PREFIX[prefix]
    digits = prefix[2:] if prefix.startswith("sm") else ""
    return int(digits) / 10 if digits.isdigit() else None


def tensor_cores(device_name: str | None, compute_major: int | None, arch_prefixes: list[str]) -> str | None:
    """'tf32' (sm_80+: TF32 and bf16), 'fp16' (sm_70/75: fp16 only), 'none' (older), or None
    when the trace does not say. The GPU's computeMajor decides where the trace has it, then its
    name, then the newest architecture in the kernel names (cuBLAS may run kernels tuned for an
    older architecture on a newer GPU, not the reverse)."""
    if device_name and _NOT_CUDA.search(device_name):
        return None     # ROCm: matrix cores, other kernels; not this analysis' naming
    level = None
    if compute_major:
        arch: float | None = float(compute_major)
    elif device_name and _NO_TC_GPUS.search(device_name):
        arch = 6.0
    elif device_name and _FP16_TC_GPUS.search(device_name):
        arch = 7.0
    elif device_name and _TF32_GPUS.search(device_name):
        arch = 8.0
    else:
        archs = [a for a in map(_arch, arch_prefixes) if a is not None]
        arch = max(archs) if archs else None
    if arch is not None:
        level = "tf32" if arch >= 8.0 else "fp16" if arch >= 7.0 else "none"
    return level


def tf32_capable(level: str | None) -> bool | None:
    """The `tf32_capable` metric from a tensor_cores() level: None when unknown."""
    return None if level is None else level == "tf32"


def find(con: duckdb.DuckDBPyConnection, run_id: str, ctx: Any) -> list[Finding]:
    if not ctx.has_gpu:
        return []
    speedup = float(ctx.thresholds["TENSOR_CORE_SPEEDUP"])
    rows = query(con, "SELECT * FROM fp32_matmul_by_rank(?) ORDER BY rank", [run_id])
    devices = {r["rank"]: r for r in query(
        con, "SELECT rank, device_name, TRY_CAST(json_extract(device_properties, '$[0].computeMajor') AS INTEGER) "
             "AS compute_major FROM ranks WHERE run_id = ?", [run_id])}
    findings = []
    for row in rows:
        rank = row["rank"]
        if rank not in ctx.ranks:
            continue
        per_step = ctx.ranks[rank].steps_divisor
        fp32_ns = row["fp32_ns"] / per_step
        cost_ns = fp32_ns * (1.0 - 1.0 / speedup)
        device = devices.get(rank) or {}
        level = tensor_cores(device.get("device_name"), device.get("compute_major"), row["arch_prefixes"] or [])
        if level == "none":
            ctx.notes.append(f"Rank {rank} runs {to_ms(fp32_ns):,.2f} ms per step of FP32 matrix multiplies on a GPU "
                             "without tensor cores (before Volta): no tensor-core saving to report.")
            continue
        capable = tf32_capable(level)
        tf32_in_use = bool(row["tf32_kernels"])
        top = [{"name": k["name"], "calls_per_step": rounded(k["calls"] / per_step, 2),
                "ms_per_step": to_ms(k["ns"] / per_step)} for k in row["top_kernels"] or []]
        metrics = {
            "fp32_matmul_ms_per_step": to_ms(fp32_ns),
            "share_of_compute": rounded(row["fp32_ns"] / row["compute_kernel_ns"]) if row["compute_kernel_ns"] else None,
            "kernels_per_step": rounded(row["kernels"] / per_step, 2),
            "tf32_capable": capable,
            # TF32 tensor-core kernels run on this rank too: TF32 is on, these are what it left in FP32
            "tf32_in_use": tf32_in_use,
            "assumed_tensor_core_speedup": speedup,
            "top_kernels": top,
        }
        if tf32_in_use:
            how = ("TF32 is already on here (TF32 tensor-core kernels run too): these are the shapes cuBLAS/cuDNN "
                   "still runs in FP32 (dimensions not multiples of 8, tiny GEMMs) or ops TF32 does not cover; "
                   "bf16 autocast or padded shapes put them on tensor cores")
        else:
            how = {True: "TF32 tensor cores are one line away on this GPU (or bf16 autocast)",
                   False: "this GPU predates TF32 and bf16: fp16 autocast with a GradScaler puts them on tensor cores",
                   None: "TF32 (Ampere and newer) or fp16/bf16 autocast would put them on tensor cores"}[capable]
        summary = (f"Rank {rank}: {metrics['fp32_matmul_ms_per_step']:,.2f} ms per step of matrix multiplies and "
                   f"convolutions run in plain FP32 on CUDA cores ({100 * (metrics['share_of_compute'] or 0):.0f}% "
                   f"of compute kernel time, mostly {short_name(top[0]['name']) if top else '?'}); {how}. At ~"
                   f"{speedup:g}x tensor-core speed that is up to {cost_ns / 1e6:,.2f} ms per step.")
        findings.append(ctx.make(KIND, f"{KIND}:r{rank}", rank=rank, cost_ns=cost_ns, summary=summary,
                                 metrics=metrics, step=row["worst_step"], t_start_ns=row["longest_start_ns"],
                                 t_end_ns=row["longest_end_ns"]))
    return findings
