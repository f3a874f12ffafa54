#!/usr/bin/env bash
# The sidecar's IDs per second over HTTP against the library's in-process, in one run
# (client/examples/bench_sidecar.rs): one ID a request on one keep-alive connection and on four,
# and batches of 100 and 1,000 on one, each as a ratio to IdgenNode::next_id, interleaved rounds
# and medians. Both mint for service "bench" in a fresh database of the scratch cluster
# (PostgreSQL 15), release builds. Prints a markdown table (docs/kubernetes.md has the last one).
#
#   bash scripts/bench_sidecar.sh [SECONDS per measurement, default 2] [ROUNDS, default 5]
#
# IDGEN_KEEP_INSTALLED=1 uses the idgen already installed (no build or install of the extension).
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
cd "$ROOT" || exit 1
SECONDS_EACH=${1:-2}
ROUNDS=${2:-5}

use_pg 15
if [ "${IDGEN_KEEP_INSTALLED:-}" != 1 ]; then install_extension; fi
start_scratch_cluster
scratch_psql postgres -c "DROP DATABASE IF EXISTS idgen_bench_sidecar WITH (FORCE)" -c "CREATE DATABASE idgen_bench_sidecar"
scratch_psql idgen_bench_sidecar -c "CREATE EXTENSION idgen"

say "building idgen-node and the benchmark (release)"
cargo build --release -q -p idgen-client --bin idgen-node --example bench_sidecar
say "$ROUNDS rounds of ${SECONDS_EACH} s per measurement ($(nproc) cores)"
"$ROOT/target/release/examples/bench_sidecar" --dsn "$SCRATCH_DSN dbname=idgen_bench_sidecar" \
    --node "$ROOT/target/release/idgen-node" --seconds "$SECONDS_EACH" --rounds "$ROUNDS"
