#!/usr/bin/env bash
# A pg_auto_failover formation for the failover tests: a monitor and two PostgreSQL 15 nodes on
# 127.0.0.1 ($IDGEN_HA_PORT, +1, +2), a primary with a synchronous secondary (pg_auto_failover's
# default), run as the postgres user (or the current user when not root), trust auth, no SSL.
# The monitor's health checks are tightened so that a crashed primary fails over in seconds.
#
#   IDGEN_HA_DIR=<dir> IDGEN_HA_PORT=28820 bash scripts/formation.sh start|failover|crash-primary|sync|async|state|stop
#
# Each member runs with XDG_* directories of its own under $IDGEN_HA_DIR/xdg: that keeps
# pg_autoctl's state out of the user's home, and lets `stop` and `crash-primary` find every
# process of a member (keeper, its subprocesses, Postgres) by its environment.
set -euo pipefail
dir=${IDGEN_HA_DIR:?set IDGEN_HA_DIR}
port=${IDGEN_HA_PORT:-28820}
pg_bin=${IDGEN_PG_BIN:-/usr/lib/postgresql/15/bin}
runas=()
[ "$(id -u)" = 0 ] && runas=(runuser -u postgres --)
members=(monitor node1 node2)

xdg() { echo "XDG_CONFIG_HOME=$dir/xdg/$1/config XDG_DATA_HOME=$dir/xdg/$1/data XDG_RUNTIME_DIR=$dir/xdg/$1/run"; }
# shellcheck disable=SC2046 # xdg's words are NAME=value pairs
as_member() { local m=$1; shift; "${runas[@]}" env $(xdg "$m") "$@"; }
monitor_ctl() { as_member monitor pg_autoctl "$@"; }
psql_at() { "${runas[@]}" psql -X -At -h 127.0.0.1 -p "$1" -U postgres -d postgres -c "$2" 2>/dev/null; }
# Every process of a member, found by the XDG_RUNTIME_DIR it was started with.
pids_of() {
    local p
    for p in /proc/[0-9]*; do
        grep -qsxz "XDG_RUNTIME_DIR=$dir/xdg/$1/run" "$p/environ" 2>/dev/null && echo "${p#/proc/}"
    done
    return 0
}
start_member() { # member, then pg_autoctl create arguments
    local m=$1; shift
    "${runas[@]}" mkdir -p "$dir/xdg/$m/config" "$dir/xdg/$m/data" "$dir/xdg/$m/run"
    # shellcheck disable=SC2046
    "${runas[@]}" env $(xdg "$m") setsid nohup pg_autoctl create "$@" --pgctl "$pg_bin/pg_ctl" --pgdata "$dir/$m" \
        --hostname 127.0.0.1 --auth trust --no-ssl --run >> "$dir/$m.log" 2>&1 < /dev/null &
    # Its launcher (runuser, as root): not found by pids_of (its environment is not the member's).
    echo $! > "$dir/$m.launcher.pid"
}
# Ends the launcher of member $1: runuser stops itself when its child is stopped, and a stopped
# runuser whose child was then killed stays stopped for good.
end_launcher() {
    [ -f "$dir/$1.launcher.pid" ] || return 0
    local pid
    pid=$(cat "$dir/$1.launcher.pid")
    # Only if that process is still a runuser (not a number used again).
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != runuser ] || kill -9 "$pid" 2>/dev/null || true
    rm -f "$dir/$1.launcher.pid"
}
primary_port() {
    local p
    for p in $((port + 1)) $((port + 2)); do
        [ "$(psql_at "$p" 'SELECT pg_is_in_recovery()')" = f ] && { echo "$p"; return 0; }
    done
    return 1
}
wait_for() { # what, command...
    local what=$1; shift
    # A harness's patience, not an assertion: ten minutes before it reports where it stands.
    for _ in $(seq 1 1200); do "$@" >/dev/null 2>&1 && return 0; sleep 0.5; done
    echo "formation: timed out waiting for $what" >&2
    if [ -s "$dir/last-answer.log" ]; then cat "$dir/last-answer.log" >&2; fi
    monitor_ctl show state --pgdata "$dir/monitor" >&2 || true
    exit 1
}
settled() { # a primary and a secondary, as the monitor sees them
    [ "$(monitor_ctl show state --pgdata "$dir/monitor" 2>/dev/null \
        | grep -cE '\| +(primary|secondary) +\| +(primary|secondary)$')" = 2 ]
}

