#!/usr/bin/env bash
# Runs idgen's tests and reports their counts, read from the test runners' own summaries.
#
#   bash scripts/test.sh [STAGE] [PG]          PG may also come from IDGEN_TEST_PG
#
# With no STAGE (or `all`), everything, as CI runs it: the pure core's unit tests and the
# simulation's quick size, then on PostgreSQL 15 and then 18 the #[pg_test]s, pg_regress twice and
# the client-driven suites. STAGE runs one stage alone:
#   core      the pure core's unit tests (cargo test -p idgen-core; no PostgreSQL)
#   sim       the simulation (cargo test -p idgen-sim: 10,000 schedules, the mutation searches,
#             the scripted regressions; no PostgreSQL; docs/simulation.md)
#   pg_test   the #[pg_test]s, in a temporary PostgreSQL (cargo pgrx test)
#   regress   pg_regress against the scratch cluster, twice (the second time with idgen in
#             shared_preload_libraries)
#   cluster   every client-driven suite (tests/cluster and client/tests) against the scratch
#             cluster, the clock-step cluster, pgbouncer in front of the scratch cluster and, on
#             15 only, a pg_auto_failover formation (the failover suite is skipped on 18); then
#             the preloaded stage
#   preloaded the extension's client-driven suites again (tests/cluster, not the failover suite),
#             with idgen in shared_preload_libraries; the idgen-client crate's tests are not run
#             again: they call the SQL functions, which preloading does not change
#   python    the Python package (python/): its wheel built, installed into a fresh virtual
#             environment without Rust, and its tests (pytest, python/tests) against the scratch
#             cluster: the contract, signals, clock steps under libfaketime, the FastAPI example
#   SUITE     one of those suites: a test target of tests/cluster/tests (clock_steps, pooler,
#             failover, ...), or `client` for the idgen-client crate's tests; with
#             IDGEN_TEST_PRELOADED=1, with idgen in shared_preload_libraries
# PG is 15, 18 or both (`both`, or "15 18"). Default: both for the full run, 15 for one stage.
#
# Each stage installs and starts only what it needs (scripts/provision.sh, scripts/clusters.sh)
# and leaves the scratch and clock-step clusters running (the pooler and the formation are
# stopped when the run ends, however it ends). Ports and directories: see scripts/common.sh
# (IDGEN_PORT, ..., IDGEN_WORK_DIR). Each stage's output is kept in <work dir>/test-logs/.
# IDGEN_KEEP_INSTALLED=1 skips building and installing the extension (it tests what is installed:
# for a second checkout that changes no SQL and shares the PostgreSQL of another).
# Ends with a table of each stage's passed, failed and ignored tests and, for the full run, the
# line `idgen: N passed, 0 failed (PostgreSQL 15 and 18)`; exits non-zero at the first failure.
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
source "$(dirname "${BASH_SOURCE[0]}")/python.sh"
cd "$ROOT" || exit 1

# ---- what to run

SUITES=(client)
for f in tests/cluster/tests/*.rs; do n=${f##*/}; SUITES+=("${n%.rs}"); done
SCHEDULE=()
for f in tests/pg_regress/sql/*.sql; do n=${f##*/}; SCHEDULE+=("${n%.sql}"); done

usage() { header_help "$0"; printf '\nSuites: %s\n' "${SUITES[*]}"; }
usage_error() { printf 'error: %s (see: bash scripts/test.sh --help)\n' "$1" >&2; exit 2; }

# Sets STAGE and PGS (the majors, in order) from the arguments, or exits with the usage.
parse_args() {
    STAGE=${1:-all}
    case $STAGE in
    -h | --help | help) usage; exit 0 ;;
    all | core | sim | pg_test | regress | cluster | preloaded | python) ;;
    *) [[ " ${SUITES[*]} " == *" $STAGE "* ]] || usage_error "unknown stage or suite: $STAGE" ;;
    esac
    [ $# -le 2 ] || usage_error "too many arguments"
    PGS=${2:-${IDGEN_TEST_PG:-}}
    if [ -z "$PGS" ]; then if [ "$STAGE" = all ]; then PGS="15 18"; else PGS=15; fi; fi
    [ "$PGS" != both ] || PGS="15 18"
    local pg
    for pg in $PGS; do [[ $pg == 15 || $pg == 18 ]] || usage_error "PostgreSQL 15, 18 or both, not $pg"; done
    # shellcheck disable=SC2046 # a list of file names without spaces
    if [[ " ${SUITES[*]} " == *" $STAGE "* && " $PGS " == *" 18 "* ]] &&
            [[ $(suite_needs $(suite_files "$STAGE")) == *formation* ]]; then
        usage_error "the $STAGE suite needs pg_auto_failover, which Debian ships for PostgreSQL 15 only"
    fi
}

