"""Which fixes address which finding kind, when each applies, and the code a user pastes.

Imports no torch: the analyzers import this module to fill a finding's `fixes` list.

A fix's predicate (accel/fix_predicates.py, with the readers of metrics it uses) reads a finding's
`metrics` and the thresholds (analyzers/common/thresholds.py, where every cut-off lives with its
unit and source) and returns the plain reason the fix cannot help, or None. `Fix.verdict` turns that into one of three answers:
  applies     nothing rules the fix out and every metric its predicate reads is measured;
  ruled_out   the metrics show it cannot help (the reason says why);
  unknown     nothing rules it out, but a metric it needs is missing, None or unusable (the
              reason names it): a missing metric never counts as "applies".
Each Fix lists in `reads` the metric keys it reads; they are keys the kinds it addresses emit
(each analysis declares them in its SPEC.metric_keys, and tests/accel/test_registry_metrics.py checks
both sides). For a finding of one kind, only the keys that kind emits can leave it unknown.

Ranking (`fixes_for`): fixes that apply first, then unknown ones, then those ruled out (kept: the
user may know better than the metrics); within each, by fit (a per-kind base score saying how
directly the fix attacks that kind, plus a bonus when the metrics point at it), then by the order
below.
"""
from __future__ import annotations

import ast
import builtins
import math
from dataclasses import dataclass, field
from pprint import pformat
from typing import Any, Callable, Literal, Mapping

from analyzers.common import thresholds as th
from analyzers.analysis.kinds import analysis_specs
# the predicates and the metric readers are accel/fix_predicates.py's; these names stay importable from here
from accel.fix_predicates import (IMBALANCE_SOURCES, Bonus, MetricUnusable, Metrics, Predicate, Thresholds,
                                  accumulates_without_no_sync, accumulation_bonus, allocator_bound, bandwidth_bound,
                                  boolean, choice, copies_exposed, gelu_chain_to_fuse, graph_capturable,
                                  imbalance_from_data, kernel_share_at_least, measured, multi_node, num, number,
                                  records, share_bonus, slow_link, slow_link_bonus, tf32_fits)

EMITTED_METRICS: dict[str, frozenset[str]] = {
    kind: spec.metric_keys for kind, spec in analysis_specs().items()}   # declared by the analyses
FINDING_KINDS = tuple(EMITTED_METRICS)
NEEDS = frozenset({"cuda", "triton", "multi_rank", "multi_gpu"})


# What each metric a fix reads means, and the values the analyses emit; unknown verdicts quote it.
READ_METRICS: dict[str, str] = {
    "syncs_per_step": "blocking host<->device synchronisations per step",
    "optimizer_kernel_share": "share (0..1) of the step's kernels launched from optimizer.step",
    "elementwise_kernel_share": "share (0..1) of the step's kernels that are small elementwise ones",
    "gelu_chains_per_step": "GELU kernels per step run beside a bias-add or dropout kernel "
                            "(0: the trace has no bias+GELU+dropout chain to fuse)",
    "pageable_share": "share (0..1) of host-to-device bytes copied from pageable memory",
    "h2d_overlap_pct": "share (0..100 %) of host-to-device copy time overlapped with kernels",
    "top_callers": "the aten ops the blocking syncs came from ([{op, call, blocked_ms_per_step}])",
    "num_workers": "DataLoader workers (0: single process; None: some, the trace does not say how many)",
    "wait_ms_per_step": "time the training loop waits for a batch, ms per step",
    "step_time_ms": "mean step time, ms",
    "allocator_share": "share (0..1) of a runtime stall's time in memory-management calls "
                       "(cudaMalloc, cudaFree, cudaHostAlloc, cuMemCreate, hipMalloc, ...)",
    "tf32_capable": "whether the GPU has TF32 tensor cores (Ampere or newer; None: GPU not identified)",
    "tf32_in_use": "whether TF32 tensor-core kernels already run on that rank",
    "imbalance_source": "why the straggler is late: \"input\" (its inputs are shaped differently), "
                        "\"compute\" (same shapes, more work), \"stall\" (no more work: a stall of its own) or "
                        "\"periodic\" (extra work on one rank every k steps)",
    "shapes_compared": "whether the ranks' input shapes were compared (False for pipeline stages)",
    "shape_differs": "whether the straggler's input shapes differ from the other ranks'",
    "mean_msg_bytes": "mean collective message size, bytes (None: the trace has no message sizes)",
    "busbw_gbps": "collective bus bandwidth achieved, GB/s (None: the trace has no message sizes)",
    "collectives_per_step": "collective kernels per step",
    "bytes_per_step": "bytes the collectives move per step",
    "overlap_pct": "share (0..100 %) of communication time overlapped with compute",
    "nodes": "nodes the ranks span (world_size / GPUs per node; absent when GPUs per node is unknown)",
    "world_size": "ranks in the job",
    "local_world_size": "GPUs per node, from the trace's deviceProperties",
    "hosts": "hosts that recorded the ranks' traces (their host_name; absent unless every rank is loaded)",
    "allreduce_rounds_per_step": "DDP forwards per step whose backward all-reduced gradients",
    "optimizer_steps_per_step": "Optimizer.step calls per step",
}


# How a user gets `accel`, which the snippets import from (pyproject.toml at the repository root;
# torch stays the user's own install: the package depends on none of it).
INSTALL_HINT = ('`pip install "tracedoctor @ git+URL"` (URL: where your team keeps this repository) or, '
                'from a checkout, `pip install -e .`: it provides `accel` and never installs or replaces torch')

# The longest line a snippet has, characters: the dashboard's code box shows this many at 1440 px
# without scrolling (tests/accel/test_fix_snippets.py checks every snippet).
SNIPPET_LINE_WIDTH = 96

