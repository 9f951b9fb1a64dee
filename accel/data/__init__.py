"""Input-pipeline fixes: CUDA prefetcher, DataLoader tuning, balanced distributed sampler."""
