#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/debug-kernel/run.sh [--fuzz SECS] - `make test-debug-kernel`: under
# the debug lab kernel (build.sh here: KASAN, lockdep, DEBUG_ATOMIC_SLEEP,
# full preemption; built once per machine, reused after), run
#   1. the in-VM suite (knem-tests --no-skip: no test may skip but those
#      that need the DMA provider, --no-provider, which step 2 runs, and
#      pin_pool_not_held_by_stalled_gup, which 6.1's GUP cannot run: its
#      FOLL_LONGTERM pins do not wait for a userfaultfd handler),
#   2. with the test DMA provider (tests/dma-provider/run-vm.sh), the
#      tests that need it (every one has dma in its name; step 1 ran
#      the rest),
#   3. the fuzzer with the provider and its conductor (tests/fuzzer/run.sh
#      --dma), 600 s unless --fuzz says otherwise,
# with knem.ko built against the debug kernel as a fault-injection build
# (KNEM_FAULT_INJECT=1: fault_dma_finish_delay_ms, which the suite's
# dma_finish_async_abandoned_batch sets) and its Rust core built for KASAN
# (rust-core/build-kobj.sh --kasan), so the core's memory accesses are
# checked as the shim's are.  Every step runs; each prints
# one "debug-kernel: STEP passed|FAILED in N s" line, and any KASAN,
# lockdep or other kernel report fails its step (tests/vm/run).  Exits 1
# when a step failed.  Needs the suite binary (make tests-bin).  Not in CI.
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
prog=debug-kernel
fuzz=600
while [ $# -gt 0 ]; do
	case $1 in
	--fuzz) fuzz=$2; shift 2 ;;
	*) echo "$prog: unknown argument $1" >&2; exit 2 ;;
	esac
done
[[ $fuzz =~ ^[0-9]+$ ]] || { echo "$prog: --fuzz wants seconds" >&2; exit 2; }

"$here/build.sh" || exit 2
kver=$("$here/build.sh" --print) || { echo "$prog: no debug kernel after build.sh" >&2; exit 2; }
cache=$("$here/build.sh" --dir)
image=$cache/bzImage
kdir=$cache/obj
out=$top/build/$kver
suite=$top/target/x86_64-unknown-linux-gnu/release/knem-tests
[ -x "$suite" ] || { echo "$prog: no $suite (make tests-bin)" >&2; exit 2; }

echo "$prog: kernel $kver ($image)"
# The Rust core built for the kernel's KASAN, which otherwise sees only C.
core=$top/build/knem_core-kasan.o
"$top/rust-core/build-kobj.sh" --kasan "$core" \
	> "$out.core.log" 2>&1 || { tail -n 30 "$out.core.log"; echo "$prog: building the KASAN core failed" >&2; exit 2; }
KDIR=$kdir KNEM_FAULT_INJECT=1 KNEM_CORE_OBJ=$core "$top/c-shim/build-module.sh" "$kver" "$out" > "$out.build.log" 2>&1 ||
	{ tail -n 30 "$out.build.log"; echo "$prog: building knem.ko failed" >&2; exit 2; }
grep -q '^fault_dma_finish_delay_ms:' <<< "$(modinfo -F parm "$out/knem.ko")" ||
	{ echo "$prog: $out/knem.ko is not a fault-injection build" >&2; exit 2; }
dma_ko=$(KDIR=$kdir "$top/tests/dma-provider/build.sh" "$kver" "$out/dma-provider" 2> "$out.dma-build.log") ||
	{ tail -n 30 "$out.dma-build.log"; echo "$prog: building the DMA provider failed" >&2; exit 2; }
img=(--kernel-image "$image" --module "$out/knem.ko")

failed=()
step() {
	local what=$1 t0=$SECONDS
	shift
	if "$@"; then
		echo "$prog: $what passed in $((SECONDS - t0)) s"
	else
		echo "$prog: $what FAILED in $((SECONDS - t0)) s"
		failed+=("$what")
	fi
}
# KASAN and lockdep make the guest several times slower than the stock
# kernels: the time limits are raised accordingly.
step "suite" "$top/tests/vm/run" "${img[@]}" --timeout 3600 --scratch-ext4 --add "$suite" -- \
	sh -c 'KNEM_SUITE_IDLE_FDS=1000 /opt/knem-tests --no-skip --no-provider --fault-build --timeout 900 \
		--allow-skip pin_pool_not_held_by_stalled_gup'
step "suite with the DMA provider" env KNEM_DMA_SUITE_TIMEOUT=3600 \
	"$top/tests/dma-provider/run-vm.sh" "${img[@]}" --dma-module "$dma_ko" --timeout 900 dma
step "fuzz ${fuzz} s with the DMA provider" "$top/tests/fuzzer/run.sh" "${img[@]}" \
	--dma-module "$dma_ko" --duration "$fuzz"
if [ ${#failed[@]} -gt 0 ]; then
	echo "$prog: FAILED: ${failed[*]} (logs: $top/build/vm-logs/$kver-*)"
	exit 1
fi
echo "$prog: all 3 steps passed on $kver"
