#!/usr/bin/env bash
# The servers idgen runs in, for the demo, the benchmarks and the tests: puts idgen's package
# (scripts/package.sh) into a PostgreSQL (15 or 18, see use_pg in common.sh), and starts the scratch cluster, the
# clock-step cluster (libfaketime), PgBouncer in front of the scratch cluster, and the
# pg_auto_failover formation (scripts/formation.sh). Everything listens on 127.0.0.1 only, with
# trust authentication; data under target/ (or IDGEN_WORK_DIR). Installs no other packages: run
# scripts/provision.sh first.
#
#   bash scripts/clusters.sh stop [15|18]    # stops that version's scratch and clock-step clusters and pooler
#
# Sourced (by demo.sh, test.sh, bench*.sh), it defines the functions below and does nothing by itself.
source "$(dirname "${BASH_SOURCE[0]}")/package.sh"

# Builds idgen's package for PostgreSQL $PG_MAJOR (release: what users run, and fast enough to
# reach the layout's 4,096 IDs per millisecond) and installs it as a DBA would: what runs here is
# what users get.
install_extension() {
    build_package "$PG_MAJOR"
    install_package "$PG_MAJOR"
}

# The install scripts of earlier versions (tests/upgrade), so that tests/cluster/tests/upgrade.rs
# can start from them.
install_upgrade_scripts() {
    local extension_dir
    extension_dir="$("$PG_CONFIG" --sharedir)/extension/"
    if [ -w "$extension_dir" ]; then install -m 644 "$ROOT"/tests/upgrade/idgen--*.sql "$extension_dir"
    else as_root install -m 644 "$ROOT"/tests/upgrade/idgen--*.sql "$extension_dir"; fi
}

# Creates the cluster in $1/data if missing, and (re)writes its settings for port $2.
init_cluster() {
    local dir=$1 port=$2 data=$1/data
    if [ ! -f "$data/PG_VERSION" ]; then
        say "creating a scratch cluster in $data"
        as_pg "$PG_BIN/initdb" -D "$data" -U postgres --auth=trust -E UTF8 --locale=C.UTF-8 >/dev/null
        echo "include 'idgen_scratch.conf'" | as_pg tee -a "$data/postgresql.conf" >/dev/null
    fi
    # Rewritten at every start, so an existing scratch cluster follows changes here.
    as_pg tee "$data/idgen_scratch.conf" >/dev/null <<CONF
# idgen scratch cluster: local only, trust auth, room for the concurrency tests.
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$dir'
max_connections = 400
# Room for the test of PREPARE TRANSACTION after a claim.
max_prepared_transactions = 10
# The DROP EXTENSION tests hold a lease in a logical-replication apply worker (a background worker).
wal_level = logical
# Without idgen preloaded, a background worker slot stays free for its registry writer by the
# server's settings (docs/install.md); the tests that starve it raise their own.
max_parallel_workers = 6
shared_buffers = 256MB
fsync = off
# One log file that tests read through pg_current_logfile().
logging_collector = on
log_directory = 'log'
log_filename = 'postgresql.log'
log_rotation_age = 0
log_rotation_size = 0
log_line_prefix = '%m [%p] %q%u@%d '
CONF
}

# Starts, or restarts, the cluster in $1/data; `env ...` before pg_ctl comes from $3.
# (pg_ctl -w waits at most its default 60 s.)
start_cluster() {
    local dir=$1 port=$2 environment=$3 action=start
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 && action=restart
    # shellcheck disable=SC2086 # the environment is a list of NAME=value words
    if ! as_pg env $environment "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/pg_ctl.log" -w -m fast "$action" >/dev/null; then
        tail -n 20 "$dir/pg_ctl.log" "$dir/data/log/postgresql.log" 2>/dev/null >&2 || true
        die "the cluster in $dir did not $action (is port $port taken? set IDGEN_PORT, or IDGEN_CLOCK_PORT for the clock-step cluster)"
    fi
}

# Stops the cluster in $1/data if it runs (fast shutdown, at most a minute).
stop_cluster() {
    local dir=$1
    [ -f "$dir/data/PG_VERSION" ] || return 0
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 || return 0
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" -w -t 60 -m fast stop >/dev/null
}

