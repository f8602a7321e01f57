#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/debug-kernel/uaf-demo.sh [--kernel VERSION] - issue 21, item 1:
# the suite's dma_finish_async_abandoned_batch must fail on the old
# knem_shim_dma_finish_async and pass on the fixed one.  Both are built as
# fault-injection builds (KNEM_FAULT_INJECT=1: the test sets
# fault_dma_finish_delay_ms); the old one from a temporary copy of the
# tree in which the function reads b->dead again after the delay, past the
# unlock, as before commit 1a230a2 (the work tree is not touched).
#
# Default kernel: the debug lab kernel (build.sh here), where KASAN reports
# the old code's read of the freed batch.  With --kernel VERSION (a stock
# Debian kernel, no KASAN) the freed batch reads as poison and nothing is
# reported: the script then says the old code was not caught.
#
# Exits 0 when the old build failed with a KASAN use-after-free report and
# the fixed one passed the test (--no-skip --fault-build: a skip, a module
# that is not a fault build or a renamed test fails it).  Needs make
# tests-bin and the Rust core object.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
prog=uaf-demo
kernel=
[ "${1:-}" = --kernel ] && kernel=$2

if [ -n "$kernel" ]; then
	kver=$("$top/tests/vm/run" --kernel "$kernel" --resolve-kernel) || exit 2
	kdir=/lib/modules/$kver/build
	kopts=(--kernel "$kernel")
else
	"$here/build.sh" || exit 2
	kver=$("$here/build.sh" --print) || exit 2
	cache=$("$here/build.sh" --dir)
	kdir=$cache/obj
	kopts=(--kernel-image "$cache/bzImage")
fi
suite=$top/target/x86_64-unknown-linux-gnu/release/knem-tests
[ -x "$suite" ] || { echo "$prog: no $suite (make tests-bin)" >&2; exit 2; }
out=$top/build/uaf-demo/$kver
rm -rf "$out"
mkdir -p "$out/old"

# The old code, in a copy: after the delay, b->dead is read again.
cp -a "$top/c-shim" "$top/include" "$top/Cargo.toml" "$out/old/"
perl -0pi -e 's/knem_dma_test_delay\(\);\n\tif \(dead\)\n/knem_dma_test_delay();\n\tif (b->dead)\n/' \
	"$out/old/c-shim/knem_dma.c"
grep -q 'if (b->dead)$' "$out/old/c-shim/knem_dma.c" ||
	{ echo "$prog: could not recreate the old code (knem_dma.c changed?)" >&2; exit 2; }
core=$top/c-shim/knem_core.prebuilt
[ -e "$core" ] || core=$top/build/knem_core.o
[ -e "$core" ] || { echo "$prog: no Rust core object (make core-object)" >&2; exit 2; }
# On the debug kernel, the Rust core built for its KASAN, as everywhere
# there (tests/debug-kernel/README.md).
if [ "$kdir" = "${cache:-}/obj" ]; then
	core=$out/knem_core-kasan.o
	"$top/rust-core/build-kobj.sh" --kasan "$core" \
		> "$out/core.log" 2>&1 || { tail -n 20 "$out/core.log"; exit 2; }
fi
for v in old fixed; do
	src=$top
	[ $v = old ] && src=$out/old
	KDIR=$kdir KNEM_FAULT_INJECT=1 KNEM_CORE_OBJ=$core "$src/c-shim/build-module.sh" "$kver" "$out/$v-build" \
		> "$out/$v-build.log" 2>&1 || { tail -n 20 "$out/$v-build.log"; exit 2; }
done
dma_ko=$(KDIR=$kdir "$top/tests/dma-provider/build.sh" "$kver" "$out/dma-provider" 2> "$out/dma-build.log") ||
	{ tail -n 20 "$out/dma-build.log"; exit 2; }

run() {
	"$top/tests/vm/run" "${kopts[@]}" --module "$out/$1-build/knem.ko" --timeout 900 \
		--add "$dma_ko" --add "$suite" -- \
		sh -c 'insmod /opt/knem_dma_test.ko &&
			/opt/knem-tests --no-skip --fault-build --timeout 600 dma_finish_async_abandoned_batch' \
		> "$out/$1.log" 2>&1
}
run old
old_status=$?
run fixed
fixed_status=$?
for v in old fixed; do
	echo "$prog: $v code:"
	grep -aE '^(ok|FAIL|skip) |dma_finish_async_abandoned_batch:|BUG: KASAN|KASAN: |^tests/vm/run: (FAIL|command)' \
		"$out/$v.log" | head -n 8 | sed 's/^/    /'
done
caught=
[ $old_status -ne 0 ] && grep -aqE 'BUG: KASAN: (slab-)?use-after-free' "$out/old.log" && caught=1
# The fixed run passes the test itself, not a run where it did not run.
fixed_ok=
[ $fixed_status -eq 0 ] && grep -aq '^ok dma_finish_async_abandoned_batch$' "$out/fixed.log" && fixed_ok=1
if [ -n "$caught" ] && [ -n "$fixed_ok" ]; then
	echo "$prog: the old code fails (KASAN use-after-free), the fixed code passes, on $kver"
	exit 0
fi
echo "$prog: old code $([ -n "$caught" ] && echo caught || echo 'NOT caught') (status $old_status), fixed code $([ -n "$fixed_ok" ] && echo passed || echo 'did NOT pass') (status $fixed_status), on $kver (logs: $out)"
exit 1
