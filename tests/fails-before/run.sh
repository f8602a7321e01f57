#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/fails-before/run.sh [--kernel VERSION] [ITEM...] - issue 21: the
# suite test of each ITEM must fail on the old logic and pass on today's.
# Both modules are fault-injection builds (KNEM_FAULT_INJECT=1: the tests
# lower bounds, add delays and read records through test-only module
# parameters); the old one is built from a copy of the tree in which each
# ITEM's recipe below puts the old logic back (the work tree is not
# touched).  One VM boot runs every ITEM's test on the old module, one on
# today's.
#
# Items (default: 6 7):
#   6  pin_count_refused_before_overflow: no reservation of unchecked pins
#      before pinning (knem_pins_reserve() takes whatever it is asked), as
#      before commit 897a72c, so concurrent pinners pass the bound before
#      any of them checks.
#   7  no_long_scans_under_table_mutex: a context's release scans every
#      slot up to its last region in one hold of the table mutex
#      (SCAN_PER_HOLD = usize::MAX); rebuilds the Rust core from the copy.
# Item 7's other half, the per-context counts, is shown on the host by
# counts-host.sh here.  Item 1 (dma_finish_async_abandoned_batch) has its
# own script, which needs the debug kernel's KASAN:
# tests/debug-kernel/uaf-demo.sh.
#
# --kernel VERSION: an installed kernel as tests/vm/run takes it (default
# 6.1).  Exits 0 when every test failed on the old module and passed on
# today's.  Needs make tests-bin and the Rust core object (make
# core-object).  Logs and builds: build/fails-before/KVER/.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
prog=fails-before
kernel=6.1
if [ "${1:-}" = --kernel ]; then
	kernel=$2
	shift 2
fi
items=("$@")
[ ${#items[@]} -gt 0 ] || items=(6 7)

# recipe_N DIR: puts item N's old logic into the copy at DIR; test_N: its
# suite test; core_N=1 when the recipe changes the Rust core.
recipe_6() {
	perl -0pi -e 's/take = min\(nr, knem_pins_unchecked_max\(\) - cur\);/take = nr;/' \
		"$1/c-shim/knem_pin.c"
	grep -q 'take = nr;' "$1/c-shim/knem_pin.c"
}
test_6=pin_count_refused_before_overflow
core_6=0

recipe_7() {
	perl -pi -e 's/^pub const SCAN_PER_HOLD: usize = 1024;/pub const SCAN_PER_HOLD: usize = usize::MAX;/' \
		"$1/rust-core/src/state/table.rs"
	grep -q 'SCAN_PER_HOLD: usize = usize::MAX;' "$1/rust-core/src/state/table.rs"
}
test_7=no_long_scans_under_table_mutex
core_7=1

kver=$("$top/tests/vm/run" --kernel "$kernel" --resolve-kernel) || exit 2
suite=$top/target/x86_64-unknown-linux-gnu/release/knem-tests
[ -x "$suite" ] || { echo "$prog: no $suite (make tests-bin)" >&2; exit 2; }
core=$top/c-shim/knem_core.prebuilt
[ -e "$core" ] || core=$top/build/knem_core.o
[ -e "$core" ] || { echo "$prog: no Rust core object (make core-object)" >&2; exit 2; }
out=$top/build/fails-before/$kver
rm -rf "$out"
mkdir -p "$out/old"

# The copy: every file git knows or would add, as it is now.
(cd "$top" && git ls-files -z --cached --others --exclude-standard |
	tar --null -T - -cf -) | tar -xf - -C "$out/old" ||
	{ echo "$prog: could not copy the tree" >&2; exit 2; }
tests=()
old_core=$core
for i in "${items[@]}"; do
	declare -F "recipe_$i" > /dev/null || { echo "$prog: no recipe for item $i" >&2; exit 2; }
	"recipe_$i" "$out/old" ||
		{ echo "$prog: could not recreate item $i's old logic (the code changed?)" >&2; exit 2; }
	t=test_$i
	tests+=("${!t}")
	c=core_$i
	[ "${!c}" = 1 ] && old_core=$out/old-core.o
done
if [ "$old_core" != "$core" ]; then
	# Its own target directory, next to the tree's, so later runs are
	# incremental and the tree's own build is not disturbed.
	KNEM_CORE_TARGET_DIR=$top/target/kobj-fails-before \
		"$out/old/rust-core/build-kobj.sh" "$old_core" > "$out/old-core.log" 2>&1 ||
		{ tail -n 20 "$out/old-core.log"; exit 2; }
fi
for v in old fixed; do
	src=$top obj=$core
	[ $v = old ] && src=$out/old obj=$old_core
	KNEM_FAULT_INJECT=1 KNEM_CORE_OBJ=$obj "$src/c-shim/build-module.sh" "$kver" "$out/$v-build" \
		> "$out/$v-build.log" 2>&1 || { tail -n 20 "$out/$v-build.log"; exit 2; }
done

declare -A status
for v in old fixed; do
	"$top/tests/vm/run" --kernel "$kernel" --module "$out/$v-build/knem.ko" --timeout 600 \
		--add "$suite" -- /opt/knem-tests --no-skip "${tests[@]}" > "$out/$v.log" 2>&1
	status[$v]=$?
done
good=1
for v in old fixed; do
	echo "$prog: $v logic on $kver (status ${status[$v]}):"
	for t in "${tests[@]}"; do
		grep -aE "^(ok|FAIL|skip) $t\b|^$t: " "$out/$v.log" | sed 's/^/    /'
		want=ok
		[ $v = old ] && want=FAIL
		grep -aqE "^$want $t\b" "$out/$v.log" || good=
	done
done
if [ -n "$good" ]; then
	echo "$prog: ${tests[*]}: fail on the old logic, pass on today's, on $kver"
	exit 0
fi
echo "$prog: not every test failed on the old logic and passed on today's, on $kver (logs: $out)"
exit 1