# The scratch cluster's directories: $SCRATCH_DIR, its data $PGDATA_DIR and server log $SCRATCH_LOG.
scratch_paths() {
    [ -n "$SCRATCH_DIR" ] || SCRATCH_DIR=$(pg_work_dir "$SCRATCH_NAME")
    PGDATA_DIR=$SCRATCH_DIR/data
    # shellcheck disable=SC2034 # for the scripts that source this file (demo.sh prints it)
    SCRATCH_LOG=$PGDATA_DIR/log/postgresql.log
}

# Starts (or restarts, to load a new build) the scratch cluster on 127.0.0.1:$SCRATCH_PORT.
start_scratch_cluster() {
    scratch_paths
    init_cluster "$SCRATCH_DIR" "$SCRATCH_PORT"
    # The scale-out tests set idgen.machine_id_range here too (see start_clock_cluster).
    if [ -f "$SCRATCH_DIR/data/postgresql.auto.conf" ]; then
        as_pg sed -i '/^idgen\./d; /^synchronous_standby_names/d; /^shared_preload_libraries/d' \
            "$SCRATCH_DIR/data/postgresql.auto.conf"
    fi
    start_cluster "$SCRATCH_DIR" "$SCRATCH_PORT" ""
}

# Restarts the scratch cluster with idgen in shared_preload_libraries (`on`) or without (`off`).
scratch_preload() {
    scratch_paths
    if [ "$1" = on ]; then scratch_psql postgres -c "ALTER SYSTEM SET shared_preload_libraries = 'idgen'"
    else scratch_psql postgres -c "ALTER SYSTEM RESET shared_preload_libraries"; fi
    start_cluster "$SCRATCH_DIR" "$SCRATCH_PORT" ""
}

# Restarts the clock-step cluster with idgen in shared_preload_libraries (`on`) or without (`off`).
clock_preload() {
    local dsn="host=127.0.0.1 port=$CLOCK_PORT user=postgres dbname=postgres"
    if [ "$1" = on ]; then psql "$dsn" -X -q -c "ALTER SYSTEM SET shared_preload_libraries = 'idgen'"
    else psql "$dsn" -X -q -c "ALTER SYSTEM RESET shared_preload_libraries"; fi
    bash "$CLOCK_RESTART"
}

# psql into database $1 (default postgres) of the scratch cluster; the other arguments are psql's.
scratch_psql() { psql "$SCRATCH_DSN dbname=${1:-postgres}" -X -v ON_ERROR_STOP=1 -q "${@:2}"; }

# A second scratch cluster whose wall clock the clock-step tests move: libfaketime is
# preloaded into it and re-reads $CLOCK_FILE ("+0", "-3", "+3600", or a frozen
# "2026-11-29 14:00:00", UTC) on every clock reading; monotonic time stays real.
# $CLOCK_RESTART restarts it with the same environment. Port $CLOCK_PORT.
start_clock_cluster() {
    [ -n "$CLOCK_DIR" ] || CLOCK_DIR=$(pg_work_dir "$CLOCK_NAME")
    CLOCK_FILE=$CLOCK_DIR/faketime.rc
    CLOCK_RESTART=$CLOCK_DIR/restart.sh
    echo "+0" > "$CLOCK_FILE"
    chmod 644 "$CLOCK_FILE"
    local environment
    environment=$(clock_environment)
    init_cluster "$CLOCK_DIR" "$CLOCK_PORT"
    # Tests set idgen's cluster-wide thresholds (and synchronous_standby_names) here with ALTER SYSTEM
    # and reset them when done; a run killed in between must not leave them to the next one.
    if [ -f "$CLOCK_DIR/data/postgresql.auto.conf" ]; then
        as_pg sed -i '/^idgen\./d; /^synchronous_standby_names/d; /^shared_preload_libraries/d' \
            "$CLOCK_DIR/data/postgresql.auto.conf"
    fi
    start_cluster "$CLOCK_DIR" "$CLOCK_PORT" "$environment"
    write_clock_restart "$environment"
}

