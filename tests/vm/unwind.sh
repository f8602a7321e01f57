#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# unwind.sh PROGRAM [ARGS...] - run PROGRAM (one that copies through
# /dev/knem) with a kprobe on the shim's page copy whose trigger saves one
# kernel stack trace, then check that the trace unwinds through the Rust
# core's frames down to the system call entry.  The ORC unwinder stops at
# the first frame it has no entry for, so a module without ORC data for
# the core's functions ends the trace inside the core: the same unwinder
# prints the trace of a WARN or an Oops.  For busybox sh in the VM.
# Exits with PROGRAM's status if it failed, else 1 if the trace is cut.

probe=knem_shim_copy_page_user
t=/sys/kernel/tracing
[ -e $t/kprobe_events ] || mount -t tracefs tracefs $t 2>/dev/null || t=/sys/kernel/debug/tracing
[ -e $t/kprobe_events ] || { echo "FAIL unwind: no tracefs kprobe_events"; exit 1; }

echo "p:knem_unwind/copy $probe" > $t/kprobe_events || { echo "FAIL unwind: cannot probe $probe"; exit 1; }
ev=$t/events/knem_unwind/copy
# A trigger on a disabled event runs without recording the event itself,
# so the buffer holds exactly one stack trace.
echo > $t/trace
echo 'stacktrace:1' > $ev/trigger

"$@"
status=$?

stack=$(sed -n 's/^ *=> //p' $t/trace)
echo '!stacktrace:1' > $ev/trigger
echo > $t/kprobe_events

echo "$stack" | sed 's/^/     | /'
[ "$status" -eq 0 ] || { echo "FAIL unwind: $1 exited with status $status"; exit "$status"; }
if ! echo "$stack" | grep -q "$probe"; then
	echo "FAIL unwind: no stack trace recorded for $probe"
	exit 1
fi
# The core's functions (v0-mangled Rust names, or its knem_core_* exports)
# must appear, and below them the ioctl entry.
if ! echo "$stack" | grep -qE '^_R.*knem_core|^knem_core_'; then
	echo "FAIL unwind: no frame of the Rust core in the trace"
	exit 1
fi
if ! echo "$stack" | grep -qE '^(__x64_sys_ioctl|do_syscall_64|entry_SYSCALL_64)'; then
	echo "FAIL unwind: the trace stops before the system call entry (no ORC data for the core?)"
	exit 1
fi
echo "ok   unwind: $(echo "$stack" | wc -l) frames from $probe through the core to the syscall entry"
echo "1 passed, 0 failed"
