# tests/vm/verdict.sh - the verdict of a lab run, sourced last by tests/vm/run
# (QEMU) and tests/uml/run (User-Mode Linux), so both labs judge a run by
# the same rules.  It reads:
#   log          the console log (from the guest's start marker on)
#   m            the prefix of the guest's marker lines (KNEM-VM)
#   qemu_status  the exit status of the lab's process (qemu or linux)
#   engine       its name for the messages (qemu, uml)
#   timeout_s    the run's time limit
#   fail MSG     prints "$prog: FAIL: MSG" and exits 1
# and exits with the command's status, or fails with one line saying why.
# shellcheck shell=bash

# ---- Verdict ------------------------------------------------------------------

if [ "$qemu_status" -eq 124 ] || [ "$qemu_status" -eq 137 ]; then
	fail "timeout after ${timeout_s}s (log: $log)"
fi

# Every scan below reads the log from the start marker on: without it
# (an exit marker alone, say) they would have nothing to read, and the run
# would pass unchecked.
grep -aq "^$m-START " "$log" ||
	fail "no start marker from the guest ($engine status $qemu_status): its kernel log cannot be checked (log: $log)"

# Reports of kernel trouble, from the start marker on (Debian's boot prints
# mitigation notices that mention WARNING; the panic checks cover the boot).
bad='BUG:|WARNING:|Oops|[Kk]ernel panic|Call Trace|kernel BUG at|BUG [a-z0-9_-]+ \(|Poison overwritten|Redzone overwritten|Object padding overwritten|Freepointer corrupt|Objects remaining|pagealloc: memory corruption|Bad page|pinned pages leak|KASAN|kmemleak|UBSAN|general protection fault|soft lockup|hung_task|blocked for more than|rcu.*detected stall|list_(add|del) corruption'
if grep -aqE '[Kk]ernel panic' "$log"; then
	fail "kernel panic: $(grep -aE '[Kk]ernel panic' "$log" | head -n 1) (log: $log)"