# The environment the clock-step cluster runs in (NAME=value words); compiles its select() shim.
clock_environment() {
    # The library's path depends on the architecture: ask the package.
    local libfaketime
    libfaketime=$(dpkg -L libfaketime | grep '/libfaketime\.so\.1$' | head -n 1)
    [ -n "$libfaketime" ] || die "libfaketime.so.1 not found (package libfaketime)"
    # Without it, PostgreSQL 15's background workers (idgen's registry writer among them) would
    # read the real clock while backends read the fake one: see tests/clock/select_passthrough.c.
    local passthrough=$CLOCK_DIR/select_passthrough.so
    gcc -shared -fPIC -O2 -o "$passthrough" "$ROOT/tests/clock/select_passthrough.c"
    chmod 755 "$passthrough"
    # RUST_BACKTRACE: no backtrace may reach a client whatever the server was started with (tests/cluster/tests/errors.rs).
    echo "LD_PRELOAD=$passthrough:$libfaketime FAKETIME_TIMESTAMP_FILE=$CLOCK_FILE FAKETIME_NO_CACHE=1 DONT_FAKE_MONOTONIC=1 FAKETIME_DONT_FAKE_MONOTONIC=1 TZ=UTC RUST_BACKTRACE=1"
}

# $CLOCK_RESTART: restarts the clock-step cluster in environment $1 (for the tests).
write_clock_restart() {
    local runas=""
    is_root && runas="runuser -u postgres --"
    cat > "$CLOCK_RESTART" <<SH
#!/usr/bin/env bash
# Restarts the clock-step cluster with libfaketime preloaded (written by scripts/clusters.sh).
exec $runas env $1 "$PG_BIN/pg_ctl" -D "$CLOCK_DIR/data" -l "$CLOCK_DIR/pg_ctl.log" -w -m fast restart >/dev/null
SH
    chmod 755 "$CLOCK_RESTART"
}

# PgBouncer in transaction mode in front of the scratch cluster, for tests/cluster/tests/pooler.rs:
# listening on 127.0.0.1:$POOLER_PORT, its files under target/pooler$PG_MAJOR. Restarted afresh every time.
POOLER_DSN=
start_pooler() {
    [ -n "$POOLER_DIR" ] || POOLER_DIR=$(pg_work_dir "pooler$PG_MAJOR")
    stop_pooler
    say "starting pgbouncer (transaction mode) on 127.0.0.1:$POOLER_PORT in front of :$SCRATCH_PORT"
    write_pooler_config
    local pgbouncer
    pgbouncer=$(PATH="$PATH:/usr/sbin" command -v pgbouncer) || die "pgbouncer not found (package pgbouncer)"
    as_pg rm -f "$POOLER_DIR/pgbouncer.log"
    as_pg "$pgbouncer" -d -q "$POOLER_DIR/pgbouncer.ini" || die "pgbouncer did not start (log: $POOLER_DIR/pgbouncer.log)"
    POOLER_DSN="host=127.0.0.1 port=$POOLER_PORT user=postgres"
    export POOLER_DSN
    wait_for_pooler
}

# trust, as the scratch cluster: a user not in the auth file (a test's role) is looked up by
# auth_user through auth_query. The test database idgen_t_pooler_one_backend gets a pool of one
# server connection, so that consecutive clients share a backend; every other database gets 5.
# The tests' DSN asks for statement_timeout in `options`, which pgbouncer cannot pass on: it is
# ignored (the suite sets statement_timeout on its databases), query_timeout bounds every query
# here too, query_wait_timeout every wait for a backend, and client_login_timeout (60 s) every login.
write_pooler_config() {
    echo '"postgres" ""' | as_pg tee "$POOLER_DIR/userlist.txt" >/dev/null
    as_pg tee "$POOLER_DIR/pgbouncer.ini" >/dev/null <<INI
[databases]
idgen_t_pooler_one_backend = host=127.0.0.1 port=$SCRATCH_PORT pool_size=1
* = host=127.0.0.1 port=$SCRATCH_PORT

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $POOLER_PORT
unix_socket_dir =
auth_type = trust
auth_file = $POOLER_DIR/userlist.txt
auth_user = postgres
admin_users = postgres
pool_mode = transaction
default_pool_size = 5
max_client_conn = 1000
ignore_startup_parameters = extra_float_digits,options
query_timeout = 330
query_wait_timeout = 120
logfile = $POOLER_DIR/pgbouncer.log
pidfile = $POOLER_DIR/pgbouncer.pid
INI
}

