#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# make interop-ompi5 (not part of make test: the build takes about 35
# minutes): Open MPI 5 from Debian's source with smsc/knem
# (tests/interop/build-ompi5.sh), mpi_check built with its mpicc, run in the
# VM on each kernel by tests/interop/guest-ompi5.sh.
#
#   tests/interop/ompi5.sh [--kernel VERSION]...
#
# Work files go to build/interop/; each phase's time is printed.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/tests/interop/on-kernels.sh"
out=$top/build/interop
kernels=()
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernels+=("$2"); shift 2 ;;
	*) echo "usage: tests/interop/ompi5.sh [--kernel VERSION]..." >&2; exit 2 ;;
	esac
done
[ ${#kernels[@]} -gt 0 ] || kernels=(6.1)

mkdir -p "$out"
t=$SECONDS
phase() { echo "interop-ompi5: $1 took $((SECONDS - t)) s"; t=$SECONDS; }

"$top/tests/interop/build-ompi5.sh" "$out/ompi5-src" "$out/ompi5"
phase "Open MPI 5 build"
"$out/ompi5/bin/mpicc" -O2 -Wall -Wextra -Werror -o "$out/mpi_check5" "$top/tests/interop/mpi_check.c"

status=0
run_on_kernels interop-ompi5 guest-ompi5 /opt/interop/guest-ompi5.sh "$out/ompi5" "$out/mpi_check5" || status=1
exit $status
