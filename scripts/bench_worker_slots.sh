#!/usr/bin/env bash
# Inserts under background worker starvation: a role granted nothing fills every free background
# worker slot with parallel queries (SET max_parallel_workers and force_parallel_mode /
# debug_parallel_query are any role's), then another role's new connections each insert one row
# keyed by idgen_next_id('service') of a service of its own (so that each needs a claim and readies
# a service: no lease to take up).
# Once with idgen loaded on demand, once preloaded, on the PostgreSQL 15 (or 18: IDGEN_PG=18)
# scratch cluster: how many inserts succeed, and how long the refused ones took. Not part of the
# test command (tests/cluster/tests/worker_slots.rs checks the behaviour).
# Usage: bash scripts/bench_worker_slots.sh [INSERTS per mode, default 20]
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
INSERTS=${1:-20}

provision
use_pg "${IDGEN_PG:-15}"
install_extension >/dev/null
start_scratch_cluster
trap 'scratch_preload off >/dev/null 2>&1 || true' EXIT

psql_as() { psql "$SCRATCH_DSN user=$1 dbname=$2" -X -q -v ON_ERROR_STOP=1 "${@:3}"; }
scratch_psql postgres -c "DO \$\$ BEGIN
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idgen_bench_hog') THEN CREATE ROLE idgen_bench_hog LOGIN; END IF;
    IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'idgen_bench_inserter') THEN CREATE ROLE idgen_bench_inserter LOGIN; END IF;
END \$\$"
forced=force_parallel_mode
[ "$PG_MAJOR" -ge 16 ] && forced=debug_parallel_query

DB=idgen_bench_slots
# Runs one mode; prints "succeeded refused slowest_refusal_ms slowest_success_ms hogs".
run_mode() {
    local i pids=() hogs=0 launched out start ms ok=0 refused=0 max_refused=0 max_ok=0
    scratch_psql postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
    scratch_psql "$DB" -c "CREATE EXTENSION idgen" -c "CREATE TABLE t (id bigint PRIMARY KEY, p int)" \
        -c "GRANT INSERT ON t TO idgen_bench_inserter" \
        -c "SELECT idgen_grant_service('bench_s' || i, 'idgen_bench_inserter') FROM generate_series(1, $INSERTS) i" >/dev/null
    # Writers started on demand leave within seconds when idle: none may free a slot during the run.
    for _ in $(seq 120); do
        [ "$1" = on ] && break
        [ "$(scratch_psql postgres -At -c "SELECT count(*) FROM pg_stat_activity WHERE backend_type = 'idgen registry writer'")" = 0 ] && break
        sleep 1
    done
    while :; do
        launched=$(psql_as idgen_bench_hog postgres -At -c "SET max_parallel_workers = 64" -c "SET $forced = on" \
            -c "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF, SUMMARY OFF) SELECT pg_sleep(0)" | sed -n 's/.*Workers Launched: \([0-9]*\).*/\1/p')
        [ "$launched" = 0 ] && break
        [ "$hogs" -lt 64 ] || die "the worker slots never filled"
        psql_as idgen_bench_hog postgres -c "SET max_parallel_workers = 64" -c "SET $forced = on" -c "SELECT pg_sleep(600)" >/dev/null 2>&1 &
        pids+=($!)
        hogs=$((hogs + 1))
        sleep 0.5
    done
    for i in $(seq "$INSERTS"); do
        start=$(date +%s%N)
        if out=$(psql_as idgen_bench_inserter "$DB" -c "INSERT INTO t VALUES (idgen_next_id('bench_s$i'), 1)" 2>&1); then
            ms=$(( ($(date +%s%N) - start) / 1000000 ))
            ok=$((ok + 1))
            [ "$ms" -gt "$max_ok" ] && max_ok=$ms
        else
            ms=$(( ($(date +%s%N) - start) / 1000000 ))
            refused=$((refused + 1))
            [ "$ms" -gt "$max_refused" ] && max_refused=$ms
            [ "$refused" = 1 ] && say "refused: $out"
        fi
    done
    scratch_psql postgres -c "SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE usename = 'idgen_bench_hog'" >/dev/null
    wait "${pids[@]}" 2>/dev/null || true
    scratch_psql postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" >/dev/null
    echo "$ok $refused $max_refused $max_ok $hogs"
}

say "idgen loaded on demand"
scratch_preload off >/dev/null
read -r plain_ok plain_refused plain_ms plain_ok_ms plain_hogs < <(run_mode off)
say "idgen preloaded"
scratch_preload on >/dev/null
read -r pre_ok pre_refused pre_ms pre_ok_ms pre_hogs < <(run_mode on)
scratch_preload off >/dev/null

cat <<TABLE

| PostgreSQL $PG_MAJOR, every free worker slot held by another role's parallel queries | inserts | succeeded | slowest success | refused | slowest refusal |
|---|---:|---:|---:|---:|---:|
| idgen loaded on demand ($plain_hogs hog sessions) | $INSERTS | $plain_ok | $plain_ok_ms ms | $plain_refused | $plain_ms ms |
| idgen preloaded ($pre_hogs hog sessions) | $INSERTS | $pre_ok | $pre_ok_ms ms | $pre_refused | $pre_ms ms |
TABLE
