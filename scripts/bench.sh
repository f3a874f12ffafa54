#!/usr/bin/env bash
# Registry benchmark: idgen_heartbeat and idgen_claim against a plain UPDATE of the
# same shape, with pgbench on the scratch cluster; and a claim of a new machine id in a
# pool of 1,024 against one in a pool of 65,536 (Sonyflake's), each half held: the
# claim looks at a few ids from its service's hint, not at the held half. The machine
# is shared and noisy: read the ratios, which compare runs made side by side.
# PostgreSQL 15, or 18 with IDGEN_PG=18.
# Usage: bash scripts/bench.sh [seconds per run, default 10] [clients, default 1]
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
SECONDS_PER_RUN=${1:-10}
CLIENTS=${2:-1}

provision
use_pg "${IDGEN_PG:-15}"
install_extension >/dev/null
start_scratch_cluster

scratch_psql postgres -c "DROP DATABASE IF EXISTS idgen_bench WITH (FORCE)" -c "CREATE DATABASE idgen_bench"
scratch_psql idgen_bench <<'SQL'
CREATE EXTENSION idgen;
-- Two pools, each half held by busy nodes: the default layout's 1,024 ids and Sonyflake's 65,536,
-- loaded first, as a restore does: a session's kept plans are made on the registry it first sees.
SELECT idgen_define_layout('large', 'sonyflake');
INSERT INTO system_nodes (service, machine_id, host, port, version)
SELECT s.service, m, ('10.' || (m / 65536) || '.' || (m / 256 % 256) || '.' || (m % 256))::inet, 9000, 1
  FROM (VALUES ('small', 512), ('large', 32768)) s(service, held), generate_series(0, s.held - 1) m;
-- One claim of each moves its service's hint past the held half, as the claims that filled it would.
SELECT (SELECT machine_id FROM idgen_claim('small', '10.200.0.1', 1)) AS small, (SELECT machine_id FROM idgen_claim('large', '10.200.0.1', 1)) AS large;
-- One node per pgbench client, and for the baseline a table of the registry's shape (its columns,
-- constraints and indexes) with the same rows, that idgen does not touch.
SELECT count(*) FROM (SELECT idgen_claim('bench', ('10.0.0.' || c)::inet, 1) FROM generate_series(1, 64) c) claimed;
CREATE TABLE baseline (LIKE system_nodes INCLUDING ALL);
INSERT INTO baseline SELECT * FROM system_nodes;
-- The statistics of a registry that grew claim by claim (autovacuum keeps them), not of one loaded a
-- moment ago: without them the planner reads 34,000 rows where an index finds one.
ANALYZE;
SQL

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Each client heartbeats its node's row (the version each row was claimed at: the registry's base + 1).
version=$(scratch_psql idgen_bench -At -c "SELECT version FROM system_nodes WHERE service = 'bench' AND machine_id = 0")
cat > "$work/heartbeat.sql" <<SQL
\\set c (:client_id % 64) + 1
SELECT idgen_heartbeat('bench', :c - 1, ('10.0.0.' || :c)::inet, 1, $version);
SQL
cat > "$work/baseline_heartbeat.sql" <<SQL
\\set c (:client_id % 64) + 1
UPDATE baseline SET last_seen = now() WHERE service = 'bench' AND machine_id = :c - 1 AND host = ('10.0.0.' || :c)::inet AND port = 1 AND version = $version RETURNING last_seen + interval '55 minutes';
SQL
# A graceful restart: the node claims its own released id back, and releases it again with its
# watermark (without one, a release keeps what a live holder may still stamp: its id stays fenced).
# Each statement's latency is read apart (pgbench -r): the claim's is the reusing claim's.
cat > "$work/claim.sql" <<'SQL'
\set c (:client_id % 64) + 1
SELECT machine_id, version FROM idgen_claim('bench', ('10.0.0.' || :c)::inet, 3) \gset
SELECT idgen_release('bench', :machine_id, ('10.0.0.' || :c)::inet, 3, :version, clock_timestamp());
SQL
# A new node of the service claims a never-registered id: 100 of them, committed, so that the pool
# stays about half held (512 to 612 of 1,024 ids: below idgen.capacity_warning; 32,768 to 32,868 of
# 65,536). (Rolled back instead, each claim would leave a dead index entry past the end of the
# machine ids, which the planner of the next one reads through: that is no claim's cost.)
for pool in small large; do
    cat > "$work/new_$pool.sql" <<SQL
\\set n random(1, 1000000000)
SELECT machine_id FROM idgen_claim('$pool', ('10.' || (:n / 65536 % 256) || '.' || (:n / 256 % 256) || '.' || (:n % 256))::inet, 2 + :n / 16777216);
SQL
done

# Calls per second over 100 calls per client (a script that changes what the next call finds).
tps_of_100() {
    pgbench -h 127.0.0.1 -p "$SCRATCH_PORT" -U postgres -n -M prepared -c "$CLIENTS" -j "$CLIENTS" -t 100 -f "$work/$1" idgen_bench 2>/dev/null \
        | awk '/^tps = / {printf "%.0f", $3}'
}
# Milliseconds per call of each statement of script $1 (pgbench -r), one per line.
latencies() {
    pgbench -h 127.0.0.1 -p "$SCRATCH_PORT" -U postgres -n -M prepared -r -c "$CLIENTS" -j "$CLIENTS" -T "$SECONDS_PER_RUN" -f "$work/$1" idgen_bench 2>/dev/null \
        | awk '/^ +[0-9.]+ +[0-9]+ +(SELECT|UPDATE)/ {print $1}'
}
say "pgbench, $CLIENTS client(s), ${SECONDS_PER_RUN}s per run"
base_ms=$(latencies baseline_heartbeat.sql)
hb_ms=$(latencies heartbeat.sql)
read -r claim_ms release_ms <<< "$(latencies claim.sql | tr '\n' ' ')"
new_small=$(tps_of_100 new_small.sql)
new_large=$(tps_of_100 new_large.sql)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
per_second() { awk -v ms="$1" 'BEGIN {printf "%.0f", 1000 / ms}'; }
cat <<TABLE

| operation ($CLIENTS client(s), ${SECONDS_PER_RUN} s) | ms per call | time per call vs plain UPDATE |
|---|---:|---:|
| plain UPDATE of a registry-shaped row (baseline) | $base_ms | 1.00 |
| idgen_heartbeat | $hb_ms | $(ratio "$hb_ms" "$base_ms") |
| idgen_claim of the caller's own released id (a graceful restart) | $claim_ms | $(ratio "$claim_ms" "$base_ms") |
| idgen_release with the watermark | $release_ms | $(ratio "$release_ms" "$base_ms") |
| idgen_claim of a new id, pool of 1,024 half held | $(awk -v t="$new_small" 'BEGIN {printf "%.3f", 1000 / t}') | $(ratio "$(per_second "$base_ms")" "$new_small") |
| idgen_claim of a new id, pool of 65,536 half held | $(awk -v t="$new_large" 'BEGIN {printf "%.3f", 1000 / t}') | $(ratio "$(per_second "$base_ms")" "$new_large") |

A new id's claim in the pool of 65,536 takes $(ratio "$new_small" "$new_large") times as long as in the pool of 1,024.
TABLE