# pgbouncer daemonizes before it listens: wait, a minute at most, until its console answers.
wait_for_pooler() {
    local deadline=$((SECONDS + 60)) failed='' pid
    until "$PG_BIN/psql" "$POOLER_DSN dbname=pgbouncer connect_timeout=5" -X -q -c 'SHOW VERSION' >/dev/null 2>&1; do
        # The daemon writes its pid file once it runs; a FATAL in its (fresh) log means it ended before.
        pid=$(cat "$POOLER_DIR/pgbouncer.pid" 2>/dev/null) || pid=
        if { [ -n "$pid" ] && [ ! -e "/proc/$pid" ]; } || grep -qs FATAL "$POOLER_DIR/pgbouncer.log"; then failed="exited"
        elif [ "$SECONDS" -ge "$deadline" ]; then failed="did not accept connections within a minute"; fi
        if [ -n "$failed" ]; then
            tail -n 20 "$POOLER_DIR/pgbouncer.log" >&2 || true
            die "pgbouncer on 127.0.0.1:$POOLER_PORT $failed (port taken? set IDGEN_POOLER_PORT)"
        fi
        sleep 0.2
    done
}

# Stops the pgbouncer in $POOLER_DIR: start_pooler's, or one a killed run left there (30 s, then KILL).
stop_pooler() {
    local dir=$POOLER_DIR pid
    [ -n "$dir" ] || return 0
    pid=$(cat "$dir/pgbouncer.pid" 2>/dev/null) || return 0
    # Only if that process is still a pgbouncer: the file may outlive it, and its number be reused.
    if [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = pgbouncer ]; then
        as_pg kill -TERM "$pid" 2>/dev/null || true
        local tries=0
        while [ -e "/proc/$pid" ] && [ "$tries" -lt 150 ]; do sleep 0.2; tries=$((tries + 1)); done
        [ ! -e "/proc/$pid" ] || as_pg kill -KILL "$pid" 2>/dev/null || true
    fi
    as_pg rm -f "$dir/pgbouncer.pid"
}

# The pg_auto_failover formation of the failover tests (scripts/formation.sh): a monitor on
# $HA_PORT, nodes on the next two ports, state under target/ha. Started afresh every time.
HA_DIR=
start_formation() {
    HA_DIR=$(pg_work_dir ha)
    formation stop
    rm -rf "${HA_DIR:?}"/*
    say "starting a pg_auto_failover formation (monitor :$HA_PORT, nodes :$((HA_PORT + 1)) :$((HA_PORT + 2)))"
    formation start
    # shellcheck disable=SC2034 # for scripts/test.sh, which passes it to the failover suite
    HA_DSN="host=127.0.0.1,127.0.0.1 port=$((HA_PORT + 1)),$((HA_PORT + 2)) user=postgres target_session_attrs=read-write"
}
formation() { IDGEN_HA_DIR=$HA_DIR IDGEN_HA_PORT=$HA_PORT IDGEN_PG_BIN=$PG_BIN bash "$ROOT/scripts/formation.sh" "$@"; }
stop_formation() { [ -z "$HA_DIR" ] || formation stop; }

# `stop [15|18]`: that version's scratch and clock-step clusters and pooler (as left by the tests or the demo).
stop_all() {
    use_pg "${1:-15}"
    scratch_paths
    CLOCK_DIR=$(pg_work_dir "$CLOCK_NAME")
    POOLER_DIR=$(pg_work_dir "pooler$PG_MAJOR")
    say "stopping PostgreSQL $PG_MAJOR's pooler, scratch and clock-step clusters (under $WORK_DIR)"
    stop_pooler
    stop_cluster "$SCRATCH_DIR"
    stop_cluster "$CLOCK_DIR"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case ${1:-} in
    stop) stop_all "${2:-15}" ;;
    -h | --help) header_help "$0" ;;
    *) die "usage: bash scripts/clusters.sh stop [15|18]" ;;
    esac
fi
