#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# The interop stage: real clients over the module.  Installs Debian's Open
# MPI 4.1.4 and UCX 1.13.1's source (tests/interop/setup.sh), rebuilds UCX
# with knem against include/knem_io.h (tests/interop/build-ucx.sh), builds
# mpi_check with Debian's mpicc, then on each kernel boots the VM in the
# host's root filesystem (tests/vm/run --host-root) and runs
# tests/interop/guest.sh there: ucx_info, ucx_perftest at the UCT and UCP
# levels, Open MPI on 2 and 4 ranks, a CMA control run and an unprivileged
# run under an 8 MiB memlock limit, each checked against knem's counters;
# then coll/knemrs (mpi/openmpi/coll-knemrs, built here against Debian's
# Open MPI and the given libknem_rs.so) under coll_check.
#
#   tests/interop/run.sh --knem-stat PATH --capi-lib PATH [--kernel VERSION]...
#
# Work files go to build/interop/; each phase's time is printed.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/tests/interop/on-kernels.sh"
out=$top/build/interop
knem_stat=
capi_lib=
kernels=()
while [ $# -gt 0 ]; do
	case $1 in
	--knem-stat) knem_stat=$(realpath "$2"); shift 2 ;;
	--capi-lib) capi_lib=$(realpath "$2"); shift 2 ;;
	--kernel) kernels+=("$2"); shift 2 ;;
	*) echo "usage: tests/interop/run.sh --knem-stat PATH --capi-lib PATH [--kernel VERSION]..." >&2; exit 2 ;;
	esac
