# SPDX-License-Identifier: GPL-2.0-only
#
# Sourced by tests/interop/guest.sh after checks.sh, with $knemrs (the
# directory of mca_coll_knemrs.so) and $coll_check set: coll/knemrs in
# Debian's Open MPI 4.1.4 under coll_check, each job checked against
# knem's counters and coll_base_verbose's record of the selection.
# tests/interop/guest-smsc.sh sources it for Open MPI 5 and 6, setting
#   knemrs_launch     mpirun's mapping options (4.1: --oversubscribe)
#   knemrs_path       the ranks' component path (4.1: pkglibdir and $knemrs)
#   knemrs_transport  Open MPI's shared-memory MCA options (4.1: btl vader)
#   knemrs_label      a prefix of the check names
#   knemrs_suite      "no-bench": all but the timing mode, which
#                     make interop-smsc-bench runs on 6.0 (4.1: "all";
#                     "verify", only the verify runs: run.sh's kernels
#                     after the first, where the rest would repeat the
#                     first kernel's userspace decisions)

# Open MPI's own components plus ours; point to point over ob1 and vader
# (CMA single copy), so that knem's counters see only what coll/knemrs
# moved.  Blocks from 4 KiB on go to knem-rs (coll_check reads the
# threshold back through MPI_T to compute the bytes).
knemrs_t0=$(date +%s)
pkglibdir=$(ompi_info --parsable --path pkglibdir | sed 's/^path:pkglibdir://')
knemrs_launch=${knemrs_launch:---oversubscribe}
knemrs_path=${knemrs_path:-$pkglibdir:$knemrs}
knemrs_transport=${knemrs_transport:---mca pml ob1 --mca btl self,vader}
knemrs_label=${knemrs_label:-}
knemrs_suite=${knemrs_suite:-all}
# coll_knemrs_threshold of the jobs (-1 for the rules job: the rules decide).
knemrs_threshold=4096
# The checks below that count a pass: verify on 2 and 4 ranks; then the
# fallbacks, no transport, the cache, memlock and unaccounted jobs, and
# with "all" the timing mode.
case $knemrs_suite in
verify) want_passed=$((want_passed + 2)) ;;
no-bench) want_passed=$((want_passed + 10)) ;;
*) want_passed=$((want_passed + 11)) ;;
esac
# Each rank writes its output to files of its own (rank-files.sh, in
# coll_run's $log.RANK.out and .err), not through mpirun.
rank_files=$(dirname "$0")/rank-files.sh
mpirun_knemrs() {
	np=$1
	shift
	# shellcheck disable=SC2086 # the option lists split into words
	mpirun $knemrs_launch -np "$np" \
		--mca mca_base_component_path "$knemrs_path" \
		$knemrs_transport \
		--mca coll_knemrs_threshold "$knemrs_threshold" --mca coll_base_verbose 10 \
		"$rank_files" "$log" "$@"
}

# coll_job NAME EXPECTED NP ARGS...: coll_check ARGS on NP ranks, every
# byte verified; coll/knemrs selected for MPI_COMM_WORLD on every rank;
# knem moved EXPECTED bytes ("all": what coll_check computed).  With
# EXPECTED "all" each rank must also have made the team over knem.
# coll_run NAME COMMAND...: run a coll_check job into /tmp/NAME.log (as
# $log), show its report, and fail NAME (returning 1) unless it exited 0
# with every byte verified.
# COMMAND starts the ranks through rank-files.sh "$log" (mpirun_knemrs
# and knemrs_as_nobody do): mpirun forwards what the ranks write as it
# reads it, up to 4 KiB at a time, so a read can end inside a line, and
# through mpirun into one file rank 0's report could land in the middle
# of another rank's coll_base_verbose line, where "^coll_check:" does not
# find it (nor a count of verbose lines the cut one).  $log is mpirun's
# stdout, the ranks' stdout, mpirun's stderr, the ranks' stderr.
coll_run() {
	local t0 rc
	name=$1
	shift
	log=/tmp/$name.log
	rm -f "$log".*
	t0=$(date +%s)
	"$@" > "$log.out" 2> "$log.err"
	rc=$?
	cat "$log.out" "$log".[0-9]*.out "$log.err" "$log".[0-9]*.err > "$log" 2> /dev/null
	if [ "$rc" -ne 0 ]; then
		fail "$name" "mpirun exited with status $rc"
		return 1
	fi
	grep -a '^coll_check:\|^  \|^# ' "$log" | sed 's/^/    /'
	echo "    ($(($(date +%s) - t0)) s)"
	if ! grep -aq '^coll_check: .*, bad bytes 0,' "$log"; then
		fail "$name" "coll_check did not verify every byte"
		return 1
	fi
}

