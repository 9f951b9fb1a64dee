"""The ingest tests' fixtures: con, an empty in-memory store, and good, a file that loads
(tests.support.ingest_traces)."""
from tests.support.ingest_traces import con, good  # noqa: F401 - fixtures
