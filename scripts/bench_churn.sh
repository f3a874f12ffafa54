#!/usr/bin/env bash
# A new connection per single-row insert (pgbench -C, 4 clients): idgen_next_id() against bigserial,
# with idgen loaded on demand and with idgen in shared_preload_libraries, for this checkout's library
# and another revision's, in one run on the PostgreSQL 15 (or 18: IDGEN_PG=18) scratch cluster.
# Each round runs, for each library and each way of loading it (the cluster restarted for each),
# the two tables in turn; the table gives the median TPS and the median ratio (idgen / bigserial)
# of the rounds. The database has BASE_REV's SQL version, which this checkout's library also runs
# against (privilege::SQL_VERSIONS). The server's defaults apart from the scratch cluster's
# (JIT on). Not part of the test command.
# Usage: bash scripts/bench_churn.sh [BASE_REV, default HEAD] [ROUNDS, default 3] [SECONDS per run, default 10]
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
BASE_REV=${1:-HEAD}
ROUNDS=${2:-3}
SECONDS_PER_RUN=${3:-10}
DB=idgen_bench_churn

provision
use_pg "${IDGEN_PG:-15}"
cd "$ROOT"
base_version=$(git show "$BASE_REV:Cargo.toml" | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)
[ -n "$base_version" ] || die "no version in $BASE_REV's Cargo.toml"

work=$(pg_work_dir "bench-churn$PG_MAJOR")
say "building $BASE_REV's library (release) in $work"
rm -rf "$work/base" && git worktree add --force --detach "$work/base" "$BASE_REV" >/dev/null
trap 'scratch_preload off >/dev/null 2>&1 || true; git -C "$ROOT" worktree remove --force "$work/base" 2>/dev/null || true' EXIT
(cd "$work/base" && CARGO_TARGET_DIR="$work/target" cargo build -q --release --no-default-features --features "pg$PG_MAJOR")
cp "$work/target/release/libidgen.so" "$work/base.so"
install_extension >/dev/null
install_upgrade_scripts
library="$("$PG_CONFIG" --pkglibdir)/idgen.so"
cp "$library" "$work/this.so"
start_scratch_cluster

use_library() {
    if [ -w "$(dirname "$library")" ]; then install -m 755 "$1" "$library"; else as_root install -m 755 "$1" "$library"; fi
}
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.2f", a / b}'; }

scratch_psql postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
scratch_psql "$DB" -c "CREATE EXTENSION idgen VERSION '$base_version'" \
    -c "CREATE TABLE t_idgen (id bigint PRIMARY KEY DEFAULT idgen_next_id(), payload int)" \
    -c "CREATE TABLE t_serial (id bigserial PRIMARY KEY, payload int)"
scripts=$(mktemp -d)
chmod 755 "$scripts"
for t in t_idgen t_serial; do echo "INSERT INTO $t (payload) VALUES (1);" > "$scripts/$t.sql"; done
chmod 644 "$scripts"/*.sql
tps() {
    as_pg "$PG_BIN/pgbench" -n -C -h 127.0.0.1 -p "$SCRATCH_PORT" -U postgres -c 4 -j 2 -T "$SECONDS_PER_RUN" \
        -f "$scripts/$1.sql" "$DB" 2>/dev/null | sed -n 's/^tps = \([0-9.]*\).*/\1/p'
}

say "$ROUNDS rounds of $SECONDS_PER_RUN s per run: each library, loaded on demand and preloaded"
declare -A samples
for round in $(seq "$ROUNDS"); do
    for lib in base this; do
        for preload in off on; do
            use_library "$work/$lib.so"
            scratch_preload "$preload" >/dev/null
            order=(t_idgen t_serial)
            [ $((round % 2)) = 0 ] && order=(t_serial t_idgen)
            declare -A got=()
            for t in "${order[@]}"; do got[$t]=$(tps "$t"); done
            samples[$lib.$preload.idgen]+="${got[t_idgen]} "
            samples[$lib.$preload.serial]+="${got[t_serial]} "
            samples[$lib.$preload.ratio]+="$(ratio "${got[t_idgen]}" "${got[t_serial]}") "
            say "round $round, $lib, preload $preload: idgen ${got[t_idgen]} TPS, bigserial ${got[t_serial]} TPS"
        done
    done
done
use_library "$work/this.so"
scratch_preload off >/dev/null
rm -rf "$scripts"

m() { tr ' ' '\n' <<<"${samples[$1]}" | grep . | median; }
cat <<TABLE

| PostgreSQL $PG_MAJOR, new connection per insert, 4 clients, median of $ROUNDS rounds | idgen TPS | bigserial TPS | idgen / bigserial |
|---|---:|---:|---:|
| $BASE_REV ($(git rev-parse --short "$BASE_REV")), loaded on demand | $(m base.off.idgen) | $(m base.off.serial) | $(m base.off.ratio) |
| $BASE_REV ($(git rev-parse --short "$BASE_REV")), preloaded | $(m base.on.idgen) | $(m base.on.serial) | $(m base.on.ratio) |
| this checkout, loaded on demand | $(m this.off.idgen) | $(m this.off.serial) | $(m this.off.ratio) |
| this checkout, preloaded | $(m this.on.idgen) | $(m this.on.serial) | $(m this.on.ratio) |
TABLE
