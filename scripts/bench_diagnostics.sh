#!/usr/bin/env bash
# Diagnostics benchmark: the runbook's and postgres_exporter's queries on a registry of
# 10,000 rows (ten full services), with the server's defaults (JIT on) and with jit = off,
# against a plain count of the registry. The machine is shared and noisy: read the ratios,
# which compare runs made side by side.
# Usage: bash scripts/bench_diagnostics.sh [seconds per run, default 5]
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
SECONDS_PER_RUN=${1:-5}

provision
install_extension >/dev/null
start_scratch_cluster

scratch_psql postgres -c "DROP DATABASE IF EXISTS idgen_bench_diag WITH (FORCE)" -c "CREATE DATABASE idgen_bench_diag"
scratch_psql idgen_bench_diag <<'SQL'
CREATE EXTENSION idgen;
-- Ten services of 1,000 rows, idle from a minute to a week: every state and tier occurs.
INSERT INTO system_nodes (service, machine_id, host, port, version, last_seen, issued_until)
SELECT 'svc' || g / 1000, g % 1000, ('10.' || g / 250 || '.0.' || g % 250 + 1)::inet, 8080, 1,
       now() - g * interval '1 minute', now()
  FROM generate_series(0, 9999) g;
ANALYZE system_nodes;
SQL

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
queries=(
    "SELECT count(*) FROM system_nodes"
    "SELECT * FROM idgen_health()"
    "SELECT * FROM idgen_metrics"
    "SELECT * FROM idgen_capacity"
    "SELECT * FROM idgen_nodes"
)
# Milliseconds per call of query $1 over SECONDS_PER_RUN, PGOPTIONS $2.
ms_per_call() {
    printf '%s;\n' "$1" > "$work/q.sql"
    PGOPTIONS=$2 pgbench -h 127.0.0.1 -p "$SCRATCH_PORT" -U postgres -n -T "$SECONDS_PER_RUN" -f "$work/q.sql" \
        idgen_bench_diag 2>/dev/null | awk '/^latency average/ {printf "%.1f", $4}'
}
say "pgbench, 1 client, ${SECONDS_PER_RUN}s per run, 10,000 registry rows"
base=$(ms_per_call "${queries[0]}" "")
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }
printf '\n| query (10,000 rows) | ms per call, defaults (JIT on) | ms, jit = off | defaults / jit off | vs a plain count |\n'
printf '|---|---:|---:|---:|---:|\n'
for q in "${queries[@]}"; do
    on=$(ms_per_call "$q" "")
    off=$(ms_per_call "$q" "-c jit=off")
    # shellcheck disable=SC2016 # the backticks are Markdown
    printf '| `%s` | %s | %s | %s | %s |\n' "$q" "$on" "$off" "$(ratio "$on" "$off")" "$(ratio "$on" "$base")"
done
