"""TraceDoctor analyzers: ingest PyTorch profiler traces into DuckDB and find what wastes GPU time.

This package must stay light: it imports neither torch nor streamlit, so the CLI starts fast.
"""