coll_job() {
	name=$knemrs_label$1 want=$2 np=$3
	shift 3
	b0=$(knem_bytes) f0=$(counter copies_failed)
	coll_run "$name" mpirun_knemrs "$np" "$coll_check" "$@" || return
	selected=$(grep -ac 'coll:base:comm_select: selecting *knemrs, priority *40, Enabled' "$log")
	enabled=$(grep -ac 'coll:knemrs: enabled on MPI_COMM_WORLD' "$log")
	teams=$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: team knemrs-[0-9a-f-]* of [0-9]* ranks over knem;' "$log")
	echo "    knemrs selected on $selected ranks, enabled on $enabled, team over knem on $teams"
	# Base's "selecting" lines do not name the communicator (duplicates
	# add theirs); ours do.
	if [ "$selected" -lt "$np" ] || [ "$enabled" -ne "$np" ]; then
		fail "$name" "coll/knemrs not selected for MPI_COMM_WORLD on every rank"
		return
	fi
	left=$(ls /dev/shm | grep -c '^knemrs-')
	if [ "$left" -ne 0 ]; then
		fail "$name" "$left team control blocks left in /dev/shm"
		return
	fi
	if [ "$want" = all ]; then
		want=$(coll_expected)
		if [ "$teams" -ne "$np" ] || [ -z "$want" ] || [ "$want" -eq 0 ]; then
			fail "$name" "no team over knem on every rank, or nothing expected"
			return
		fi
	fi
	verify "$name" "$want" "$b0" "$f0"
}

# Every operation x 0, 1, 4K+1, 64K, 1M+3 and 16M bytes x every root x in
# place, then a 64K bcast on each of three duplicates of MPI_COMM_WORLD.
# Each duplicate of MPI_COMM_WORLD made a team of its own, freed with it.
dup_teams() {
	set -- "$knemrs_label$1" "$2"
	freed=$(grep -ac 'coll:knemrs: team freed after bcast 1, scatter 0, gather 0, allgather 0, alltoall 0 calls' "/tmp/$1.log")
	if [ "$freed" -ne $((3 * $2)) ]; then
		fail "$1-dup-teams" "$freed teams of the 3 duplicates freed on $2 ranks" "/tmp/$1.log"
	fi
}
# The 16 MiB size on 4.1 ("all"); elsewhere to 1M+3 (TCG time).
verify_max=$((2 << 20))
[ "$knemrs_suite" != all ] || verify_max=$((16 << 20))
coll_job knemrs-verify-2 all 2 verify "$verify_max"
dup_teams knemrs-verify-2 2
coll_job knemrs-verify-4 all 4 verify "$verify_max"
dup_teams knemrs-verify-4 4
if [ "$knemrs_suite" = verify ]; then
	echo "interop: coll/knemrs checks took $(($(date +%s) - knemrs_t0)) s"
	return 0
fi
# What coll/knemrs leaves to tuned: 128 KiB vector datatypes (also on
# some ranks only) and MPI_Reduce; the team exists, knem moves nothing.
coll_job knemrs-fallback-4 0 4 fallback
if ! grep -aq 'coll:knemrs: MPI_COMM_WORLD: team .* over knem;' /tmp/${knemrs_label}knemrs-fallback-4.log; then
	fail ${knemrs_label}knemrs-fallback-4-team "the fallbacks ran without a team: not a decision of coll/knemrs" \
		/tmp/${knemrs_label}knemrs-fallback-4.log
fi
# The timing mode: coll/knemrs and what it replaced, OSU style; the
# knemrs half is accounted like the rest (coll_check sums its calls).
# Only to 64 KiB here: under TCG tuned's 1 MiB calls alone add two
# minutes per kernel (docs/PERFORMANCE.md has a run to 4 MiB).
if [ "$knemrs_suite" = all ]; then
	coll_job knemrs-bench-4 all 4 bench 3 65536
