#!/usr/bin/env bash
# Echo's benchmarks against an optimised binary: zero loss (20k burst, 50k paced), kill -9
# mid-stream and restart, sustained ingest with acknowledgement after commit, and
# find_outlier_nodes over 10 M stored points. See scripts/echo_bench.py for the method;
# the figures go to docs/benchmarks.md ("Echo").
#
#   scripts/echo-bench.sh                         (all phases; about 10 min on 2 cores)
#   scripts/echo-bench.sh --phases zero-loss,kill (the correctness phases only)
#   INGERO_ECHO_BIN=target/debug/ingero-echo scripts/echo-bench.sh --query-points 200000
#
# Builds target/release/ingero-echo with `--profile bench` (release Rust; Cargo writes the bench
# profile under target/release) unless INGERO_ECHO_BIN is set. DuckDB is DuckDB's own release
# build (-O3) of the pinned version, linked through scripts/duckdb-prebuilt.sh, as the test
# command does; where that cannot be fetched the bundled C++ is compiled at the bench
# profile's -O1 (see Cargo.toml) and the report says so (`duckdb`). The OTLP client is the
# pinned `opentelemetry-proto` package in target/echo-bench-venv.
set -euo pipefail
cd "$(dirname "$0")/.."
python="$(scripts/py-venv.sh echo-bench-venv opentelemetry-proto 1.45.2)"
if [ -z "${INGERO_ECHO_BIN:-}" ]; then
  if prebuilt="$(scripts/duckdb-prebuilt.sh)" && [ -n "$prebuilt" ]; then
    eval "$prebuilt"
    export INGERO_ECHO_BENCH_DUCKDB="DuckDB 1.5.6 release build (-O3, prebuilt static library)"
  else
    export INGERO_ECHO_BENCH_DUCKDB="DuckDB 1.5.6 bundled, compiled at -O1 (bench profile)"
  fi
  cargo build -q --profile bench --locked -p ingero-echo
fi
exec "$python" scripts/echo_bench.py "$@"
