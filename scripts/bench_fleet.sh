#!/usr/bin/env bash
# A fleet of service nodes against the registry: NODES nodes (default 1,000) claim from 16
# concurrent clients, then heartbeat (with their watermark) for SECONDS, then restart one by one
# (a rolling restart: release with the watermark, claim back). pgbench on the PostgreSQL 15 (or 18:
# IDGEN_PG=18) scratch cluster, idgen loaded on demand (PRELOAD=on: in shared_preload_libraries):
# calls per second and the latency of each transaction (average and p99, from pgbench's log).
# Not part of the test command.
# Usage: bash scripts/bench_fleet.sh [NODES, default 1000] [SECONDS of heartbeats, default 10] [CLIENTS, default 16]
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
NODES=${1:-1000}
SECONDS_PER_RUN=${2:-10}
CLIENTS=${3:-16}
DB=idgen_bench_fleet

provision
use_pg "${IDGEN_PG:-15}"
install_extension >/dev/null
start_scratch_cluster
trap 'scratch_preload off >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
[ "${PRELOAD:-off}" = on ] && scratch_preload on >/dev/null

scratch_psql postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB" >/dev/null
# A pool that holds the fleet, and a sequence that hands each client transaction its node.
scratch_psql "$DB" -c "CREATE EXTENSION idgen" -c "SELECT idgen_define_layout('fleet', 'sonyflake')" \
    -c "CREATE SEQUENCE node_no" >/dev/null
# A claim as the client contract makes it: two new nodes whose identities share a guard bucket (1 in
# 1,024) cannot claim at once, and one gets 55P03, which a node retries. Each retry is counted.
scratch_psql "$DB" >/dev/null <<'SQL'
CREATE SEQUENCE claim_retries;
CREATE FUNCTION fleet_claim(host inet) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    claimed integer;
BEGIN
    FOR attempt IN 1..100 LOOP
        BEGIN
            SELECT machine_id INTO claimed FROM idgen_claim('fleet', host, 8080);
            RETURN claimed;
        EXCEPTION WHEN lock_not_available THEN
            PERFORM nextval('claim_retries');
            PERFORM pg_sleep(0.001);
        END;
    END LOOP;
    RAISE EXCEPTION 'fleet_claim: 100 tries found the guard busy';
END $$;
SQL

work=$(mktemp -d)
# pgbench runs as postgres and writes its logs here, whoever runs this script.
chmod 1777 "$work"
host="('10.' || (:n / 65536 % 256) || '.' || (:n / 256 % 256) || '.' || (:n % 256))::inet"
cat > "$work/claim.sql" <<SQL
SELECT nextval('node_no') AS n \\gset
SELECT fleet_claim($host);
SQL
cat > "$work/heartbeat.sql" <<SQL
\\set n random(1, $NODES)
SELECT machine_id, version FROM system_nodes WHERE service = 'fleet' AND host = $host AND port = 8080 AND released_at IS NULL \\gset
SELECT idgen_heartbeat('fleet', :machine_id, $host, 8080, :version, issued_until => clock_timestamp());
SQL
cat > "$work/restart.sql" <<SQL
SELECT nextval('node_no') AS n \\gset
SELECT machine_id, version FROM system_nodes WHERE service = 'fleet' AND host = $host AND port = 8080 AND released_at IS NULL \\gset
SELECT idgen_release('fleet', :machine_id, $host, 8080, :version, clock_timestamp());
SELECT fleet_claim($host);
SQL
chmod 644 "$work"/*.sql

# Runs pgbench with script $1 and the rest as its arguments; prints "tps avg_ms p99_ms".
run() {
    local script=$1
    shift
    rm -f "$work"/log.*
    (cd "$work" && as_pg "$PG_BIN/pgbench" -n -h 127.0.0.1 -p "$SCRATCH_PORT" -U postgres -c "$CLIENTS" -j 2 \
        -f "$work/$script" -l --log-prefix="$work/log" "$@" "$DB" > "$work/out" 2> "$work/err") \
        || { tail -5 "$work/err" >&2; die "pgbench $script failed"; }
    local tps
    tps=$(sed -n 's/^tps = \([0-9.]*\).*/\1/p' "$work/out")
    cat "$work"/log.* | awk '{print $3}' | sort -n \
        | awk -v tps="$tps" '{v[NR] = $1; s += $1} END {i = int(NR * 0.99); if (i < 1) i = 1; printf "%.0f %.3f %.3f\n", tps, s / NR / 1000, v[i] / 1000}'
}
per_client=$(( (NODES + CLIENTS - 1) / CLIENTS ))
say "$NODES nodes claim ($CLIENTS clients)"
read -r claim_tps claim_avg claim_p99 < <(run claim.sql -t "$per_client")
say "heartbeats for $SECONDS_PER_RUN s"
read -r hb_tps hb_avg hb_p99 < <(run heartbeat.sql -T "$SECONDS_PER_RUN")
say "a rolling restart of every node"
scratch_psql "$DB" -c "SELECT setval('node_no', 1, false)" >/dev/null
read -r rs_tps rs_avg rs_p99 < <(run restart.sql -t "$per_client")
held=$(scratch_psql "$DB" -At -c "SELECT count(*) FROM system_nodes WHERE service = 'fleet' AND released_at IS NULL")
retries=$(scratch_psql "$DB" -At -c "SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM claim_retries")

cat <<TABLE

| PostgreSQL $PG_MAJOR, $((per_client * CLIENTS)) nodes, $CLIENTS clients, idgen $( [ "${PRELOAD:-off}" = on ] && echo preloaded || echo "loaded on demand") | per second | average ms | p99 ms |
|---|---:|---:|---:|
| claims (a new node each) | $claim_tps | $claim_avg | $claim_p99 |
| heartbeats (a row's lookup, then idgen_heartbeat) | $hb_tps | $hb_avg | $hb_p99 |
| restarts (lookup, idgen_release with the watermark, idgen_claim back) | $rs_tps | $rs_avg | $rs_p99 |

After the rolling restart $held nodes hold a machine id; $retries claims were retried after a 55P03 (a shared guard).
TABLE
