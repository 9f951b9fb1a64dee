-- TraceDoctor store: the tables every layer reads. Created idempotently by analyzers.store.database.connect().
-- Times are integer nanoseconds since the epoch (or since the trace's own origin when the
-- trace has no absolute clock); durations are integer nanoseconds.

-- One row per ingested run (all rank files of one job).
CREATE TABLE IF NOT EXISTS runs (
    run_id      VARCHAR PRIMARY KEY,   -- short content hash of the run's rank files (stable across re-ingest)
    name        VARCHAR NOT NULL,      -- user-facing name; defaults to the input path's base name
    created_at  TIMESTAMP NOT NULL,    -- when it was ingested
    source      VARCHAR,               -- the path(s) given to ingest, as the user typed them
    content_hash VARCHAR NOT NULL,     -- BLAKE3 over the sorted per-file hashes (run_id is its first 12 hex digits)
    world_size  INTEGER,               -- from distributedInfo, else the number of rank files
    tags        VARCHAR[] DEFAULT [],  -- free-form labels ("baseline", "after-fix")
    notes       VARCHAR DEFAULT '',
    analysis_version VARCHAR,          -- analyzers.execution.pipeline.ANALYSIS_VERSION of its findings; NULL: never analysed
    analysis_summary JSON,             -- run-level figures of that analysis (analyzers.analysis.root_causes.RunCosts)
    rank_table  JSON                   -- the report's ranks table from that analysis (metrics.rank_summary)
);

-- One row per rank file of a run.
CREATE TABLE IF NOT EXISTS ranks (
    run_id            VARCHAR NOT NULL,
    rank              INTEGER NOT NULL,  -- distributedInfo.rank, else from the file name (rank-3, rank3, _3.), else order
    file_name         VARCHAR NOT NULL,  -- the member name as given (zip member or base name)
    file_hash         VARCHAR NOT NULL,  -- BLAKE3 of the file's JSON text
    schema_version    VARCHAR,
    device_name       VARCHAR,           -- deviceProperties[0].name, NULL for CPU-only traces
    base_time_ns      BIGINT,            -- baseTimeNanoseconds when present
    distributed_info  JSON,
    device_properties JSON,
    trace_meta        JSON,              -- the remaining top-level keys (traceName, displayTimeUnit, ...)
    n_events          BIGINT,
    PRIMARY KEY (run_id, rank)
);

-- Every trace event, normalised across Kineto generations.
-- kind is one of: kernel, memcpy, memset, runtime, driver, cpu_op, user_annotation,
-- gpu_user_annotation, python_function, cuda_sync, flow, instant, counter, metadata, trace, other
-- (old 'Kernel'->kernel, 'Runtime'->runtime, 'Operator'->cpu_op except ProfilerStep#N/record_function
-- names which stay cpu_op, 'Memcpy'->memcpy, 'Memset'->memset, 'async'/'ac2g'/'async_cpu_to_gpu'/'fwdbwd'->flow).
CREATE TABLE IF NOT EXISTS events (
    run_id       VARCHAR NOT NULL,
    rank         INTEGER NOT NULL,
    kind         VARCHAR NOT NULL,
    cat          VARCHAR,          -- the category exactly as written in the trace
    ph           VARCHAR,          -- X, i, s, f, M, C, ...
    name         VARCHAR,
    ts_ns        BIGINT,           -- start, integer ns (exact from the text, no float rounding)
    dur_ns       BIGINT,           -- 0 for instants; NULL when absent
    pid          VARCHAR,          -- as text: pids/tids are sometimes strings ("Spans", "stream 7")
    tid          VARCHAR,
    device       INTEGER,          -- GPU activity: args.device (else numeric pid)
    stream       INTEGER,          -- GPU activity: args.stream (else numeric tid / "stream N")
    correlation  BIGINT,           -- args.correlation; for flow events their id
    external_id  BIGINT,           -- args["External id"] / args["external id"]
    bytes        BIGINT,           -- memcpy/memset args.bytes
    -- the event's args object, verbatim. zstd instead of DuckDB's default dictionary+FSST: a
    -- third smaller (1 GB of trace: 106 vs 159 MB of store) and ~0.7 CPU s per GB cheaper to write
    args         JSON USING COMPRESSION 'zstd'
);

