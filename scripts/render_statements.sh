#!/usr/bin/env bash
# Writes docs/runtime_statements.sql again from src/statements.rs: the rendering of every
# statement idgen runs, which tests/cluster/tests/runtime_sql.rs compares. Review its diff.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
IDGEN_BLESS=1 cargo test -q -p idgen-cluster-tests --test runtime_sql the_checked_in_rendering >/dev/null
git --no-pager diff --stat -- docs/runtime_statements.sql
