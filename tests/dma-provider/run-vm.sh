#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# run-vm.sh [--kernel VERSION] [SUBSTRING...] - the in-VM suite with the
# test-only software DMA provider loaded first, so every KNEM_FLAG_DMA copy
# of the suite (and the dma_engine_* tests) runs through knem's dmaengine
# path.  SUBSTRINGs select tests as knem-tests does (default: all).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
kernel=6.1
if [ "${1:-}" = --kernel ]; then kernel=$2; shift 2; fi
# The kernel tests/vm/run boots for VERSION.
kver=$("$top/tests/vm/run" --kernel "$kernel" --resolve-kernel)
ko=$("$here/build.sh" "$kver")
suite=$top/target/x86_64-unknown-linux-gnu/release/knem-tests
[ -x "$suite" ] || { echo "run-vm.sh: build the suite first (make tests-bin)" >&2; exit 2; }
exec "$top/tests/vm/run" --kernel "$kernel" --add "$ko" --add "$suite" -- \
	sh -c 'insmod /opt/knem_dma_test.ko && /opt/knem-tests "$@"' sh "$@"
