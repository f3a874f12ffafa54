#!/usr/bin/env bash
# The keys people choose today, against idgen_next_id(): generation cost, a bulk insert of
# 1,000,000 rows (time, table and primary-key sizes), pgbench single-row inserts at 1, 4 and
# 16 clients (TPS, average and p99 latency), a new connection per transaction (-C, also with
# idgen in shared_preload_libraries), and a
# time-range query through the primary key against a timestamp column with its own index.
# Every measurement runs in interleaved rounds (each key once per round); the tables give
# medians and ratios to bigserial measured in the same run. Not part of the test command.
#
#   bash scripts/bench_keys.sh [rounds, default 3] [seconds per pgbench run, default 5] [rows, default 1000000]
#   IDGEN_PG=18 bash scripts/bench_keys.sh      # on PostgreSQL 18 (native uuidv7())
#
# Writes the markdown tables to stdout and to target/bench/keys-pg<version>.md.
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
ROUNDS=${1:-3}
SECONDS_PER_RUN=${2:-5}
ROWS=${3:-1000000}

provision
use_pg "${IDGEN_PG:-15}"
install_extension >/dev/null
start_scratch_cluster
DB=idgen_keys
scratch_psql postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
psql_db() { psql "$SCRATCH_DSN dbname=$DB" -X -v ON_ERROR_STOP=1 -qAt "$@"; }

# uuidv7: native from PostgreSQL 18; on 15 a SQL version of RFC 9562's layout (48-bit Unix ms,
# version 7, variant 10, random rest).
if [ "$PG_MAJOR" -ge 18 ]; then UUIDV7=uuidv7; else
    UUIDV7=bench_uuidv7
    psql_db <<'SQL'
CREATE FUNCTION bench_uuidv7() RETURNS uuid LANGUAGE sql VOLATILE PARALLEL SAFE AS $$
  SELECT encode(set_bit(set_bit(overlay(uuid_send(gen_random_uuid())
                 PLACING substring(int8send((extract(epoch FROM clock_timestamp()) * 1000)::bigint) FROM 3)
                 FROM 1 FOR 6), 52, 1), 53, 1), 'hex')::uuid
$$;
SQL
fi

KEYS=(idgen bigserial identity uuid_v4 uuid_v7)
column_of() {
    case $1 in
    idgen) echo "id bigint PRIMARY KEY DEFAULT idgen_next_id()" ;;
    bigserial) echo "id bigserial PRIMARY KEY" ;;
    identity) echo "id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY" ;;
    uuid_v4) echo "id uuid PRIMARY KEY DEFAULT gen_random_uuid()" ;;
    uuid_v7) echo "id uuid PRIMARY KEY DEFAULT $UUIDV7()" ;;
    esac
}
generator_of() {
    case $1 in
    idgen) echo "idgen_next_id()" ;;
    bigserial) echo "nextval('gen_seq')" ;;
    identity) echo "nextval('gen_seq')" ;;
    uuid_v4) echo "gen_random_uuid()" ;;
    uuid_v7) echo "$UUIDV7()" ;;
    random) echo "random()" ;;
    esac
}
psql_db -c "CREATE EXTENSION idgen" -c "CREATE SEQUENCE gen_seq"
for k in "${KEYS[@]}"; do psql_db -c "CREATE TABLE t_$k ($(column_of "$k"), payload int)"; done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results=$work/results   # lines: measure key value
ms_of() { psql_db -c '\timing on' -c "$1" | sed -n 's/^Time: \([0-9.]*\) ms.*/\1/p' | tail -n 1; }

say "generation cost and bulk insert, $ROUNDS interleaved rounds"
for _ in $(seq 1 "$ROUNDS"); do
    for k in "${KEYS[@]}" random; do
        echo "gen $k $(ms_of "SELECT count($(generator_of "$k")) FROM generate_series(1, $ROWS)")" >> "$results"
    done
    for k in "${KEYS[@]}"; do
        psql_db -c "TRUNCATE t_$k RESTART IDENTITY" -c "CHECKPOINT"
        echo "bulk $k $(ms_of "INSERT INTO t_$k (payload) SELECT g FROM generate_series(1, $ROWS) g")" >> "$results"
    done
