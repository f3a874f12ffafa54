#!/usr/bin/env bash
# The hot path of idgen_next_id() in this checkout against another revision's, in one run on
# the PostgreSQL 15 scratch cluster: for a refactoring that must not slow it down. Each round
# times, in fresh sessions, for each library in turn:
#  - generation: SELECT count(idgen_next_id()) over ROWS rows, against count(nextval()) of a
#    sequence in the same round;
#  - inserts: ROWS rows into a table whose key defaults to idgen_next_id(), against a bigserial
#    table in the same round.
# It reports the median ratio (idgen's time / the baseline's) of each library, and the two
# libraries' ratio of ratios (1.00: the same). Only the library is swapped (a new backend loads
# the file installed when it starts): the database has BASE_REV's SQL version, which this
# checkout's library must run against (privilege::SQL_VERSIONS; tests/upgrade has its script).
# Usage: bash scripts/bench_hot_path.sh [BASE_REV, default HEAD] [ROWS, default 2000000] [ROUNDS, default 5]
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
source "$(dirname "${BASH_SOURCE[0]}")/clusters.sh"
BASE_REV=${1:-HEAD}
ROWS=${2:-2000000}
ROUNDS=${3:-5}
DB=idgen_bench_hot_path

provision
cd "$ROOT"
base_version=$(git show "$BASE_REV:Cargo.toml" | sed -n 's/^version = "\(.*\)"/\1/p' | head -1)
[ -n "$base_version" ] || die "no version in $BASE_REV's Cargo.toml"

work=$(pg_work_dir bench-hot-path)
say "building $BASE_REV's library (release) in $work"
rm -rf "$work/base" && git worktree add --force --detach "$work/base" "$BASE_REV" >/dev/null
trap 'git -C "$ROOT" worktree remove --force "$work/base" 2>/dev/null || true' EXIT
(cd "$work/base" && CARGO_TARGET_DIR="$work/target" cargo build -q --release --no-default-features --features pg15)
cp "$work/target/release/libidgen.so" "$work/base.so"
install_extension >/dev/null
install_upgrade_scripts
library="$("$PG_CONFIG" --pkglibdir)/idgen.so"
cp "$library" "$work/this.so"
start_scratch_cluster

# Installs library $1 (a new file, so that running backends keep the one they mapped).
use_library() {
    if [ -w "$(dirname "$library")" ]; then install -m 755 "$1" "$library"; else as_root install -m 755 "$1" "$library"; fi
}
# Milliseconds of statement $1, in a fresh session that has its lease already.
time_ms() {
    psql "$SCRATCH_DSN dbname=$DB" -X -q -t -A -c "SELECT idgen_next_id()" -c "TRUNCATE t_idgen, t_serial" \
        -c '\timing on' -c "$1" | awk '/^Time: / {print $2}'
}
median() { sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.3f", a / b}'; }

scratch_psql postgres -c "DROP DATABASE IF EXISTS $DB WITH (FORCE)" -c "CREATE DATABASE $DB"
scratch_psql "$DB" -c "CREATE EXTENSION idgen VERSION '$base_version'" -c "CREATE SEQUENCE s" \
    -c "CREATE TABLE t_idgen (id bigint PRIMARY KEY DEFAULT idgen_next_id())" \
    -c "CREATE TABLE t_serial (id bigserial PRIMARY KEY)"

say "$ROUNDS rounds of $ROWS rows, libraries interleaved"
declare -A samples
for round in $(seq "$ROUNDS"); do
    # Alternating which library goes first, so that neither always follows the other.
    order=(base this)
    [ $((round % 2)) = 0 ] && order=(this base)
    for lib in "${order[@]}"; do
        use_library "$work/$lib.so"
        sequence=$(time_ms "SELECT count(nextval('s')) FROM generate_series(1, $ROWS)")
        generated=$(time_ms "SELECT count(idgen_next_id()) FROM generate_series(1, $ROWS)")
        serial=$(time_ms "INSERT INTO t_serial SELECT FROM generate_series(1, $ROWS)")
        inserted=$(time_ms "INSERT INTO t_idgen SELECT FROM generate_series(1, $ROWS)")
        samples[$lib.generation]+="$(ratio "$generated" "$sequence") "
        samples[$lib.insert]+="$(ratio "$inserted" "$serial") "
    done
done
use_library "$work/this.so"

m() { tr ' ' '\n' <<<"${samples[$1]}" | grep . | median; }
for key in base.generation this.generation base.insert this.insert; do say "$key ratios, round by round: ${samples[$key]}"; done
cat <<TABLE

| $ROWS rows, median of $ROUNDS rounds | $BASE_REV ($(git rev-parse --short "$BASE_REV")) | this checkout | this / $BASE_REV |
|---|---:|---:|---:|
| generation: idgen_next_id() / nextval() | $(m base.generation) | $(m this.generation) | $(ratio "$(m this.generation)" "$(m base.generation)") |
| inserts: DEFAULT idgen_next_id() / bigserial | $(m base.insert) | $(m this.insert) | $(ratio "$(m this.insert)" "$(m base.insert)") |
TABLE
