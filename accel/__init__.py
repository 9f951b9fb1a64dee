"""TraceDoctor fix library: each finding kind links to fixes a user applies in a line or two.

- accel.registry   finding kind -> fixes (no torch import: the analyzers read it)
- accel.kernels    CUDA graphs, torch.compile, fused optimizers, a fused Triton kernel
- accel.data       CUDA prefetcher, DataLoader tuning, balanced sampler
- accel.comm       DDP communication hooks, bucket tuning, no_sync, hierarchical all-reduce
- accel.demo       `python -m accel.demo FIX_ID --out DIR`: profile before/after, analyse both

Importing this package imports no torch; the fix modules import it themselves.
"""
