#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/fails-before/run.sh [--kernel VERSION | --release NAME] [ITEM...] -
# issue 21: the suite test of each ITEM must fail on the old logic and pass
# on today's.  Both modules are fault-injection builds (KNEM_FAULT_INJECT=1:
# the tests lower bounds, add delays and read records through test-only
# module parameters); the old one is built from a copy of the tree in which
# each ITEM's recipe below puts the old logic back (the work tree is not
# touched).  One VM boot runs every ITEM's test on the old module, one on
# today's.  The old module has the old logic of every ITEM given; give one
# ITEM to see its test fail on a module that differs from today's in that
# item alone.  Not part of make test: a one-off proof.
#
# Items (default: 2 3 4 5 6 7 8 9):
#   2  account_bounds_across_userns_uids: a context is counted under its
#      own (namespace, uid) key only, not the chain up to the initial
#      namespace, so each uid of an account's namespace has a bound of its
#      own, as before commit f63a095.
#   3  memlock_per_user_across_exec: pins are charged against the pinning
#      process's mm->pinned_vm, not its user's locked_vm, so a fresh mm
#      (fork, exec) pins the limit again, as before f63a095 and 9e23dfd
#      (and not per account level either: state/pins.rs charges nothing;
#      rebuilds the Rust core).
#   4  empty_iovecs_hold_no_kernel_memory: an empty iovec gets a segment
#      (plan/layout.rs), as before f63a095; rebuilds the Rust core.
#   5  per_open_memory_charged_to_memcg: the file state, its cpumasks, the
#      status record and the statistics text are allocated with GFP_KERNEL,
#      not charged to the memcg, as before f63a095.
#   6  pin_count_refused_before_overflow: no reservation of unchecked pins
#      before pinning (knem_pins_reserve() takes whatever it is asked), as
#      before commit 897a72c, so concurrent pinners pass the bound before
#      any of them checks.
#   7  no_long_scans_under_table_mutex: a context's release scans every
#      slot up to its last region in one hold of the table mutex
#      (SCAN_PER_HOLD = usize::MAX); rebuilds the Rust core from the copy.
#   8  root_namespaces_have_their_own_bounds (issue 33, M2): namespaces
#      that global root created keep (initial namespace, uid 0) as their
#      top key (state/account.rs), so they share root's bound; rebuilds
#      the Rust core.
#   9  memlock_shared_by_subordinate_uids (issue 33, M3): pins are not
#      counted per account level (state/pins.rs charges nothing), only per
#      kernel uid by the shim; rebuilds the Rust core.
# Item 7's other half, the per-context counts, is shown on the host by
# counts-host.sh here.  Item 1 (dma_finish_async_abandoned_batch) has its
# own script, which needs the debug kernel's KASAN:
# tests/debug-kernel/uaf-demo.sh.
#
# --kernel VERSION: an installed kernel as tests/vm/run takes it (default
# 6.1); the modules are built here.  --release NAME: a kernel of the
# kernel matrix (tests/kernels/matrix.sh list, e.g. bullseye, experimental;
# chroots in KNEM_KERNELS_DIR), booted from its image; the modules are
# built in its release's chroot (matrix.sh module).  Exits 0 when every
# test failed on the old module and passed on today's.  Needs make
# tests-bin and the Rust core object (make core-object).  Logs and builds:
# build/fails-before/KVER/.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
prog=fails-before
kernel=6.1
release=
case ${1:-} in
--kernel) kernel=$2; shift 2 ;;
--release) release=$2; shift 2 ;;
esac
items=("$@")
[ ${#items[@]} -gt 0 ] || items=(2 3 4 5 6 7 8 9)

# recipe_N DIR: puts item N's old logic into the copy at DIR; test_N: its
# suite test; core_N=1 when the recipe changes the Rust core.
recipe_2() {
	perl -pi -e 's/n == KNEM_CORE_ACCOUNT_LEVELS\)/n == 1)/' "$1/c-shim/knem_owner.c"
	grep -q 'n == 1)' "$1/c-shim/knem_owner.c"
}
test_2=account_bounds_across_userns_uids
core_2=0

# Checks the mm's pinned_vm (which knem_shim_owner_new() raises after the
# charge) instead of charging the user, and keeps no cred, so nothing is
# uncharged from the user.
recipe_3() {
	local f=$1/c-shim/knem_owner.c
	perl -0pi -e 's/\tstruct user_struct \*user = current_user\(\);\n//;
		s/unsigned long cur, next;/unsigned long cur;/;
		s/cur = atomic_long_read\(&user->locked_vm\);\n\tdo \{\n\t\tif \(pages > limit \|\| cur > limit - pages\)\n\t\t\tgoto over;\n\t\tnext = cur \+ pages;\n\t\} while \(!atomic_long_try_cmpxchg\(&user->locked_vm, &cur, next\)\);\n\to->cred = get_current_cred\(\);\n/cur = atomic64_read(&current->mm->pinned_vm);\n\tif (pages > limit || cur > limit - pages)\n\t\tgoto over;\n/' "$f"
	grep -q 'cur = atomic64_read(&current->mm->pinned_vm);' "$f" &&
		! grep -qE 'get_current_cred|unsigned long cur, next;|user = current_user' "$f" &&
		recipe_9 "$1"
}
test_3=memlock_per_user_across_exec
core_3=1

recipe_4() {
	local f=$1/rust-core/src/plan/layout.rs
	perl -pi -e 's/iovecs\.iter\(\)\.filter\(\|v\| v\.len > 0\)\.count\(\)/iovecs.len()/;
		s/for iov in iovecs\.iter\(\)\.filter\(\|v\| v\.len > 0\) \{/for iov in iovecs {/' "$f"
	grep -q '^    iovecs.len()$' "$f" && grep -q 'for iov in iovecs {' "$f" &&
		! grep -qF 'iovecs.iter().filter(|v| v.len > 0)' "$f"
}
test_4=empty_iovecs_hold_no_kernel_memory
core_4=1

recipe_5() {
	local f
	for f in knem_main.c knem_offload.c knem_stats.c knem_status.c; do
		perl -pi -e 's/GFP_KERNEL_ACCOUNT/GFP_KERNEL/g' "$1/c-shim/$f"
		! grep -q GFP_KERNEL_ACCOUNT "$1/c-shim/$f" || return 1
	done
}
test_5=per_open_memory_charged_to_memcg
core_5=0

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

recipe_8() {
	local f=$1/rust-core/src/state/account.rs
	perl -pi -e 's/^(\s+)if top & UID_MASK == 0 \{/$1if top & UID_MASK == 0 && below == top {/' "$f"
	grep -q 'if top & UID_MASK == 0 && below == top {' "$f"
}
test_8=root_namespaces_have_their_own_bounds
core_8=1

recipe_9() {
	local f=$1/rust-core/src/state/pins.rs
	perl -pi -e 's/^(\s+)if pages == 0 \{/$1if pages == 0 || env.memlock_limit() != 0 {/' "$f"
	grep -q 'if pages == 0 || env.memlock_limit() != 0 {' "$f"
}
test_9=memlock_shared_by_subordinate_uids
core_9=1

# vm: how tests/vm/run boots the kernel; build_module SRC CORE KO: a
# fault-injection knem.ko from the tree at SRC with the Rust core object
# CORE, for that kernel.
if [ -n "$release" ]; then
	matrix=$top/tests/kernels/matrix.sh
	read -r _ kver image _ < <(KNEM_KERNELS=$release "$matrix" list | awk -v n="$release" '$1 == n')
	[ -n "${kver:-}" ] || { echo "$prog: no kernel $release in the matrix (tests/kernels/matrix.sh list)" >&2; exit 2; }
	vm=(--kernel-image "$image")
	build_module() {
		mkdir -p "$(dirname "$3")" &&
			KNEM_CORE_OBJ=$2 "$matrix" module "$release" "$1" "$3" KNEM_FAULT_INJECT=1
	}
else
	kver=$("$top/tests/vm/run" --kernel "$kernel" --resolve-kernel) || exit 2
	vm=(--kernel "$kernel")
	build_module() {
		KNEM_FAULT_INJECT=1 KNEM_CORE_OBJ=$2 "$1/c-shim/build-module.sh" "$kver" "$(dirname "$3")"
	}
fi
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
	build_module "$src" "$obj" "$out/$v-build/knem.ko" \
		> "$out/$v-build.log" 2>&1 || { tail -n 20 "$out/$v-build.log"; exit 2; }
done

declare -A status secs
for v in old fixed; do
	t0=$SECONDS
	"$top/tests/vm/run" "${vm[@]}" --module "$out/$v-build/knem.ko" --timeout 600 \
		--add "$suite" -- /opt/knem-tests --no-skip "${tests[@]}" > "$out/$v.log" 2>&1
	status[$v]=$?
	secs[$v]=$((SECONDS - t0))
done
good=1
for v in old fixed; do
	echo "$prog: $v logic on $kver (status ${status[$v]}, ${secs[$v]} s):"
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