fi
# No transport (a name libknem_rs does not know): every rank falls back
# together, knem moves nothing, every byte still right (sizes to 64K).
OMPI_MCA_coll_knemrs_transport=none
export OMPI_MCA_coll_knemrs_transport
coll_job knemrs-no-transport-2 0 2 verify 65536
unset OMPI_MCA_coll_knemrs_transport
if ! grep -aq 'coll:knemrs: MPI_COMM_WORLD: transport missing on some rank' /tmp/${knemrs_label}knemrs-no-transport-2.log; then
	fail ${knemrs_label}knemrs-no-transport-2 "coll/knemrs did not report the missing transport"
fi

# ---- Region cache and declined calls -----------------------------------------

# knemrs_as_nobody NP ARGS...: mpirun_knemrs as nobody, with the memlock
# limit raised for the ranks (a rank may lower its own again).
knemrs_as_nobody() {
	np=$1
	shift
	mkdir -p /tmp/nobody && chown nobody /tmp/nobody
	# shellcheck disable=SC2086 # the option lists split into words
	(ulimit -l unlimited && exec setpriv --reuid=nobody --regid=nogroup --clear-groups \
		env HOME=/tmp/nobody TMPDIR=/tmp/nobody "$(command -v mpirun)" $knemrs_launch \
		-np "$np" --mca mca_base_component_path "$knemrs_path" $knemrs_transport \
		--mca coll_knemrs_threshold 4096 --mca coll_base_verbose 10 "$rank_files" "$log" "$@")
}

knemrs_cache_checks() {
	local name np=4 calls=10 repeats created heap hits misses invalidated reports all want rc0 drc
	# The same buffers over and over: each rank declares a region per
	# buffer and operation (at most two of each: root and not) instead of
	# one per call; then buffers given new pages at the same address
	# between calls, which only the memory hooks' reports keep right, and
	# malloc heap buffers trimmed and grown again, which Open MPI 5's and
	# 6's hooks do not report (libknem_rs never keeps those).  The cache
	# is on by default here: root pins without limit (CAP_IPC_LOCK).
	#
	# Each rank looks up one buffer per call of the duplicate: a hit, or a
	# miss that declares a region.  So, from coll_check's call count and
	# knem's regions_created (not from the cache's own report): the ranks'
	# misses are the regions knem created, their hits the rest of
	# np x calls.  Every call after new pages misses, and its region is
	# the one the next new pages invalidate; the first of them also drops
	# the region each rank kept for its other buffer: 2 + (5 x 3 - 1)
	# invalidated per rank.  The heap calls (5 x 2, more when a free did
	# not trim the heap: coll_check's count) never keep a region.
	name=${knemrs_label}knemrs-cache-$np
	b0=$(knem_bytes) f0=$(counter copies_failed) rc0=$(counter regions_created)
	coll_run "$name" mpirun_knemrs "$np" "$coll_check" cache "$calls" || return
	drc=$(($(counter regions_created) - rc0))
	repeats=$(sed -n 's/^coll_check: cache: repeats \([0-9]*\), regions created [0-9]*$/\1/p' "$log")
	created=$(sed -n 's/^coll_check: cache: repeats [0-9]*, regions created \([0-9]*\)$/\1/p' "$log")
	all=$(sed -n 's/^coll_check: cache: ranks [0-9]*, calls \([0-9]*\), bad bytes 0, .*$/\1/p' "$log")
	heap=$(sed -n 's/^coll_check: heap: calls \([0-9]*\), .*$/\1/p' "$log")
	reports=$(grep -ac 'coll:knemrs: region cache: hits [0-9]*, misses [0-9]*, invalidated [0-9]*,' "$log")
	sum_field() {
		sed -n "s/^.*coll:knemrs: region cache: .*$1 \\([0-9]*\\),.*\$/\\1/p" "$log" | awk '{ s += $1 } END { print s + 0 }'
	}
	hits=$(sum_field hits) misses=$(sum_field misses) invalidated=$(sum_field invalidated)
	line="regions created $created in $repeats repeated calls on $np ranks ($((repeats * np)) without the cache), heap calls $heap"
	line="$line; the cache's reports on $reports ranks: hits $hits (expected $((np * ${all:-0} - drc))), misses $misses"
	line="$line (expected knem's regions created, $drc), invalidated $invalidated (expected $((np * (2 + 5 * 3 - 1))))"
	if [ -z "$created" ] || [ -z "$all" ] || [ -z "$repeats" ] || [ -z "$heap" ] ||
		[ "$repeats" -ne $((5 * calls)) ] || [ "$created" -gt $((2 * 5 * np)) ] || [ "$heap" -lt $((5 * 2)) ] ||
		[ "$all" -ne $((1 + 5 * calls + 5 * 3 + heap)) ] || [ "$reports" -ne "$np" ] ||
		[ "$misses" -ne "$drc" ] || [ "$drc" -ne $((np * (1 + 5 * 3 + heap) + created)) ] ||
		[ "$hits" -ne $((np * all - drc)) ] || [ "$invalidated" -ne $((np * (2 + 5 * 3 - 1))) ] ||
		[ "$(grep -ac 'coll:knemrs: .*: region cache of 64 regions' "$log")" -ne "$np" ]; then
		fail "$name" "$line; at most $((2 * 5 * np)) created in the repeats, heap calls ${heap:-missing} (at least 10), $((1 + 5 * calls + 5 * 3 + ${heap:-10})) calls, a cache on every rank"
		return
	fi
	echo "interop: $name: $line"
	want=$(coll_expected)
	verify "$name" "$want" "$b0" "$f0"

	knemrs_memlock_check
}

