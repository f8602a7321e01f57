#!/bin/sh
# Run every knem-bench benchmark inside the VM (arguments, e.g. --quick, go
# to each), then print the CSVs so that the host can plot them from the
# console log (scripts/bench.sh does):
#
#   tests/vm/run --add target/x86_64-unknown-linux-gnu/release/knem-bench \
#       --add userlib/knem-bench/scripts/vm-quick.sh -- vm-quick.sh --quick
set -e
export KNEM_BENCH_NO_PROGRESS=1
for b in pingpong contention region-cost reuse; do
	knem-bench "$b" "$@" --out "/tmp/$b.csv"
done
for b in pingpong contention region-cost reuse; do
	echo "=== $b.csv"
	cat "/tmp/$b.csv"
done