-- Where a run's events are when they are kept outside the store (analyzers/store/partitions.py): one
-- Parquet file per rank, <root>/run_id=<id>/rank=<r>/events.parquet. A run without rows here has its
-- events in the events table.
CREATE TABLE IF NOT EXISTS event_partitions (
    run_id    VARCHAR NOT NULL,
    rank      INTEGER NOT NULL,
    location  VARCHAR NOT NULL,   -- a local path or an fsspec URL (memory://, s3://, ...)
    n_events  BIGINT,
    n_bytes   BIGINT,             -- the file's size
    written_by VARCHAR,           -- the store file that wrote it (partitions.store_identity): only it deletes it
    PRIMARY KEY (run_id, rank)
);

-- Analyzer output, one row per finding (rewritten whenever a run is analysed).
CREATE TABLE IF NOT EXISTS findings (
    run_id      VARCHAR NOT NULL,
    finding_id  VARCHAR NOT NULL,  -- stable across re-analysis: the kind, e.g. "launch_gap" (one finding per cause)
    kind        VARCHAR NOT NULL,  -- launch_gap, host_sync, h2d_stall, dataloader_stall, rank_imbalance, comm_exposed, ...
    severity    VARCHAR NOT NULL,  -- high | medium | low
    rank        INTEGER,           -- the worst (or only) rank; NULL when the finding is about the whole run
    ranks       INTEGER[],         -- every rank the cause shows on (per-rank figures in metrics.per_rank)
    caused_by   VARCHAR,           -- a consequence: the finding_id of its cause (its cost is not counted again)
    position    INTEGER,           -- its place in the run's list: root causes by cost, each consequence after its cause
    step        INTEGER,           -- ProfilerStep number where it is worst, NULL when spread over all
    stream      INTEGER,
    t_start_ns  BIGINT,            -- the window that shows it best
    t_end_ns    BIGINT,
    cost_ns     BIGINT,            -- GPU time lost per step (upper bound of what a fix saves)
    cost_pct    DOUBLE,            -- cost_ns / mean step time * 100
    metrics     JSON,              -- the evidence, analysis-specific
    summary     VARCHAR,
    PRIMARY KEY (run_id, finding_id)
);

-- Review marks on findings; kept across re-analysis and shown in reports.
CREATE TABLE IF NOT EXISTS finding_marks (
    run_id      VARCHAR NOT NULL,
    finding_id  VARCHAR NOT NULL,
    status      VARCHAR NOT NULL,  -- to_fix | fixed | wont_fix
    note        VARCHAR DEFAULT '',
    updated_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (run_id, finding_id)
);

-- The caveats of a run's last analysis, in plain words (analyze_run writes them with the findings):
-- what the analyses could not look at, and how to read the costs.
CREATE TABLE IF NOT EXISTS analysis_notes (
    run_id  VARCHAR NOT NULL,
    seq     INTEGER NOT NULL,
    note    VARCHAR NOT NULL,
    PRIMARY KEY (run_id, seq)
);

-- Runs moved to the trash (analyzers.store.runs.delete_run): hidden from every list, rows kept until
-- purge_trash removes them after the retention (7 days), or restore_run takes them back out.
CREATE TABLE IF NOT EXISTS run_trash (
    run_id      VARCHAR PRIMARY KEY,
    deleted_at  TIMESTAMP NOT NULL,  -- UTC
    deleted_by  VARCHAR              -- who deleted it (the OS user for the CLI, the login in the dashboard); NULL: unknown
);

-- Who changed what, when: one row per ingest, rename, tags, notes, mark, delete, restore, purge.
-- Kept when its run is purged.
CREATE TABLE IF NOT EXISTS audit_log (
    "at"        TIMESTAMP NOT NULL,  -- UTC ("at" is a keyword: always quoted)
    actor       VARCHAR,             -- NULL: unknown
    action      VARCHAR NOT NULL,    -- ingest | upload | load_path | load_path_refused | reanalyse | rename | tags | notes | mark | unmark | delete | restore | purge
    run_id      VARCHAR,
    detail      VARCHAR              -- the new name, tags or note, the finding marked, why a run was purged
);

-- Memory inputs given beside (or instead of) a run's traces (analyzers/ingest/memory_files.py).
-- Allocator snapshots (torch.cuda.memory._snapshot(), torch_npu's alike), one row per file.
CREATE TABLE IF NOT EXISTS memory_snapshots (
    run_id       VARCHAR NOT NULL,
    snapshot_id  INTEGER NOT NULL,   -- 0, 1, ... within the run
    rank         INTEGER NOT NULL,   -- from the file's name (rank3, _3.pickle), else the run's only rank, else 0
    file_name    VARCHAR NOT NULL,
    file_hash    VARCHAR NOT NULL,   -- BLAKE3 of the file as given
    PRIMARY KEY (run_id, snapshot_id)
);

-- A snapshot's segments (memory the allocator reserved from the device), as the file gives them.
CREATE TABLE IF NOT EXISTS memory_segments (
    run_id          VARCHAR NOT NULL,
    snapshot_id     INTEGER NOT NULL,
    segment_index   INTEGER NOT NULL,
    device          INTEGER,
    address         BIGINT,
    total_size      BIGINT,          -- reserved bytes
    allocated_size  BIGINT,
    active_size     BIGINT,
    requested_size  BIGINT,
    stream          BIGINT,
    segment_type    VARCHAR,         -- 'small' | 'large'
    is_expandable   BOOLEAN
);

-- The blocks of each segment: state 'active_allocated' (in use), 'active_pending_free', 'inactive' (free).
CREATE TABLE IF NOT EXISTS memory_blocks (
    run_id          VARCHAR NOT NULL,
    snapshot_id     INTEGER NOT NULL,
    segment_index   INTEGER NOT NULL,
    block_index     INTEGER NOT NULL,
    device          INTEGER,
    address         BIGINT,
    size            BIGINT,
    requested_size  BIGINT,
    state           VARCHAR,
    frames          JSON             -- [{name, filename, line}] where it was allocated (innermost first), up to 64
);

-- A snapshot's allocator history (device_traces): alloc, free_requested, free_completed,
-- segment_alloc/free/map/unmap, snapshot, oom (size: the failed request; device_free: free then).
CREATE TABLE IF NOT EXISTS memory_trace (
    run_id       VARCHAR NOT NULL,
    snapshot_id  INTEGER NOT NULL,
    device       INTEGER NOT NULL,
    seq          INTEGER NOT NULL,   -- order within the device's trace
    action       VARCHAR,
    addr         BIGINT,
    size         BIGINT,
    stream       BIGINT,
    time_us      BIGINT,
    device_free  BIGINT,
    frames       JSON
);

-- torch.profiler export_memory_timeline raw rows ([ts, action, bytes, category]).
CREATE TABLE IF NOT EXISTS memory_timeline (
    run_id     VARCHAR NOT NULL,
    rank       INTEGER NOT NULL,
    file_name  VARCHAR NOT NULL,
    seq        INTEGER NOT NULL,
    ts_ns      BIGINT,               -- NULL: memory that existed before profiling (ts -1)
    action     VARCHAR,              -- preexisting | create | increment_version | destroy
    bytes      BIGINT,               -- negative when memory is released
    category   VARCHAR               -- parameter | optimizer_state | input | temporary | activation | gradient | autograd_detail | unknown
);

-- The what-if replay of a run's last analysis (analyzers/analysis/whatif): run-level figures (measured,
-- replayed, all fixes, greedy order, critical path by category), each finding's prediction, the
-- replay's per-step error and notes, as one JSON document (rewritten with the findings).
CREATE TABLE IF NOT EXISTS whatif (
    run_id  VARCHAR PRIMARY KEY,
    result  JSON
);

-- The whole-run tables the pages open on (analyzers/read/queries.py PAGE_DEFAULTS: the step table,
-- the operator, kernel and module summaries, the per-kernel rates, the per-op model), computed while
-- the analysis has the run's views cached, so a page's first view reads them instead of
-- aggregating every event again. One Parquet file per table; rows of another analysis version are
-- not read (the page computes its table then).
CREATE TABLE IF NOT EXISTS page_defaults (
    run_id   VARCHAR NOT NULL,
    name     VARCHAR NOT NULL,
    version  VARCHAR NOT NULL,
    data     BLOB NOT NULL,
    PRIMARY KEY (run_id, name)
);
