"""Fixes for where the memory goes: recompute activations instead of keeping them."""