knemrs_memlock_check() {
	local name np refused0 b0 f0 t0 secs line declined named want cached uncached
	# Rank 1 of 3 may pin nothing (memlock 0, as nobody): every call it
	# cannot declare a region for is declined on every rank together and
	# carried by tuned.  Before, rank 1's call failed and the job aborted
	# (or, had it gone on, its peers would have waited 120 s for it).
	# Each rank says so on its first declined call of each operation, and
	# counts them when the team is freed.
	np=3
	name=${knemrs_label}knemrs-memlock-$np
	refused0=$(counter pins_refused_memlock)
	b0=$(knem_bytes) f0=$(counter copies_failed)
	t0=$(date +%s)
	coll_run "$name" knemrs_as_nobody "$np" sh -c \
		'if [ "$OMPI_COMM_WORLD_RANK" = 1 ]; then ulimit -l 0; fi; exec "$@"' sh \
		"$coll_check" verify 4097 || return
	secs=$(($(date +%s) - t0))
	declined=$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: .* declined by knem-rs (rank(s) \[1\] could not' "$log")
	named=$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: .* declined by knem-rs (.*here: .*RLIMIT_MEMLOCK' "$log")
	# The region cache's default follows each rank's pin limit: on for
	# ranks 0 and 2 (memlock unlimited), off for rank 1.
	cached=$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: region cache of 64 regions' "$log")
	uncached=$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: no region cache: this rank.s pins are limited (RLIMIT_MEMLOCK 0 KiB)' "$log")
	line="first declined call per operation logged $declined times ($named naming RLIMIT_MEMLOCK)"
	line="$line, region cache on $cached ranks, off for the pin limit on $uncached"
	line="$line, pins refused +$(($(counter pins_refused_memlock) - refused0)), job $secs s"
	if [ "$declined" -ne $((5 * np)) ] || [ "$named" -ne 5 ] || [ "$cached" -ne 2 ] || [ "$uncached" -ne 1 ] ||
		[ "$(grep -ac 'declined by knem-rs and carried by the saved module' "$log")" -lt "$np" ] ||
		[ "$(counter pins_refused_memlock)" -eq "$refused0" ]; then
		fail "$name" "$line; expected 5 operations x $np ranks declined for rank 1's memlock (5 named there), a cache on ranks 0 and 2 only"
		return
	fi
	echo "interop: $name: $line"
	verify "$name" 0 "$b0" "$f0"
}
knemrs_unaccounted_check() {
	local name np=2 param=/sys/module/knem/parameters/account_pinned b0 f0 rc cached want
	# knem loaded not to count pins (account_pinned=N): the cache's
	# default is on even under a small memlock limit, and the pins the
	# limit would refuse go through.
	name=${knemrs_label}knemrs-unaccounted-$np
	b0=$(knem_bytes) f0=$(counter copies_failed)
	echo N > "$param"
	coll_run "$name" knemrs_as_nobody "$np" sh -c 'ulimit -l 64; exec "$@"' sh \
		"$coll_check" verify 65536
	rc=$?
	echo Y > "$param"
	[ "$rc" -eq 0 ] || return
	cached=$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: region cache of 64 regions' "$log")
	if [ "$cached" -ne "$np" ]; then
		fail "$name" "region cache on $cached of $np ranks with account_pinned=N"
		return
	fi
	echo "interop: $name: region cache on $cached of $np ranks under memlock 64 KiB"
	want=$(coll_expected)
	verify "$name" "$want" "$b0" "$f0"
}

# ---- Rules tuned on this node ------------------------------------------------

# knemrs-tune on 4 ranks, every operation at 4 KiB and 64 KiB per block
# (a few seconds of TCG per operation), then coll_check verify on 4 ranks
# with those rules in force (threshold -1): every byte right, and knem
# moved exactly what the rules give knem-rs (coll_check asks
# knem_rs_rules_decide of libknem_rs for each call).  At these sizes the
# tuning usually hands every call over, which would leave the rules' knem
# path unused: the job's file is the tuned one with bcast, scatter and
# gather given to knem-rs wherever it handed over (allgather and alltoall
# keep the tuned choices), so knem must move bytes under rules too.  Then
# a rules file that is not one: rank 0 says so in one line, the model
# decides, every byte still right.
knemrs_rules_checks() {
	local name=${knemrs_label}knemrs-tune-4 rules=/tmp/knemrs-rules.json rc t0 points in_force
	t0=$(date +%s)
	rm -f "$rules"
	# shellcheck disable=SC2086 # the option lists split into words
	mpirun $knemrs_launch -np 4 --mca mca_base_component_path "$knemrs_path" $knemrs_transport \
		"$knemrs/knemrs-tune" --ranks 4 --sizes 4K,64K --reps 5,10 --seconds 10 \
		--out "$rules" > "/tmp/$name.log" 2>&1
	rc=$?
	grep -a '^knemrs-tune:' "/tmp/$name.log" | sed 's/^/    /'
	points=$(grep -ac '^knemrs-tune: [a-z]* on 4 ranks, [0-9]* B per block: ' "/tmp/$name.log")
	if [ "$rc" -ne 0 ] || [ "$points" -ne 10 ] || [ ! -s "$rules" ] ||
		! grep -aq "^knemrs-tune: rules for 1 team size(s) written to $rules" "/tmp/$name.log"; then
		fail "$name" "knemrs-tune exited with status $rc after $points of 10 decisions"
		return
	fi
	echo "interop: $name: 10 decisions on 4 ranks in $(($(date +%s) - t0)) s"
	passed=$((passed + 1))

	# The case's "op" comes before its "ranges", and its "points" after.
	awk 'BEGIN { alg["bcast"] = "direct-read"; alg["scatter"] = "direct-read"; alg["gather"] = "direct-write" }
		/"op": / { op = $2; gsub(/[",]/, "", op) }
		/"ranges": \[/ { in_ranges = 1 }
		/"points": \[/ { in_ranges = 0 }
		in_ranges && (op in alg) { sub(/"choice": "hand-over"/, "\"choice\": \"" alg[op] "\"") }
		{ print }' "$rules" > "$rules.knem"
	mv "$rules.knem" "$rules"
	OMPI_MCA_coll_knemrs_rules=$rules
	export OMPI_MCA_coll_knemrs_rules
	knemrs_threshold=-1
	coll_job knemrs-rules-4 all 4 verify 65536 "$rules" "$knemrs/lib/libknem_rs.so.0"
	knemrs_threshold=4096
	unset OMPI_MCA_coll_knemrs_rules
	in_force=$(grep -ac "coll:knemrs: MPI_COMM_WORLD: rules $rules in force on 4 ranks" \
		"/tmp/${knemrs_label}knemrs-rules-4.log")
	if [ "$in_force" -ne 1 ]; then
		fail "${knemrs_label}knemrs-rules-4-in-force" "rank 0 said $in_force times that the rules are in force" \
			"/tmp/${knemrs_label}knemrs-rules-4.log"
	fi

	OMPI_MCA_coll_knemrs_rules=/etc/passwd
	export OMPI_MCA_coll_knemrs_rules
	coll_job knemrs-bad-rules-2 all 2 verify 65536
	unset OMPI_MCA_coll_knemrs_rules
	if [ "$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: rules /etc/passwd: not a knem-rs rules file .*; the model decides$' \
		"/tmp/${knemrs_label}knemrs-bad-rules-2.log")" -ne 1 ]; then
		fail "${knemrs_label}knemrs-bad-rules-2-line" "not one line naming /etc/passwd as no rules file" \
			"/tmp/${knemrs_label}knemrs-bad-rules-2.log"
	fi
}

knemrs_cache_checks
knemrs_unaccounted_check
knemrs_rules_checks
echo "interop: coll/knemrs checks took $(($(date +%s) - knemrs_t0)) s"