# ---- counting, from each stage's own output

LOG_DIR=$WORK_DIR/test-logs
RESULTS=()   # one "stage major passed failed ignored" per stage run
DONE=

# The log of stage $1 on PostgreSQL $2 ("-": none).
stage_log() { if [ "$2" = - ]; then echo "$LOG_DIR/$1.log"; else echo "$LOG_DIR/$1-$2.log"; fi; }

# Runs $2... with its output shown and appended to log $1; returns the command's status.
logged() { local log=$1; shift; "$@" 2>&1 | tee -a "$log"; }

# "passed failed ignored", summed over the libtest summaries in log $1, e.g.
# `test result: ok. 12 passed; 0 failed; 1 ignored; 0 measured; 3 filtered out; finished in 0.20s`.
libtest_counts() {
    sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '/^test result: / {
        for (i = 1; i < NF; i++) {
            if ($(i + 1) ~ /^passed;?$/) p += $i
            if ($(i + 1) ~ /^failed;?$/) f += $i
            if ($(i + 1) ~ /^ignored;?$/) g += $i
        }
    } END { print p + 0, f + 0, g + 0 }'
}

# "passed failed ignored", from pytest's last summary line in log $1, e.g.
# `1 failed, 21 passed, 1 skipped in 32.00s` (errors count as failed).
pytest_counts() {
    sed 's/\x1b\[[0-9;]*m//g' "$1" | awk '/ in [0-9.]+s/ && /(passed|failed|error)/ { line = $0 } END {
        n = split(line, w, /[ ,=]+/)
        for (i = 2; i <= n; i++) {
            if (w[i] ~ /^passed/) p = w[i - 1]
            if (w[i] ~ /^failed/ || w[i] ~ /^error/) f += w[i - 1]
            if (w[i] ~ /^skipped/ || w[i] ~ /^deselected/) g += w[i - 1]
        }
        print p + 0, f + 0, g + 0
    }'
}

# "passed failed ignored summaries", summed over pg_regress's summaries in log $1: PostgreSQL 15
# prints " All 3 tests passed. " (or " 1 of 3 tests failed. ", or with failures ignored), 16 and
# later "# All 3 tests passed." (or "# 1 of 3 tests failed.").
regress_counts() {
    awk '{ sub(/^# /, ""); sub(/^ +/, ""); split($0, w, " ") }
        /^All [0-9]+ tests passed\./ { p += w[2]; n++ }
        /^[0-9]+ of [0-9]+ tests passed, [0-9]+ failed test\(s\) ignored\./ { p += w[1]; g += w[6]; n++ }
        /^[0-9]+ of [0-9]+ tests failed, [0-9]+ of these failures ignored\./ { p += w[3] - w[1]; f += w[1] - w[6]; g += w[6]; n++ }
        /^[0-9]+ of [0-9]+ tests failed\./ { p += w[3] - w[1]; f += w[1]; n++ }
        END { print p + 0, f + 0, g + 0, n + 0 }' "$1"
}

# Records stage $1 on PostgreSQL $2 ("-": none) with counts $3 $4 $5; ends the run if it failed
# (its command's status $6, or a failed test).
record() {
    RESULTS+=("$1 $2 $3 $4 $5")
    if [ "$6" != 0 ] || [ "$4" != 0 ]; then
        die "stage $1 failed$([ "$2" = - ] || echo " on PostgreSQL $2") (its output: $(stage_log "$1" "$2"))"
    fi
}

# Runs the cargo command $3... as stage $1 on PostgreSQL $2, and records its libtest counts.
cargo_stage() {
    local stage=$1 pg=$2 status=0 passed failed ignored log
    shift 2
    log=$(stage_log "$stage" "$pg")
    : > "$log"
    logged "$log" "$@" || status=$?
    read -r passed failed ignored < <(libtest_counts "$log")
    record "$stage" "$pg" "$passed" "$failed" "$ignored" "$status"
}

