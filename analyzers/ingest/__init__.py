"""Ingest: Kineto trace files → the DuckDB store (runs, ranks, events).

    ingest_paths(con, paths, name=None, progress=None, limits=None, events_root=None, runner=None) -> IngestResult
    ingest_jobs(con, paths, name=None, progress=None, limits=None, events_root=None, runner=None)
        -> list[IngestResult]

paths: str/Path or a list of them: .json, .json.gz, .zip or .tar.gz of rank files, or a
directory (searched recursively for *.json / *.json.gz), or an fsspec URL of either (copied into
the temp directory first). One call is one run. events_root (default $TRACEDOCTOR_EVENTS_DIR):
keep the run's events as Parquet partitions there instead of in the store (partitioned.py), each
rank parsed as a task of `runner` (analyzers/cluster.py; default this process). The event arrays
are parsed by DuckDB itself from byte ranges of the files (never as Python objects); gzip and
archive members are inflated straight into such ranges in a private temp directory
($TRACEDOCTOR_TMPDIR, else the system temp dir) under the caps in `Limits`. progress(stage, file,
fraction[, **details]) is told each file read, parsed and stored (analyzers/common/progress.py). Files
of several unrelated jobs (jobs.py) are refused by ingest_paths and split into one run per job by
ingest_jobs. Identical files ingested again return the stored run with
reused=True. Temp directories a killed ingest or dashboard left behind are swept at the start of
each call; SIGTERM and the dashboard's upload directories: see analyzers/common/tempfiles.py.
"""
from .core import ingest_jobs, ingest_paths
from .sources import Limits

__all__ = ["ingest_jobs", "ingest_paths", "Limits"]