# The names a snippet reads from the user's own training script, and what each stands for; every
# other name a snippet reads it imports (tests/accel/test_fix_snippets.py checks). `metrics` is filled
# in from the finding by Fix.snippet_for.
SNIPPET_PLACEHOLDERS: dict[str, str] = {
    "model": "your torch.nn.Module",
    "optimizer": "your torch.optim optimizer",
    "loss_fn": "your loss function (outputs, targets) -> loss",
    "loader": "your DataLoader (or any iterable of batches)",
    "dataset": "your Dataset",
    "train_step": "your function that runs one training step on a batch",
    "x": "the activation in your model's forward",
    "x0": "a sample batch's inputs, shaped like every batch",
    "y0": "a sample batch's targets, shaped like every batch",
    "bias": "the bias added before the GELU (the preceding Linear's, kept as a parameter of its own)",
    "lengths": "tokens per sample in the dataset, one number each",
    "pad_collate": "your collate function padding a batch to its longest sample",
    "epochs": "how many epochs you train",
    "local_rank": "this process's GPU index on its node (torchrun's LOCAL_RANK)",
    "ddp_model": "your model wrapped in DistributedDataParallel",
    "micro_batches": "the micro-batches one optimizer step accumulates over",
    "texts": "your raw samples (the sentences, images or records the loop preprocessed itself)",
    "tokenize_batch": "your module-level function turning a list of raw samples into a batch (it must pickle)",
    "metrics": "this finding's measured metrics (filled in on the dashboard and in reports; "
               "from the CLI JSON: the finding's \"metrics\")",
}


def snippet_free_names(code: str) -> set[str]:
    """The names `code` reads before (or without) binding them, builtins left out: what a pasted
    snippet needs from the program around it. SyntaxError for code that does not parse."""
    free: set[str] = set()

    def bind(target: ast.AST, scope: set[str]) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                scope.add(node.id)
            elif isinstance(node, (ast.Attribute, ast.Subscript)):
                visit(node, scope)     # `a.b = ...` reads a

    def visit(node: ast.AST, scope: set[str]) -> None:
        if isinstance(node, ast.Name):
            if isinstance(node.ctx, ast.Load) and node.id not in scope:
                free.add(node.id)
            elif not isinstance(node.ctx, ast.Load):
                scope.add(node.id)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            scope.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.NamedExpr)):   # the value is read first
            if node.value is not None:
                visit(node.value, scope)
            for target in getattr(node, "targets", None) or [node.target]:
                bind(target, scope)
        elif isinstance(node, ast.AugAssign):
            visit(node.value, scope)
            visit(ast.Name(node.target.id, ast.Load()) if isinstance(node.target, ast.Name) else node.target, scope)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            visit(node.iter, scope)
            bind(node.target, scope)
            for stmt in node.body + node.orelse:
                visit(stmt, scope)
        elif isinstance(node, (ast.Lambda, ast.FunctionDef, ast.AsyncFunctionDef)):
            if not isinstance(node, ast.Lambda):
                scope.add(node.name)
            inner = scope | {a.arg for a in ast.walk(node.args) if isinstance(a, ast.arg)}
            for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
                visit(default, scope)
            for stmt in node.body if isinstance(node.body, list) else [node.body]:
                visit(stmt, inner)
        elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
            inner = set(scope)
            for gen in node.generators:
                visit(gen.iter, inner)
                bind(gen.target, inner)
                for condition in gen.ifs:
                    visit(condition, inner)
            for part in (node.key, node.value) if isinstance(node, ast.DictComp) else (node.elt,):
                visit(part, inner)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, scope)

    visit(ast.parse(code), set())
    return free - set(dir(builtins))


def resolve_thresholds(thresholds: Thresholds | None = None) -> dict[str, float]:
    """analyzers.common.thresholds.DEFAULTS with `thresholds` applied (ValueError names an unknown one)."""
    return th.resolve(thresholds)


# --- verdicts -------------------------------------------------------------------------------------

Status = Literal["applies", "ruled_out", "unknown"]
APPLIES: Status = "applies"
RULED_OUT: Status = "ruled_out"
UNKNOWN: Status = "unknown"
STATUS_ORDER: dict[str, int] = {APPLIES: 0, UNKNOWN: 1, RULED_OUT: 2}   # how fixes_for ranks them


@dataclass(frozen=True)
class Verdict:
    """Whether a fix suits a finding, from the finding's metrics."""
    status: Status
    reason: str = ""                 # ruled_out: why it cannot help; unknown: what is not measured
    missing: tuple[str, ...] = ()    # unknown: the metric keys missing, None or unusable

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "reason": self.reason, "missing": list(self.missing)}


def _unmeasured(keys: tuple[str, ...]) -> str:
    said = "; ".join(f"{key} ({READ_METRICS.get(key, 'a metric this fix reads')})" for key in keys)
    return f"the finding does not measure {said}, which decides whether this fix helps"


