#!/usr/bin/env bash
# Runs every test, on PostgreSQL 15 and on PostgreSQL 18: the pure core's unit
# tests, the #[pg_test]s (cargo pgrx test), pg_regress against the scratch
# cluster, and the client-driven suites in tests/cluster and client/tests
# (against the scratch cluster, the clock-step cluster, pgbouncer in front of
# the scratch cluster, and on 15 a pg_auto_failover formation). Installs and
# starts what it needs. Safe to run again.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

setup
TEST_LOG=$(mktemp)
# The failover formation and the pooler never outlive the run, whatever ends it.
trap 'rm -f "$TEST_LOG"; stop_formation; stop_pooler' EXIT
# Runs a test stage, keeping its output to count the passed tests at the end.
stage() { "$@" 2>&1 | tee -a "$TEST_LOG"; }
schedule=$(cd tests/pg_regress/sql && ls *.sql | sed 's/\.sql$//')
regress_passed=0

say "unit tests of the pure core (cargo test -p idgen-core)"
stage cargo test -p idgen-core

# pg_regress against the scratch cluster of the current version; $1 says how it runs.
run_pg_regress() {
    say "pg_regress against the PostgreSQL $PG_MAJOR scratch cluster ${1:-}"
    local regress_dir pg_regress_bin
    regress_dir=$(pg_work_dir "regress$PG_MAJOR")
    as_pg rm -rf "$regress_dir/sql" "$regress_dir/expected" "$regress_dir/results"
    cp -r tests/pg_regress/sql tests/pg_regress/expected "$regress_dir/"
    is_root && chown -R postgres: "$regress_dir"
    pg_regress_bin="$(dirname "$("$PG_CONFIG" --pgxs)")/../test/regress/pg_regress"
    # shellcheck disable=SC2086 # the schedule is a list of names
    if ! as_pg "$pg_regress_bin" --bindir="$PG_BIN" --host=127.0.0.1 --port="$SCRATCH_PORT" --user=postgres \
            --inputdir="$regress_dir" --outputdir="$regress_dir" --dbname=idgen_regress $schedule; then
        cat "$regress_dir/regression.diffs" >&2 || true
        die "pg_regress failed on PostgreSQL $PG_MAJOR ${1:-} (diffs above; results in $regress_dir/results)"
    fi
    regress_passed=$((regress_passed + $(wc -w <<<"$schedule")))
}

# Every suite that needs a server, against PostgreSQL $1.
suites_on() {
    use_pg "$1"
    say "#[pg_test]s in a temporary PostgreSQL $PG_MAJOR (cargo pgrx test)"
    local pgrx_test_dir
    pgrx_test_dir=$(pg_work_dir "pgrx-test-data$PG_MAJOR")
    # pgrx wants to create the data directory itself.
    as_pg rm -rf "$pgrx_test_dir/data"
    stage cargo pgrx test "pg$PG_MAJOR" --runas "$PG_OS_USER" --pgdata "$pgrx_test_dir/data" \
        --no-default-features --features "pg$PG_MAJOR"

    # cargo pgrx test installed its test build; install the release build, then restart to load it.
    install_extension
    # The 0.1.0 to 0.4.0 install scripts, so that tests/cluster/tests/upgrade.rs can start from them.
    local extension_dir
    extension_dir="$("$PG_CONFIG" --sharedir)/extension/"
    if [ -w "$extension_dir" ]; then install -m 644 tests/upgrade/idgen--0.[1234].0.sql "$extension_dir"
    else as_root install -m 644 tests/upgrade/idgen--0.[1234].0.sql "$extension_dir"; fi
    start_scratch_cluster
    start_clock_cluster

    run_pg_regress
    # The README suggests preloading idgen for connection churn: the cases pass that way too.
    scratch_preload on
    run_pg_regress "with idgen in shared_preload_libraries"
    scratch_preload off

    # The failover test needs pg_auto_failover, which Debian ships for PostgreSQL 15 only.
    local skip=()
    if [ "$PG_MAJOR" = 15 ]; then start_formation; else skip=(-- --skip no_id_twice_across); fi
    # pgbouncer in transaction mode for tests/cluster/tests/pooler.rs, after the scratch cluster's last restart.
    start_pooler
    say "client-driven suites against PostgreSQL $PG_MAJOR (tests/cluster, client/tests)"
    PATH="$PG_BIN:$PATH" IDGEN_TEST_DSN=$SCRATCH_DSN IDGEN_CLOCK_DSN=$CLOCK_DSN IDGEN_CLOCK_FILE=$CLOCK_FILE \
        IDGEN_CLOCK_RESTART=$CLOCK_RESTART IDGEN_HA_DIR=$HA_DIR IDGEN_HA_PORT=$HA_PORT IDGEN_HA_DSN=${HA_DSN:-} \
        IDGEN_POOLER_DSN=$POOLER_DSN stage cargo test -p idgen-cluster-tests -p idgen-client "${skip[@]}"
    stop_formation
    stop_pooler
}

suites_on 15
suites_on 18
# The scratch cluster `scripts/demo.sh` and the benchmarks use is PostgreSQL 15's.
use_pg 15

cargo_passed=$(sed 's/\x1b\[[0-9;]*m//g' "$TEST_LOG" | grep -oE 'test result: ok\. [0-9]+ passed' | awk '{n += $4} END {print n + 0}')
say "all tests passed"
echo "idgen: $((cargo_passed + regress_passed)) passed, 0 failed (PostgreSQL 15 and 18)"
