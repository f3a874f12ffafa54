#!/usr/bin/env bash
# The main job: installs what is missing, builds and installs idgen, starts a
# scratch PostgreSQL 15 on 127.0.0.1:28815 (data under target/scratch), runs a
# short demo and prints the psql line to connect. Safe to run again.
# IDGEN_PG=18 demos on PostgreSQL 18 instead (127.0.0.1:28915, target/scratch18).
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"

provision
use_pg "${IDGEN_PG:-15}"
install_extension
start_scratch_cluster

say "demo database idgen_demo"
scratch_psql postgres -c "DROP DATABASE IF EXISTS idgen_demo WITH (FORCE)" -c "CREATE DATABASE idgen_demo"
scratch_psql idgen_demo -v q=- <<'SQL'
\set QUIET off
\echo
CREATE EXTENSION idgen;
\echo '-- two nodes of the "orders" service boot and claim machine ids'
\echo '-- (versions start at a base each registry draws: a node keeps the version its claim returned)'
SELECT * FROM idgen_claim('orders', '10.0.0.5', 8080) \gset first_
SELECT :first_machine_id AS machine_id, :first_version AS version, :'first_outcome' AS outcome,
       :'first_lease_until' AS lease_until, :'first_not_before' AS not_before;
SELECT * FROM idgen_claim('orders', '10.0.0.6', 8080);
\echo '-- the first shuts down gracefully: it gives its id back with the last timestamp it stamped'
SELECT idgen_release('orders', :first_machine_id, '10.0.0.5', 8080, :first_version, clock_timestamp()) AS released;
\echo '-- restarted on the same address after that release: same machine id, next version, after its watermark'
SELECT * FROM idgen_claim('orders', '10.0.0.5', 8080) \gset again_
SELECT :again_machine_id AS machine_id, :again_version AS version, :'again_outcome' AS outcome,
       :'again_lease_until' AS lease_until, :'again_not_before' AS not_before;
\echo '-- it reports before its first ID, and heartbeats with its version and its watermark (its own clock)'
SELECT idgen_heartbeat('orders', :again_machine_id, '10.0.0.5', 8080, :again_version, clock_timestamp()) AS lease_until;
\echo '-- the orders service runs as its own role, which may act for orders and nothing else'
DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_roles WHERE rolname = 'orders_svc') THEN CREATE ROLE orders_svc LOGIN; END IF; END $$;
SELECT idgen_grant_service('orders', 'orders_svc') AS granted;
\echo '-- a table keyed by the generator; this backend joins the "orders" service with a machine id of its own'
CREATE TABLE purchases (id bigint PRIMARY KEY DEFAULT idgen_next_id(), item text);
SET idgen.service = 'orders';
INSERT INTO purchases (item) VALUES ('book'), ('pen'), ('ink');
SELECT p.id, d.ts, d.machine_id, d.sequence, p.item FROM purchases p, idgen_decode(p.id) d ORDER BY p.id;
\echo '-- the lease this backend holds'
SELECT service, machine_id, version, backend_slot, ids_issued, lease_until FROM idgen_backend_leases();
\echo '-- the registry: two service nodes and one database backend share the id space of "orders"'
SELECT service, machine_id, host, port, backend_slot, version, last_seen, issued_until FROM system_nodes ORDER BY service, machine_id;
\echo '-- diagnostics: node states, who made an ID, the ownership history, and the health check (no rows: healthy)'
SELECT service, machine_id, kind, state, holder, idle, pid, application_name FROM idgen_nodes ORDER BY service, machine_id;
SELECT x.service, x.machine_id, x.finding, x.holder, x.version FROM purchases p, idgen_explain(p.id, 'orders') x ORDER BY p.id LIMIT 1;
SELECT at, event, machine_id, version, outcome, holder FROM idgen_events ORDER BY event_id;
SELECT * FROM idgen_health();
SQL

cat <<MSG

idgen is installed in the scratch cluster (log: $SCRATCH_LOG). Connect with:

    psql "host=127.0.0.1 port=$SCRATCH_PORT user=postgres dbname=idgen_demo"

Stop it with: $(is_root && echo "runuser -u postgres -- ")$PG_BIN/pg_ctl -D $PGDATA_DIR stop
MSG
