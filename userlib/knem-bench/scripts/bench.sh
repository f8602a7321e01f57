#!/bin/bash
# bench.sh [--quick] [--kernel VER] BENCH_BIN OUTDIR - the benchmarks of
# `make bench`: pingpong and contention on the host (memcpy, shm and CMA on
# real hardware), then every benchmark in the VM with the module loaded
# (every mechanism), booted for measuring (tests/vm/run --bench: no memory
# debugging, KVM when it works, else an emulated CPU, which every table
# header then says).  Tables go to stdout; CSVs and PNG plots to OUTDIR
# (host-*.{csv,png}, vm-*.{csv,png}).
set -euo pipefail

quick=()
kernel=6.12
while [ $# -gt 2 ]; do
	case $1 in
	--quick) quick=(--quick); shift ;;
	--kernel) kernel=$2; shift 2 ;;
	*) echo "bench.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
[ $# -eq 2 ] || { echo "usage: bench.sh [--quick] [--kernel VER] BENCH_BIN OUTDIR" >&2; exit 2; }
bin=$1
out=$2
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../.." && pwd)
mkdir -p "$out"
export KNEM_BENCH_NO_PROGRESS=1

echo "=== host: pingpong"
"$bin" pingpong "${quick[@]}" --out "$out/host-pingpong.csv" --plot "$out/host-pingpong.png"
echo "=== host: contention"
"$bin" contention "${quick[@]}" --out "$out/host-contention.csv" --plot "$out/host-contention.png"

echo "=== VM (kernel $kernel): every benchmark"
log=$out/vm-console.log
"$top/tests/vm/run" --bench --kernel "$kernel" --timeout 1800 --add "$bin" \
	--add "$here/vm-quick.sh" -- vm-quick.sh "${quick[@]}" | tee "$log"

# vm-quick.sh prints each CSV after a "=== NAME.csv" line; plot them here.
for b in pingpong contention region-cost reuse; do
	awk -v want="=== $b.csv" '
		/^=== / { on = ($0 == want); next }
		/^KNEM-VM-/ { on = 0 }
		on { sub(/\r$/, ""); print }' "$log" > "$out/vm-$b.csv"
	[ -s "$out/vm-$b.csv" ] || { echo "bench.sh: no $b.csv in the VM output" >&2; exit 1; }
	"$bin" plot "$out/vm-$b.csv" "$out/vm-$b.png"
done
echo "bench.sh: results in $out"