done
for k in "${KEYS[@]}"; do
    psql_db -c "VACUUM ANALYZE t_$k"
    echo "table_mb $k $(psql_db -c "SELECT round(pg_relation_size('t_$k') / 1048576.0, 1)")" >> "$results"
    echo "index_mb $k $(psql_db -c "SELECT round(pg_relation_size('t_${k}_pkey') / 1048576.0, 1)")" >> "$results"
done

say "pgbench single-row inserts (1, 4, 16 clients) and a new connection per transaction, $SECONDS_PER_RUN s each"
pgbench_run() { # key clients extra-flags... ; prints "tps avg_ms p99_ms"
    local k=$1 c=$2; shift 2
    echo "INSERT INTO t_$k (payload) VALUES (1);" > "$work/insert.sql"
    rm -f "$work"/pgbench_log.*
    (cd "$work" && as_pg "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$SCRATCH_PORT" -U postgres -c "$c" -j "$(( c < 2 ? c : 2 ))" \
        -T "$SECONDS_PER_RUN" -f "$work/insert.sql" -l --log-prefix="$work/pgbench_log" "$@" "$DB" > "$work/out" 2>&1) \
        || { cat "$work/out" >&2; die "pgbench failed"; }
    local tps p99 avg
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/out")
    # Per-transaction log: field 3 is the latency in microseconds.
    read -r avg p99 < <(cat "$work"/pgbench_log.* | awk '{print $3}' | sort -n \
        | awk '{v[NR] = $1; s += $1} END {i = int(NR * 0.99); if (i < 1) i = 1; printf "%.3f %.3f\n", s / NR / 1000, v[i] / 1000}')
    echo "$tps $avg $p99"
}
is_root && chmod 777 "$work"
for _ in $(seq 1 "$ROUNDS"); do
    for c in 1 4 16; do
        for k in "${KEYS[@]}"; do
            read -r tps avg p99 < <(pgbench_run "$k" "$c")
            printf '%s\n' "tps$c $k $tps" "avg$c $k $avg" "p99$c $k $p99" >> "$results"
        done
    done
    for k in "${KEYS[@]}"; do
        read -r tps avg p99 < <(pgbench_run "$k" 4 -C)
        echo "churn $k $tps" >> "$results"
    done
done

