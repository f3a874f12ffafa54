#!/usr/bin/env bash
# Lint checks, run by .ci/run before the tests: formatting (cargo fmt), clippy with warnings as
# errors over every crate of the workspace and every target, and shellcheck on the scripts.
# Installs only what they need (shellcheck, the rustfmt and clippy components, and for clippy of
# the pgrx crate what building it needs: scripts/provision.sh lint). Runs every check, then
# exits non-zero if any failed.
#
#   bash scripts/lint.sh
#
# The root crate idgen is a pgrx extension built for one PostgreSQL at a time: clippy checks it
# for 15 and 18, each with and without the pg_test feature (the #[pg_test]s). The other crates
# (idgen-core, idgen-client, idgen-sim, idgen-cluster-tests) need no PostgreSQL to build.
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"
cd "$ROOT" || exit 1

FAILED=()

# Runs check $1 (a name) as the command $2...; a failure is noted, and the next check runs.
check() {
    local name=$1
    shift
    say "$name"
    if "$@"; then return 0; fi
    FAILED+=("$name")
}

# Clippy over the root crate, the extension, for the features $1.
clippy_extension() {
    cargo clippy --locked -p idgen --all-targets --no-default-features --features "$1" -- -D warnings
}

# Clippy over every other crate of the workspace.
clippy_others() {
    cargo clippy --locked -p idgen-core -p idgen-client -p idgen-client-python -p idgen-sim -p idgen-cluster-tests --all-targets -- -D warnings
}

main() {
    provision_lint
    check rustfmt cargo fmt --all --check
    check "clippy (idgen-core, idgen-client, idgen-client-python, idgen-sim, idgen-cluster-tests)" clippy_others
    local features
    for features in pg15 "pg15 pg_test" pg18 "pg18 pg_test"; do
        check "clippy (idgen, $features)" clippy_extension "$features"
    done
    check shellcheck shellcheck -x scripts/*.sh .ci/run
    if [ ${#FAILED[@]} -gt 0 ]; then
        echo "lint: ${#FAILED[@]} check(s) failed:"
        printf '  %s\n' "${FAILED[@]}"
        exit 1
    fi
    echo "lint: rustfmt, clippy and shellcheck clean"
}

main "$@"
