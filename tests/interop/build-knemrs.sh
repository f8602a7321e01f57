#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# coll/knemrs and coll_check for the host's Open MPI (4.1.4 on Debian 12):
#
#   tests/interop/build-knemrs.sh OUT CAPI_LIB
#
# OUT/knemrs/ holds mca_coll_knemrs.so, knemrs-tune and lib/libknem_rs.so.0 (a copy of
# CAPI_LIB under its soname, which the component names as its run path),
# OUT/coll_check the test program.  The release chroots' builds are
# tests/interop/ompi-chroot.sh build's.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
[ $# -eq 2 ] || { echo "usage: tests/interop/build-knemrs.sh OUT CAPI_LIB" >&2; exit 2; }
out=$1 capi_lib=$2
knemrs=$out/knemrs
rm -rf "$knemrs"
mkdir -p "$knemrs/lib"
cp "$capi_lib" "$knemrs/lib/libknem_rs.so.0"
ln -sf libknem_rs.so.0 "$knemrs/lib/libknem_rs.so"
make -s -C "$top/mpi/openmpi/coll-knemrs" -B OUT="$knemrs" KNEM_RS_LIB="$knemrs/lib"
make -s -C "$top/mpi/openmpi/knemrs-tune" -B OUT="$knemrs" KNEM_RS_LIB="$knemrs/lib" \
	'KNEM_RS_RPATH=$$ORIGIN/lib'
mpicc -O2 -Wall -Wextra -Werror -o "$out/coll_check" "$top/tests/interop/coll_check.c"