say "time-range query: the primary key against a timestamp column with its own index"
psql_db <<SQL
CREATE TABLE ranged (id bigint PRIMARY KEY DEFAULT idgen_next_id(), created_at timestamptz NOT NULL DEFAULT clock_timestamp(), payload int);
INSERT INTO ranged (payload) SELECT g FROM generate_series(1, $ROWS) g;
CREATE INDEX ranged_created_at ON ranged (created_at);
VACUUM ANALYZE ranged;
SQL
# The middle 10 % of the rows' time span.
IFS='|' read -r from until < <(psql_db -F '|' -c "SELECT (min(created_at) + (max(created_at) - min(created_at)) * 0.45)::text,
                                                        (min(created_at) + (max(created_at) - min(created_at)) * 0.55)::text FROM ranged")
buffers() { psql_db -c "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) $1" | python3 -c 'import json,sys; p=json.load(sys.stdin)[0]["Plan"]; print(p.get("Shared Hit Blocks",0)+p.get("Shared Read Blocks",0))'; }
pk_buffers=$(buffers "SELECT count(*) FROM ranged WHERE id BETWEEN idgen_min_id('$from') AND idgen_max_id('$until')")
ts_buffers=$(buffers "SELECT count(*) FROM ranged WHERE created_at BETWEEN '$from' AND '$until'")
pk_rows=$(psql_db -c "SELECT count(*) FROM ranged WHERE id BETWEEN idgen_min_id('$from') AND idgen_max_id('$until')")
ts_index_mb=$(psql_db -c "SELECT round(pg_relation_size('ranged_created_at') / 1048576.0, 1)")

# A new connection pays for loading idgen (on 15, defining its settings sorts the server's whole
# list once per setting) unless the postmaster loaded it: the -C runs again with idgen preloaded.
say "a new connection per transaction, idgen in shared_preload_libraries, $ROUNDS interleaved rounds"
trap 'scratch_preload off || true; rm -rf "$work"' EXIT
scratch_preload on
for _ in $(seq 1 "$ROUNDS"); do
    for k in idgen bigserial; do
        read -r tps avg p99 < <(pgbench_run "$k" 4 -C)
        echo "churn_preloaded $k $tps" >> "$results"
    done
done
scratch_preload off
trap 'rm -rf "$work"' EXIT

median() { sort -n | awk '{v[NR] = $1} END {if (NR % 2) print v[(NR + 1) / 2]; else printf "%.3f\n", (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
value() { awk -v m="$1" -v k="$2" '$1 == m && $2 == k {print $3}' "$results" | median; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {if (b > 0) printf "%.2f", a / b; else print "-"}'; }
# Rounded for the tables: whole numbers (TPS), one decimal (ms).
n0() { awk -v v="$1" 'BEGIN {printf "%.0f", v}'; }
n1() { awk -v v="$1" 'BEGIN {printf "%.1f", v}'; }

out=$(pg_work_dir bench)/keys-pg$PG_MAJOR.md
{
    echo "#### PostgreSQL $PG_MAJOR"
    echo
    echo "\`IDGEN_PG=$PG_MAJOR bash scripts/bench_keys.sh $ROUNDS $SECONDS_PER_RUN $ROWS\` on $(nproc) cores, $(free -g | awk '/^Mem:/ {print $2}') GiB, $(psql_db -c 'SHOW server_version'),"
    echo "medians of $ROUNDS interleaved rounds; ratios to bigserial (for the generation cost: to \`random()\`)."
    echo
    echo "| key | generation ms ($ROWS) | ×random() | bulk insert ms | ×bigserial | table MB | PK index MB |"
    echo "|---|---:|---:|---:|---:|---:|---:|"
    for k in "${KEYS[@]}"; do
        echo "| $k | $(n1 "$(value gen "$k")") | $(ratio "$(value gen "$k")" "$(value gen random)") | $(n1 "$(value bulk "$k")") | $(ratio "$(value bulk "$k")" "$(value bulk bigserial)") | $(value table_mb "$k") | $(value index_mb "$k") |"
    done
    echo "| random() (floor) | $(n1 "$(value gen random)") | 1.00 | | | | |"
    echo
    echo "| key | TPS 1 | TPS 4 | TPS 16 | ×bigserial at 16 | avg / p99 ms at 16 | TPS with -C (4 clients) | ×bigserial |"
    echo "|---|---:|---:|---:|---:|---:|---:|---:|"
    for k in "${KEYS[@]}"; do
        echo "| $k | $(n0 "$(value tps1 "$k")") | $(n0 "$(value tps4 "$k")") | $(n0 "$(value tps16 "$k")") | $(ratio "$(value tps16 "$k")" "$(value tps16 bigserial)") | $(value avg16 "$k") / $(value p9916 "$k") | $(n0 "$(value churn "$k")") | $(ratio "$(value churn "$k")" "$(value churn bigserial)") |"
    done
    echo
    echo "With \`shared_preload_libraries = 'idgen'\`, a new connection per transaction (-C, 4 clients): idgen $(n0 "$(value churn_preloaded idgen)") TPS,"
    echo "bigserial $(n0 "$(value churn_preloaded bigserial)") TPS: $(ratio "$(value churn_preloaded idgen)" "$(value churn_preloaded bigserial)") × bigserial."
    echo
    echo "Time range (the middle 10 % of $ROWS rows, $pk_rows rows): through the primary key with \`idgen_min_id\`/\`idgen_max_id\`"
    echo "$pk_buffers buffers; through a \`timestamptz\` column's own index $ts_buffers buffers (and that index is $ts_index_mb MB more)."
} | tee "$out"