@dataclass(frozen=True)
class Fix:
    """One fix: what it addresses, what it needs, the code to paste, and when it applies."""
    id: str
    title: str
    addresses: list[str]                 # finding kinds, in the order the fix attacks them best
    needs: list[str]                     # subset of NEEDS
    snippet: str                         # the code a user pastes (real, runnable with their names)
    description: str                     # why it helps, and when it does not
    module: str                          # dotted path of the implementation
    demo_module: str                     # dotted path of the demo (exposes run(out_dir, device, steps))
    fit: dict[str, float] = field(default_factory=dict)  # base fit per addressed kind, 0..1
    # metric keys the predicate, the bonus and the fix's own code (given finding["metrics"]) read;
    # with a predicate, each one the finding's kind emits must be measured for the fix to apply
    reads: tuple[str, ...] = ()
    predicate: Predicate | None = None   # the reason the fix cannot help, or None
    bonus: Bonus | None = None           # extra fit from the metrics
    # the runs it is for (analyzers.read.fixes.WORKLOAD_CONTEXTS): training; inference (a forward
    # loop or pipeline); serving (inference under vLLM, SGLang, TensorRT-LLM, which set graphs,
    # compile and batching themselves). On a run of another workload it is ruled out with the reason.
    workloads: tuple[str, ...] = ("training", "inference", "serving")

    @property
    def demo(self) -> str:
        return demo_command(self.id)

    def snippet_for(self, metrics: Metrics | None = None) -> str:
        """The snippet as a finding's page shows it: when it reads `metrics`, a first line defines
        them from the finding (the measured ones of the keys this fix reads, as a Python literal)."""
        if not isinstance(metrics, Mapping) or "metrics" not in snippet_free_names(self.snippet):
            return self.snippet
        values = {key: metrics[key] for key in self.reads if key in metrics and measured(metrics[key])
                  and not (isinstance(metrics[key], float) and math.isinf(metrics[key]))}   # inf: no literal
        literal = pformat(values, width=SNIPPET_LINE_WIDTH - len("metrics = "), sort_dicts=False)
        literal = literal.replace("\n", "\n" + " " * len("metrics = "))   # continuation under the brace
        return f"# this finding's measured metrics\nmetrics = {literal}\n{self.snippet}"

    def placeholders(self, metrics: Metrics | None = None) -> dict[str, str]:
        """{name: what it stands for} for the names of the user's program the snippet (as
        snippet_for shows it) reads."""
        free = snippet_free_names(self.snippet_for(metrics))
        return {name: what for name, what in SNIPPET_PLACEHOLDERS.items() if name in free}

    def kind_of(self, metrics: Metrics, kind: str | None = None) -> str:
        """The finding kind to judge `metrics` as: `kind` when given, else the addressed kind whose
        metric keys the metrics share most (the first addressed one on a tie)."""
        if kind is not None:
            return kind
        keys = set(metrics)
        return max(self.addresses, key=lambda k: len(keys & EMITTED_METRICS.get(k, frozenset())))

    def reads_for(self, kind: str) -> tuple[str, ...]:
        """The keys of `reads` a finding of `kind` carries (all of them for a kind not declared)."""
        emitted = EMITTED_METRICS.get(kind)
        return self.reads if emitted is None else tuple(k for k in self.reads if k in emitted)

    def verdict(self, metrics: Metrics | None = None, *, kind: str | None = None,
                thresholds: Thresholds | None = None) -> Verdict:
        """applies / ruled_out (with the reason) / unknown (with the metrics not measured) for a
        finding of `kind` (inferred from the metrics when None) with these metrics."""
        if self.predicate is None:
            return Verdict(APPLIES)
        m = metrics if isinstance(metrics, Mapping) else {}
        resolved = resolve_thresholds(thresholds)   # an unknown threshold name is the caller's error
        try:
            reason = self.predicate(m, resolved)
        except MetricUnusable as exc:
            return Verdict(UNKNOWN, f"the finding's {exc}, which this fix's check cannot read", (exc.key,))
        except Exception as exc:  # a metrics shape we did not foresee must not break a report
            return Verdict(UNKNOWN, f"the finding's metrics could not be checked ({type(exc).__name__}: {exc})")
        if reason:
            return Verdict(RULED_OUT, reason)
        missing = tuple(key for key in self.reads_for(self.kind_of(m, kind)) if not measured(m.get(key)))
        return Verdict(UNKNOWN, _unmeasured(missing), missing) if missing else Verdict(APPLIES)

    def why_not(self, metrics: Metrics | None = None, *, kind: str | None = None,
                thresholds: Thresholds | None = None) -> str | None:
        """The plain reason the metrics rule this fix out, or None (it applies, or is unknown)."""
        verdict = self.verdict(metrics, kind=kind, thresholds=thresholds)
        return verdict.reason if verdict.status == RULED_OUT else None

    def applies(self, metrics: Metrics | None = None, *, kind: str | None = None,
                thresholds: Thresholds | None = None) -> bool:
        """True unless the metrics rule the fix out (also when they leave it unknown: `verdict`
        tells those apart)."""
        return self.why_not(metrics, kind=kind, thresholds=thresholds) is None

    def fit_for(self, kind: str, metrics: Metrics | None = None,
                thresholds: Thresholds | None = None) -> float:
        """How well this fix suits a finding of `kind` with these metrics (higher is better)."""
        score = self.fit.get(kind, 0.5 if kind in self.addresses else 0.0)
        if self.bonus is not None:
            try:
                score += float(self.bonus(metrics if isinstance(metrics, Mapping) else {},
                                          resolve_thresholds(thresholds)))
            except Exception:  # the bonus only refines the order; odd metrics leave the base fit
                pass
        return score

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "title": self.title, "addresses": list(self.addresses),
                "needs": list(self.needs), "snippet": self.snippet,
                "description": self.description, "module": self.module, "demo": self.demo,
                "workloads": list(self.workloads)}


# --- the fixes ---------------------------------------------------------------------------------

