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
# The kernel tests/vm/run boots for VERSION: 6.12 is the plain one, 6.12-rt
# the real-time one.
case $kernel in
*-rt) want=${kernel%-rt}; flavour='-rt-' ;;
*) want=$kernel; flavour= ;;
esac
kver=$(cd /boot && ls vmlinuz-"$want"[.+-]* 2>/dev/null | sed 's/^vmlinuz-//' |
	if [ -n "$flavour" ]; then grep -- "$flavour"; else grep -v -- '-rt-\|-cloud-'; fi |
	sort -V | tail -n 1)
[ -n "$kver" ] || { echo "run-vm.sh: no installed kernel $kernel" >&2; exit 2; }
ko=$("$here/build.sh" "$kver")
suite=$top/target/x86_64-unknown-linux-gnu/release/knem-tests
[ -x "$suite" ] || { echo "run-vm.sh: build the suite first (make tests-bin)" >&2; exit 2; }
exec "$top/tests/vm/run" --kernel "$kernel" --add "$ko" --add "$suite" -- \
	sh -c 'insmod /opt/knem_dma_test.ko && /opt/knem-tests "$@"' sh "$@"