done
[ -x "$knem_stat" ] || { echo "interop: --knem-stat names no program" >&2; exit 2; }
[ -f "$capi_lib" ] || { echo "interop: --capi-lib names no libknem_rs.so" >&2; exit 2; }
[ ${#kernels[@]} -gt 0 ] || kernels=(6.1)

mkdir -p "$out"
t=$SECONDS
phase() { echo "interop: $1 took $((SECONDS - t)) s"; t=$SECONDS; }

"$top/tests/interop/setup.sh" "$out/src"
phase "setup (apt)"
"$top/tests/interop/build-ucx.sh" "$out/src" "$out/ucx"
phase "UCX build"
mpicc -O2 -Wall -Wextra -Werror -o "$out/mpi_check" "$top/tests/interop/mpi_check.c"
knemrs=$out/knemrs
"$top/tests/interop/build-knemrs.sh" "$out" "$capi_lib"
phase "coll/knemrs build"

status=0
# coll/knemrs's region cache default, here on the host over CMA (no module
# needed; the VM's guest runs chrooted, where no user namespace can be
# made): under an 8 MiB memlock limit, root keeps regions (CAP_IPC_LOCK
# exempts it from knem's pin limit) and root of a user namespace of its
# own does not (knem exempts the capability only in the initial one).
# knemrs_host NAME WANT [WRAPPER...]: coll_check verify on 2 ranks, every
# byte right and WANT logged for MPI_COMM_WORLD on both.
knemrs_host() {
	local name=$1 want=$2 log=$out/$1.log n
	shift 2
	rm -f "$log".*
	if ! (ulimit -l 8192 && exec env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		"$@" mpirun --oversubscribe -np 2 \
		--mca mca_base_component_path "$(ompi_info --parsable --path pkglibdir | cut -d: -f3):$knemrs" \
		--mca pml ob1 --mca btl self,vader --mca coll_knemrs_transport cma \
		--mca coll_knemrs_threshold 4096 --mca coll_base_verbose 10 \
		"$top/tests/interop/rank-files.sh" "$log" "$out/coll_check" verify 65536) > "$log.out" 2> "$log.err"; then
		cat "$log.out" "$log".[0-9]*.out "$log.err" "$log".[0-9]*.err > "$log" 2> /dev/null
		sed 's/^/    | /' "$log"
		echo "interop: $name: FAIL: mpirun failed (the whole log above, and in $log)"
		return 1
	fi
	# Each rank's output in files of its own (tests/interop/knemrs.sh's
	# coll_run says why).
	cat "$log.out" "$log".[0-9]*.out "$log.err" "$log".[0-9]*.err > "$log" 2> /dev/null
	n=$(grep -ac "coll:knemrs: MPI_COMM_WORLD: $want" "$log")
	if ! grep -aq '^coll_check: .*, bad bytes 0,' "$log" || [ "$n" -ne 2 ]; then
		sed 's/^/    | /' "$log"
		echo "interop: $name: FAIL: '$want' on $n of 2 ranks, or bad bytes (the whole log above, and in $log)"
		return 1
	fi
	echo "interop: $name: '$want' on both ranks, every byte verified"
}
knemrs_host knemrs-cache-root-host 'region cache of 64 regions' || status=1
knemrs_host knemrs-cache-userns-host \
	"no region cache: this rank.s pins are limited (RLIMIT_MEMLOCK 8192 KiB)" \
	unshare --user --map-root-user || status=1
# The memory hooks the cache needs: installed in MPI_Init, each rank's
# self-test line before its first team (the patcher rewrites munmap and
# friends in place: not while the application's threads may run), and
# not installed at all where no team will keep regions.
# hooks_first LOG: ranks whose self-test passed before their first team.
hooks_first() {
	awk '/coll:knemrs: memory hooks installed in MPI_Init; self-test: the munmap of a page was reported/ {
			if (!($1 in team)) ok[$1] = 1 }
		/coll:knemrs: MPI_COMM_WORLD: team / { team[$1] = 1 }
		END { n = 0; for (r in ok) n++; print n }' "$1"
}
n=$(hooks_first "$out/knemrs-cache-root-host.log")
m=$(grep -ac 'coll:knemrs: memory hooks installed' "$out/knemrs-cache-userns-host.log" || true)
if [ "$n" -ne 2 ] || [ "$m" -ne 0 ]; then
	echo "interop: knemrs-hooks-host: FAIL: hooks self-tested before the first team on $n of 2 ranks;" \
		"installed on $m ranks that keep no regions"
	status=1
else
	echo "interop: knemrs-hooks-host: installed and self-tested in MPI_Init on both ranks, before" \
		"their first team; not installed where pins are limited"
fi
phase "coll/knemrs's cache default on the host"

# The team's control block, on the host over CMA: another user (nobody)
# plants files and symbolic links in /dev/shm where a team may look.
# With fs.protected_regular and fs.protected_symlinks at 0 (the kernel's
# defaults; the run prints the host's), a team that opened its name with
# O_CREAT used them: nobody's file as its control block (nobody
# reads and rewrites the descriptors), a link to truncate root's file.
#  - under a pid namespace of its own (rank 0's pid is then small),
#    knemrs-<pid>-<n> for pids 1..300 and n 0..3, the names rank 0 used
#    to pick: the random name never meets them, and the team works;
#  - coll_knemrs_team_name set to a planted file, then to a planted link:
#    rank 0 cannot create the block (EEXIST) and every rank falls back to
#    the saved modules together, every byte right.
# Afterwards every planted file is still empty and nobody's, every link
# still a link, the victim file still whole.
knemrs_planted() {
	local shm=/dev/shm victim=/dev/shm/knemrs-victim-$$ file=knemrs-planted-file-$$
	local link=knemrs-planted-link-$$ rc=0 sum bad left
	echo "interop: planted names: fs.protected_regular $(sysctl -n fs.protected_regular)," \
		"fs.protected_symlinks $(sysctl -n fs.protected_symlinks)"
	head -c 100000 /dev/zero | tr '\0' V > "$victim"
	sum=$(md5sum < "$victim")
	setpriv --reuid=nobody --regid=nogroup --clear-groups sh -c '
		umask 0
		for pid in $(seq 1 300); do
			: > "$1/knemrs-$pid-0"; ln -s "$2" "$1/knemrs-$pid-1"
			: > "$1/knemrs-$pid-2"; ln -s "$2" "$1/knemrs-$pid-3"
		done
		: > "$1/$3"; ln -s "$2" "$1/$4"' sh "$shm" "$victim" "$file" "$link"
	knemrs_host knemrs-planted-pidns-host \
		'team knemrs-[0-9]*-[0-9]*-[0-9a-f]\{32\} of 2 ranks over cma' \
		unshare --pid --fork --mount-proc || rc=1
	knemrs_host knemrs-planted-file-host 'a rank could not attach the team' \
		env OMPI_MCA_coll_knemrs_team_name="$file" || rc=1
	knemrs_host knemrs-planted-link-host 'a rank could not attach the team' \
		env OMPI_MCA_coll_knemrs_team_name="$link" || rc=1
	for n in file link; do
		if [ "$(grep -ac "coll:knemrs: MPI_COMM_WORLD: rank 0 could not create the team's control block: .*knemrs-planted-$n-$$: File exists" \
			"$out/knemrs-planted-$n-host.log")" -ne 1 ]; then
			echo "interop: knemrs-planted-$n-host: FAIL: rank 0 did not refuse the planted name"
			rc=1
		fi
	done
	# A team that used a planted file also unlinked it.
	bad=$(find "$shm" -maxdepth 1 -name 'knemrs-*' -user nobody \( -type f -size +0c -o \
		! -type f ! -type l \) | wc -l)
	left=$(find "$shm" -maxdepth 1 -name 'knemrs-*' -user nobody | wc -l)
	if [ "$bad" -ne 0 ] || [ "$left" -ne $((4 * 300 + 2)) ] || [ "$(md5sum < "$victim")" != "$sum" ]; then
		echo "interop: knemrs-planted: FAIL: $bad planted files written, $left of $((4 * 300 + 2))" \
			"planted names left, victim file of $(stat -c %s "$victim") bytes (100000 planted)"
		rc=1
	else
		echo "interop: knemrs-planted: $left planted names left alone, the victim file whole"
	fi
	find "$shm" -maxdepth 1 -name 'knemrs-*' -user nobody -delete
	rm -f "$victim"
	return $rc
}
knemrs_planted || status=1
phase "coll/knemrs's control block against planted names on the host"

# coll/knemrs's fallbacks, timing mode and missing transport are
# userspace decisions that move no byte through the module (the timing
# mode repeats verify's copies): the first kernel runs them, the others
# only the verify runs (make interop-smsc runs them again with Open MPI
# 5.0.7 and 6.0).
all_kernels=("${kernels[@]}")
kernels=("${all_kernels[0]}")
run_on_kernels interop guest /opt/interop/guest.sh "$out/ucx" "$out/mpi_check" "$knem_stat" \
	"$knemrs" "$out/coll_check" all || status=1
if [ ${#all_kernels[@]} -gt 1 ]; then
	kernels=("${all_kernels[@]:1}")
	run_on_kernels interop guest /opt/interop/guest.sh "$out/ucx" "$out/mpi_check" "$knem_stat" \
		"$knemrs" "$out/coll_check" verify || status=1
fi
exit $status