# The table of every stage run, then the total line.
report() {
    local row stage pg p f i tp=0 tf=0 ti=0 majors=()
    printf '\n%-14s %-10s %7s %7s %8s\n' stage PostgreSQL passed failed ignored
    for row in "${RESULTS[@]}"; do
        read -r stage pg p f i <<<"$row"
        printf '%-14s %-10s %7d %7d %8d\n' "$stage" "$pg" "$p" "$f" "$i"
        tp=$((tp + p)) tf=$((tf + f)) ti=$((ti + i))
        [ "$pg" = - ] || [[ " ${majors[*]} " == *" $pg "* ]] || majors+=("$pg")
    done
    printf '%-14s %-10s %7d %7d %8d\n' total "" "$tp" "$tf" "$ti"
    local versions="no PostgreSQL"
    case ${#majors[@]} in
    1) versions="PostgreSQL ${majors[0]}" ;;
    2) versions="PostgreSQL ${majors[0]} and ${majors[1]}" ;;
    esac
    if [ -n "$DONE" ]; then echo "idgen: $tp passed, $tf failed ($versions)"
    else echo "idgen: FAILED, after $tp passed, $tf failed ($versions; logs in $LOG_DIR)"; fi
}

# ---- the stages

stage_core() {
    say "unit tests of the pure core (cargo test -p idgen-core)"
    cargo_stage core - cargo test -p idgen-core
}

stage_sim() {
    say "the simulation's quick size, mutation searches and regressions (cargo test -p idgen-sim)"
    cargo_stage sim - cargo test -p idgen-sim
}

INSTALLED=   # the PostgreSQL this run installed the release build into (and nothing since)
SCRATCH_UP=  # the PostgreSQL whose scratch cluster this run (re)started after that install

stage_pg_test() {
    say "#[pg_test]s in a temporary PostgreSQL $PG_MAJOR (cargo pgrx test)"
    local dir
    dir=$(pg_work_dir "pgrx-test-data$PG_MAJOR")
    # pgrx wants to create the data directory itself.
    as_pg rm -rf "$dir/data"
    cargo_stage pg_test "$PG_MAJOR" cargo pgrx test "pg$PG_MAJOR" --runas "$PG_OS_USER" --pgdata "$dir/data" \
        --no-default-features --features "pg$PG_MAJOR"
    # It installed its test build.
    INSTALLED=
}

# The release build in PostgreSQL $PG_MAJOR, and its scratch cluster restarted to load it.
ensure_release_installed() {
    [ "$INSTALLED" = "$PG_MAJOR" ] && return 0
    if [ "${IDGEN_KEEP_INSTALLED:-}" = 1 ]; then
        say "IDGEN_KEEP_INSTALLED=1: testing the idgen already installed in PostgreSQL $PG_MAJOR"
        INSTALLED=$PG_MAJOR
        return 0
    fi
    install_extension
    install_upgrade_scripts
    INSTALLED=$PG_MAJOR SCRATCH_UP=
}
ensure_scratch_cluster() {
    [ "$SCRATCH_UP" = "$PG_MAJOR" ] && return 0
    start_scratch_cluster
    SCRATCH_UP=$PG_MAJOR
}

stage_regress() {
    ensure_release_installed
    ensure_scratch_cluster
    local log passed failed ignored runs
    log=$(stage_log regress "$PG_MAJOR")
    : > "$log"
    REGRESS_STATUS=0
    run_pg_regress "$log"
    if [ "$REGRESS_STATUS" = 0 ]; then
        # The README suggests preloading idgen for connection churn: the cases pass that way too.
        scratch_preload on
        run_pg_regress "$log" "with idgen in shared_preload_libraries"
        scratch_preload off
    fi
    read -r passed failed ignored runs < <(regress_counts "$log")
    if [ "$REGRESS_STATUS" = 0 ] && [ "$runs" != 2 ]; then
        say "pg_regress printed $runs summaries, not 2"
        REGRESS_STATUS=1
    fi
    record regress "$PG_MAJOR" "$passed" "$failed" "$ignored" "$REGRESS_STATUS"
}

# pg_regress against the scratch cluster, its output appended to log $1; $2 says how the cluster
# runs. A failure shows the diffs and sets REGRESS_STATUS.
run_pg_regress() {
    local log=$1 how=${2:-} dir bin
    say "pg_regress against the PostgreSQL $PG_MAJOR scratch cluster${how:+ $how}"
    dir=$(pg_work_dir "regress$PG_MAJOR")
    as_pg rm -rf "$dir/sql" "$dir/expected" "$dir/results"
    cp -r tests/pg_regress/sql tests/pg_regress/expected "$dir/"
    if is_root; then chown -R postgres: "$dir"; fi
    bin="$(dirname "$("$PG_CONFIG" --pgxs)")/../test/regress/pg_regress"
    if ! logged "$log" as_pg "$bin" --bindir="$PG_BIN" --host=127.0.0.1 --port="$SCRATCH_PORT" --user=postgres \
            --inputdir="$dir" --outputdir="$dir" --dbname=idgen_regress "${SCHEDULE[@]}"; then
        cat "$dir/regression.diffs" >&2 || true
        say "pg_regress failed on PostgreSQL $PG_MAJOR${how:+ $how} (diffs above; results in $dir/results)"
        REGRESS_STATUS=1
    fi
}

