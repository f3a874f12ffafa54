#!/usr/bin/env bash
# Runs every test: the pure core's unit tests, the #[pg_test]s (cargo pgrx
# test), pg_regress against the scratch cluster, and the client-driven suites
# in tests/cluster (against the scratch cluster, the clock-step cluster and a
# pg_auto_failover formation). Installs and starts what it needs. Safe to run again.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"
cd "$ROOT"

setup
TEST_LOG=$(mktemp)
# The failover formation never outlives the run, whatever ends it.
trap 'rm -f "$TEST_LOG"; stop_formation' EXIT
# Runs a test stage, keeping its output to count the passed tests at the end.
stage() { "$@" 2>&1 | tee -a "$TEST_LOG"; }

say "unit tests of the pure core (cargo test -p idgen-core)"
stage cargo test -p idgen-core

say "#[pg_test]s in a temporary PostgreSQL $PG_MAJOR (cargo pgrx test)"
pgrx_test_dir=$(pg_work_dir pgrx-test-data)
# pgrx wants to create the data directory itself.
as_pg rm -rf "$pgrx_test_dir/data"
stage cargo pgrx test "pg$PG_MAJOR" --runas "$PG_OS_USER" --pgdata "$pgrx_test_dir/data"

# cargo pgrx test installed its test build; install the release build, then restart to load it.
install_extension
# The 0.1.0 and 0.2.0 install scripts, so that tests/cluster/tests/upgrade.rs can start from them.
as_root install -m 644 tests/upgrade/idgen--0.1.0.sql tests/upgrade/idgen--0.2.0.sql "$("$PG_CONFIG" --sharedir)/extension/"
start_scratch_cluster
start_clock_cluster
start_formation

say "pg_regress against the scratch cluster"
regress_dir=$(pg_work_dir regress)
as_pg rm -rf "$regress_dir/sql" "$regress_dir/expected" "$regress_dir/results"
cp -r tests/pg_regress/sql tests/pg_regress/expected "$regress_dir/"
is_root && chown -R postgres: "$regress_dir"
pg_regress_bin="$(dirname "$("$PG_CONFIG" --pgxs)")/../test/regress/pg_regress"
schedule=$(cd tests/pg_regress/sql && ls *.sql | sed 's/\.sql$//')
if ! as_pg "$pg_regress_bin" --host=127.0.0.1 --port="$SCRATCH_PORT" --user=postgres \
        --inputdir="$regress_dir" --outputdir="$regress_dir" --dbname=idgen_regress $schedule; then
    cat "$regress_dir/regression.diffs" >&2 || true
    die "pg_regress failed (diffs above; results in $regress_dir/results)"
fi

say "client-driven suites against the scratch clusters and the formation (tests/cluster, client/tests)"
IDGEN_TEST_DSN=$SCRATCH_DSN IDGEN_CLOCK_DSN=$CLOCK_DSN IDGEN_CLOCK_FILE=$CLOCK_FILE IDGEN_CLOCK_RESTART=$CLOCK_RESTART \
    IDGEN_HA_DIR=$HA_DIR IDGEN_HA_PORT=$HA_PORT IDGEN_HA_DSN=$HA_DSN \
    stage cargo test -p idgen-cluster-tests -p idgen-client

cargo_passed=$(sed 's/\x1b\[[0-9;]*m//g' "$TEST_LOG" | grep -oE 'test result: ok\. [0-9]+ passed' | awk '{n += $4} END {print n + 0}')
regress_passed=$(wc -w <<<"$schedule")
say "all tests passed"
echo "idgen: $((cargo_passed + regress_passed)) passed, 0 failed"
