#!/bin/bash
# run.sh [KERNEL...] - build the core object, knem.ko and core_smoke, and run
# core_smoke in the VM on each KERNEL (prefixes of installed kernels;
# default: 6.1 6.12).  Everything is built under build/core-check/, so the
# tree's own build outputs are left alone.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
out=$top/build/core-check
mkdir -p "$out"

kernels=("$@")
[ ${#kernels[@]} -gt 0 ] || kernels=(6.1 6.12)

"$top/rust-core/build-kobj.sh" "$out/knem_core.o"
"$top/rust-core/check-kobj.sh" "$out/knem_core.o"
${CC:-gcc} -static -O1 -Wall -Werror -I"$top/include" -o "$out/core_smoke" "$here/core_smoke.c"

status=0
for k in "${kernels[@]}"; do
	kver=$(cd /boot && ls vmlinuz-"$k"[.-]* 2>/dev/null | grep -v -- '-rt-' | sed 's/^vmlinuz-//' | sort -V | tail -1)
	[ -n "$kver" ] || { echo "run.sh: no installed kernel $k" >&2; status=1; continue; }
	KNEM_CORE_OBJ=$out/knem_core.o "$top/c-shim/build-module.sh" "$kver" "$out/$kver" >"$out/$kver.build.log" 2>&1 ||
		{ echo "run.sh: module build for $kver failed, see $out/$kver.build.log" >&2; status=1; continue; }
	"$top/tests/vm/run" --kernel "$k" --module "$out/$kver/knem.ko" --add "$out/core_smoke" -- core_smoke || status=1
done
exit $status
