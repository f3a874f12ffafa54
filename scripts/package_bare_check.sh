#!/usr/bin/env bash
# Installs the PostgreSQL 15 package on a bare Debian 12 server and uses it: a debootstrap minbase
# chroot with no Rust and no build tools, where `apt install ./postgresql-15-idgen_*.deb` pulls in
# postgresql-15 and nothing else of ours; then a cluster, CREATE EXTENSION, a table keyed by
# idgen_next_id(), a service's claim, heartbeat and release, and ALTER EXTENSION UPDATE of a
# database created at 0.6.0 (its install script copied in from tests/upgrade, as a server that ran
# 0.6.0 before the package has it). What the test command cannot show: it runs where Rust is.
# As root (debootstrap and chroot); about five minutes; the chroot's cluster listens on
# 127.0.0.1:28895 (IDGEN_BARE_PORT) while it runs.
#
#   bash scripts/package_bare_check.sh [PACKAGE]   # default: the package scripts/package.sh 15 built
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

is_root || die "run as root: debootstrap and chroot need it"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -n 1)
package=${1:-$ROOT/target/packages/postgresql-15-idgen_${version}-${IDGEN_DEB_REVISION:-1}_$(dpkg --print-architecture).deb}
[ -f "$package" ] || die "no package $package (bash scripts/package.sh 15 builds it)"
port=${IDGEN_BARE_PORT:-28895}
root=$WORK_DIR/bare-server
mirror=$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null)
[ -n "$mirror" ] || die "no Debian mirror in /etc/apt/sources.list.d/debian.sources"
command -v debootstrap >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null

unmount() {
    local p
    for p in /proc/[0-9]*; do [ "$(readlink "$p/root" 2>/dev/null)" = "$root" ] && kill "${p#/proc/}" 2>/dev/null; done
    umount -l "$root/proc" 2>/dev/null || true
}
trap unmount EXIT
unmount
rm -rf "$root"
mkdir -p "$root"
say "a bare Debian 12 (debootstrap minbase) in $root"
debootstrap --variant=minbase bookworm "$root" "$mirror" >"$WORK_DIR/bare-server.log" 2>&1 ||
    die "debootstrap failed: $WORK_DIR/bare-server.log"
cp /etc/apt/sources.list.d/debian.sources "$root/etc/apt/sources.list.d/" && rm -f "$root/etc/apt/sources.list"
cp /etc/resolv.conf "$root/etc/"
# No service starts inside the chroot (Debian's postgresql-15 would start a cluster on 5432).
printf '#!/bin/sh\nexit 101\n' >"$root/usr/sbin/policy-rc.d" && chmod 755 "$root/usr/sbin/policy-rc.d"
mount -t proc proc "$root/proc"
cp "$package" "$root/tmp/"
cp "$ROOT/tests/upgrade/idgen--0.6.0.sql" "$root/tmp/"
# A service node's calls, keeping the version its claim returned (psql runs meta-commands from a file).
cat >"$root/tmp/node.sql" <<'SQL'
SELECT machine_id, version FROM idgen_claim('orders', '10.0.0.5', 8080) \gset
SELECT idgen_heartbeat('orders', :machine_id, '10.0.0.5', 8080, :version, clock_timestamp()) > now() AS renewed;
SELECT idgen_release('orders', :machine_id, '10.0.0.5', 8080, :version, clock_timestamp()) AS released;
SQL

say "apt install ./$(basename "$package") on it"
chroot "$root" env DEBIAN_FRONTEND=noninteractive bash -euo pipefail -c "
    apt-get update -qq
    apt-get install -y -qq /tmp/$(basename "$package") >/dev/null
    ! command -v cargo rustc gcc cc >/dev/null || { echo 'error: the bare server has a toolchain' >&2; exit 1; }
    dpkg -s postgresql-15-idgen | grep -E '^(Version|Depends):'
    install -m 644 /tmp/idgen--0.6.0.sql /usr/share/postgresql/15/extension/
"

say "a cluster on 127.0.0.1:$port, CREATE EXTENSION, IDs, a service node, an update"
chroot "$root" runuser -u postgres -- bash -euo pipefail -c "
    bin=/usr/lib/postgresql/15/bin
    \$bin/initdb -D /tmp/pg -U postgres --auth=trust >/dev/null
    \$bin/pg_ctl -D /tmp/pg -l /tmp/pg.log -o '-p $port -k /tmp -c listen_addresses=127.0.0.1' -w start >/dev/null
    psql() { command psql -h /tmp -p $port -X -v ON_ERROR_STOP=1 -qAt \"\$@\"; }
    psql -d postgres -c 'CREATE DATABASE shop'
    psql -d shop -c 'CREATE EXTENSION idgen'
    psql -d shop -c 'CREATE TABLE orders (id bigint PRIMARY KEY DEFAULT idgen_next_id(), n int)' \
                 -c 'INSERT INTO orders (n) SELECT generate_series(1, 10000)'
    echo \"IDs: \$(psql -d shop -c 'SELECT count(DISTINCT id) FROM orders') distinct of 10000\"
    echo \"a service node: renewed and released: \$(psql -d shop -f /tmp/node.sql | tr '\\n' ' ')\"
    psql -d postgres -c 'CREATE DATABASE old'
    psql -d old -c \"CREATE EXTENSION idgen VERSION '0.6.0'\" -c \"SELECT idgen_claim('orders', '10.0.0.5', 8080)\" \\
               -c 'ALTER EXTENSION idgen UPDATE'
    echo \"updated from 0.6.0 to \$(psql -d old -c \"SELECT extversion FROM pg_extension WHERE extname = 'idgen'\"), \$(psql -d old -c 'SELECT count(*) FROM system_nodes') row kept\"
    \$bin/pg_ctl -D /tmp/pg -w stop >/dev/null
"
say "the package installs and works on a bare Debian 12 server"