# What the suites in files $@ need besides the scratch cluster, as words: clock (the clock-step
# cluster), pooler, formation, prometheus (promtool and postgres_exporter, Debian's packages),
# pg_cron (Debian's, for PostgreSQL 15). Read from what they use, so that a new suite needs no entry here.
suite_needs() {
    local needs=""
    if grep -qE 'clock_cluster|ClockCluster' "$@"; then needs+=" clock"; fi
    if grep -q IDGEN_POOLER_DSN "$@"; then needs+=" pooler"; fi
    if grep -q 'IDGEN_HA_' "$@"; then needs+=" formation"; fi
    if grep -qE 'promtool|postgres-exporter' "$@"; then needs+=" prometheus"; fi
    if grep -q 'pg_cron' "$@"; then needs+=" pg_cron"; fi
    echo "$needs"
}

# Packages for the servers in $1 (suite_needs' words), beside what building needs.
provision_suites() {
    local packages=(procps)
    is_root || packages+=(sudo)
    [[ $1 != *clock* ]] || packages+=(faketime gcc)
    [[ $1 != *pooler* ]] || packages+=(pgbouncer)
    [[ $1 != *formation* ]] || packages+=(postgresql-15-auto-failover)
    [[ $1 != *prometheus* ]] || packages+=(prometheus prometheus-postgres-exporter)
    [[ $1 != *pg_cron* ]] || packages+=(postgresql-15-cron)
    ensure_packages "${packages[@]}"
}

# Client-driven suites as stage $1 on PostgreSQL $PG_MAJOR, with the servers in $2 (suite_needs'
# words); the rest is cargo test's arguments.
run_suites() {
    local stage=$1 needs=$2
    shift 2
    ensure_release_installed
    ensure_scratch_cluster
    # The suites read their servers from these (tests/cluster/src/lib.rs and the suites).
    local vars=(PATH="$PG_BIN:$PATH" IDGEN_TEST_DSN="$SCRATCH_DSN")
    if [[ $needs == *clock* ]]; then
        start_clock_cluster
        [ "${PRELOAD_CLOCK:-}" != on ] || clock_preload on
        vars+=(IDGEN_CLOCK_DSN="$CLOCK_DSN" IDGEN_CLOCK_FILE="$CLOCK_FILE" IDGEN_CLOCK_RESTART="$CLOCK_RESTART")
    fi
    if [[ $needs == *formation* ]]; then
        start_formation
        vars+=(IDGEN_HA_DIR="$HA_DIR" IDGEN_HA_PORT="$HA_PORT" IDGEN_HA_DSN="$HA_DSN")
    fi
    # After the scratch cluster's last restart.
    if [[ $needs == *pooler* ]]; then
        start_pooler
        vars+=(IDGEN_POOLER_DSN="$POOLER_DSN")
    fi
    say "client-driven suites ($stage) against PostgreSQL $PG_MAJOR"
    cargo_stage "$stage" "$PG_MAJOR" env "${vars[@]}" cargo test --no-fail-fast "$@"
    stop_formation
    stop_pooler
}

# Tests that need what Debian ships for PostgreSQL 15 only: the failover formation (pg_auto_failover)
# and pg_cron.
ONLY_ON_15=(--skip no_id_twice_across --skip the_pg_cron_purge_job)

# Every client-driven suite, against a plain cluster and again with idgen in
# shared_preload_libraries (the scratch and clock-step clusters; the failover formation runs plain).
# The failover test needs pg_auto_failover, which Debian ships for 15 only.
stage_cluster() {
    local needs="clock pooler formation" skip=()
    if [ "$PG_MAJOR" != 15 ]; then needs="clock pooler" skip=(-- "${ONLY_ON_15[@]}"); fi
    provision_suites "$needs prometheus pg_cron"
    run_suites cluster "$needs" -p idgen-cluster-tests -p idgen-client "${skip[@]}"
    stage_preloaded
}