fi
# A test that provokes the OOM killer on purpose (knem-tests --mm,
# oom_kill_of_region_owner) prints "$m-EXPECT-OOM begin" and "... end"
# around it: the OOM killer's own report inside that window (from "invoked
# oom-killer" to its "Killed process" line, with its call trace) is not
# trouble; anything else there still is.
drop_expected_oom() {
	awk -v b="$m-EXPECT-OOM begin" -v e="$m-EXPECT-OOM end" '
		{ line = $0; sub(/\r$/, "", line) }
		line == b { win = 1; next }
		line == e { win = 0; rep = 0; next }
		win && /invoked oom-killer:/ { rep = 1 }
		rep { if (/Killed process [0-9]+ /) rep = 0; next }
		{ print }'
}
# kmemleak's note that it could not allocate the record of an object's scan
# area (under the fault injection of tests/faults, which may fail its
# allocations too) only says that it scans the whole object: not trouble.
benign='\] kmemleak: Cannot allocate a scan area, scanning the full object.?$'
# KNEM_VM_ALLOW_WARNING (a regex, tests/faults/run.sh): a kernel warning
# whose "WARNING: ... at FILE:LINE FUNCTION" line matches it is the
# kernel's known reaction to what the run does on purpose (its own
# allocation failing under fault injection), not trouble: its whole
# record, from "cut here" to "end trace", is left out, and so is the W
# taint when nothing else warned.  The guest must then boot with
# panic_on_warn=0 for the run to go on.  Any other warning still fails.
allowed_warnings=0
drop_allowed_warnings() {
	if [ -z "${KNEM_VM_ALLOW_WARNING:-}" ]; then
		cat
		return
	fi
	awk -v allow="${KNEM_VM_ALLOW_WARNING}" -v count="$work/allowed-warnings" '
		/\[ cut here \]/ { inrec = 1; rec = $0; ok = 0; next }
		inrec {
			rec = rec "\n" $0
			if (/WARNING: / && $0 ~ allow) ok = 1
			if (/---\[ end trace/) {
				inrec = 0
				if (ok) n++
				else print rec
			}
			next
		}
		{ print }
		END { if (inrec) print rec; print n + 0 > count }'
}
trouble=$(sed -n "/^$m-START /,\$p" "$log" | drop_expected_oom | drop_allowed_warnings |
	grep -avE "$benign" | grep -aE "$bad" | head -n 1 || true)
[ ! -s "$work/allowed-warnings" ] || allowed_warnings=$(cat "$work/allowed-warnings")
if [ "$allowed_warnings" -gt 0 ]; then
	echo "$prog: $allowed_warnings kernel warning(s) matching KNEM_VM_ALLOW_WARNING='$KNEM_VM_ALLOW_WARNING' left out of the verdict"
fi
[ -z "$trouble" ] || fail "kernel reported: $trouble (log: $log)"

# ---- Warnings and taint (tests/kernels) --------------------------------------
#
# From the start marker on, only messages at warning level or above reach
# the console (dmesg -n 5): any message of the module ("knem: ..." or a
# line naming the module "[knem]"), and any use of an interface the kernel
# calls deprecated, is a warning our module caused.  A line that merely
# names a process of ours (comm: knem-fuzz, e.g. the kernel refusing a huge
# mmap under overcommit) is not, nor are the two notices the kernel prints
# when it loads any unsigned out-of-tree module, nor the module's own
# info-level line for a region the access policy refused (it reaches the
# console on kernels that print every level there, 5.10-rt).  The W taint
# catches a WARN whose text the patterns above miss.
#
# A kernel message reaches the console as one record ending its line, but
# not always at the start of one: after a command's output that did not
# end in a newline it follows that text ("...text[   12.3] knem: ...").
# So each line is read from its first timestamp on, and a notice is
# allowed only as the whole of its record (anchored at both ends: it
# cannot hide a longer message that begins like it).
load_notices='knem: (loading out-of-tree module taints kernel\.|module verification failed: signature and/or required key missing - tainting kernel|.{1,15}\[[0-9]+\]: uid [0-9]+: region refused by access_policy=(uid|ptrace))'
kernel_records() {
	sed -n "/^$m-START /,\$p" "$1" | drop_expected_oom | drop_allowed_warnings |
		grep -aoE '\[ *[0-9]+\.[0-9]+\] .*' || true
}
trouble=$(kernel_records "$log" |
	grep -aE '^\[ *[0-9]+\.[0-9]+\] ((.*[^a-z_-])?(knem:|\[knem\])|.*deprecated)' |
	grep -avE "^\[ *[0-9]+\.[0-9]+\] $load_notices\$" | head -n 1 || true)
[ -z "$trouble" ] || fail "kernel warned: $trouble (log: $log)"
mtaint=$(sed -n "s/^$m-TAINT module=\([A-Z]*\) .*/\1/p" "$log" | tail -n 1)
taints=$(sed -n "s/^$m-TAINT before=\([0-9]*\) after=\([0-9]*\).*/\1 \2/p" "$log" | tail -n 1)
# The guest prints the taint line just before its exit marker.
[ -n "$taints" ] || fail "no taint line from the guest: the W taint cannot be checked (log: $log)"
read -r taint0 taint1 <<<"$taints"
echo "$prog: module taint '${mtaint}', kernel taint $taint0 before insmod, $taint1 at exit"
# TAINT_WARN is bit 9.
if (( (taint1 & 512) && !(taint0 & 512) )) && [ "$allowed_warnings" -eq 0 ]; then
	fail "the kernel took a warning taint (W) during the run (log: $log)"
fi
# ---- end of the warnings and taint block -----------------------------------

marker=$(grep -a "^$m-EXIT " "$log" | tail -n 1 || true)
[ -n "$marker" ] || fail "no exit marker from the guest ($engine status $qemu_status; log: $log)"
status=$(sed -n 's/.* status=\([0-9]*\).*/\1/p' <<<"$marker")
modstate=$(sed -n 's/.* module=\([a-z-]*\).*/\1/p' <<<"$marker")
case $modstate in
ok) ;;
insmod-failed)
	why=$(sed -n "s/^$m-INSMOD-ERROR //p" "$log" | tail -n 1)
	kmsg=$(sed -n "s/^$m-INSMOD-KERNEL //p" "$log" | tail -n 1)
	fail "insmod knem.ko failed: ${why:-no error message}; kernel: ${kmsg:-nothing} (log: $log)" ;;
rmmod-failed) fail "rmmod knem failed after the command (status $status; log: $log)" ;;
*) fail "unreadable exit marker '$marker' (log: $log)" ;;
esac

echo "$prog: command exited with status $status"
exit "$status"