_FIX_LIST = [
    Fix(
        id="cuda_graph",
        workloads=("training",),
        title="Capture the training step in a CUDA graph",
        addresses=["launch_gap"],
        needs=["cuda"],
        snippet=(
            "from accel.kernels.cuda_graph import CudaGraphStep\n"
            "# optimizer built with capturable=True (Adam/AdamW), static batch shape\n"
            "step = CudaGraphStep(model, loss_fn, optimizer, sample_batch=(x0, y0))\n"
            "for x, y in loader:\n"
            "    loss = step.step((x, y))   # one cudaGraphLaunch instead of hundreds of launches\n"
        ),
        description=(
            "Replays forward, backward and optimizer step as one graph launch, so the GPU no "
            "longer waits for the CPU to launch each small kernel. Needs static shapes, no host "
            "syncs (.item(), printing tensors) and no CPU-side control flow on tensor values "
            "inside the step; gains nothing when kernels are long (compute-bound steps)."
        ),
        module="accel.kernels.cuda_graph",
        demo_module="accel.demos.cuda_graph",
        fit={"launch_gap": 0.9},
        reads=("syncs_per_step",),
        predicate=graph_capturable,
    ),
    Fix(
        id="compile_reduce_overhead",
        workloads=("training", "inference"),
        title="torch.compile(mode=\"reduce-overhead\")",
        addresses=["launch_gap"],
        needs=["cuda"],
        snippet=(
            "import torch\n"
            "model = torch.compile(model, mode=\"reduce-overhead\")\n"
            "# mark step boundaries if you keep outputs across steps:\n"
            "# torch.compiler.cudagraph_mark_step_begin()\n"
        ),
        description=(
            "One line: Inductor fuses elementwise chains and wraps the compiled graph in CUDA "
            "graphs (one per input shape set), cutting launch count and launch overhead. Pays "
            "a compile time up front; many distinct shapes mean many recompiles and graphs; "
            "graph breaks (.item(), data-dependent Python) leave eager gaps behind."
        ),
        module="accel.kernels.compile",
        demo_module="accel.demos.compile_reduce_overhead",
        fit={"launch_gap": 0.8},
        reads=("elementwise_kernel_share",),
        bonus=share_bonus("elementwise_kernel_share", 0.1),
    ),
    Fix(
        id="fused_optimizer",
        workloads=("training",),
        title="Fused / foreach optimizer instead of a per-parameter loop",
        addresses=["launch_gap"],
        needs=[],
        snippet=(
            "from accel.kernels.fused_optimizer import fuse_optimizer\n"
            "optimizer = fuse_optimizer(optimizer)  # fused where torch has it (CUDA; CPU Adam/AdamW/\n"
            "                                       # SGD/Adagrad), else foreach; in place: groups,\n"
            "                                       # state, LR schedulers and GradScaler keep working\n"
            "# or when building it: torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)\n"
        ),
        description=(
            "A per-parameter optimizer launches ~10 tiny kernels per parameter tensor; foreach "
            "batches them into a few multi-tensor kernels, fused does the whole update in one "
            "kernel per group of tensors. Helps when the model has many parameter tensors; "
            "little to gain with a handful of large ones."
        ),
        module="accel.kernels.fused_optimizer",
        demo_module="accel.demos.fused_optimizer",
        fit={"launch_gap": 0.7},
        reads=("optimizer_kernel_share",),
        predicate=kernel_share_at_least("optimizer_kernel_share", "FUSED_OPTIMIZER_MIN_KERNEL_SHARE",
                                         "come from the optimizer"),
        bonus=share_bonus("optimizer_kernel_share", 0.4),
    ),
    Fix(
        id="triton_fused_elementwise",
        workloads=("training", "inference"),
        title="Fuse bias + GELU + dropout into one Triton kernel",
        addresses=["launch_gap"],
        needs=["cuda", "triton"],
        snippet=(
            "from accel.kernels.triton_fused import fused_bias_gelu_dropout\n"
            "# in the model's forward; was: y = F.dropout(F.gelu(x + bias), p=0.1, training=model.training)\n"
            "y = fused_bias_gelu_dropout(x, bias, p=0.1, training=model.training)\n"
        ),
        description=(
            "Three (forward) and four (backward) memory-bound kernels become one each: fewer "
            "launches and one read and write of the activation instead of three. Helps when "
            "small elementwise kernels dominate the step; nothing to gain in GEMM-bound steps."
        ),
        module="accel.kernels.triton_fused",
        demo_module="accel.demos.triton_fused_elementwise",
        fit={"launch_gap": 0.6},
        reads=("gelu_chains_per_step", "elementwise_kernel_share"),
        predicate=gelu_chain_to_fuse,
        # at most 0.2: a chain present still leaves the whole-step fixes (graphs, compile) first
        bonus=share_bonus("elementwise_kernel_share", 0.2),
    ),
    Fix(
        id="cuda_prefetcher",
        workloads=("training", "inference"),
        title="Prefetch the next batch to the GPU on a side stream (pinned, non_blocking)",
        addresses=["h2d_stall", "host_sync", "dataloader_stall"],
        needs=["cuda"],
        snippet=(
            "from accel.data.prefetcher import CudaPrefetcher\n"
            "for batch in CudaPrefetcher(loader, device=\"cuda\"):\n"
            "    loss = train_step(batch)   # batch is already on the GPU; the next one is in flight\n"
        ),
        description=(
            "Copies from pinned host memory on a side stream while the current batch computes, "
            "so H2D copies stop blocking the host (pageable copies are synchronous) and stop "
            "stalling the compute stream. Hides copy time only up to the compute time of a "
            "step; does not make a slow data loader faster. On CPU it is a pass-through."
        ),
        module="accel.data.prefetcher",
        demo_module="accel.demos.cuda_prefetcher",
        fit={"h2d_stall": 0.9, "host_sync": 0.5, "dataloader_stall": 0.3},
        reads=("pageable_share", "h2d_overlap_pct", "top_callers"),
        predicate=copies_exposed,
        bonus=share_bonus("pageable_share", 0.2),
    ),
    Fix(
        id="dataloader_tuning",
        workloads=("training", "inference"),
        title="Tune DataLoader workers, pinning and prefetch from the trace",
        addresses=["dataloader_stall", "h2d_stall"],
        needs=[],
        snippet=(
            "from accel.data.loader_tuning import tuned_dataloader\n"
            "loader = tuned_dataloader(dataset, batch_size=64, shuffle=True,\n"
            "                          metrics=metrics)  # workers, pin_memory, prefetch\n"
            "# the profiled loader already had workers? the trace does not say how many:\n"
            "# tuned_dataloader(..., metrics=metrics, current_workers=4)\n"
        ),
        description=(
            "When the training loop waits in `DataLoader.__next__`, loading runs serially with "
            "compute. Worker processes load the next batches in parallel; pin_memory makes the "
            "H2D copy asynchronous; persistent workers skip the restart each epoch. Cannot help "
            "past one worker per core for CPU-bound decoding, nor when storage is the limit."
        ),
        module="accel.data.loader_tuning",
        demo_module="accel.demos.dataloader_tuning",
        fit={"dataloader_stall": 0.9, "h2d_stall": 0.4},
        reads=("num_workers", "wait_ms_per_step", "step_time_ms"),
    ),
    Fix(
        id="preprocess_in_workers",
        workloads=("training", "inference"),
        title="Move per-batch Python (tokenising, augmenting) into DataLoader workers, or cache it",
        addresses=["untraced_host_time"],
        needs=[],
        snippet=(
            "from accel.data.preprocess import preprocessing_loader, cached_batches\n"
            "# the loop did tokens = tokenize_batch(texts[i:i + 64]) itself: let workers do it\n"
            "loader = preprocessing_loader(texts, tokenize_batch, batch_size=64, num_workers=2)\n"
            "for tokens in loader:\n"
            "    train_step(tokens)\n"
            "# the same texts every epoch? tokenise once: batches = cached_batches(texts, tokenize_batch, 64)\n"
        ),
        description=(
            "Python the training loop runs between ops (a tokenizer, an augmentation, feature "
            "building) runs serially with the step: the trace shows it as host time outside every "
            "profiled op. DataLoader workers run it in parallel with compute, as the collate_fn; data "
            "that repeats each epoch can be preprocessed once. Cannot help when the untraced time is "
            "something else: sleeps, blocking I/O, logging or metrics the loop must do itself (the "
            "finding's Python frames, with with_stack=True, say which)."
        ),
        module="accel.data.preprocess",
        demo_module="accel.demos.preprocess_in_workers",
        fit={"untraced_host_time": 0.8},
    ),
    Fix(
        id="allocator_tuning",
        title="Keep the CUDA caching allocator warm (no empty_cache in the loop, expandable segments)",
        addresses=["runtime_stall", "allocator_churn", "allocator_fragmentation"],
        needs=["cuda"],
        snippet=(
            "from accel.kernels.allocator import keep_cache_warm, expandable_segments\n"
            "print(expandable_segments())  # before the first CUDA tensor: fewer cudaMalloc calls\n"
            "with keep_cache_warm() as swallowed:  # torch.cuda.empty_cache() is a no-op inside\n"
            "    for batch in loader:\n"
            "        train_step(batch)\n"
            "print(f\"{swallowed.calls} empty_cache calls skipped\")\n"
        ),
        description=(
            "torch.cuda.empty_cache() every step hands the caching allocator's free segments back "
            "to the driver: cudaFree synchronises the whole device and the next step pays "
            "cudaMalloc again for the same memory. keep_cache_warm() turns those calls (yours or a "
            "library's) into no-ops for the loop; expandable segments let the allocator grow one "
            "segment instead of cudaMalloc-ing new ones when varying shapes fragment the cache, "
            "which is also the fix for the out-of-memory errors empty_cache was meant to avoid. "
            "Pinning fresh host tensors every step (cudaHostAlloc) wants one pinned buffer reused "
            "instead. Does not help when the stall is CUDA start-up (context creation in the first "
            "cudaFree, lazy module loading in a first cudaLaunchKernel) caught because profiling "
            "started cold: profile after warm-up with "
            "torch.profiler.schedule(wait=1, warmup=1, active=3) instead."
        ),
        module="accel.kernels.allocator",
        demo_module="accel.demos.allocator_tuning",
        fit={"runtime_stall": 0.9, "allocator_churn": 0.9, "allocator_fragmentation": 0.6},
        reads=("allocator_share",),
        predicate=allocator_bound,
    ),
    Fix(
        id="drop_empty_cache",
        title="Delete the per-step torch.cuda.empty_cache()",
        addresses=["runtime_stall", "allocator_churn"],
        needs=[],
        snippet=(
            "from accel.kernels.allocator import keep_cache_warm\n"
            "with keep_cache_warm() as found:  # run one step to find where the calls come from\n"
            "    train_step(next(iter(loader)))\n"
            "for where, calls in found.callers.items():\n"
            "    print(f\"delete torch.cuda.empty_cache() at {where} ({calls} per step)\")\n"
        ),
        description=(
            "torch.cuda.empty_cache() in the loop (\"to avoid OOM\") hands the caching allocator's "
            "free segments back to the driver: cudaFree synchronises the device and the next step "
            "cudaMallocs the same memory again. It frees nothing the process could use (the memory "
            "is needed again at once) and never prevents an OOM the allocator would not avoid "
            "itself (it empties its cache and retries before failing). Find the line (yours or a "
            "library's) and delete it; where it cannot be edited, keep_cache_warm() (allocator_tuning) "
            "swallows it. Does not help when the stall is CUDA start-up or fragmentation (expandable "
            "segments: allocator_tuning)."
        ),
        module="accel.kernels.allocator",
        demo_module="accel.demos.drop_empty_cache",
        fit={"runtime_stall": 0.85, "allocator_churn": 0.85},
        reads=("allocator_share",),
        predicate=allocator_bound,
    ),
    Fix(
        id="tf32_matmul",
        title="Let FP32 matmuls and convolutions use TF32 tensor cores",
        addresses=["fp32_matmul"],
        needs=["cuda"],
        snippet=(
            "from accel.kernels.precision import enable_tf32\n"
            "print(enable_tf32())  # once, before training; or: with tf32(): ... for a block\n"
            "# plain torch: torch.backends.cuda.matmul.allow_tf32 = True\n"
            "#              torch.backends.cudnn.allow_tf32 = True\n"
        ),
        description=(
            "One setting: cuBLAS and cuDNN run FP32 matmuls and convolutions on tensor cores in "
            "TF32 (about 8x the FP32 CUDA-core peak on A100/H100) instead of SIMT sgemm kernels. "
            "The model, its weights and the data stay FP32. Numerics: each multiply's inputs "
            "are rounded to a 10-bit mantissa and accumulated in FP32 (about 1e-3 relative "
            "error), which training tolerates; keep it off where FP32-exact products matter "
            "(with tf32(False): ...). Needs an Ampere or newer GPU; gains nothing on a step "
            "that is not GEMM/convolution-bound."
        ),
        module="accel.kernels.precision",
        demo_module="accel.demos.tf32_matmul",
        fit={"fp32_matmul": 0.9},
        reads=("tf32_capable", "tf32_in_use"),
        predicate=tf32_fits,
    ),
    Fix(
        id="amp_autocast",
        title="Mixed precision: bf16/fp16 autocast",
        addresses=["fp32_matmul"],
        needs=["cuda"],
        snippet=(
            "from accel.kernels.precision import AmpStep\n"
            "amp = AmpStep(optimizer)  # bf16 autocast (Ampere+), else fp16 with a GradScaler\n"
            "for x, y in loader:\n"
            "    loss = amp(lambda: loss_fn(model(x), y))  # forward, backward, optimizer step\n"
            "# plain torch: with torch.autocast(\"cuda\", dtype=torch.bfloat16): loss = ...\n"
        ),
        description=(
            "Runs matmuls and convolutions in bf16 (or fp16 on GPUs without bf16) on tensor "
            "cores while autocast keeps softmax, norms, losses and reductions in FP32; weights "
            "and the optimizer stay FP32. Works on Volta and Turing too (fp16, where TF32 does "
            "not exist) and halves activation memory traffic. Numerics: bf16 keeps FP32's range "
            "with an 8-bit mantissa; fp16 needs loss scaling (the GradScaler). Touches the "
            "training step; ops that must stay FP32 go under autocast(enabled=False). Gains "
            "little on steps that are not GEMM/convolution-bound."
        ),
        module="accel.kernels.precision",
        demo_module="accel.demos.amp_autocast",
        fit={"fp32_matmul": 0.8},
    ),
    # --- owned by the accel-dist helper (modules and demos under accel/comm, accel/demos/dist_*) --
    Fix(
        id="balanced_sampler",
        workloads=("training",),
        title="Balance tokens per rank with a length-aware distributed sampler",
        addresses=["rank_imbalance"],
        needs=["multi_rank"],
        snippet=(
            "from torch.utils.data import DataLoader\n"
            "from accel.data.balanced_sampler import BalancedDistributedSampler\n"
            "# drop-in for DistributedSampler; lengths = tokens per sample, batch_size = the loader's\n"
            "sampler = BalancedDistributedSampler(dataset, lengths=lengths, batch_size=32, seed=0)\n"
            "loader = DataLoader(dataset, batch_size=32, sampler=sampler, collate_fn=pad_collate)\n"
            "for epoch in range(epochs):\n"
            "    sampler.set_epoch(epoch)\n"
            "    ...\n"
            "# variable-size batches under a token budget instead:\n"
            "# BalancedBatchSampler(lengths, max_tokens=16384) as DataLoader(batch_sampler=...)\n"
        ),
        description=(
            "With variable-length samples, DistributedSampler gives every rank the same number "
            "of samples but not the same work: each step, all ranks wait at the gradient "
            "all-reduce for the rank that drew the longest sequences. This sampler sorts samples "
            "by length within windows (so a step's samples have similar lengths and padding "
            "shrinks) and deals each step's samples to ranks so their token counts match, "
            "deterministically per seed and epoch. Does not help when the imbalance comes from "
            "hardware (a slow GPU, thermal throttling) or from communication."
        ),
        module="accel.data.balanced_sampler",
        demo_module="accel.demos.dist_balanced_sampler",
        fit={"rank_imbalance": 0.9},
        reads=("imbalance_source", "shapes_compared", "shape_differs"),
        predicate=imbalance_from_data,
    ),
    Fix(
        id="comm_compression",
        workloads=("training",),
        title="Compress DDP gradients to bf16/fp16 (communication hook)",
        addresses=["comm_exposed"],
        needs=["multi_rank"],
        snippet=(
            "from torch.nn.parallel import DistributedDataParallel\n"
            "from accel.comm import apply_comm_hook\n"
            "ddp_model = DistributedDataParallel(model, device_ids=[local_rank])\n"
            "apply_comm_hook(ddp_model, kind=\"auto\")  # bf16 where native (Ampere+, CPU), else fp16\n"
            "# plain torch on NCCL: ddp_model.register_comm_hook(None, default_hooks.bf16_compress_hook)\n"
        ),
        description=(
            "Casts each gradient bucket to 16 bits before the all-reduce: half the bytes on the "
            "wire. Pays when the all-reduce is bandwidth-bound on a slow link (Ethernet between "
            "nodes, PCIe without NVLink); small latency-bound messages gain nothing, and on a "
            "fast link the casts can cost more than they save. Results differ from fp32 "
            "all-reduce by 16-bit rounding of the gradients (bf16 keeps fp32's range)."
        ),
        module="accel.comm.hooks",
        demo_module="accel.demos.dist_comm_compression",
        fit={"comm_exposed": 0.7},
        reads=("mean_msg_bytes",),
        predicate=bandwidth_bound,
    ),
    Fix(
        id="powersgd",
        workloads=("training",),
        title="PowerSGD low-rank gradient compression",
        addresses=["comm_exposed"],
        needs=["multi_rank"],
        snippet=(
            "from accel.comm import apply_comm_hook\n"
            "# rank-2 approximation, error feedback and warm start; plain all-reduce for the first\n"
            "# 1000 steps (about 10% of training) while gradients change fast\n"
            "state = apply_comm_hook(ddp_model, kind=\"powersgd\",\n"
            "                        matrix_approximation_rank=2, start_powerSGD_iter=1000)\n"
        ),
        description=(
            "Sends low-rank factors of each gradient matrix instead of the matrix (often 10-100x "
            "fewer bytes), keeping the residual for the next step (error feedback). Pays on slow "
            "links (Ethernet, cross-node) with large layers; on NVLink its extra compute costs "
            "more than it saves. Lossy: it changes the optimisation trajectory (error feedback "
            "keeps it converging like SGD). On gloo, apply_comm_hook serialises the hook per "
            "bucket (torch's hook issues collectives from callbacks in different orders on "
            "different ranks, which gloo does not survive with several buckets)."
        ),
        module="accel.comm.hooks",
        demo_module="accel.demos.dist_powersgd",
        fit={"comm_exposed": 0.5},
        reads=("busbw_gbps", "mean_msg_bytes"),
        predicate=slow_link,
        bonus=slow_link_bonus,
    ),
    Fix(
        id="ddp_bucket_tuning",
        workloads=("training",),
        title="Size DDP buckets from the trace (bucket_cap_mb, gradient_as_bucket_view)",
        addresses=["comm_exposed"],
        needs=["multi_rank"],
        snippet=(
            "from accel.comm import derive_ddp_settings, wrap_ddp\n"
            "ddp_model = wrap_ddp(model, metrics, device_ids=[local_rank])\n"
            "print(derive_ddp_settings(metrics).reasons)  # why each setting\n"
        ),
        description=(
            "Bucket size trades latency against overlap: many small all-reduces each pay a fixed "
            "cost (merge them into a few buckets), one huge all-reduce at the end of backward "
            "overlaps nothing (split it so communication starts during backward). Also turns on "
            "gradient_as_bucket_view (one gradient copy and buffer less). Cannot help when the "
            "link itself is too slow for the bytes: compress instead."
        ),
        module="accel.comm.bucket_tuning",
        demo_module="accel.demos.dist_ddp_bucket_tuning",
        fit={"comm_exposed": 0.6},
        reads=("collectives_per_step", "mean_msg_bytes", "bytes_per_step", "overlap_pct"),
    ),
    Fix(
        id="no_sync_accumulation",
        workloads=("training",),
        title="All-reduce once per optimizer step when accumulating gradients (no_sync)",
        addresses=["comm_exposed"],
        needs=["multi_rank"],
        snippet=(
            "from accel.comm import accumulate_gradients\n"
            "# model.no_sync() for all micro-batches but the last; each loss divided by their count\n"
            "loss = accumulate_gradients(ddp_model, micro_batches,\n"
            "                            lambda m, b: loss_fn(m(b[\"x\"]), b[\"y\"]))\n"
            "optimizer.step(); optimizer.zero_grad()\n"
        ),
        description=(
            "With gradient accumulation over k micro-batches, DDP all-reduces after every "
            "backward: k all-reduces per optimizer step where one is enough. Under no_sync the "
            "gradients add up locally and the last backward all-reduces the sum once; the result "
            "equals the full batch's gradient. Nothing to gain without accumulation."
        ),
        module="accel.comm.no_sync",
        demo_module="accel.demos.dist_no_sync_accumulation",
        fit={"comm_exposed": 0.6},
        reads=("allreduce_rounds_per_step", "optimizer_steps_per_step"),
        predicate=accumulates_without_no_sync,
        bonus=accumulation_bonus,
    ),
    Fix(
        id="hierarchical_allreduce",
        workloads=("training",),
        title="Hierarchical all-reduce (reduce-scatter in node, all-reduce across, all-gather)",
        addresses=["comm_exposed"],
        needs=["multi_rank"],
        snippet=(
            "from accel.comm import apply_comm_hook\n"
            "# ranks laid out node by node (torchrun's layout); local_size = ranks per node\n"
            "apply_comm_hook(ddp_model, kind=\"hierarchical\", local_size=8)\n"
        ),
        description=(
            "Reduce-scatters inside each node over fast links, all-reduces each 1/local_size "
            "slice among the peers with the same local rank across nodes, then all-gathers in "
            "the node: each rank sends 1/local_size of the gradients over the slow network "
            "instead of all of them. Pays across nodes with a slow interconnect; within one node "
            "it only adds steps (NCCL is already topology-aware there)."
        ),
        module="accel.comm.hierarchical",
        demo_module="accel.demos.dist_hierarchical_allreduce",
        fit={"comm_exposed": 0.4},
        reads=("hosts", "nodes", "world_size", "local_world_size"),
        predicate=multi_node,
    ),
    Fix(
        id="activation_checkpointing",
        workloads=("training",),
        title="Recompute activations in the backward instead of keeping them (activation checkpointing)",
        addresses=["memory_spike", "allocator_fragmentation"],
        needs=[],
        snippet=(
            "from accel.memory.checkpointing import checkpoint_blocks\n"
            "model.blocks = checkpoint_blocks(model.blocks)  # an nn.Sequential of your blocks\n"
            "# or per block: torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)\n"
        ),
        description=(
            "A block under checkpoint keeps only its input through the forward and recomputes its "
            "activations in the backward: the step's peak falls from every block's activations to "
            "one block's plus the inputs, for about one more forward of compute. It lowers a peak "
            "set by activations, including a large intermediate inside a block; it does not shrink "
            "parameters, gradients or optimizer state (shard those: ZeroRedundancyOptimizer, FSDP), "
            "nor a leak."
        ),
        module="accel.memory.checkpointing",
        demo_module="accel.demos.activation_checkpointing",
        fit={"memory_spike": 0.7, "allocator_fragmentation": 0.4},
    ),
    Fix(
        id="zero_grad_set_to_none",
        workloads=("training",),
        title="Free the gradients between steps: zero_grad(set_to_none=True), not zeroed in place",
        addresses=["memory_spike"],
        needs=[],
        snippet=(
            "optimizer.zero_grad(set_to_none=True)  # torch's default since 2.0; not set_to_none=False\n"
            "# gradients zeroed by hand (p.grad.zero_())? free them instead:\n"
            "from accel.memory.gradients import release_gradients\n"
            "print(release_gradients(model), \"bytes of gradients freed before the forward\")\n"
        ),
        description=(
            "zero_grad(set_to_none=False), model.zero_grad(False) or p.grad.zero_() keep every "
            "gradient allocated through the next forward, where the activations pile up on top of "
            "them: the peak carries a copy of the parameters' size that nothing reads. Freed, the "
            "backward allocates each gradient as it frees the activations it consumed, so the peak "
            "falls by up to the gradients' size. Same results (a freed gradient is written, a zeroed "
            "one accumulated into). Does not help when the peak is in the optimizer step or when "
            "gradients must outlive the step (accumulation across micro-batches keeps them anyway)."
        ),
        module="accel.memory.gradients",
        demo_module="accel.demos.zero_grad_set_to_none",
        fit={"memory_spike": 0.3},
    ),
    Fix(
        id="autocast_activations",
        workloads=("training",),
        title="Keep activations in 16 bits: the forward under torch.autocast",
        addresses=["memory_spike", "memory_headroom"],
        needs=[],
        snippet=(
            "import torch\n"
            "from accel.kernels.precision import amp_dtype\n"
            "device = next(model.parameters()).device.type\n"
            "with torch.autocast(device_type=device, dtype=amp_dtype(device)):   # bf16 (fp16 without it)\n"
            "    loss = loss_fn(model(x0), y0)   # the activations kept for backward are 16-bit\n"
            "loss.backward()\n"
        ),
        description=(
            "The forward keeps each layer's activations for the backward; in FP32 they are often most "
            "of the peak. Under torch.autocast the matmuls and what follows them run in bf16 (fp16 with "
            "a GradScaler where the GPU has no bf16), so the saved activations take half the bytes while "
            "the weights, gradients and optimizer state stay FP32. On GPUs it is faster too (tensor "
            "cores); on CPUs without bf16 units the matmuls get slower. Losses drift within bf16's "
            "precision: check convergence. Does not shrink optimizer state (shard it) or weights."
        ),
        module="accel.kernels.precision",
        demo_module="accel.demos.autocast_activations",
        fit={"memory_spike": 0.5, "memory_headroom": 0.5},
    ),
    Fix(
        id="zero_optimizer",
        workloads=("training",),
        title="Shard the optimizer state across data-parallel ranks (ZeroRedundancyOptimizer)",
        addresses=["allocator_fragmentation", "memory_spike"],
        needs=["multi_rank"],
        snippet=(
            "import torch\n"
            "from accel.memory.sharded_optimizer import shard_optimizer\n"
            "optimizer = shard_optimizer(model.parameters(), torch.optim.AdamW, lr=1e-3)\n"
            "# each rank keeps Adam's state for 1/world_size of the parameters\n"
        ),
        description=(
            "Under data parallelism every rank keeps the whole optimizer state (Adam: twice the "
            "parameters). ZeroRedundancyOptimizer gives each rank the state, and the update, of its "
            "share of the parameters only and broadcasts the updated ones: the state and the "
            "optimizer step's working memory shrink by the number of ranks (gloo and NCCL). It does "
            "not shrink activations (checkpoint those) nor gradients (FSDP shards those too), and "
            "adds a broadcast per step."
        ),
        module="accel.memory.sharded_optimizer",
        demo_module="accel.demos.dist_zero_optimizer",
        fit={"allocator_fragmentation": 0.4, "memory_spike": 0.2},
    ),
    Fix(
        id="serving_cuda_graphs",
        workloads=("serving",),
        title="Serving engine: CUDA graphs for every batch size served, overlap scheduling on",
        addresses=["launch_gap", "host_sync"],
        needs=["cuda"],
        snippet=(
            "from accel.serving import serving_graph_settings\n"
            "# your engine (\"vllm\", \"sglang\" or \"tensorrt_llm\") and the largest decode batch served\n"
            "for line in serving_graph_settings(\"sglang\", max_batch=64):\n"
            "    print(line)\n"
            "# SGLang: python -m sglang.launch_server --model-path MODEL --cuda-graph-max-bs 64\n"
            "#         (not --disable-cuda-graph, not --disable-overlap-schedule)\n"
            "# vLLM:   vllm serve MODEL --async-scheduling (not --enforce-eager)\n"
            "#         --compilation-config '{\"cudagraph_capture_sizes\": [1, 2, 4, 8, 16, 32, 64]}'\n"
        ),
        description=(
            "Serving engines replay decode steps from CUDA graphs captured at start-up for a list "
            "of batch sizes and overlap the scheduler's CPU work with the GPU step. Eager mode "
            "(vLLM --enforce-eager, SGLang --disable-cuda-graph), a batch above the largest "
            "captured size, or overlap turned off launch every kernel from Python again: the GPU "
            "then waits between kernels. Costs GPU memory per captured size and start-up time."
        ),
        module="accel.serving",
        demo_module="accel.demos.serving_cuda_graphs",
        fit={"launch_gap": 0.5, "host_sync": 0.3},   # after the general fixes where the workload is unknown
    ),
]

