#!/usr/bin/env bash
# Builds idgen's packages (release) from this checkout into target/packages/, for servers that
# have no Rust toolchain:
#
#   PostgreSQL 15  postgresql-15-idgen_<version>-<revision>_<arch>.deb, a Debian package that depends on
#                  postgresql-15, laid out as Debian's own (md5sums, copyright and changelogs under
#                  /usr/share/doc, a stripped library) and checked with lintian (no errors, no warnings);
#                  on a Debian 12 server: sudo apt install ./postgresql-15-idgen_<version>-<revision>_<arch>.deb
#   PostgreSQL 18  idgen-<version>-pg18-<arch>.tar.gz, laid out by pg_config's directories
#                  (pkglibdir/idgen.so, sharedir/extension/...); with that server's pg_config first on the PATH:
#                  for d in pkglibdir sharedir; do sudo tar -xzf idgen-<version>-pg18-<arch>.tar.gz -C "$(pg_config --$d)" --strip-components=1 "$d"; done
#
# Each holds the library (stripped), the control file, the install script of this version and every upgrade
# script (sql/idgen--*--*.sql), nothing else: the files are checked before a package is written.
# Then `CREATE EXTENSION idgen;` (or, over an older version, `ALTER EXTENSION idgen UPDATE;`) in
# each database. Installs what building needs first (as bash scripts/provision.sh pgrx does).
#
#   bash scripts/package.sh [15|18|both]    # default both (18 only if scripts/provision.sh installed it)
#
# Sourced (by clusters.sh), it defines build_package, install_package and package_file, and does
# nothing by itself.
source "$(dirname "${BASH_SOURCE[0]}")/provision.sh"

PACKAGE_DIR=$ROOT/target/packages
# The [package] version of the extension's Cargo.toml: the first version line.
PACKAGE_VERSION=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n 1)
PACKAGE_ARCH=$(dpkg --print-architecture)
# The Debian revision: raise it to rebuild a version's package (apt skips a package whose version it has).
DEB_REVISION=${IDGEN_DEB_REVISION:-1}
DEB_VERSION=$PACKAGE_VERSION-$DEB_REVISION
DEB_MAINTAINER=${IDGEN_DEB_MAINTAINER:-idgen developers <idgen@example.org>}
# The project's home page, for the control file's Homepage field (none when empty).
DEB_HOMEPAGE=${IDGEN_DEB_HOMEPAGE:-}

# The package for PostgreSQL $1 (15 or 18), built or not.
package_file() {
    case $1 in
    15) echo "$PACKAGE_DIR/postgresql-15-idgen_${DEB_VERSION}_${PACKAGE_ARCH}.deb" ;;
    18) echo "$PACKAGE_DIR/idgen-${PACKAGE_VERSION}-pg18-${PACKAGE_ARCH}.tar.gz" ;;
    *) die "package_file: PostgreSQL 15 or 18, not $1" ;;
    esac
}

# What a package's extension directory must hold, one name per line, sorted: the control file,
# this version's install script and every upgrade script of sql/.
expected_extension_files() {
    {
        echo idgen.control
        echo "idgen--$PACKAGE_VERSION.sql"
        (cd "$ROOT/sql" && ls idgen--*--*.sql)
    } | LC_ALL=C sort
}

# Checks that $1 (what cargo pgrx package wrote) holds exactly the library in $2 and the
# extension files in $3, paths relative to $1.
check_package_files() {
    local stage=$1 lib=$2 ext=$3 found expected
    found=$(cd "$stage" && find . -type f | sed 's|^\./||' | LC_ALL=C sort)
    expected=$({ echo "${lib#/}/idgen.so"; expected_extension_files | sed "s|^|${ext#/}/|"; } | LC_ALL=C sort)
    if [ "$found" != "$expected" ]; then
        diff <(echo "$expected") <(echo "$found") >&2 || true
        die "the package for PostgreSQL $PG_MAJOR holds other files than the library, the control file, the install script of $PACKAGE_VERSION and every upgrade script (above: < missing, > unexpected)"
    fi
}

# Checks that the library $1 needs nothing a server without Rust lacks: the C library and
# libgcc_s (whose packages the Debian package depends on), nothing of a toolchain.
check_library_needs() {
    local needed
    needed=$(objdump -p "$1" | awk '$1 == "NEEDED" { print $2 }' | grep -vxE 'libc\.so\.6|libgcc_s\.so\.1|libm\.so\.6|ld-linux-[a-z0-9-]+\.so\.[0-9]+' || true)
    [ -z "$needed" ] || die "the library needs $(echo "$needed" | tr '\n' ' ')beyond libc and libgcc_s: the package would not run on a server without them"
}

# The oldest glibc the library $1 needs (its highest GLIBC_ symbol version), for the Depends line.
glibc_needed() {
    objdump -T "$1" | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' | sort -uV | tail -n 1
}

