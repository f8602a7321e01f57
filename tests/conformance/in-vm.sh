#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# in-vm.sh PROGRAM... - run each conformance program (in the guest), pass
# on its output, and print the totals of all of them last:
# "N passed, N failed".  Exits nonzero when any case failed, a program
# did not finish with its own summary line, or a program exited non-zero
# (whatever its summary said: a crash after the summary, or a summary
# that hides a failure, is a failed program).  No PROGRAM at all, or a
# program whose summary counts no case, is a failure too: nothing was
# checked.
passed=0
failed=0
if [ $# -eq 0 ]; then
	echo "FAIL in-vm.sh: no conformance program given"
	echo "0 passed, 1 failed"
	exit 1
fi
for p in "$@"; do
	echo "=== $p"
	out=/tmp/$(basename "$p").out
	"$p" > "$out" 2>&1
	status=$?
	cat "$out"
	last=$(tail -n 1 "$out")
	case $last in
	[0-9]*" passed, "[0-9]*" failed")
		rest=${last#* passed, }
		passed=$((passed + ${last%% passed, *}))
		failed=$((failed + ${rest%% failed}))
		if [ "${last%% passed, *}" -eq 0 ] && [ "${rest%% failed}" -eq 0 ]; then
			echo "FAIL $p: its summary counts no case"
			failed=$((failed + 1))
		fi
		if [ "$status" -ne 0 ]; then
			echo "FAIL $p: exited with status $status after its summary line"
			failed=$((failed + 1))
		fi
		;;
	*)
		echo "FAIL $p: exited with status $status without a summary line"
		failed=$((failed + 1))
		;;
	esac
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
