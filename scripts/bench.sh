#!/usr/bin/env bash
# Registry benchmark: idgen_heartbeat and idgen_claim against a plain UPDATE of the
# same shape, with pgbench on the scratch cluster; and a claim of a new machine id in a
# pool of 1,024 against one in a pool of 65,536 (Sonyflake's), each half held: the
# claim looks at a few ids from its service's hint, not at the held half. The machine
# is shared and noisy: read the ratios, which compare runs made side by side.
# Usage: bash scripts/bench.sh [seconds per run, default 10] [clients, default 1]
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
SECONDS_PER_RUN=${1:-10}
CLIENTS=${2:-1}

provision
install_extension >/dev/null
start_scratch_cluster

scratch_psql postgres -c "DROP DATABASE IF EXISTS idgen_bench WITH (FORCE)" -c "CREATE DATABASE idgen_bench"
scratch_psql idgen_bench <<'SQL'
CREATE EXTENSION idgen;
-- One node per pgbench client, and a copy of the registry without idgen for the baseline.
SELECT idgen_claim('bench', ('10.0.0.' || c)::inet, 1) FROM generate_series(1, 64) c;
CREATE TABLE baseline AS SELECT * FROM system_nodes;
ALTER TABLE baseline ADD PRIMARY KEY (service, machine_id);
-- Two pools, each half held by busy nodes: the default layout's 1,024 ids and Sonyflake's 65,536.
-- One claim of each moves its service's hint past the held half, as the claims that filled it would.
SELECT idgen_define_layout('large', 'sonyflake');
INSERT INTO system_nodes (service, machine_id, host, port, version)
SELECT s.service, m, ('10.' || (m / 65536) || '.' || (m / 256 % 256) || '.' || (m % 256))::inet, 9000, 1
  FROM (VALUES ('small', 512), ('large', 32768)) s(service, held), generate_series(0, s.held - 1) m;
SELECT machine_id FROM idgen_claim('small', '10.200.0.1', 1), idgen_claim('large', '10.200.0.1', 1);
SQL

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/heartbeat.sql" <<'SQL'
\set c (:client_id % 64) + 1
SELECT idgen_heartbeat('bench', (:c - 1)::smallint, ('10.0.0.' || :c)::inet, 1, 1);
SQL
cat > "$work/baseline_heartbeat.sql" <<'SQL'
\set c (:client_id % 64) + 1
UPDATE baseline SET last_seen = now() WHERE service = 'bench' AND machine_id = :c - 1 AND host = ('10.0.0.' || :c)::inet AND port = 1 AND version = 1 RETURNING last_seen + interval '55 minutes';
SQL
cat > "$work/claim.sql" <<'SQL'
\set c (:client_id % 64) + 1
SELECT * FROM idgen_claim('bench', ('10.0.0.' || :c)::inet, 2);
SQL
# A new node of the service claims a never-registered id; rolled back, so that every call finds
# the pool as it was (half held).
for pool in small large; do
    cat > "$work/new_$pool.sql" <<SQL
\\set c (:client_id % 64) + 1
BEGIN;
SELECT machine_id FROM idgen_claim('$pool', ('10.201.0.' || :c)::inet, 1);
ROLLBACK;
SQL
done

tps() {
    pgbench -h 127.0.0.1 -p "$SCRATCH_PORT" -U postgres -n -M prepared -c "$CLIENTS" -j "$CLIENTS" -T "$SECONDS_PER_RUN" -f "$work/$1" idgen_bench 2>/dev/null \
        | awk '/^tps = / {printf "%.0f", $3}'
}
say "pgbench, $CLIENTS client(s), ${SECONDS_PER_RUN}s per run"
base=$(tps baseline_heartbeat.sql)
hb=$(tps heartbeat.sql)
claim=$(tps claim.sql)
new_small=$(tps new_small.sql)
new_large=$(tps new_large.sql)
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }
cat <<TABLE

| operation ($CLIENTS client(s), ${SECONDS_PER_RUN} s) | calls/s | time per call vs plain UPDATE |
|---|---:|---:|
| plain UPDATE of a registry-shaped row (baseline) | $base | 1.00 |
| idgen_heartbeat | $hb | $(ratio "$base" "$hb") |
| idgen_claim, reusing the caller's row | $claim | $(ratio "$base" "$claim") |
| idgen_claim of a new id, pool of 1,024 half held (rolled back) | $new_small | $(ratio "$base" "$new_small") |
| idgen_claim of a new id, pool of 65,536 half held (rolled back) | $new_large | $(ratio "$base" "$new_large") |

A new id's claim in the pool of 65,536 takes $(ratio "$new_small" "$new_large") times as long as in the pool of 1,024.
TABLE
