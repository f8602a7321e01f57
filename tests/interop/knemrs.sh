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
mpirun_knemrs() {
	np=$1
	shift
	# shellcheck disable=SC2086 # the option lists split into words
	mpirun $knemrs_launch -np "$np" \
		--mca mca_base_component_path "$knemrs_path" \
		$knemrs_transport \
		--mca coll_knemrs_threshold 4096 --mca coll_base_verbose 10 "$@"
}

# coll_job NAME EXPECTED NP ARGS...: coll_check ARGS on NP ranks, every
# byte verified; coll/knemrs selected for MPI_COMM_WORLD on every rank;
# knem moved EXPECTED bytes ("all": what coll_check computed).  With
# EXPECTED "all" each rank must also have made the team over knem.
# coll_run NAME COMMAND...: run a coll_check job into /tmp/NAME.log (as
# $log), show its report, and fail NAME (returning 1) unless it exited 0
# with every byte verified.
coll_run() {
	local t0 rc
	name=$1
	shift
	log=/tmp/$name.log
	t0=$(date +%s)
	"$@" > "$log" 2>&1
	rc=$?
	if [ "$rc" -ne 0 ]; then
		grep -av 'mca: base\|coll:find_available\|comm_select\|comm_query\|comm_unselect' "$log" |
			sed 's/^/    /' | tail -n 30
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
	teams=$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: team knemrs-[0-9-]* of [0-9]* ranks over knem;' "$log")
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
	case $want in
	all)
		want=$(sed -n 's/^coll_check: .*knem bytes expected \([0-9]*\)$/\1/p' "$log")
		if [ "$teams" -ne "$np" ] || [ -z "$want" ] || [ "$want" -eq 0 ]; then
			fail "$name" "no team over knem on every rank, or nothing expected"
			return
		fi
		;;
	esac
	verify "$name" "$want" "$b0" "$f0"
}

# Every operation x 0, 1, 4K+1, 64K, 1M+3 bytes x every root x in place,
# then a 64K bcast on each of three duplicates of MPI_COMM_WORLD.
# Each duplicate of MPI_COMM_WORLD made a team of its own, freed with it.
dup_teams() {
	set -- "$knemrs_label$1" "$2"
	freed=$(grep -ac 'coll:knemrs: team freed after bcast 1, scatter 0, gather 0, allgather 0, alltoall 0 calls' "/tmp/$1.log")
	if [ "$freed" -ne $((3 * $2)) ]; then
		fail "$1-dup-teams" "$freed teams of the 3 duplicates freed on $2 ranks"
	fi
}
coll_job knemrs-verify-2 all 2 verify
dup_teams knemrs-verify-2 2
coll_job knemrs-verify-4 all 4 verify
dup_teams knemrs-verify-4 4
if [ "$knemrs_suite" = verify ]; then
	echo "interop: coll/knemrs checks took $(($(date +%s) - knemrs_t0)) s"
	return 0
fi
# What coll/knemrs leaves to tuned: 128 KiB vector datatypes (also on
# some ranks only) and MPI_Reduce; the team exists, knem moves nothing.
coll_job knemrs-fallback-4 0 4 fallback
if ! grep -aq 'coll:knemrs: MPI_COMM_WORLD: team .* over knem;' /tmp/${knemrs_label}knemrs-fallback-4.log; then
	fail knemrs-fallback-4-team "the fallbacks ran without a team: not a decision of coll/knemrs"
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
	fail knemrs-no-transport-2 "coll/knemrs did not report the missing transport"
fi
echo "interop: coll/knemrs checks took $(($(date +%s) - knemrs_t0)) s"
