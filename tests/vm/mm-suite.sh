#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/vm/mm-suite.sh [--kernel VERSION | --release NAME]... - the memory
# manager's movers against live regions (knem-tests --mm, issue 35: page
# migration and compaction, THP collapse and split, KSM, fork, swap, the
# OOM killer; tests/suite/src/t_mm.rs) on each kernel given, in a guest
# booted for them: two fake NUMA nodes (numa=fake=2), a scratch ext4 for
# the swap file, 1 GiB.  --no-skip: a kernel that lacks a knob fails with
# the test's reason.  --kernel: an installed kernel (default 6.1); --release:
# a kernel of the matrix (tests/kernels/matrix.sh list, e.g. experimental
# for 7.3), whose module is built from this tree in its release's chroot.
# Exits 1 when a kernel failed.  Needs make tests-bin.
set -uo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prog=mm-suite
die() { echo "$prog: $*" >&2; exit 2; }
kernels=()
while [ $# -gt 0 ]; do
	case $1 in
	--kernel|--release) [ $# -ge 2 ] || die "$1 needs a name"; kernels+=("$1=$2"); shift 2 ;;
	-h|--help) sed -n '4,14p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
[ ${#kernels[@]} -gt 0 ] || kernels=(--kernel=6.1)
suite=$top/target/x86_64-unknown-linux-gnu/release/knem-tests
[ -x "$suite" ] || die "no $suite (make tests-bin)"

failed=()
for k in "${kernels[@]}"; do
	name=${k#*=}
	case $k in
	--kernel=*) vm=(--kernel "$name") ;;
	--release=*)
		read -r _ kver image _ < <("$top/tests/kernels/matrix.sh" list | awk -v n="$name" '$1 == n')
		[ -n "${kver:-}" ] || die "no kernel $name in the matrix: tests/kernels/matrix.sh list does not show it (prepared with matrix.sh prepare, in KNEM_KERNELS_DIR=${KNEM_KERNELS_DIR:-build/kernels})"
		ko=$top/build/mm-$name/knem.ko
		mkdir -p "$(dirname "$ko")"
		"$top/tests/kernels/matrix.sh" module "$name" "$top" "$ko" > "$top/build/mm-$name.build.log" 2>&1 ||
			{ tail -n 20 "$top/build/mm-$name.build.log"; die "building knem.ko for $name failed"; }
		vm=(--kernel-image "$image" --module "$ko") ;;
	esac
	t0=$SECONDS
	if "$top/tests/vm/run" "${vm[@]}" --timeout 1800 --mem 1024 --append numa=fake=2 \
		--scratch-ext4 --add "$suite" -- /opt/knem-tests --mm --no-skip --timeout 600; then
		echo "$prog: $name passed in $((SECONDS - t0)) s"
	else
		echo "$prog: $name FAILED in $((SECONDS - t0)) s"
		failed+=("$name")
	fi
done
[ ${#failed[@]} -eq 0 ] || { echo "$prog: FAILED on ${failed[*]}"; exit 1; }
echo "$prog: passed on ${#kernels[@]} kernel(s)"
