#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/uml/coll-bench-guest.sh ITERS MAXSIZE ROUNDS SIZES - in the UML
# guest of tests/uml/coll-bench.sh, on the host's Open MPI (the guest's
# root is the host's /): knemrs-tune on 2 ranks (one per virtual CPU) at
# SIZES over knem, then ROUNDS rounds of coll_check time, three runs per
# round, interleaved:
#   knemrs        coll/knemrs from 4 KiB (threshold 4096)
#   tuned-cma     Open MPI's own choice over vader with CMA single copy
#   knemrs-rules  coll/knemrs with the rules just tuned (threshold -1)
# Each run's lines are printed as "RUN NAME ROUND op size avg min max".
set -u
iters=$1 max=$2 rounds=$3 sizes=$4
k=/opt/knemrs
mca="--oversubscribe -np 2 --bind-to none --mca mca_base_component_path /usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi3:$k --mca pml ob1 --mca btl self,vader --mca btl_vader_single_copy_mechanism cma"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
t0=$(date +%s)
# shellcheck disable=SC2086 # the option list splits into words
mpirun $mca "$k/knemrs-tune" --transport knem --sizes "$sizes" --reps 10,40 --seconds 30 \
	--out /tmp/rules.json || { echo "coll-bench: FAIL: knemrs-tune"; exit 1; }
echo "coll-bench: tuned in $(($(date +%s) - t0)) s"
run() {
	name=$1 round=$2
	shift 2
	# shellcheck disable=SC2086
	mpirun $mca "$@" || { echo "coll-bench: FAIL: $name round $round"; exit 1; }
}
r=1
while [ "$r" -le "$rounds" ]; do
	run knemrs "$r" --mca coll_knemrs_threshold 4096 /opt/coll_check time "$iters" "$max" |
		sed -n "s/^  /RUN knemrs $r /p"
	run tuned-cma "$r" --mca coll_knemrs_priority 0 /opt/coll_check time "$iters" "$max" |
		sed -n "s/^  /RUN tuned-cma $r /p"
	run knemrs-rules "$r" --mca coll_knemrs_threshold -1 --mca coll_knemrs_rules /tmp/rules.json \
		/opt/coll_check time "$iters" "$max" /tmp/rules.json "$k/lib/libknem_rs.so.0" |
		sed -n "s/^  /RUN knemrs-rules $r /p"
	r=$((r + 1))
done
echo "coll-bench: done"
