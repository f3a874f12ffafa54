#!/usr/bin/env bash
# What a new connection pays for loading idgen, in instructions: repeatable where timings on a
# shared machine are not. Each case runs in a fresh single-user backend under callgrind
# (valgrind), on a cluster of its own; the table gives the instructions over a fresh backend's
# `SELECT 1`.
# A backend's first ID is not among the cases: since 0.4.0 its claim commits in a background
# worker of its own, which a single-user backend cannot start (idgen_next_id refuses there). Its
# cost is measured in connections per second, as a ratio to bigserial, by scripts/bench_keys.sh
# (the -C columns). Not part of the test command.
#
#   bash scripts/bench_first_call.sh
#   IDGEN_PG=18 bash scripts/bench_first_call.sh
#
# Writes the markdown table to stdout and to target/bench/first-call-pg<version>.md.
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
APT_PACKAGES+=(valgrind)

provision
use_pg "${IDGEN_PG:-15}"
install_extension >/dev/null

dir=$(pg_work_dir "first-call$PG_MAJOR")
as_pg rm -rf "$dir/data" "$dir/callgrind"
as_pg mkdir -p "$dir/callgrind"
as_pg "$PG_BIN/initdb" -D "$dir/data" -A trust -U postgres >/dev/null
echo "fsync = off" | as_pg tee -a "$dir/data/postgresql.conf" >/dev/null
single_user() { # database; statements on stdin
    as_pg "$PG_BIN/postgres" --single -D "$dir/data" "$1"
}
echo "CREATE DATABASE bench;" | single_user postgres >/dev/null
single_user bench >/dev/null <<'SQL'
CREATE EXTENSION idgen;
CREATE TABLE t_bigserial (id bigserial PRIMARY KEY, payload int);
SQL

CASES=(
    "SELECT 1"
    "SELECT idgen_min_id(now())"
    "INSERT INTO t_bigserial (payload) VALUES (1)"
)
LABELS=(
    "a fresh backend: \`SELECT 1\`"
    "loading idgen: \`SELECT idgen_min_id(now())\`"
    "an insert, bigserial"
)
instructions() { # statement -> callgrind's instruction count for a backend that runs it
    as_pg rm -f "$dir"/callgrind/out.*
    printf '%s;\n' "$1" | as_pg valgrind --tool=callgrind --callgrind-out-file="$dir/callgrind/out.%p" \
        "$PG_BIN/postgres" --single -D "$dir/data" bench > "$dir/callgrind/log" 2>&1
    if grep -q ERROR "$dir/callgrind/log"; then grep ERROR "$dir/callgrind/log" >&2; die "$1 failed"; fi
    as_pg cat "$dir"/callgrind/out.* | awk '/^summary:/ {s += $2} END {print s}'
}

say "callgrind, one fresh backend per case"
counts=()
for q in "${CASES[@]}"; do counts+=("$(instructions "$q")"); done

out=$(pg_work_dir bench)/first-call-pg$PG_MAJOR.md
{
    echo "#### PostgreSQL $PG_MAJOR"
    echo
    echo "\`IDGEN_PG=$PG_MAJOR bash scripts/bench_first_call.sh\` on $(nproc) cores, $("$PG_BIN/postgres" --version | sed 's/^postgres (PostgreSQL) //'),"
    echo "instructions (callgrind) of a fresh single-user backend; M = 10^6."
    echo
    echo "| case | instructions, M | over a fresh backend, M |"
    echo "|---|---:|---:|"
    for i in "${!CASES[@]}"; do
        awk -v label="${LABELS[$i]}" -v n="${counts[$i]}" -v base="${counts[0]}" \
            'BEGIN {printf "| %s | %.2f | %.2f |\n", label, n / 1e6, (n - base) / 1e6}'
    done
} | tee "$out"
