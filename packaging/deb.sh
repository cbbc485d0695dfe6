#!/bin/sh
# Build a Debian package from the tree: packaging/deb.sh [BUILD_DIR]
#
# `make install DESTDIR=<staging> PREFIX=/usr` into a staging root, the
# control file from packaging/control.in (version from src/usmc.h, the
# architecture and shared-library dependencies of this machine), then
# dpkg-deb --root-owner-group.  Prints the path of the .deb.
set -eu
O=${1:-build}
top=$(cd "$(dirname "$0")/.." && pwd)
cd "$top"
version=$(sed -n 's/^#define USMC_VERSION_STR[[:space:]]*"\(.*\)"/\1/p' src/usmc.h)
arch=$(dpkg --print-architecture)
stage=$(mktemp -d "${TMPDIR:-/tmp}/usmc-deb.XXXXXX")
chmod 0755 "$stage"
trap 'rm -rf "$stage"' EXIT
make -s O="$O" install DESTDIR="$stage" PREFIX=/usr >/dev/null
# Debian policy: man pages and the changelog compressed.
gzip -9n "$stage/usr/share/man/man1/usmc.1" "$stage/usr/share/man/man7/usmc.7"
mkdir -p "$stage/DEBIAN"
# The libc version the binaries need (dpkg-shlibdeps would need debian/).
glibc=$(dpkg-query -W -f='${Version}' libc6 2>/dev/null | sed 's/-.*//')
size=$(du -sk "$stage/usr" | cut -f1)
sed -e "s/@VERSION@/$version/" -e "s/@ARCH@/$arch/" -e "s/@GLIBC@/${glibc:-2.36}/" \
    -e "s/@SIZE@/$size/" packaging/control.in > "$stage/DEBIAN/control"
out="$O/usmc_${version}_${arch}.deb"
dpkg-deb --root-owner-group -Zxz --build "$stage" "$out" >/dev/null
echo "$out"
