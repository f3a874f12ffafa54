#!/usr/bin/env bash
# The Python package idgen-client (python/): its wheel, built with maturin, and a fresh virtual
# environment it is installed into the way a service installs it, from the wheel, with no Rust on
# the PATH.
#
#   bash scripts/python.sh wheel      # builds the wheel into target/python/wheels, prints its path
#   bash scripts/python.sh venv       # the wheel, then a fresh target/python/venv with it and
#                                     # python/tests/requirements.txt; prints the venv's path
#
# Sourced (by test.sh and bench_python.sh), it defines build_wheel and fresh_venv.
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"

PYTHON_DIR=$WORK_DIR/python
# maturin builds the wheel (it needs cargo, which building idgen needs anyway).
MATURIN_SPEC='maturin>=1.9,<2'

# Builds the wheel (release); sets WHEEL to its path.
build_wheel() {
    ensure_packages python3-venv
    local build=$PYTHON_DIR/build
    [ -x "$build/bin/maturin" ] || {
        python3 -m venv "$build"
        "$build/bin/pip" install --quiet --disable-pip-version-check "$MATURIN_SPEC"
    }
    rm -rf "$PYTHON_DIR/wheels"
    say "building the wheel of idgen-client (maturin, release)"
    (cd "$ROOT/python" && "$build/bin/maturin" build --release --quiet --out "$PYTHON_DIR/wheels") >&2
    WHEEL=$(compgen -G "$PYTHON_DIR/wheels/idgen_client-*.whl" | head -n 1)
    [ -n "$WHEEL" ] || die "maturin built no wheel into $PYTHON_DIR/wheels"
}

# A fresh virtual environment with the wheel and the tests' requirements; sets VENV. pip runs with
# the environment's own bin/ as the whole PATH, so no cargo or rustc is found, and binaries only: a
# package that needed Rust (or any build) to install would fail here.
fresh_venv() {
    build_wheel
    VENV=$PYTHON_DIR/venv
    python3 -m venv --clear "$VENV"
    say "installing $(basename "$WHEEL") into a fresh virtual environment ($VENV), without Rust"
    env -i HOME="$HOME" PATH="$VENV/bin" "$VENV/bin/pip" install --quiet --disable-pip-version-check \
        --only-binary :all: "$WHEEL" -r "$ROOT/python/tests/requirements.txt"
    # Imported from elsewhere than the source tree, which has a package of the same name.
    (cd / && env -i PATH="$VENV/bin" "$VENV/bin/python" -c 'import idgen_client; print("idgen_client", idgen_client.__version__)') >&2
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case ${1:-} in
    wheel) build_wheel; echo "${WHEEL#"$ROOT"/}" ;;
    venv) fresh_venv; echo "$VENV" ;;
    -h | --help) header_help "$0"; exit 0 ;;
    *) die "usage: bash scripts/python.sh wheel|venv" ;;
    esac
fi
