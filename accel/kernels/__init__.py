"""GPU-time fixes for launch-bound steps: CUDA graphs, torch.compile, fused optimizers, Triton.

Each module imports torch itself; triton_fused also imports without Triton present.
"""