# The Debian changelog of package $1: an entry for each version CHANGELOG.md dates
# ("## [0.8.0] - 2026-12-04"), newest first, pointing to the project's changelog; the package is
# the same whenever it is built. Versions of one day are an hour apart, the newest at noon (each
# entry must be later than the one before it).
debian_changelog() {
    local version day first=1 previous_day="" hours=0
    grep -q "^## \[$PACKAGE_VERSION\] - " "$ROOT/CHANGELOG.md" ||
        die "CHANGELOG.md has no heading for $PACKAGE_VERSION (## [$PACKAGE_VERSION] - YYYY-MM-DD)"
    sed -n 's/^## \[\([0-9][0-9.]*\)\] - \([0-9-]*\)$/\1 \2/p' "$ROOT/CHANGELOG.md" | while read -r version day; do
        [ -n "$first" ] || echo
        first=
        if [ "$day" = "$previous_day" ]; then hours=$((hours + 1)); else hours=0; fi
        previous_day=$day
        if [ "$version" = "$PACKAGE_VERSION" ]; then version=$DEB_VERSION; else version=$version-1; fi
        printf '%s (%s) unstable; urgency=medium\n\n' "$1" "$version"
        printf '  * idgen %s for PostgreSQL 15 (what changed: changelog.gz).\n\n' "${version%-*}"
        printf ' -- %s  %s\n' "$DEB_MAINTAINER" "$(LC_ALL=C date -u -d "$day 12:00:00 UTC - $hours hours" -R)"
    done
}

# /usr/share/doc/$2 under root $1: the copyright (machine-readable), the Debian changelog and the
# project's own (CHANGELOG.md), both compressed as Debian does (gzip -9n).
write_deb_docs() {
    local doc=$1/usr/share/doc/$2
    mkdir -p "$doc"
    cat >"$doc/copyright" <<EOF
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: idgen
Upstream-Contact: $DEB_MAINTAINER

Files: *
Copyright: 2025-2026 idgen developers
License: MIT

License: MIT
 Permission is hereby granted, free of charge, to any person obtaining a copy
 of this software and associated documentation files (the "Software"), to deal
 in the Software without restriction, including without limitation the rights
 to use, copy, modify, merge, publish, distribute, sublicense, and/or sell
 copies of the Software, and to permit persons to whom the Software is
 furnished to do so, subject to the following conditions:
 .
 The above copyright notice and this permission notice shall be included in all
 copies or substantial portions of the Software.
 .
 THE SOFTWARE IS PROVIDED "AS IS", WITHOUT WARRANTY OF ANY KIND, EXPRESS OR
 IMPLIED, INCLUDING BUT NOT LIMITED TO THE WARRANTIES OF MERCHANTABILITY,
 FITNESS FOR A PARTICULAR PURPOSE AND NONINFRINGEMENT. IN NO EVENT SHALL THE
 AUTHORS OR COPYRIGHT HOLDERS BE LIABLE FOR ANY CLAIM, DAMAGES OR OTHER
 LIABILITY, WHETHER IN AN ACTION OF CONTRACT, TORT OR OTHERWISE, ARISING FROM,
 OUT OF OR IN CONNECTION WITH THE SOFTWARE OR THE USE OR OTHER DEALINGS IN THE
 SOFTWARE.
EOF
    debian_changelog "$2" | gzip -9n >"$doc/changelog.Debian.gz"
    gzip -9n <"$ROOT/CHANGELOG.md" >"$doc/changelog.gz"
}

# The Debian package of the files under $1 (the library in $2): the docs, DEBIAN/control and
# DEBIAN/md5sums, then dpkg-deb; then lintian, which must find nothing to say.
write_deb() {
    local stage=$1 lib=$2 root size name=postgresql-15-idgen
    root=$(mktemp -d "$PACKAGE_DIR/deb.XXXXXX")
    cp -a "$stage/." "$root/"
    write_deb_docs "$root" "$name"
    mkdir -p "$root/DEBIAN"
    size=$(du -sk --exclude=DEBIAN "$root" | cut -f1)
    cat >"$root/DEBIAN/control" <<EOF
Package: $name
Version: $DEB_VERSION
Architecture: $PACKAGE_ARCH
Maintainer: $DEB_MAINTAINER
Depends: postgresql-15, libc6 (>= $(glibc_needed "$root$lib/idgen.so")), libgcc-s1
Section: database
Priority: optional
Installed-Size: $size${DEB_HOMEPAGE:+
Homepage: $DEB_HOMEPAGE}
Description: Snowflake IDs and a machine-id registry for PostgreSQL 15
 idgen mints 64-bit, time-ordered Snowflake IDs inside PostgreSQL
 (id bigint PRIMARY KEY DEFAULT idgen_next_id()) and keeps the registry of
 machine ids that services claim, so that IDs minted by the database and by
 services never collide. After installing, preload it (recommended: its
 registry writers then start with the server, and no other role's parallel
 queries can starve its writes): shared_preload_libraries = 'idgen' in
 postgresql.conf, then restart. Then CREATE EXTENSION idgen; in each database,
 as a superuser (over an older version: ALTER EXTENSION idgen UPDATE;).
EOF
    find "$root" -type d -exec chmod 755 {} +
    find "$root" -type f -exec chmod 644 {} +
    (cd "$root" && find usr -type f | LC_ALL=C sort | xargs md5sum) >"$root/DEBIAN/md5sums"
    dpkg-deb --root-owner-group -Zxz --build "$root" "$(package_file 15)" >/dev/null
    rm -rf "$root"
    check_lintian "$(package_file 15)"
}