# The extension's client-driven suites with idgen in shared_preload_libraries (the scratch and
# clock-step clusters; the failover formation runs plain, and is left out). Not the idgen-client
# crate's tests: they exercise the client against idgen_claim, idgen_heartbeat and idgen_release,
# which run alike preloaded or not (and took 3 minutes of the test command's 45 a second time).
stage_preloaded() {
    provision_suites "clock pooler prometheus pg_cron"
    say "the client-driven suites with idgen in shared_preload_libraries"
    # Installing a build restarts the scratch cluster plain: first.
    ensure_release_installed
    ensure_scratch_cluster
    scratch_preload on
    local skip=(--skip no_id_twice_across)
    [ "$PG_MAJOR" = 15 ] || skip=("${ONLY_ON_15[@]}")
    PRELOAD_CLOCK=on run_suites preloaded "clock pooler" -p idgen-cluster-tests -- "${skip[@]}"
    scratch_preload off
    clock_preload off
}

# The source files of suite $1: `client`'s, or a test target's of tests/cluster/tests.
suite_files() { if [ "$1" = client ]; then echo client/tests/*.rs; else echo "tests/cluster/tests/$1.rs"; fi; }

# One suite, $1; with IDGEN_TEST_PRELOADED=1, as the preloaded stage runs it.
stage_suite() {
    local target=(-p idgen-cluster-tests --test "$1") needs
    if [ "$1" = client ]; then target=(-p idgen-client); fi
    # shellcheck disable=SC2046 # a list of file names without spaces
    needs=$(suite_needs $(suite_files "$1"))
    provision_suites "$needs"
    [ "$PG_MAJOR" = 15 ] || target+=(-- "${ONLY_ON_15[@]}")
    if [ "${IDGEN_TEST_PRELOADED:-}" != 1 ]; then
        run_suites "$1" "$needs" "${target[@]}"
        return
    fi
    ensure_release_installed
    ensure_scratch_cluster
    scratch_preload on
    PRELOAD_CLOCK=on run_suites "$1" "$needs" "${target[@]}"
    scratch_preload off
    if [[ $needs == *clock* ]]; then clock_preload off; fi
}

# The Python package's tests against the scratch cluster of PostgreSQL $PG_MAJOR, from a fresh
# virtual environment with the wheel (scripts/python.sh; built once a run).
PYTHON_READY=
stage_python() {
    provision_suites clock
    ensure_release_installed
    ensure_scratch_cluster
    if [ -z "$PYTHON_READY" ]; then
        fresh_venv
        # The sidecar the uniqueness test runs beside the package.
        cargo build -q -p idgen-client --bin idgen-node
        PYTHON_READY=1
    fi
    local log status=0 passed failed ignored libfaketime
    log=$(stage_log python "$PG_MAJOR")
    : > "$log"
    libfaketime=$(dpkg -L libfaketime | grep '/libfaketime\.so\.1$' | head -n 1)
    say "the Python package's tests (pytest) against PostgreSQL $PG_MAJOR"
    (cd "$ROOT/python" && logged "$log" env IDGEN_TEST_DSN="$SCRATCH_DSN" IDGEN_NODE_BIN="$ROOT/target/debug/idgen-node" \
        IDGEN_LIBFAKETIME="$libfaketime" "$VENV/bin/pytest" -p no:cacheprovider -q tests) || status=$?
    read -r passed failed ignored < <(pytest_counts "$log")
    record python "$PG_MAJOR" "$passed" "$failed" "$ignored" "$status"
}

# ---- the run

on_exit() {
    stop_formation || true
    stop_pooler || true
    if [ -z "$DONE" ] && [ ${#RESULTS[@]} -gt 0 ]; then report; fi
}

main() {
    parse_args "$@"
    mkdir -p "$LOG_DIR"
    rm -f "$LOG_DIR"/*.log
    trap on_exit EXIT
    local pg
    # What every stage needs; the suites add their servers' packages (provision_suites).
    case $STAGE in
    all) provision ;;
    core | sim) provision_core ;;
    *) provision_pgrx ;;
    esac
    if [ "$STAGE" = all ] || [ "$STAGE" = core ]; then stage_core; fi
    if [ "$STAGE" = all ] || [ "$STAGE" = sim ]; then stage_sim; fi
    if [ "$STAGE" != core ] && [ "$STAGE" != sim ]; then
        for pg in $PGS; do
            use_pg "$pg"
            case $STAGE in
            all) stage_pg_test; stage_regress; stage_cluster; stage_python ;;
            pg_test) stage_pg_test ;;
            regress) stage_regress ;;
            cluster) stage_cluster ;;
            preloaded) stage_preloaded ;;
            python) stage_python ;;
            *) stage_suite "$STAGE" ;;
            esac
        done
    fi
    DONE=1
    say "all tests passed"
    report
}

main "$@"
