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
# run under an 8 MiB memlock limit, each checked against knem's counters.
#
#   tests/interop/run.sh --knem-stat PATH [--kernel VERSION]...
#
# Work files go to build/interop/; each phase's time is printed.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/tests/interop/on-kernels.sh"
out=$top/build/interop
knem_stat=
kernels=()
while [ $# -gt 0 ]; do
	case $1 in
	--knem-stat) knem_stat=$(realpath "$2"); shift 2 ;;
	--kernel) kernels+=("$2"); shift 2 ;;
	*) echo "usage: tests/interop/run.sh --knem-stat PATH [--kernel VERSION]..." >&2; exit 2 ;;
	esac
done
[ -x "$knem_stat" ] || { echo "interop: --knem-stat names no program" >&2; exit 2; }
[ ${#kernels[@]} -gt 0 ] || kernels=(6.1)

mkdir -p "$out"
t=$SECONDS
phase() { echo "interop: $1 took $((SECONDS - t)) s"; t=$SECONDS; }

"$top/tests/interop/setup.sh" "$out/src"
phase "setup (apt)"
"$top/tests/interop/build-ucx.sh" "$out/src" "$out/ucx"
phase "UCX build"
mpicc -O2 -Wall -Wextra -Werror -o "$out/mpi_check" "$top/tests/interop/mpi_check.c"

status=0
run_on_kernels interop guest /opt/interop/guest.sh "$out/ucx" "$out/mpi_check" "$knem_stat" || status=1
exit $status
