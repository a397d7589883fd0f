//! Echo's own metric families, declared once (name, type, unit, help, labels): the
//! exporter's and the API extension's `telemetry` build their families from these specs,
//! and `examples/exported-metrics.txt` lists them from the same declaration. This file
//! names nothing outside `component`, so the Fleet distribution's generator reads it
//! without linking Echo (and DuckDB).

pub const LABEL_EXPORTER: &str = "exporter";
pub const LABEL_EXTENSION: &str = "extension";
pub const LABEL_ROUTE: &str = "route";
pub const LABEL_STATUS: &str = "status";

// In exposition order: the `echo` exporter's families, then the `echo_api` extension's.
component::metric_set! {
    specs: pub mod spec;
    all: pub FAMILIES;
    BATCHES_COMMITTED: counter "ingero_echo_batches_committed_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Batches committed (each acknowledged after its commit).";
    ROWS_COMMITTED: counter "ingero_echo_rows_committed_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Rows committed, all tables.";
    COMMITS: counter "ingero_echo_commits_total", unit "1", labels [LABEL_EXPORTER],
        help "Write transactions committed (several batches each).";
    COMMIT_FAILURES: counter "ingero_echo_commit_failures_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Write transactions that failed (their batches answered unavailable).";
    REFUSED_FULL: counter "ingero_echo_refused_full_total", unit "1", labels [LABEL_EXPORTER],
        help "Batches answered 503 / UNAVAILABLE because the writer queue was full.";
    REJECTED_NONFINITE_POINTS: counter "ingero_echo_rejected_nonfinite_points_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Metric points dropped at ingest because a value was NaN or infinite (answered as partial success).";
    REJECTED_CAUSAL_CHAINS: counter "ingero_echo_rejected_causal_chains_total", unit "1",
        labels [LABEL_EXPORTER],
        help "ingero.causal_chains attributes dropped at ingest as malformed (the event or span itself is stored).";
    RETENTION_DELETED_ROWS: counter "ingero_echo_retention_deleted_rows_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Rows deleted by retention (age or size).";
    RETENTION_FAILURES: counter "ingero_echo_retention_failures_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Retention checks that failed.";
    ROLLUP_ROWS_MERGED: counter "ingero_echo_rollup_rows_merged_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Partial health_minutes rows merged away by the writer.";
    ROLLUP_FAILURES: counter "ingero_echo_rollup_failures_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Merges of the health rollup that failed (retried later; queries stay exact).";
    QUERIES_OVER_MEMORY: counter "ingero_echo_queries_over_memory_total", unit "1",
        labels [LABEL_EXPORTER],
        help "Tool calls interrupted because the process's resident memory passed query.memory_budget_mib.";
    PENDING_BATCHES: gauge "ingero_echo_pending_batches", unit "1", labels [LABEL_EXPORTER],
        help "Batches queued for the writer.";
    DATABASE_USED_BYTES: gauge "ingero_echo_database_used_bytes", unit "By",
        labels [LABEL_EXPORTER],
        help "Database bytes in use at the last retention check.";
    API_REQUESTS: counter "ingero_echo_api_requests_total", unit "1",
        labels [LABEL_EXTENSION, LABEL_ROUTE, LABEL_STATUS],
        help "Requests to the Echo API and MCP listener by route and HTTP status.";
}