case ${1:-} in
start)
    "${runas[@]}" mkdir -p "$dir"
    start_member monitor monitor --pgport "$port"
    wait_for "the monitor" psql_at "$port" 'SELECT 1'
    for setting in "health_check_period = 1000" "health_check_timeout = 1000" "health_check_retry_delay = 500" \
                   "node_considered_unhealthy_timeout = 3000" "primary_demote_timeout = 3000"; do
        psql_at "$port" "ALTER SYSTEM SET pgautofailover.$setting" >/dev/null
    done
    psql_at "$port" 'SELECT pg_reload_conf()' >/dev/null
    monitor_uri="postgres://autoctl_node@127.0.0.1:$port/pg_auto_failover?sslmode=disable"
    start_member node1 postgres --pgport $((port + 1)) --monitor "$monitor_uri"
    wait_for "node1 as the primary" primary_port
    start_member node2 postgres --pgport $((port + 2)) --monitor "$monitor_uri"
    wait_for "a primary and a synchronous secondary" settled
    ;;
failover)
    monitor_ctl perform failover --pgdata "$dir/monitor" >/dev/null 2>&1
    wait_for "a settled formation" settled
    ;;
crash-primary)
    old=$(primary_port)
    node=node$((old - port))
    # The node's keeper and its Postgres die at once, as in a machine crash. Frozen first, then
    # killed: a process the keeper spawned between a listing and the kill would survive it, and
    # could start the node's Postgres again as the primary it was.
    for _ in 1 2 3; do pids_of "$node" | xargs -r kill -STOP 2>/dev/null || true; done
    pids_of "$node" | xargs -r kill -9 2>/dev/null || true
    gone() { [ -z "$(pids_of "$node")" ]; }
    wait_for "every process of $node to be gone" gone
    end_launcher "$node"
    other=$((2 * port + 3 - old))
    promoted() { [ "$(psql_at "$other" 'SELECT pg_is_in_recovery()')" = f ]; }
    wait_for "node$((other - port)) to be promoted" promoted
    ;;
sync|async)
    # The secondary leaves (async) or rejoins (sync) the synchronous standbys.
    primary=$(primary_port)
    secondary=$((2 * port + 3 - primary))
    node=node$((secondary - port))
    quorum=true; want="sync\|quorum"
    [ "$1" = async ] && { quorum=false; want=async; }
    # pg_autoctl set can fail while the formation moves (a keeper reporting in, a transition): it
    # failed one run at once on a busy machine, its answer discarded. Ask until the monitor takes
    # it; its last answer is kept for a timeout's report.
    set_quorum() {
        as_member "$node" pg_autoctl set node replication-quorum "$quorum" --pgdata "$dir/$node" >"$dir/last-answer.log" 2>&1 \
            && rm -f "$dir/last-answer.log"
    }
    wait_for "the monitor to take $node's replication-quorum $quorum" set_quorum
    is_now() { psql_at "$primary" "SELECT sync_state FROM pg_stat_replication WHERE state = 'streaming'" | grep -qx "$want"; }
    wait_for "the secondary to be $1" is_now
    ;;
state) monitor_ctl show state --pgdata "$dir/monitor" ;;
stop)
    for m in "${members[@]}"; do
        if [ -d "$dir/$m" ]; then as_member "$m" pg_autoctl stop --pgdata "$dir/$m" --immediate >/dev/null 2>&1 || true; fi
    done
    for i in $(seq 1 50); do
        left=$(for m in "${members[@]}"; do pids_of "$m"; done)
        if [ -z "$left" ]; then
            for m in "${members[@]}"; do end_launcher "$m"; done
            exit 0
        fi
        # What did not stop by itself within 4 s is killed.
        if [ "$i" -gt 20 ]; then echo "$left" | xargs -r kill -9 2>/dev/null || true; fi
        sleep 0.2
    done
    echo "formation: processes left behind:" >&2
    for m in "${members[@]}"; do pids_of "$m" | xargs -r ps -o pid,cmd -p >&2 || true; done
    exit 1
    ;;
*) echo "usage: $0 start|failover|crash-primary|sync|async|state|stop" >&2; exit 2 ;;
esac
