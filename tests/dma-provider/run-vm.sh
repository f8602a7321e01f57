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
# --suite-first IDLE_FDS: in the same boot, first the whole suite without
# the provider (its .ko kept out of the suite's sight, so the dma tests
# skip), with KNEM_SUITE_IDLE_FDS=IDLE_FDS, then the provider and the
# SUBSTRINGs' tests: one boot for tests/vm/full-suite.sh's two passes.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
kernel=6.1
image_opts=()
ko=
first_fds=
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=$2; shift 2 ;;
	--kernel-image | --module) image_opts+=("$1" "$2"); shift 2 ;;
	--dma-module) ko=$2; shift 2 ;;
	--suite-first)
		[[ ${2:-} =~ ^[0-9]+$ ]] || { echo "run-vm.sh: --suite-first wants a number of idle fds" >&2; exit 2; }
		first_fds=$2; shift 2 ;;
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
timeout=${KNEM_DMA_SUITE_TIMEOUT:-600}
if [ -z "$first_fds" ]; then
	exec "$top/tests/vm/run" "${run_opts[@]}" --timeout "$timeout" --scratch-ext4 --add "$ko" --add "$suite" -- \
		sh -c 'insmod /opt/knem_dma_test.ko && KNEM_SUITE_IDLE_FDS=1000 /opt/knem-tests --no-skip "$@"' sh "$@"
fi
# The dma tests load /opt/knem_dma_test.ko themselves when they find it:
# hidden during the first pass, they skip there and run in the second.
# Both passes always run; the boot fails if either failed.
exec "$top/tests/vm/run" "${run_opts[@]}" --timeout $((timeout + 300)) --scratch-ext4 --add "$ko" --add "$suite" -- \
	sh -c 'mv /opt/knem_dma_test.ko /opt/provider.ko.hidden &&
		{ echo "=== the suite without the DMA provider"; KNEM_SUITE_IDLE_FDS=$1 /opt/knem-tests; a=$?; } &&
		mv /opt/provider.ko.hidden /opt/knem_dma_test.ko && shift &&
		echo "=== the suite with the DMA provider${1:+ (tests matching: $*)}" &&
		insmod /opt/knem_dma_test.ko && KNEM_SUITE_IDLE_FDS=1000 /opt/knem-tests --no-skip "$@" && [ "$a" -eq 0 ]' \
	sh "$first_fds" "$@"
