#!/usr/bin/env bash
# IDs per second a Python service gets (python/bench/bench_python.py): the package's next_id() and
# next_ids(1000), the Rust crate on the same node (the yardstick), and the sidecar over HTTP from
# Python, in one run, interleaved rounds and medians, as ratios to the Rust crate. The wheel is
# built (release) and installed into a fresh virtual environment (scripts/python.sh); the node and
# the sidecar mint for service "bench" in a fresh database of the scratch cluster (PostgreSQL 15).
# Prints a markdown table (docs/benchmarks.md has the last one).
#
#   bash scripts/bench_python.sh [SECONDS per measurement, default 2] [ROUNDS, default 5]
#
# IDGEN_KEEP_INSTALLED=1 uses the idgen already installed (no build or install of the extension).
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
source "$(dirname "${BASH_SOURCE[0]}")/python.sh"
cd "$ROOT" || exit 1
SECONDS_EACH=${1:-2}
ROUNDS=${2:-5}

use_pg 15
if [ "${IDGEN_KEEP_INSTALLED:-}" != 1 ]; then install_extension; fi
start_scratch_cluster
scratch_psql postgres -c "DROP DATABASE IF EXISTS idgen_bench_python WITH (FORCE)" -c "CREATE DATABASE idgen_bench_python"
scratch_psql idgen_bench_python -c "CREATE EXTENSION idgen"

fresh_venv
say "building idgen-node (release)"
cargo build --release -q -p idgen-client --bin idgen-node
say "$ROUNDS rounds of ${SECONDS_EACH} s per measurement ($(nproc) cores)"
(cd / && "$VENV/bin/python" "$ROOT/python/bench/bench_python.py" "$SCRATCH_DSN dbname=idgen_bench_python" \
    "$ROOT/target/release/idgen-node" "$SECONDS_EACH" "$ROUNDS")
