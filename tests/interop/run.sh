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
phase "coll/knemrs's cache default on the host"

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
