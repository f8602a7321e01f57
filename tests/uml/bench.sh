#!/bin/bash
# tests/uml/bench.sh [--quick] [--ncpus N] BENCH_BIN OUTDIR - knem-bench on
# real cores (make bench-uml): the host's own system call and hand-off
# costs first (knem-bench overhead, passed into the guest so that every
# table shows both), then tests/uml/bench-guest.sh in a UML boot for
# measuring (tests/uml/run --bench: one virtual CPU per host CPU, no memory
# debugging).  Tables on stdout; the console and the CSVs in OUTDIR
# (uml-*.csv, uml-console.log).  The host's load average is printed before
# and after: a loaded host slows every mechanism, not their order.
set -euo pipefail

quick=()
ncpus=()
while [ $# -gt 2 ]; do
	case $1 in
	--quick) quick=(--quick); shift ;;
	--ncpus) ncpus=(--ncpus "$2"); shift 2 ;;
	*) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ $# -eq 2 ] || { echo "usage: tests/uml/bench.sh [--quick] [--ncpus N] BENCH_BIN OUTDIR" >&2; exit 2; }
bin=$1
out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
mkdir -p "$out"

echo "=== host: $(uptime)"
host=$("$bin" overhead --env)
echo "=== host overheads: $(tr '\n' ' ' <<<"$host")"
envs=()
while read -r l; do
	[ -n "$l" ] && envs+=(--env "$l")
done <<<"$host"

log=$out/uml-console.log
start=$(date +%s)
"$top/tests/uml/run" --bench "${ncpus[@]+"${ncpus[@]}"}" --timeout 7200 "${envs[@]}" \
	--add "$bin" --add "$here/bench-guest.sh" -- bench-guest.sh "${quick[@]+"${quick[@]}"}" | tee "$log"
echo "=== host: $(uptime) (after $(($(date +%s) - start)) s)"

# bench-guest.sh prints each CSV after a "=== NAME.csv" line.
for b in solo pingpong contention; do
	awk -v want="=== $b.csv" '
		/^=== / { on = ($0 == want); next }
		/^KNEM-VM-/ { on = 0 }
		on { sub(/\r$/, ""); print }' "$log" > "$out/uml-$b.csv"
	[ -s "$out/uml-$b.csv" ] || { echo "tests/uml/bench.sh: no $b.csv in the UML output" >&2; exit 1; }
done
echo "tests/uml/bench.sh: results in $out"
