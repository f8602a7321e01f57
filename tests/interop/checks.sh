# SPDX-License-Identifier: GPL-2.0-only
#
# Sourced by the interop guest scripts: the module's counters, and checks
# that compare them before and after a job.  Each check prints one line
#   interop: <check>: knem bytes +N (expected N), failed copies 0, regions 0, pinned 0
# and counts itself in $passed or $failed.  The caller sets $mpi_check for
# mpi_job.

sysfs=/sys/class/misc/knem
passed=0
failed=0
# The checks this run must pass, set from what it was asked to run (each
# script adds its own): a check that vanishes fails the run.
want_passed=0

# passed_line: the last line, "interop: N passed (expected M), N failed";
# succeeds when none failed and every expected check passed.
passed_line() {
	echo "interop: $passed passed (expected $want_passed), $failed failed"
	[ "$failed" -eq 0 ] && [ "$passed" -eq "$want_passed" ]
}

counter() { cat "$sysfs/$1"; }
knem_bytes() {
	echo $(($(counter bytes_inline_read) + $(counter bytes_inline_write) + \
		$(counter bytes_region_copy) + $(counter bytes_async)))
}

# coll_expected: the knem bytes coll_check computed for the job in $log.
coll_expected() {
	sed -n 's/^coll_check: .*knem bytes expected \([0-9]*\)$/\1/p' "$log"
}

# fail CHECK WHY [LOG]: CHECK failed.  The job's whole log (LOG, by
# default /tmp/CHECK.log when there is one) goes to the console first:
# the guest's /tmp dies with it, the console reaches the host (and CI).
fail() {
	fail_log=${3:-/tmp/$1.log}
	if [ -f "$fail_log" ]; then
		echo "interop: $1: the whole of $fail_log ($(wc -l < "$fail_log") lines):"
		sed 's/^/    | /' "$fail_log"
	fi
	echo "interop: $1: FAIL: $2"
	failed=$((failed + 1))
}

# verify CHECK EXPECTED BYTES0 FAILED0: the counters after a job against
# the snapshot taken before it.
verify() {
	name=$1 want=$2 b0=$3 f0=$4
	db=$(($(knem_bytes) - b0))
	df=$(($(counter copies_failed) - f0))
	regions=$(counter regions)
	pinned=$(counter pinned_pages)
	line="knem bytes +$db (expected $want), failed copies $df, regions $regions, pinned $pinned"
	if [ "$db" -eq "$want" ] && [ "$df" -eq 0 ] && [ "$regions" -eq 0 ] && [ "$pinned" -eq 0 ]; then
		echo "interop: $name: $line"
		passed=$((passed + 1))
	else
		fail "$name" "$line"
	fi
}

# run_check NAME EXPECTED CMD...: run CMD, which must succeed, then verify.
run_check() {
	name=$1 want=$2
	shift 2
	b0=$(knem_bytes) f0=$(counter copies_failed)
	"$@" > "/tmp/$name.log" 2>&1
	rc=$?
	if [ "$rc" -ne 0 ]; then
		fail "$name" "exited with status $rc"
		return
	fi
	verify "$name" "$want" "$b0" "$f0"
}

# mpi_check's report: "... large-message bytes N".
mpi_moved() { sed -n 's/^mpi_check: .*large-message bytes \([0-9]*\)$/\1/p' "/tmp/$1.log"; }

# mpi_job NAME EXPECTED LAUNCHER NP: run mpi_check with LAUNCHER (a
# function taking the rank count and the program), which must succeed
# with every byte verified ("bad bytes 0"), then verify.  EXPECTED "all"
# is the total mpi_check reports it moved.
mpi_job() {
	name=$1 want_knem=$2 launcher=$3 np=$4
	b0=$(knem_bytes) f0=$(counter copies_failed)
	# Rank 0's report on stdout apart from the ranks' stderr (as
	# knemrs.sh's coll_run): mpirun may cut lines where it reads.
	"$launcher" "$np" "$mpi_check" > "/tmp/$name.log.out" 2> "/tmp/$name.log.err"
	rc=$?
	cat "/tmp/$name.log.out" "/tmp/$name.log.err" > "/tmp/$name.log"
	if [ "$rc" -ne 0 ]; then
		fail "$name" "mpirun exited with status $rc"
		return
	fi
	grep '^mpi_check:' "/tmp/$name.log" | sed 's/^/    /'
	if ! grep -q '^mpi_check: .*, bad bytes 0,' "/tmp/$name.log"; then
		fail "$name" "mpi_check did not verify every byte"
		return
	fi
	if [ "$want_knem" = all ]; then
		want=$(mpi_moved "$name")
	else
		want=$want_knem
	fi
	verify "$name" "$want" "$b0" "$f0"
}

