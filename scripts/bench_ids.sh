#!/usr/bin/env bash
# idgen_next_id() benchmark, two ways:
#  1. wall clock on the scratch cluster: SELECT count(f) FROM generate_series(1, N) for random(),
#     nextval() and idgen_next_id(), interleaved, median of RUNS runs each;
#  2. instructions per call (valgrind callgrind on a backend of a throwaway cluster whose
#     postmaster runs under valgrind): repeatable whatever else the machine does, and too slow to
#     reach the layout's 4,096 IDs per millisecond, so it shows the generator's own cost. (Not a
#     single-user backend: a backend's claim commits in a background worker, which only a running
#     server can start. The worker's instructions are its own process's, not the backend's.)
# Usage: bash scripts/bench_ids.sh [N, default 10000000] [RUNS, default 3]
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
ROWS=${1:-10000000}
RUNS=${2:-3}
FUNCTIONS=("random()" "nextval('bench_seq')" "idgen_next_id()" "idgen_next_id('bench')")

provision
command -v valgrind >/dev/null || { say "installing valgrind"; as_root apt-get install -y -qq valgrind >/dev/null; }
install_extension >/dev/null
start_scratch_cluster

scratch_psql postgres -c "DROP DATABASE IF EXISTS idgen_bench_ids WITH (FORCE)" -c "CREATE DATABASE idgen_bench_ids"
scratch_psql idgen_bench_ids -c "CREATE EXTENSION idgen" -c "CREATE SEQUENCE bench_seq"

# Milliseconds of one query, in a fresh session whose lease is claimed beforehand.
time_query() {
    psql "$SCRATCH_DSN dbname=idgen_bench_ids" -X -q -t -A \
        -c "SELECT idgen_next_id(), idgen_next_id('bench')" -c '\timing on' \
        -c "SELECT count($1) FROM generate_series(1, $ROWS)" | awk '/^Time: / {print $2}'
}
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }

say "wall clock: $RUNS runs of each, interleaved, $ROWS rows"
declare -A samples
for _ in $(seq "$RUNS"); do
    for f in 1 "${FUNCTIONS[@]}"; do samples[$f]+="$(time_query "$f") "; done
done
declare -A wall
for f in 1 "${FUNCTIONS[@]}"; do wall[$f]=$(tr ' ' '\n' <<<"${samples[$f]}" | grep . | median); done

say "instructions per call (callgrind: a backend of a throwaway cluster run under valgrind)"
cg_dir=$(pg_work_dir callgrind)
cg_port=$((SCRATCH_PORT + 40))
as_pg rm -rf "$cg_dir/data" "$cg_dir/out"
as_pg mkdir -p "$cg_dir/out"
as_pg "$PG_BIN/initdb" -D "$cg_dir/data" -U postgres --auth=trust >/dev/null
# Every process the postmaster forks stays under valgrind and writes its own counts on exit.
as_pg valgrind --tool=callgrind --callgrind-out-file="$cg_dir/out/cg.%p" "$PG_BIN/postgres" -D "$cg_dir/data" \
    -p "$cg_port" -k "$cg_dir" -c listen_addresses=127.0.0.1 -c fsync=off >"$cg_dir/log" 2>&1 &
cg_dsn="host=127.0.0.1 port=$cg_port user=postgres dbname=postgres"
stop_cg() { as_pg "$PG_BIN/pg_ctl" -D "$cg_dir/data" -m fast -w -t 300 stop >/dev/null 2>&1 || true; }
trap stop_cg EXIT
for _ in $(seq 600); do "$PG_BIN/pg_isready" -q -d "$cg_dsn" && break; sleep 0.5; done
"$PG_BIN/pg_isready" -q -d "$cg_dsn" || die "the cluster under valgrind did not start in 5 minutes (see $cg_dir/log)"
psql "$cg_dsn" -X -q -c "CREATE EXTENSION idgen" -c "CREATE SEQUENCE bench_seq"
# Instructions of one backend that claims its leases, then runs one query over n rows.
instructions() {
    local f=$1 n=$2 pid out
    # The whole output first: a pipe closed after its first line would end psql, and the backend with it, early.
    pid=$(psql "$cg_dsn" -X -q -t -A -c "SELECT pg_backend_pid()" -c "SELECT idgen_next_id(), idgen_next_id('bench')" \
        -c "SELECT count($f) FROM generate_series(1, $n)")
    pid=${pid%%$'\n'*}
    out="$cg_dir/out/cg.$pid"
    # The backend writes its counts as it exits, after psql has gone: wait for them (10 minutes at most).
    for _ in $(seq 1200); do as_pg grep -qE '^(summary|totals):' "$out" 2>/dev/null && break; sleep 0.5; done
    # shellcheck disable=SC2016 # an awk program: its $2 is awk's
    as_pg awk '/^(summary|totals):/ {print $2; exit}' "$out" | grep . || die "no callgrind counts for backend $pid ($out)"
}
# Per row: the difference between 300,000 and 100,000 rows, so start-up and the claims cancel out.
declare -A per_row
for f in 1 "${FUNCTIONS[@]}"; do
    per_row[$f]=$(awk -v a="$(instructions "$f" 300000)" -v b="$(instructions "$f" 100000)" 'BEGIN {printf "%.0f", (a - b) / 200000}')
done
stop_cg

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
floor_ms=$(awk -v n="$ROWS" 'BEGIN {printf "%.0f", n / 4096}')
cat <<TABLE

| \`SELECT count(f) FROM generate_series(1, $ROWS)\` | wall ms (median of $RUNS) | vs random() | vs nextval() | instructions per row | vs random() | vs nextval() | of which f itself |
|---|---:|---:|---:|---:|---:|---:|---:|
TABLE
base=${FUNCTIONS[0]} seq=${FUNCTIONS[1]}
for f in 1 "${FUNCTIONS[@]}"; do
    # shellcheck disable=SC2016 # the backticks are Markdown
    printf '| `%s` | %s | %s | %s | %s | %s | %s | %s |\n' "$f" "${wall[$f]}" \
        "$(ratio "${wall[$f]}" "${wall[$base]}")" "$(ratio "${wall[$f]}" "${wall[$seq]}")" \
        "${per_row[$f]}" "$(ratio "${per_row[$f]}" "${per_row[$base]}")" \
        "$(ratio "${per_row[$f]}" "${per_row[$seq]}")" "$((per_row[$f] - per_row[1]))"
done
cat <<NOTE

\`count(1)\` is the query with no function at all: generating and counting the rows.
The layout allows 4,096 IDs per millisecond per backend: $ROWS IDs from one backend take at least $floor_ms ms of wall clock.
NOTE
