#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# run-vm.sh [--kernel VERSION | --kernel-image PATH --module PATH
#            --dma-module PATH] [SUBSTRING...] - the in-VM suite with the
# test-only software DMA provider loaded first, so every KNEM_FLAG_DMA copy
# of the suite (and the dma_engine_* tests) runs through knem's dmaengine
# path.  SUBSTRINGs select tests as knem-tests does (default: all).  With
# --kernel the provider is built here for that kernel; a kernel given by
# image (tests/kernels) comes with the provider its release built.
# KNEM_DMA_SUITE_TIMEOUT: the VM's time limit in seconds (default 600; the
# debug kernel of tests/debug-kernel needs more).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
kernel=6.1
image_opts=()
ko=
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=$2; shift 2 ;;
	--kernel-image | --module) image_opts+=("$1" "$2"); shift 2 ;;
	--dma-module) ko=$2; shift 2 ;;
	*) break ;;
	esac
done
if [ ${#image_opts[@]} -gt 0 ]; then
	[ -n "$ko" ] || { echo "run-vm.sh: --kernel-image needs --dma-module" >&2; exit 2; }
	run_opts=("${image_opts[@]}")
else
	run_opts=(--kernel "$kernel")
	# The kernel tests/vm/run boots for VERSION.
	kver=$("$top/tests/vm/run" --kernel "$kernel" --resolve-kernel)
	ko=$("$here/build.sh" "$kver")
fi
suite=$top/target/x86_64-unknown-linux-gnu/release/knem-tests
[ -x "$suite" ] || { echo "run-vm.sh: build the suite first (make tests-bin)" >&2; exit 2; }
# The whole suite with the provider takes 1 to 2 minutes uncontended and
# near 5 on a loaded host: more than tests/vm/run's default 300 s.  The
# offload thread bound has no DMA part: 1000 idle fds show it here.  This
# run has everything the suite can use (the provider, the scratch ext4),
# so a test that skips fails it (--no-skip).  KNEM_DMA_SUITE_TIMEOUT
# raises the VM's limit (the debug kernel's run needs more).
exec "$top/tests/vm/run" "${run_opts[@]}" --timeout "${KNEM_DMA_SUITE_TIMEOUT:-600}" --scratch-ext4 --add "$ko" --add "$suite" -- \
	sh -c 'insmod /opt/knem_dma_test.ko && KNEM_SUITE_IDLE_FDS=1000 /opt/knem-tests --no-skip "$@"' sh "$@"
