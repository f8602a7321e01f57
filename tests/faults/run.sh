#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/faults/run.sh [--series 6.1|7.3] [--secs N] [--probs "1 10 50"]
#                     [--types "..."] [--seed N] - `make test-faults`:
# the fuzzer, with the DMA provider and its kills, under the kernel's own
# fault injection (failslab, fail_page_alloc, fail_usercopy, and
# fail_function on the module's error-injectable functions), one type and
# probability at a time, on the debug lab kernel (tests/debug-kernel:
# KASAN, lockdep, kmemleak and the fault-injection framework; Debian's own
# kernels have none of the last two).  What each run must show is in
# tests/faults/in-vm.sh; any kernel report fails the run (tests/vm/run),
# and the module must unload.
#
# --series: the lab kernel's (KNEM_DEBUG_SERIES of
# tests/debug-kernel/build.sh, default 6.1); --secs: each run's length
# (default 30); --probs: the percentages (default "1 10 50"); --types:
# in-vm.sh's KNEM_FAULTS_TYPES (default: all 7 of in-vm.sh's); --seed:
# the first run's fuzz seed (default random).  Exits 1 when a run failed,
# 2 when the lab could not be set up.  Not in make test: the debug kernel
# is built once per machine and never in CI.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
prog=tests/faults/run.sh
die() { echo "$prog: $*" >&2; exit 2; }
secs=30
probs="1 10 50"
types=
seed=
while [ $# -gt 0 ]; do
	case $1 in
	--series) [ $# -ge 2 ] || die "--series needs 6.1 or 7.3"; export KNEM_DEBUG_SERIES=$2; shift 2 ;;
	--secs) [ $# -ge 2 ] || die "--secs needs N"; secs=$2; shift 2 ;;
	--probs) [ $# -ge 2 ] || die "--probs needs percentages"; probs=$2; shift 2 ;;
	--types) [ $# -ge 2 ] || die "--types needs a list"; types=$2; shift 2 ;;
	--seed) [ $# -ge 2 ] || die "--seed needs N"; seed=$2; shift 2 ;;
	-h|--help) sed -n '4,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
done
[[ $secs =~ ^[0-9]+$ ]] && [ "$secs" -gt 0 ] || die "--secs wants whole seconds"
for p in $probs; do
	[[ $p =~ ^[0-9]+$ ]] && [ "$p" -ge 1 ] && [ "$p" -le 100 ] || die "--probs wants percentages from 1 to 100, not '$p'"
done
[ -n "$seed" ] || seed=$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')

"$top/tests/debug-kernel/build.sh" || exit 2
kver=$("$top/tests/debug-kernel/build.sh" --print) || die "no debug kernel after build.sh"
cache=$("$top/tests/debug-kernel/build.sh" --dir)
out=$top/build/$kver-faults
mkdir -p "$out"
# The Rust core built for the kernel's KASAN, which otherwise sees only C.
core=$out/knem_core-kasan.o
"$top/rust-core/build-kobj.sh" --kasan "$core" \
	> "$out/core.log" 2>&1 || { tail -n 30 "$out/core.log"; die "building the KASAN core failed"; }
KDIR=$cache/obj KNEM_CORE_OBJ=$core "$top/c-shim/build-module.sh" "$kver" "$out" > "$out/build.log" 2>&1 ||
	{ tail -n 30 "$out/build.log"; die "building knem.ko failed"; }
dma_ko=$(KDIR=$cache/obj "$top/tests/dma-provider/build.sh" "$kver" "$out/dma-provider" 2> "$out/dma-build.log") ||
	{ tail -n 30 "$out/dma-build.log"; die "building the DMA provider failed"; }
target=x86_64-unknown-linux-gnu
fuzz=${CARGO_TARGET_DIR:-$top/target}/$target/release/knem-fuzz
(cd "$top" && RUSTFLAGS="-C target-feature=+crt-static" \
	cargo build --release -q -p knem-fuzz --target "$target") || die "building knem-fuzz failed"

nprobs=$(wc -w <<< "$probs")
ntypes=7
[ -z "$types" ] || ntypes=$(wc -w <<< "$types")
# KASAN and lockdep under TCG: each run's end (reaping, counter checks) and
# the fuzzer's own grace (30 s; up to 120 s while its processes still use
# CPU) take about as long again as the run; a slow run borrows from the spare.
timeout=$(( ntypes * nprobs * (secs * 2 + 60) + 600 ))
env=(KNEM_FAULTS_SECS="$secs" KNEM_FAULTS_PROBS="$probs" KNEM_FAULTS_SEED="$seed"
	KNEM_FAULTS_DMA="/opt/$(basename "$dma_ko")")
[ -z "$types" ] || env+=(KNEM_FAULTS_TYPES="$types")
echo "$prog: $kver, $ntypes types x probabilities $probs, $secs s each, seed $seed, timeout $timeout s"
t0=$SECONDS
# A large log buffer keeps every report of the run for the verdict.  The
# one kernel warning allowed (README.md): 6.1's alloc_vmap_area() when
# failslab takes the record it needs; the guest must not panic on it.
KNEM_VM_ALLOW_WARNING='at mm/vmalloc\.c:[0-9]+ alloc_vmap_area\+' \
"$top/tests/vm/run" --kernel-image "$cache/bzImage" --module "$out/knem.ko" \
	--timeout "$timeout" --append "log_buf_len=8M panic_on_warn=0" \
	--add "$here/in-vm.sh" --add "$fuzz" --add "$dma_ko" -- \
	env "${env[@]}" sh /opt/in-vm.sh
st=$?
echo "$prog: $([ $st -eq 0 ] && echo passed || echo FAILED) in $((SECONDS - t0)) s on $kver"
[ $st -eq 0 ] || exit 1
