#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/faults/in-vm.sh - in the guest of tests/faults/run.sh: the fuzzer
# (with the DMA provider and its kills) under the kernel's own fault
# injection, one fault type and probability at a time:
#   failslab, fail_page_alloc (every order, sleeping and highmem
#   allocations too) and fail_usercopy, task-filtered: the fuzzer turns
#   its make-it-fail on only for its calls into /dev/knem (knem-fuzz
#   --kernel-faults), so the failures land in the module's paths; and
#   fail_function (fail_function:FUNCTION:RETVAL) on the module's
#   error-injectable functions knem_shim_alloc (every object of the core:
#   0, i.e. NULL), knem_pin_chunk (a chunk of pins: -12, -14) and
#   knem_status_mmap (a status array: -12), task-filtered the same way.
#   Its kprobes must be ftrace-based (checked: "[FTRACE]" in
#   kprobes/list): an int3 kprobe's handler runs in NMI context, where the
#   task filter never matches and 6.1's should_fail() takes crngs.lock, a
#   lockdep report (tests/faults/README.md).
# The count of injected failures is exact: `times` starts at a large
# number and counts down once per injected failure.
#
# After each run: the fuzzer passed (every errno in its call's documented
# set, the module's contexts, regions and pinned pages back to 0 and the
# FOLL_PIN balance back to its start, no process hung or died of anything
# but the conductor's SIGKILL), the counters and the balance are checked
# again here, and the run injected at least one failure (a run that
# injected nothing proves nothing).  At the end, kmemleak scans: any
# unreferenced object is a failure (its summary line avoids the word the
# VM runner treats as a report).  Kernel reports (KASAN, lockdep, BUG,
# WARNING) fail the whole run in tests/vm/run, and the module must unload.
#
# Environment: KNEM_FAULTS_SECS (each run's length, default 45),
# KNEM_FAULTS_PROBS (percentages, default "1 10 50"), KNEM_FAULTS_TYPES
# (default: all of the above; TYPE@P1+P2 gives a type percentages of its
# own), KNEM_FAULTS_DMA (the test DMA provider's
# .ko, required), KNEM_FAULTS_SEED (default: random; each run
# uses SEED + its index).  Prints one line per run and
# "faults: N runs passed, N failed" last; exits 1 if any failed.
set -u
prog=faults
dbg=/sys/kernel/debug
sysfs=/sys/class/misc/knem
secs=${KNEM_FAULTS_SECS:-45}
probs=${KNEM_FAULTS_PROBS:-1 10 50}
# knem_status_mmap runs a few dozen times in a run (the fuzzer maps few
# status arrays): at 1 % a run often injects nothing, so it has its own
# percentages.
types=${KNEM_FAULTS_TYPES:-failslab fail_page_alloc fail_usercopy fail_function:knem_shim_alloc:0 fail_function:knem_pin_chunk:-12 fail_function:knem_pin_chunk:-14 fail_function:knem_status_mmap:-12@50+100}
seed=${KNEM_FAULTS_SEED:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
dma=${KNEM_FAULTS_DMA:-}
# `times` counts down from here; no run comes near it.
big=1000000000

passed=0
failed=0
fail() {
	echo "$prog: FAIL: $*"
	failed=$((failed + 1))
}

grep -q " $dbg debugfs" /proc/mounts || mount -t debugfs none "$dbg" || {
	echo "$prog: FAIL: cannot mount debugfs at $dbg"
	exit 1
}
missing=
for d in failslab fail_page_alloc fail_usercopy fail_function kmemleak; do
	[ -e "$dbg/$d" ] || missing="$missing $dbg/$d"
done
if [ -n "$missing" ]; then
	echo "$prog: FAIL: this kernel lacks$missing (CONFIG_FAILSLAB, FAIL_PAGE_ALLOC, FAULT_INJECTION_USERCOPY, FAIL_FUNCTION, DEBUG_KMEMLEAK: the debug lab kernel has them)"
	exit 1
fi
[ -r "$dma" ] || { echo "$prog: FAIL: no DMA provider module (KNEM_FAULTS_DMA=$dma)"; exit 1; }

pins() {
	echo 1 > /proc/sys/vm/stat_refresh
	awk '/^nr_foll_pin_acquired /{a=$2} /^nr_foll_pin_released /{r=$2} END{print a - r}' /proc/vmstat
}
pin_start=$(pins)
# Only what the module leaves from here on counts.
echo clear > "$dbg/kmemleak"

# Every type off, fail_function's list empty.
all_off() {
	for d in failslab fail_page_alloc fail_usercopy fail_function; do
		echo 0 > "$dbg/$d/probability"
	done
	echo > "$dbg/fail_function/inject"
}

# arm DIR PERCENT FILTER: inject at PERCENT % of the chances (into tasks
# whose make-it-fail is on when FILTER is Y), counting down from $big,
# without log lines (the count is read back from `times`).  The
# probability goes last: set first, it would hit every task (this shell
# and init included) until the filter is on.  Any write that fails stops
# the whole run.
arm() {
	echo "$3" > "$1/task-filter" &&
		echo 0 > "$1/verbose" &&
		echo 1 > "$1/interval" &&
		echo "$big" > "$1/times" &&
		echo 0 > "$1/space" &&
		echo "$2" > "$1/probability" ||
		{ all_off; echo "$prog: FAIL: cannot arm $1"; exit 1; }
}

# The return value as fail_function's retval wants it: unsigned 64 bits
# in hex (-12 is 0xfffffffffffffff4); 0 or an errno down to -255.
retval() {
	case $1 in
	0) echo 0 ;;
	-*) printf '0xffffffffffffff%02x\n' $((256 + $1)) ;;
	*) return 1 ;;
	esac
}

