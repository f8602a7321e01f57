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

# coll/knemrs's fallbacks, timing mode and missing transport are
# userspace decisions that move no byte through the module (the timing
# mode repeats verify's copies): the first kernel runs them, the others
# only the verify runs (make interop-smsc runs them again with Open MPI
# 5.0.7 and 6.0).
status=0
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
