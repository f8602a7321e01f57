#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/abi/core-marker.sh CORE.o [KVER] - the Rust core object carries the
# SHA-256 of the c-shim/knem_core.h it was built from, and the kernel build
# refuses it next to any other header: a stale prebuilt core would call the
# shim with other arguments than the shim expects, and corrupt memory
# instead of failing.  Builds only the knem_core.o target (a few seconds).
# KVER: an installed kernel with headers (default: the newest).
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
core=${1:?usage: core-marker.sh CORE.o [KVER]}
kver=${2:-$(ls /lib/modules | sort -V | while read -r v; do
	[ -e "/lib/modules/$v/build/Makefile" ] && echo "$v"; done | tail -n 1)}
[ -n "$kver" ] || { echo "core-marker: no kernel headers installed" >&2; exit 1; }
out=$(mktemp -d "${TMPDIR:-/tmp}/knem-core-marker.XXXXXX")
trap 'rm -rf "$out"' EXIT
fail=0

sum=$(sha256sum "$top/c-shim/knem_core.h" | cut -d' ' -f1)
if grep -qaF "knem_core.h sha256 $sum" "$core"; then
	echo "core-marker: ok   $core carries knem_core.h sha256 $sum"
else
	echo "core-marker: FAIL $core does not carry knem_core.h sha256 $sum"
	fail=1
fi

build() {
	make -C "/lib/modules/$kver/build" M="$out" knem_core.o > "$out/build.log" 2>&1
}
cp -p "$top/c-shim/Kbuild" "$top/c-shim/Makefile" "$top"/c-shim/*.h "$top/include/knem_io.h" "$out/"
cp "$core" "$out/knem_core.prebuilt"
if build; then
	echo "core-marker: ok   $kver: the core is accepted next to its own header"
else
	echo "core-marker: FAIL $kver: the core is refused next to its own header:"
	tail -n 5 "$out/build.log"
	fail=1
fi
# Any change to the header, a comment included, must refuse the object.
echo "/* changed */" >> "$out/knem_core.h"
rm -f "$out/knem_core.o"
if build; then
	echo "core-marker: FAIL $kver: the core is accepted next to another knem_core.h"
	fail=1
elif line=$(grep -F 'built from another knem_core.h' "$out/build.log"); then
	echo "core-marker: ok   refused: ${line#"$out/"}"
else
	echo "core-marker: FAIL $kver: the build failed, but not with the header check:"
	tail -n 5 "$out/build.log"
	fail=1
fi
exit $fail