all_off
n=0
for t in $types; do
	# TYPE@P1+P2: this type's own percentages instead of KNEM_FAULTS_PROBS.
	tprobs=$probs
	case $t in
	*@*) tprobs=$(echo "${t#*@}" | tr + ' '); t=${t%@*} ;;
	esac
	for p in $tprobs; do
		n=$((n + 1))
		kind=${t%%:*}
		dir=$dbg/$kind
		what="$kind $p%"
		case $kind in
		failslab)
			echo N > "$dir/ignore-gfp-wait"
			echo N > "$dir/cache-filter" ;;
		fail_page_alloc)
			echo N > "$dir/ignore-gfp-wait"
			echo N > "$dir/ignore-gfp-highmem"
			echo 0 > "$dir/min-order" ;;
		fail_function)
			fn=${t#fail_function:}
			rv=${fn#*:}
			fn=${fn%%:*}
			what="fail_function $fn=$rv $p%"
			echo "$fn" > "$dir/inject" || { fail "$what: $fn is not error-injectable here"; continue; }
			retval "$rv" > "$dir/$fn/retval" || { fail "$what: retval $rv refused"; all_off; continue; }
			grep -q " $fn+0x[0-9a-f]* .*\[FTRACE\]" "$dbg/kprobes/list" || {
				fail "$what: the kprobe on $fn is not ftrace-based ($(grep " $fn+" "$dbg/kprobes/list" || echo 'not in kprobes/list')): its handler would run in NMI context, outside the task filter (the lab kernel needs FTRACE, DYNAMIC_FTRACE, KPROBES_ON_FTRACE)"
				all_off
				continue
			} ;;
		esac
		arm "$dir" "$p" Y
		log=/tmp/fuzz-$n.log
		/opt/knem-fuzz --kernel-faults --dma "$dma" --seed $((seed + n)) \
			--duration "$secs" --procs 4 > "$log" 2>&1
		st=$?
		left=$(cat "$dir/times")
		all_off
		injected=$((big - left))
		steps=$(sed -n 's/^knem-fuzz: seed .* ran [0-9.]*s, \([0-9][0-9]*\) steps.*/\1/p' "$log" | tail -n 1)
		descs=$(sed -n 's/^DMA: provider ran \([0-9][0-9]*\) descriptors.*/\1/p' "$log" | tail -n 1)
		bad=
		[ "$st" -eq 0 ] || bad="knem-fuzz exited $st"
		[ "$injected" -gt 0 ] || bad="${bad:+$bad; }no failure was injected into a /dev/knem call"
		for c in contexts regions pinned_pages; do
			v=$(cat "$sysfs/$c")
			[ "$v" = 0 ] || bad="${bad:+$bad; }$c is $v after the run"
		done
		pin_now=$(pins)
		[ "$pin_now" = "$pin_start" ] ||
			bad="${bad:+$bad; }FOLL_PIN balance $pin_now, was $pin_start"
		if [ -n "$bad" ]; then
			echo "$prog: ---- knem-fuzz log of run $n ($what) ----"
			cat "$log"
			echo "$prog: ---- end of the log of run $n ----"
			fail "run $n, $what: $bad (seed $((seed + n)))"
		else
			passed=$((passed + 1))
			echo "$prog: run $n, $what: $injected failures injected into /dev/knem calls, ${steps:-?} fuzz steps, ${descs:-?} DMA descriptors, errnos and counters right"
		fi
	done
done

# kmemleak reports an object only once it has been unreferenced for a
# while (5 s) and seen so by two scans.
# A scan fails once kmemleak has turned itself off (it does when it cannot
# record an object, which the injection could cause): then it saw nothing.
sleep 6
echo scan > "$dbg/kmemleak" && sleep 6 && echo scan > "$dbg/kmemleak" ||
	fail "kmemleak is off (its log above says why): the leak check saw nothing"
leaks=$(cat "$dbg/kmemleak")
if [ -n "$leaks" ]; then
	echo "$prog: ---- kmemleak ----"
	echo "$leaks"
	echo "$prog: ---- end of kmemleak ----"
	fail "kmemleak found $(echo "$leaks" | grep -c '^unreferenced object') unreferenced object(s)"
else
	echo "$prog: leak scan: no unreferenced object after $n runs"
fi
echo "$prog: $passed runs passed, $failed failed (seed $seed, $secs s each)"
[ "$failed" -eq 0 ]
