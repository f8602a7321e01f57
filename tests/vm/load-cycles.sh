#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# load-cycles.sh [N] - unload and reload knem.ko N times (default 200), for
# busybox sh in the VM, with the module tests/vm/run loaded:
#
#   tests/vm/run --add tests/vm/load-cycles.sh \
#       --add target/x86_64-unknown-linux-gnu/release/knem-tests \
#       -- load-cycles.sh 200
#
# Every cycle loads with other parameters, opens the device and, every
# 25th, runs a few suite tests (regions, copies, an async copy) on the fresh
# module: knem-tests must be on PATH (/opt), and each name must still
# select a test (knem-tests fails a name that selects none).  Each unload
# must succeed and leave nothing behind; at the end the kernel's FOLL_PIN
# balance must be even.  The runner's own checks
# (final rmmod, no BUG/WARNING/poison report) apply on top.

n=${1:-200}
ko=/lib/knem/knem.ko
fail() { echo "FAIL load-cycles: $*"; echo "0 passed, 1 failed"; exit 1; }

# Exact counts: fold the per-cpu vmstat deltas first (after a busy run,
# the collectives of tests/vm/full-suite.sh in the same boot, the unfolded
# totals were seen off by 12 pages).
pins() {
	echo 1 > /proc/sys/vm/stat_refresh
	awk '/^nr_foll_pin_acquired/ { a = $2 } /^nr_foll_pin_released/ { r = $2 }
	     END { print a - r }' /proc/vmstat
}
command -v knem-tests > /dev/null || fail "no knem-tests on PATH for the suite runs (--add it)"
base=$(pins)

i=0
while [ "$i" -lt "$n" ]; do
	i=$((i + 1))
	rmmod knem || fail "rmmod in cycle $i"
	[ ! -e /sys/module/knem ] || fail "/sys/module/knem after rmmod in cycle $i"
	case $((i % 3)) in
	0) params= ;;
	1) params="access_policy=ptrace account_pinned=0" ;;
	2) params="access_policy=uid" ;;
	esac
	# shellcheck disable=SC2086
	insmod "$ko" $params || fail "insmod $params in cycle $i"
	cat /dev/knem > /dev/null || fail "cat /dev/knem in cycle $i"
	if [ $((i % 25)) -eq 0 ]; then
		knem-tests inline_read_two_processes multi_region_1000 \
			async_memcpythread_copy memlock_limit > /tmp/cycle.log 2>&1 ||
			{ cat /tmp/cycle.log; fail "suite tests in cycle $i"; }
	fi
done
now=$(pins)
[ "$now" = "$base" ] || fail "FOLL_PIN balance $base before, $now after"
grep -q '^knem ' /proc/modules || fail "module not loaded at the end"
echo "ok load_unload_cycles_$n"
echo "1 passed, 0 failed"
