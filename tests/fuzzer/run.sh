#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/fuzzer/run.sh - build knem-fuzz (static) and run it in the VM.
#
#   tests/fuzzer/run.sh [--kernel VER | --kernel-image PATH --module PATH]
#                       [--duration SECS] [--seed N] [--procs N] [--dma]
#                       [--dma-module PATH] [-- FUZZER-ARGS...]
#
#   --kernel VER    Debian kernel to boot (tests/vm/run --kernel), default 6.1
#   --kernel-image PATH  boot this bzImage instead (tests/vm/run), e.g. the
#                   debug kernel of tests/debug-kernel; needs --module
#   --duration S    fuzzing time in the guest, default 60
#   --seed N        replay a seed (default: a random one, printed first)
#   --procs N       worker processes, default 4
#   --module PATH   knem.ko to load (tests/vm/run --module)
#   --dma           load the test DMA provider (tests/dma-provider, built
#                   here for the kernel) and fuzz with its conductor
#                   (knem-fuzz --dma: stalls, failures, lowered timeouts,
#                   SIGKILLs in the middle of ioctls)
#   --dma-module PATH  the provider to load (implies --dma; needed with
#                   --kernel-image)
#
# Fails when the fuzzer reports a failure (errno outside the documented set,
# a wrong success, a leak of contexts/regions/pinned pages or FOLL_PIN
# references, a process that would not die) or when tests/vm/run sees a
# kernel BUG/WARNING/Oops, a timeout, or rmmod failing afterwards.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
die() { echo "tests/fuzzer/run.sh: $*" >&2; exit 2; }

kernel=6.1
duration=60
seed=
procs=4
module=()
image=()
dma=
dma_ko=
extra=()
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) [ $# -ge 2 ] || die "--kernel needs VER"; kernel=$2; shift 2 ;;
	--duration) [ $# -ge 2 ] || die "--duration needs SECS"; duration=$2; shift 2 ;;
	--seed) [ $# -ge 2 ] || die "--seed needs N"; seed=$2; shift 2 ;;
	--procs) [ $# -ge 2 ] || die "--procs needs N"; procs=$2; shift 2 ;;
	--module) [ $# -ge 2 ] || die "--module needs PATH"; module=(--module "$2"); shift 2 ;;
	--kernel-image) [ $# -ge 2 ] || die "--kernel-image needs PATH"; image=(--kernel-image "$2"); shift 2 ;;
	--dma) dma=1; shift ;;
	--dma-module) [ $# -ge 2 ] || die "--dma-module needs PATH"; dma=1; dma_ko=$2; shift 2 ;;
	--) shift; extra=("$@"); break ;;
	-h|--help) sed -n '4,27p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
[[ $duration =~ ^[0-9]+$ ]] || die "--duration wants whole seconds"
[ -n "$seed" ] || seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')

target=x86_64-unknown-linux-gnu
bin=${CARGO_TARGET_DIR:-$top/target}/$target/release/knem-fuzz
(cd "$top" && RUSTFLAGS="-C target-feature=+crt-static" \
	cargo build --release -p knem-fuzz --target "$target")
[ -x "$bin" ] || die "no $bin after the build"

if [ ${#image[@]} -gt 0 ]; then
	[ ${#module[@]} -gt 0 ] || die "--kernel-image needs --module"
	kernel_opts=("${image[@]}")
else
	kernel_opts=(--kernel "$kernel")
fi
adds=(--add "$bin")
dma_args=()
if [ -n "$dma" ]; then
	if [ -z "$dma_ko" ]; then
		[ ${#image[@]} -eq 0 ] || die "--dma with --kernel-image needs --dma-module"
		kver=$("$top/tests/vm/run" --kernel "$kernel" --resolve-kernel)
		dma_ko=$top/build/$kver/dma-provider/knem_dma_test.ko
		# The VM suites built it already (make test): rebuilt only when
		# its sources are newer.
		if [ ! -e "$dma_ko" ] || [ "$top/tests/dma-provider/knem_dma_test.c" -nt "$dma_ko" ] ||
			[ "$top/tests/dma-provider/Kbuild" -nt "$dma_ko" ]; then
			dma_ko=$("$top/tests/dma-provider/build.sh" "$kver")
		fi
	fi
	[ -r "$dma_ko" ] || die "no DMA provider at $dma_ko"
	adds+=(--add "$dma_ko")
	dma_args=(--dma "/opt/$(basename "$dma_ko")")
fi

# Boot (~10 s under TCG), the run, the final leak checks, and a margin
# that also holds the fuzzer's longest wait for slow processes (120 s
# after the deadline, then 20 s after its kill): its own verdict is clearer
# than the VM's timeout.
timeout=$((duration + 240))
echo "tests/fuzzer/run.sh: ${image[1]:-kernel $kernel}, seed $seed, ${duration}s, $procs procs${dma:+, DMA provider and conductor}"
exec "$top/tests/vm/run" "${kernel_opts[@]}" "${module[@]}" --timeout "$timeout" \
	"${adds[@]}" -- /opt/knem-fuzz --seed "$seed" --duration "$duration" \
	--procs "$procs" "${dma_args[@]+"${dma_args[@]}"}" "${extra[@]+"${extra[@]}"}"
