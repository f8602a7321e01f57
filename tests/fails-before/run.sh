#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/fails-before/run.sh [--kernel VERSION | --release NAME | --debug-kernel] [ITEM...] -
# issue 21: the suite test of each ITEM must fail on the old logic and pass
# on today's.  Both modules are fault-injection builds (KNEM_FAULT_INJECT=1:
# the tests lower bounds, add delays and read records through test-only
# module parameters); the old one is built from a copy of the tree in which
# each ITEM's recipe below puts the old logic back (the work tree is not
# touched).  Each ITEM has an old module of its own, with that item's old
# logic alone, and a VM boot of its own, where its test must fail with the
# assertion the old logic breaks (fail_N below); one boot runs every
# ITEM's test on today's module, where each must pass and the run be clean
# (tests/vm/run's status 0: no kernel warning, rmmod, no new taint).  Not
# part of make test: a one-off proof.
#
# Items (default: 2 3 4 5 6 7 8 9 10):
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
#   8  single_use_consumed_while_owner_closes (issue 33): a single-use
#      region is marked consumed before the table lock is taken, so the
#      owner's release skips it and frees the context the consumer then
#      writes to; rebuilds the Rust core from the copy.  With
#      --debug-kernel, KASAN reports the use-after-free.
#   9  root_namespaces_have_their_own_bounds (issue 33, M2): namespaces
#      that global root created keep (initial namespace, uid 0) as their
#      top key (state/account.rs), so they share root's bound; rebuilds
#      the Rust core.
#   10 memlock_shared_by_subordinate_uids (issue 33, M3): pins are not
#      counted per account level (state/pins.rs charges nothing), only per
#      kernel uid by the shim; rebuilds the Rust core.
# Item 7's other half, the per-context counts, is shown on the host by
# counts-host.sh here (partly by construction: see its header).  Item 1 (dma_finish_async_abandoned_batch) has its
# own script, which needs the debug kernel's KASAN:
# tests/debug-kernel/uaf-demo.sh.
#
# --kernel VERSION: an installed kernel as tests/vm/run takes it (default
# 6.1); the modules are built here.  --release NAME: a kernel of the
# kernel matrix (tests/kernels/matrix.sh list, e.g. bullseye, experimental;
# chroots in KNEM_KERNELS_DIR), booted from its image; the modules are
# built in its release's chroot (matrix.sh module).  --debug-kernel: the
# debug lab kernel (tests/debug-kernel/build.sh: KASAN, lockdep), with
# the modules built against its tree and every Rust core object built for
# its KASAN (rust-core/build-kobj.sh --kasan), and an item with kasan_N
# set must show KASAN's use-after-free report on its old module.  Exits 0 when every test failed as
# it should on its old module and passed on today's.  Needs make
# tests-bin and the Rust core object (make core-object).  Logs and builds:
# build/fails-before/KVER/.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
prog=fails-before
kernel=6.1
release=
debug=
case ${1:-} in
--kernel) kernel=$2; shift 2 ;;
--release) release=$2; shift 2 ;;
--debug-kernel) debug=1; shift ;;
esac
items=("$@")
[ ${#items[@]} -gt 0 ] || items=(2 3 4 5 6 7 8 9 10)

# recipe_N DIR: puts item N's old logic into the copy at DIR; test_N: its
# suite test; fail_N: what the test's FAIL line must say on the old logic
# (an extended regex of the test's own assertion that the old logic breaks:
# a skip, a timeout, a leak-baseline failure or another assertion does not
# count); core_N=1 when the recipe changes the Rust core.
recipe_2() {
	perl -pi -e 's/n == KNEM_CORE_ACCOUNT_LEVELS\)/n == 1)/' "$1/c-shim/knem_owner.c"
	grep -q 'n == 1)' "$1/c-shim/knem_owner.c"
}
test_2=account_bounds_across_userns_uids
fail_2="copies of one account's [0-9]+ namespace uids ran in their callers, expected|namespace uids held [0-9]+ regions at once"
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
fail_3='(one page in a forked child|one page more after exec [0-9]+): expected ENOMEM, got success|pinned_pages [0-9]+ after the last image exited, expected'
core_3=1

recipe_4() {
	local f=$1/rust-core/src/plan/layout.rs
	perl -pi -e 's/iovecs\.iter\(\)\.filter\(\|v\| v\.len > 0\)\.count\(\)/iovecs.len()/;
		s/for iov in iovecs\.iter\(\)\.filter\(\|v\| v\.len > 0\) \{/for iov in iovecs {/' "$f"
	grep -q '^    iovecs.len()$' "$f" && grep -q 'for iov in iovecs {' "$f" &&
		! grep -qF 'iovecs.iter().filter(|v| v.len > 0)' "$f"
}
test_4=empty_iovecs_hold_no_kernel_memory
fail_4="a region of [0-9]+ empty iovecs raised the group's memory.current from"
core_4=1

recipe_5() {
	local f
	for f in knem_main.c knem_offload.c knem_stats.c knem_status.c; do
		perl -pi -e 's/GFP_KERNEL_ACCOUNT/GFP_KERNEL/g' "$1/c-shim/$f"
		! grep -q GFP_KERNEL_ACCOUNT "$1/c-shim/$f" || return 1
	done
}
test_5=per_open_memory_charged_to_memcg
fail_5="opens raised the group's slab_unreclaimable by [0-9]+ bytes \\([0-9]+ per fd\\), expected at least"
core_5=0

recipe_6() {
	perl -0pi -e 's/take = min\(nr, knem_pins_unchecked_max\(\) - cur\);/take = nr;/' \
		"$1/c-shim/knem_pin.c"
	grep -q 'take = nr;' "$1/c-shim/knem_pin.c"
}
test_6=pin_count_refused_before_overflow
fail_6='regions of [0-9]+ pins of one page all made, past a bound|the regions made hold [0-9]+ pins of the page, past the bound|a page reached [0-9]+ references: at or past the simulated overflow point'
core_6=0

recipe_7() {
	perl -pi -e 's/^pub const SCAN_PER_HOLD: usize = 1024;/pub const SCAN_PER_HOLD: usize = usize::MAX;/' \
		"$1/rust-core/src/state/table.rs"
	grep -q 'SCAN_PER_HOLD: usize = usize::MAX;' "$1/rust-core/src/state/table.rs"
}
test_7=no_long_scans_under_table_mutex
fail_7="one hold of the table mutex looked at or moved [0-9]+ slots|nobody's CREATE_REGION \\+ DESTROY_REGION took [0-9]+ us while the fds closed"
core_7=1

# Issue 33, item 1: Table::consume marks the slot CONSUMED before it takes
# the table lock, as before commit "core: a single-use region is consumed
# under the table lock"; rebuilds the Rust core from the copy.  On the
# debug kernel (--debug-kernel) KASAN reports the write into the owner's
# freed context.
recipe_8() {
	local f=$1/rust-core/src/state/table.rs
	perl -0pi -e 's/(        let table_ref = \{\n            let _g = self\.hold\(env\);\n)            found\n                \.slot\n                \.state\n                \.compare_exchange\(found\.state, with_st\(found\.state, ST_FREE\), AcqRel, Relaxed\)\n                \.map_err\(\|_\| EINVAL\)\?;\n/        found\n            .slot\n            .state\n            .compare_exchange(found.state, with_st(found.state, ST_CONSUMED), AcqRel, Relaxed)\n            .map_err(|_| EINVAL)?;\n$1            found.slot.state.store(with_st(found.state, ST_FREE), Release);\n/' "$f"
	grep -q 'found.slot.state.store(with_st(found.state, ST_FREE), Release);' "$f"
}
test_8=single_use_consumed_while_owner_closes
fail_8="the owner's close ended while the reader waited for the table mutex, yet the copy of its single-use region gave Ok\\(Success\\), expected EINVAL"
core_8=1
# On the debug kernel the old logic's write into the freed context is a
# KASAN report (the guest panics before the test can print its line).
kasan_8=1

# Issue 33, M2 and M3.
recipe_9() {
	local f=$1/rust-core/src/state/account.rs
	perl -pi -e 's/^(\s+)if top & UID_MASK == 0 \{/$1if top & UID_MASK == 0 && below == top {/' "$f"
	grep -q 'if top & UID_MASK == 0 && below == top {' "$f"
}
test_9=root_namespaces_have_their_own_bounds
fail_9='namespaces A and B of root held \[[0-9]+, [0-9]+\] regions at once, then root [0-9]+: expected [0-9]+ each'
core_9=1

recipe_10() {
	local f=$1/rust-core/src/state/pins.rs
	perl -pi -e 's/^(\s+)if pages == 0 \{/$1if pages == 0 || env.memlock_limit() != 0 {/' "$f"
	grep -q 'if pages == 0 || env.memlock_limit() != 0 {' "$f"
}
test_10=memlock_shared_by_subordinate_uids
fail_10='uids of one account.s namespace pinned [0-9]+ pages at once \([^)]*\) with RLIMIT_MEMLOCK at [0-9]+'
core_10=1

# vm: how tests/vm/run boots the kernel; build_module SRC CORE KO: a
# fault-injection knem.ko from the tree at SRC with the Rust core object
# CORE, for that kernel.
if [ -n "$debug" ]; then
	"$top/tests/debug-kernel/build.sh" || exit 2
	kver=$("$top/tests/debug-kernel/build.sh" --print) || exit 2
	dcache=${KNEM_DEBUG_KERNEL_DIR:-/var/cache/knem-rs/debug-kernel}
	vm=(--kernel-image "$dcache/bzImage")
	# Its KASAN sees the Rust core's loads and stores only when the core
	# is built for it (build-kobj.sh --kasan): every core here is.
	kasan_core=--kasan
	build_module() {
		KDIR=$dcache/obj KNEM_FAULT_INJECT=1 KNEM_CORE_OBJ=$2 "$1/c-shim/build-module.sh" "$kver" "$(dirname "$3")"
	}
elif [ -n "$release" ]; then
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
mkdir -p "$out"
if [ -n "${kasan_core:-}" ]; then
	core=$out/fixed-core.o
	"$top/rust-core/build-kobj.sh" --kasan "$core" \
		> "$out/fixed-core.log" 2>&1 || { tail -n 20 "$out/fixed-core.log"; exit 2; }
fi

# Every ITEM has its old tree, module and boot of its own: its test fails
# on a module whose logic differs from today's in that item alone, in a
# kernel that no other item's old logic has run in.
tests=()
for i in "${items[@]}"; do
	declare -F "recipe_$i" > /dev/null || { echo "$prog: no recipe for item $i" >&2; exit 2; }
	for v in test fail core; do
		n=${v}_$i
		[ -n "${!n:-}" ] || { echo "$prog: item $i has no $n" >&2; exit 2; }
	done
	t=test_$i
	tests+=("${!t}")
done

# The copy: every file git knows or would add, as it is now, once; each
# item's old tree is a copy of it.
mkdir -p "$out/tree"
(cd "$top" && git ls-files -z --cached --others --exclude-standard |
	tar --null -T - -cf -) | tar -xf - -C "$out/tree" ||
	{ echo "$prog: could not copy the tree" >&2; exit 2; }
for i in "${items[@]}"; do
	cp -a "$out/tree" "$out/old-$i" || { echo "$prog: could not copy the tree" >&2; exit 2; }
	"recipe_$i" "$out/old-$i" ||
		{ echo "$prog: could not recreate item $i's old logic (the code changed?)" >&2; exit 2; }
	c=core_$i obj=$core
	if [ "${!c}" = 1 ]; then
		# Its own target directory, next to the tree's, so later runs are
		# incremental and the tree's own build is not disturbed.
		obj=$out/old-$i-core.o
		KNEM_CORE_TARGET_DIR=$top/target/kobj-fails-before${kasan_core:+-kasan} \
			"$out/old-$i/rust-core/build-kobj.sh" ${kasan_core:-} "$obj" > "$out/old-$i-core.log" 2>&1 ||
			{ tail -n 20 "$out/old-$i-core.log"; exit 2; }
	fi
	build_module "$out/old-$i" "$obj" "$out/old-$i-build/knem.ko" \
		> "$out/old-$i-build.log" 2>&1 || { tail -n 20 "$out/old-$i-build.log"; exit 2; }
done
build_module "$out/tree" "$core" "$out/fixed-build/knem.ko" \
	> "$out/fixed-build.log" 2>&1 || { tail -n 20 "$out/fixed-build.log"; exit 2; }

# run NAME KO TEST...: one boot of the suite's TESTs on KO, log NAME.log.
# --no-skip and --fault-build: a skip, a module that is not a fault build
# or a name that selects no test fails the run.
declare -A status secs
run() {
	local name=$1 ko=$2 t0=$SECONDS
	shift 2
	"$top/tests/vm/run" "${vm[@]}" --module "$ko" --timeout 600 \
		--add "$suite" -- /opt/knem-tests --no-skip --fault-build "$@" > "$out/$name.log" 2>&1
	status[$name]=$?
	secs[$name]=$((SECONDS - t0))
}
for i in "${items[@]}"; do
	t=test_$i
	run "old-$i" "$out/old-$i-build/knem.ko" "${!t}"
done
run fixed "$out/fixed-build/knem.ko" "${tests[@]}"

# On its old logic, each test fails, and for the reason fail_N names: the
# test's own FAIL line (not one about a skip under --no-skip, a timeout, a
# signal or the leak baseline), and no other FAIL line in the run.
good=1
for i in "${items[@]}"; do
	t=test_$i
	t=${!t}
	f=fail_$i
	log=$out/old-$i.log
	echo "$prog: item $i, old logic on $kver (status ${status[old-$i]}, ${secs[old-$i]} s):"
	grep -aE "^(ok|FAIL|skip) |^$t: |^tests/vm/run: FAIL" "$log" | sed 's/^/    /'
	line=$(grep -aE "^FAIL $t: " "$log" | tail -n 1 | tr -d '\r')
	msg=${line#"FAIL $t: "}
	why=
	k=kasan_$i
	if [ -n "$debug" ] && [ -n "${!k:-}" ]; then
		# The report names the access and the function, then who freed it.
		kasan=$(grep -aE -A 80 'BUG: KASAN: (slab-)?use-after-free' "$log" |
			grep -aE 'BUG: KASAN|\] (Read|Write) of size|(Allocated|Freed) by task|\] +(knem_open|knem_release)\+' |
			head -n 7 | tr -d '\r')
		if [ -n "$kasan" ]; then
			sed 's/^/    /' <<< "$kasan"
		else
			why="no KASAN use-after-free report (the debug kernel must see the old logic's access)"
		fi
	elif [ -z "$line" ]; then
		why="no FAIL $t line"
	elif [ "$(grep -acE '^FAIL ' "$log")" -ne 1 ]; then
		why="other FAIL lines than the test's"
	elif [[ $msg == *"(--no-skip)" ]]; then
		why="the test skipped (a FAIL only through --no-skip)"
	elif grep -qE '^(timed out after|killed by)|not back to baseline' <<< "$msg"; then
		why="a timeout, a signal or the leak check, not the test's assertion"
	elif ! grep -qE "${!f}" <<< "$msg"; then
		why="not the failure the old logic causes (fail_$i: ${!f})"
	fi
	if [ -n "$why" ]; then
		echo "$prog: item $i: $why"
		good=
	fi
done
# On today's logic, each test passes and the run is clean: status 0 (the
# runner's checks: no kernel warning, rmmod worked, no new taint).
echo "$prog: today's logic on $kver (status ${status[fixed]}, ${secs[fixed]} s):"
grep -aE "^(ok|FAIL|skip) |^tests/vm/run: FAIL" "$out/fixed.log" | sed 's/^/    /'
for t in "${tests[@]}"; do
	grep -aqE "^ok $t\$" "$out/fixed.log" || { echo "$prog: $t did not pass on today's logic"; good=; }
done
if [ "${status[fixed]}" -ne 0 ]; then
	echo "$prog: the run on today's logic exited with status ${status[fixed]} (tests/vm/run's verdict above)"
	good=
fi
if [ -n "$good" ]; then
	echo "$prog: ${tests[*]}: fail on the old logic, pass on today's, on $kver"
	exit 0
fi
echo "$prog: not every test failed on the old logic and passed on today's, on $kver (logs: $out)"
exit 1