FIXES: dict[str, Fix] = {fix.id: fix for fix in _FIX_LIST}


def get(fix_id: str) -> Fix:
    """The Fix with this id; KeyError naming the known ids otherwise."""
    try:
        return FIXES[fix_id]
    except KeyError:
        raise KeyError(f"unknown fix {fix_id!r}; known: {', '.join(FIXES)}") from None


def demo_command(fix_id: str) -> str:
    """The command that profiles a fix's demo before and after (accel/demo.py)."""
    return f"python -m accel.demo {fix_id} --out DIR"


def ranked_fixes(kind: str, metrics: Metrics | None = None, thresholds: Thresholds | None = None,
                 unmet: Callable[[Fix], str | None] | None = None) -> list[tuple[str, Verdict]]:
    """[(fix id, its Verdict)] for the fixes addressing `kind`, best first: those that apply, then
    the unknown ones, then those ruled out, each part ranked by fit (then registry order). unmet:
    why the trace cannot use a fix (it needs CUDA or several ranks the trace lacks) or None; such a
    fix is ruled out for that reason, after those the metrics alone rule out.

    Fixes ruled out stay listed (the user may know better than the metrics), so the list is empty
    only for kinds no fix addresses. The one ordering of fixes: the CLI, reports and pages read it.
    """
    resolved = resolve_thresholds(thresholds)
    order = {fix_id: i for i, fix_id in enumerate(FIXES)}
    judged = []
    for fix in FIXES.values():
        if kind not in fix.addresses:
            continue
        by_metrics = fix.verdict(metrics, kind=kind, thresholds=resolved)
        reason = unmet(fix) if unmet is not None else None
        judged.append((fix, by_metrics, reason, Verdict(RULED_OUT, reason) if reason else by_metrics))
    judged.sort(key=lambda j: (STATUS_ORDER[j[3].status], j[2] is not None, STATUS_ORDER[j[1].status],
                               -j[0].fit_for(kind, metrics, resolved), order[j[0].id]))
    return [(fix.id, shown) for fix, _, _, shown in judged]


