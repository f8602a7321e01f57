#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/vm/full-suite.sh KERNEL OPTIONS - the whole in-VM suite on one
# kernel, what `make vm-test` runs on each: the shim's own checks, the C
# conformance programs, the knem-tests suite (alone, then again with the
# test-only software DMA provider loaded, in the same boot), the tests that need a
# fault-injection build (installed kernels only), every collective on teams of 1
# to 8 over the module, and 200 unload/load cycles with suite runs in
# between.  Each step's time is printed.
#
# KERNEL OPTIONS: --kernel VERSION (an installed kernel), or
# --kernel-image PATH --module PATH --dma-module PATH (tests/kernels).
# Needs target/x86_64-unknown-linux-gnu/release/{knem-tests,knem-coll}
# (make tests-bin coll-bin).
#
# Environment (make test uses a lighter pass on all but one kernel):
#   KNEM_SUITE_COLL    knem-coll check arguments (default: every collective
#                      on teams of 1 to 8, up to 16 MiB+3); several sets
#                      separated by ';' run one after the other
#   KNEM_SUITE_CYCLES  unload/load cycles (default 200)
#   KNEM_SUITE_IDLE_FDS  idle fds of offload_threads_bounded (default 10000)
#   KNEM_SUITE_DMA_TESTS which tests the pass with the DMA provider runs
#                      (knem-tests' name substrings; default: all; "dma":
#                      those that need the provider, every one of which has
#                      dma in its name and skips in the pass without it)
set -euo pipefail
dma_only=${KNEM_SUITE_DMA_TESTS:-}
coll=${KNEM_SUITE_COLL:--n 8 --quick --all-teams --big 16M,16M+3}
cycles=${KNEM_SUITE_CYCLES:-200}
idle_fds=${KNEM_SUITE_IDLE_FDS:-10000}
[[ $idle_fds =~ ^[0-9]+$ ]] || { echo "full-suite.sh: KNEM_SUITE_IDLE_FDS wants a number" >&2; exit 2; }
[[ $cycles =~ ^[0-9]+$ ]] || { echo "full-suite.sh: KNEM_SUITE_CYCLES wants a number" >&2; exit 2; }
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top"
bin=$top/target/x86_64-unknown-linux-gnu/release
run_opts=()
dma_opts=()
kernel=
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=$2; run_opts+=("$1" "$2"); dma_opts+=("$1" "$2"); shift 2 ;;
	--kernel-image | --module) run_opts+=("$1" "$2"); dma_opts+=("$1" "$2"); shift 2 ;;
	--dma-module) dma_opts+=("$1" "$2"); shift 2 ;;
	*) echo "full-suite.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
for b in knem-tests knem-coll; do
	[ -x "$bin/$b" ] || { echo "full-suite.sh: $bin/$b is missing (make tests-bin coll-bin)" >&2; exit 2; }
done

step() {
	local what=$1 t0=$SECONDS
	shift
	"$@"
	echo "full-suite.sh: $what passed in $((SECONDS - t0)) s"
}

# One boot for both (they print "check-shim: shim checks|conformance passed").
step "check-shim and conformance" tests/vm/check-shim --conformance "${run_opts[@]}"
# One boot: the suite, then the provider and again the tests of
# KNEM_SUITE_DMA_TESTS (all of them when empty).
read -ra dma_tests <<< "$dma_only"
suite_log=$(mktemp)
trap 'rm -f "$suite_log"' EXIT
step "knem-tests, then with the DMA provider (${dma_only:-every test})" \
	tests/dma-provider/run-vm.sh "${dma_opts[@]}" --suite-first "$idle_fds" "${dma_tests[@]}" |
	tee "$suite_log"
# A test the first pass skipped for want of the provider (its skip names
# knem_dma_test.ko: tests/suite/src/t_dma.rs, PROVIDER_SKIP) must have
# passed in the second: a narrower KNEM_SUITE_DMA_TESTS leaves none unrun.
# The first pass has such skips (the dma_engine_* tests need the
# provider): none means the skip's text no longer matches and nothing
# would be checked.
read -r provider_skips unrun < <(awk '{ sub(/\r$/, "") }
	/^=== the suite with the DMA provider/ { second = 1 }
	!second && /^skip [a-z0-9_]+: .*knem_dma_test\.ko/ { sub(":", "", $2); want[$2] = 1; n++ }
	second && /^ok / { done[$2] = 1 }
	END { printf "%d", n; for (t in want) if (!(t in done)) printf " %s", t; print "" }' "$suite_log")
if [ "$provider_skips" -eq 0 ]; then
	echo "full-suite.sh: the first pass reported no skip for want of the DMA provider (its text changed?): the second pass cannot be checked" >&2
	exit 1
fi
if [ -n "$unrun" ]; then
	echo "full-suite.sh: skipped without the DMA provider and not passed with it: $unrun" >&2
	exit 1
fi
echo "full-suite.sh: the $provider_skips tests the first pass skipped for want of the DMA provider passed with it"
# An installed kernel's headers are here to build the fault-injection
# module; a kernel given by image (tests/kernels) comes with its release's.
if [ -n "$kernel" ]; then
	step "fault-injection tests" tests/vm/fault-tests.sh --kernel "$kernel"
fi
# KNEM_SUITE_COLL may hold several argument sets separated by ';' (e.g. the
# dense grid on small teams, a lighter one on big teams), run in one boot.
coll_cmd="mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm"
IFS=';' read -ra coll_sets <<< "$coll"
for set in "${coll_sets[@]}"; do
	[ -n "${set// /}" ] || continue
	coll_cmd="$coll_cmd && KNEM_RS_TRANSPORT=knem knem-coll check $set"
done
step "collectives ($coll)" tests/vm/run "${run_opts[@]}" --timeout 1200 --add "$bin/knem-coll" -- sh -c "$coll_cmd"
step "$cycles load cycles" tests/vm/run "${run_opts[@]}" --timeout 900 --add tests/vm/load-cycles.sh \
	--add "$bin/knem-tests" -- load-cycles.sh "$cycles"
