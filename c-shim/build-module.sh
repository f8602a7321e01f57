#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# build-module.sh KVER [OUTDIR] - build knem.ko for kernel KVER.
#
# Builds in OUTDIR (default: build/KVER at the top of the tree), a copy of
# c-shim/ plus include/knem_io.h, so builds for several kernels never
# clobber each other.  The result is OUTDIR/knem.ko.
#
# The Rust core object is taken from $KNEM_CORE_OBJ if set, else from
# c-shim/knem_core.prebuilt; if neither exists, rust-core/build-kobj.sh is
# run to produce the latter.  KDIR overrides /lib/modules/KVER/build.
set -euo pipefail

die() { echo "build-module.sh: $*" >&2; exit 1; }

[ $# -ge 1 ] && [ $# -le 2 ] || die "usage: build-module.sh KVER [OUTDIR]"
kver=$1
shim=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(dirname "$shim")
out=${2:-$top/build/$kver}
kdir=${KDIR:-/lib/modules/$kver/build}

[ -d "$kdir" ] || die "no kernel build tree at $kdir (install linux-headers-$kver)"

core=${KNEM_CORE_OBJ:-$shim/knem_core.prebuilt}
if [ ! -e "$core" ]; then
	[ -z "${KNEM_CORE_OBJ:-}" ] && [ -x "$top/rust-core/build-kobj.sh" ] ||
		die "no Rust core object at $core (run rust-core/build-kobj.sh)"
	"$top/rust-core/build-kobj.sh" "$core"
fi

mkdir -p "$out"
out=$(cd "$out" && pwd)
# cp -p keeps timestamps, so unchanged files do not trigger a rebuild.
cp -p "$shim"/Kbuild "$shim"/Makefile "$shim"/*.c "$shim"/*.h "$shim"/*.S \
	"$top/include/knem_io.h" "$out"/
cp -p "$core" "$out/knem_core.prebuilt"

# The copy has no Cargo.toml next to it: pass the package version along.
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$top/Cargo.toml")
make -C "$kdir" M="$out" KNEM_VERSION="${version:-unknown}" modules
echo "build-module.sh: $out/knem.ko"