# lintian on the Debian package $1: no error and no warning. It does not run as root: as the
# postgres user then (target/ is reachable by it, see reachable_dir in common.sh).
check_lintian() {
    local said
    said=$(if is_root; then runuser -u postgres -- lintian "$1"; else lintian "$1"; fi 2>&1) || true
    if echo "$said" | grep -qE '^[EW]: '; then
        echo "$said" >&2
        die "lintian found errors or warnings in $(basename "$1") (above)"
    fi
}

# The tarball of the files under $1 (library in $2, extension files in $3): pkglibdir/ and
# sharedir/extension/, as the one-line install above extracts them.
write_tarball() {
    local stage=$1 lib=$2 ext=$3 root
    root=$(mktemp -d "$PACKAGE_DIR/tar.XXXXXX")
    mkdir -p "$root/pkglibdir" "$root/sharedir/extension"
    install -m 755 "$stage$lib/idgen.so" "$root/pkglibdir/"
    install -m 644 "$stage$ext"/* "$root/sharedir/extension/"
    tar -czf "$(package_file 18)" --owner=0 --group=0 -C "$root" pkglibdir sharedir
    rm -rf "$root"
}

# Builds the package for PostgreSQL $1 (release), checks its files and writes it to package_file $1.
build_package() {
    use_pg "$1"
    local stage lib ext
    stage=$ROOT/target/package-stage/pg$PG_MAJOR
    lib=$("$PG_CONFIG" --pkglibdir)
    ext=$("$PG_CONFIG" --sharedir)/extension
    # strip (binutils) and, for the Debian package, lintian.
    ensure_packages binutils lintian
    say "building the idgen $PACKAGE_VERSION package for PostgreSQL $PG_MAJOR (release)"
    rm -rf "$stage"
    mkdir -p "$PACKAGE_DIR"
    (cd "$ROOT" && cargo pgrx package --pg-config "$PG_CONFIG" --no-default-features --features "pg$PG_MAJOR" \
        --out-dir "$stage" >&2)
    check_package_files "$stage" "$lib" "$ext"
    # A server needs no symbols beyond those it loads, nor the build notes: Debian ships debug symbols apart.
    strip --strip-unneeded --remove-section=.comment --remove-section=.note "$stage$lib/idgen.so"
    check_library_needs "$stage$lib/idgen.so"
    rm -f "$(package_file "$PG_MAJOR")"
    if [ "$PG_MAJOR" = 15 ]; then write_deb "$stage" "$lib"; else write_tarball "$stage" "$lib" "$ext"; fi
    say "wrote $(package_file "$PG_MAJOR")"
}

# Installs the package built for PostgreSQL $1 the way the header says a DBA does: apt for the
# Debian package (again over the same version, or an older one, as a developer rebuilds it), the
# tarball into that server's pg_config directories (the wheel's PostgreSQL 18 belongs to whoever
# installed it: no sudo there).
install_package() {
    use_pg "$1"
    local file d
    file=$(package_file "$PG_MAJOR")
    [ -f "$file" ] || die "no package $file (bash scripts/package.sh $PG_MAJOR builds it)"
    say "installing $(basename "$file")"
    if [ "$PG_MAJOR" = 15 ]; then
        # apt says on stderr that it delays configuring without apt-utils: nothing to configure here.
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --reinstall --allow-downgrades "$file" \
            2> >(grep -v '^debconf: delaying package configuration' >&2) >/dev/null
    else
        for d in pkglibdir sharedir; do tar -xzf "$file" -C "$("$PG_CONFIG" --$d)" --strip-components=1 "$d"; done
    fi
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
    case ${1:-both} in -h | --help) header_help "$0"; exit 0 ;; esac
    provision_pgrx
    case ${1:-both} in
    15 | 18) build_package "$1" ;;
    both)
        build_package 15
        if [ -n "$(find_pg18_config)" ]; then build_package 18
        else say "PostgreSQL 18 is not installed (bash scripts/provision.sh pgrx installs it): no package for it"; fi
        ;;
    *) die "usage: bash scripts/package.sh [15|18|both]" ;;
    esac
fi