def fixes_for(kind: str, metrics: Metrics | None = None, thresholds: Thresholds | None = None) -> list[str]:
    """The ids of ranked_fixes, best first (judged on the metrics alone)."""
    return [fix_id for fix_id, _ in ranked_fixes(kind, metrics, thresholds)]


def verdicts(fix_ids: list[str], metrics: Metrics | None, *, kind: str | None = None,
             thresholds: Thresholds | None = None) -> dict[str, Verdict]:
    """{fix id: its Verdict} for a finding of `kind` with these metrics; unknown ids are skipped."""
    resolved = resolve_thresholds(thresholds)
    return {fix_id: FIXES[fix_id].verdict(metrics, kind=kind, thresholds=resolved)
            for fix_id in fix_ids if fix_id in FIXES}


def fixes_ruled_out(fix_ids: list[str], metrics: Metrics | None, *, kind: str | None = None,
                    thresholds: Thresholds | None = None) -> dict[str, str]:
    """{fix id: why the finding's metrics rule it out} for those of `fix_ids` they rule out."""
    return {fix_id: v.reason for fix_id, v in verdicts(fix_ids, metrics, kind=kind, thresholds=thresholds).items()
            if v.status == RULED_OUT}


def fixes_unknown(fix_ids: list[str], metrics: Metrics | None, *, kind: str | None = None,
                  thresholds: Thresholds | None = None) -> dict[str, str]:
    """{fix id: what the finding does not measure} for those of `fix_ids` left unknown (nothing
    rules them out, but a metric their check needs is missing, None or unusable)."""
    return {fix_id: v.reason for fix_id, v in verdicts(fix_ids, metrics, kind=kind, thresholds=thresholds).items()
            if v.status == UNKNOWN}


def list_fixes() -> list[dict[str, Any]]:
    """[{id, title, addresses, needs}] for `python -m accel.demo --list --format json`."""
    return [{"id": f.id, "title": f.title, "addresses": list(f.addresses), "needs": list(f.needs),
             "workloads": list(f.workloads)} for f in FIXES.values()]
