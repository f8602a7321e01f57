#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# build.sh KVER [OUTDIR] - build the test-only knem_dma_test.ko for KVER,
# in OUTDIR (default: build/KVER/dma-provider at the top of the tree).
set -euo pipefail
[ $# -ge 1 ] && [ $# -le 2 ] || { echo "usage: build.sh KVER [OUTDIR]" >&2; exit 1; }
kver=$1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
out=${2:-$top/build/$kver/dma-provider}
kdir=${KDIR:-/lib/modules/$kver/build}
[ -d "$kdir" ] || { echo "build.sh: no kernel build tree at $kdir" >&2; exit 1; }
mkdir -p "$out"
out=$(cd "$out" && pwd)
cp -p "$here"/Kbuild "$here"/knem_dma_test.c "$out"/
make -C "$kdir" M="$out" modules >&2
echo "$out/knem_dma_test.ko"
