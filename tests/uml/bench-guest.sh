#!/bin/sh
# bench-guest.sh [--quick] - knem-bench's benchmarks inside the UML lab
# (tests/uml/bench.sh and the payload's measure run it in the guest, with
# knem-bench in /opt): solo copies, pingpong, one-to-all contention with
# up to one reader per CPU, and the collectives over knem, CMA and shm.
# Each CSV follows an "=== NAME.csv" line, for the host to cut out.
set -eu

quick=
[ "${1:-}" = --quick ] && quick=--quick
export KNEM_BENCH_NO_PROGRESS=1
ncpus=$(grep -c ^processor /proc/cpuinfo)
out=/tmp/bench
mkdir -p $out

if [ -n "$quick" ]; then
	sizes=64K,1M,4M
	reps=3
	coll_sizes=64K,1M
else
	sizes=4K,16K,64K,256K,1M,4M,16M,64M
	reps=5
	coll_sizes=64K,1M,8M
fi

echo "=== solo"
knem-bench solo --sizes $sizes --reps $reps --out $out/solo.csv
echo "=== pingpong"
knem-bench pingpong --sizes $sizes --reps $reps \
	--mechs memcpy,shm,cma-read,cma-write,knem-read,knem-write,knem-copy,knem-async \
	--out $out/pingpong.csv
readers=1
r=2
while [ $r -le "$ncpus" ]; do
	readers=$readers,$r
	r=$((r * 2))
done
[ "${readers##*,}" = "$ncpus" ] || [ "$ncpus" = 1 ] || readers=$readers,$ncpus
echo "=== contention (readers $readers)"
knem-bench contention --sizes 256K,1M,4M --readers $readers --reps $reps --out $out/contention.csv
n=$ncpus
[ "$n" -ge 2 ] || n=2
for t in knem cma shm; do
	echo "=== coll over $t ($n ranks)"
	KNEM_RS_TRANSPORT=$t knem-bench coll -n $n --sizes $coll_sizes --reps $reps
done
for f in solo pingpong contention; do
	echo "=== $f.csv"
	cat $out/$f.csv
done
echo "=== end"
