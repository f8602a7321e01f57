# SPDX-License-Identifier: GPL-2.0-only
#
# Sourced by tests/interop/guest-smsc.sh LABEL DIR bench [ITERS [MAXSIZE
# [ROUNDS]]] (make interop-smsc-bench, on 6.0): coll_check's timing mode
# ("time") on 4 ranks, in one boot, under
#   knemrs      coll/knemrs (btl/sm with smsc cma for point to point)
#   tuned-cma   Open MPI's own choice, tuned over btl/sm, smsc cma
#   tuned-knem  the same over our smsc/knem
#   xhc-knem    coll/xhc over smsc/knem (xhc takes bcast; the other
#               operations go to what it sits on, tuned here)
#   knemrs-rules  coll/knemrs (smsc cma) with the rules knemrs-tune
#               measured on 4 ranks at the table's sizes, in this boot,
#               before the rounds (threshold -1: the rules decide, per
#               operation and size, knem-rs's algorithm or tuned)
# ROUNDS times over (default 3), the five runs interleaved in each round,
# so that a change of the host's load moves one round, not one column;
# then one OSU-style table joining the four: per operation and size the
# median over the rounds of the average over the ranks, and the smallest
# and largest rank time of any round.
# coll/knemrs is loaded in every run for coll_check's MPI_T variable
# (priority 0: never selected outside its own run).
#
# Each run is checked against knem's counters: coll/knemrs by exactly the
# bytes coll_check computed (with rules: from the rules, through
# libknem_rs's knem_rs_rules_decide), tuned over cma by +0, the two over smsc/knem
# by more than 0 and by the same bytes in every round; no failed copy, no
# region or pinned page left.  For the two over smsc/knem this is not a
# byte count: tuned's and xhc's schedules decide how many bytes cross by
# single copy, and nothing here knows that number independently, so the
# check proves only that knem carried their traffic and that the same
# schedule moved the same bytes each round.  Their exact bytes are
# checked where the job is small enough to model: interop-smsc's
# mpi_check jobs and xhc-bcast-2 (knemrs.sh, guest-smsc.sh).

bench_iters=${4:-5}
bench_max=${5:-1048576}
bench_rounds=${6:-3}
knemrs=$dir/knemrs
coll_check=$dir/coll_check
rules=/tmp/knemrs-bench-rules.json
# The threshold and coll_check's extra arguments of a run (the rules run
# sets them).
bench_threshold=4096
bench_args=

# bench_run NAME EXPECTED SELECTED MCA-OPTIONS...: coll_check time on 4
# ranks into /tmp/bench-NAME-$round.log; EXPECTED "all" (what coll_check
# computed), 0 or "some" (> 0); SELECTED the component coll_base_verbose
# must show selected on every rank.
bench_run() {
	local name=$1 want=$2 comp=$3 rc t0 db df sel line first
	shift 3
	log=/tmp/bench-$name-$round.log
	b0=$(knem_bytes) f0=$(counter copies_failed)
	t0=$(date +%s)
	mpirun --map-by :OVERSUBSCRIBE --bind-to none -np 4 \
		--mca mca_base_component_path "$component_path:$knemrs" \
		--mca pml ob1 --mca btl self,sm \
		--mca coll_knemrs_threshold "$bench_threshold" --mca coll_base_verbose 10 "$@" \
		"$coll_check" time "$bench_iters" "$bench_max" $bench_args > "$log.out" 2> "$log.err"
	rc=$?
	# Rank 0's lines apart from the ranks' stderr (knemrs.sh's coll_run).
	cat "$log.out" "$log.err" > "$log"
	if [ "$rc" -ne 0 ]; then
		fail "bench-$name-$round" "mpirun exited with status $rc"
		return
	fi
	grep -a '^coll_check:\|^  \|^# ' "$log" | sed 's/^/    /'
	sel=$(grep -ac "coll:base:comm_select: selecting *$comp, priority *[0-9]*, Enabled" "$log")
	db=$(($(knem_bytes) - b0))
	df=$(($(counter copies_failed) - f0))
	[ "$want" != all ] || want=$(coll_expected)
	line="knem bytes +$db (expected $want), failed copies $df, regions $(counter regions), pinned $(counter pinned_pages), $comp selected on $sel, $(($(date +%s) - t0)) s"
	# "some": more than 0, and what the first round moved in the later ones.
	if [ "$want" = some ]; then
		[ -s "/tmp/bench-$name.first" ] || echo "$db" > "/tmp/bench-$name.first"
		first=$(cat "/tmp/bench-$name.first")
		line="$line, round 1 moved +$first"
	fi
	if [ "$sel" -ge 4 ] && [ "$df" -eq 0 ] && [ "$(counter regions)" -eq 0 ] &&
		[ "$(counter pinned_pages)" -eq 0 ] &&
		{ { [ "$want" = some ] && [ "$db" -gt 0 ] && [ "$db" -eq "$first" ]; } ||
			{ [ "$want" != some ] && [ -n "$want" ] && [ "$db" -eq "$want" ]; }; }; then
		echo "interop: bench-$name-$round: $line"
		passed=$((passed + 1))
	else
		fail "bench-$name-$round" "$line"
	fi
}

# The rules, tuned once in this boot on the table's sizes (per block),
# before the rounds: knemrs-tune's own time is part of the result.
tune_sizes=$(for n in 4096 65536 1048576 4194304 16777216; do [ "$n" -gt "$bench_max" ] || printf '%s,' "$n"; done)
t0=$(date +%s)
mpirun --map-by :OVERSUBSCRIBE --bind-to none -np 4 \
	--mca mca_base_component_path "$component_path:$knemrs" \
	--mca pml ob1 --mca btl self,sm --mca smsc cma \
	"$knemrs/knemrs-tune" --transport knem --ranks 4 --sizes "${tune_sizes%,}" \
	--reps 10,40 --seconds 30 --out "$rules" > /tmp/bench-tune.log 2>&1
rc=$?
tune_secs=$(($(date +%s) - t0))
grep -a '^knemrs-tune:' /tmp/bench-tune.log | sed 's/^/    /'
if [ "$rc" -ne 0 ] || [ ! -s "$rules" ]; then
	fail bench-tune "knemrs-tune exited with status $rc" /tmp/bench-tune.log
else
	echo "interop: bench-tune: rules for 4 ranks at ${tune_sizes%,} B in $tune_secs s"
	passed=$((passed + 1))
fi

round=1
while [ "$round" -le "$bench_rounds" ]; do
	bench_run knemrs all knemrs --mca smsc cma
	bench_run tuned-cma 0 tuned --mca smsc cma --mca coll_knemrs_priority 0
	bench_run tuned-knem some tuned --mca smsc knem --mca coll_knemrs_priority 0
	bench_run xhc-knem some xhc --mca smsc knem --mca coll_knemrs_priority 0 --mca coll_xhc_priority 100
	bench_threshold=-1 bench_args="$rules $knemrs/lib/libknem_rs.so.0"
	bench_run knemrs-rules all knemrs --mca smsc cma --mca coll_knemrs_rules "$rules"
	bench_threshold=4096 bench_args=
	round=$((round + 1))
done

# The five tables, one row per operation and size: median of the rounds'
# averages, smallest min, largest max; then, per row, whether
# knemrs-rules is within the confidence interval of the best column's
# median: the rounds' averages are that interval (distribution-free, the
# range of the samples when there are fewer than 6), so "within" means
# knemrs-rules's smallest round average is not above the best column's
# largest.  The last column is the same against tuned-cma alone (the
# acceptance of #36): faster only when every round is.
echo "interop: $label: coll_check time, 4 ranks on 2 vCPUs (TCG), $bench_iters iterations, $bench_rounds rounds; us, median avg, min, max over ranks; rules tuned in $tune_secs s"
echo "| op | size | knemrs avg | min | max | tuned-cma avg | min | max | tuned-knem avg | min | max | xhc-knem avg | min | max | knemrs-rules avg | min | max | rules vs best | rules vs tuned-cma |"
echo "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |"
for r in knemrs tuned-cma tuned-knem xhc-knem knemrs-rules; do
	# Rounds only: bench-knemrs-[0-9]* is not bench-knemrs-rules-*.
	for f in /tmp/bench-"$r"-[0-9]*.log; do
		grep -a '^  [a-z]' "$f" | awk -v r="$r" '{ print $1, $2, r, $3, $4, $5 }'
	done | awk '
		{ k = $1 " " $2 " " $3; if (!(k in n)) { order[m++] = k; lo[k] = $5; hi[k] = $6 }
		  avg[k, n[k]++] = $4; if ($5 < lo[k]) lo[k] = $5; if ($6 > hi[k]) hi[k] = $6 }
		END { for (i = 0; i < m; i++) { k = order[i]; c = n[k]
			# sort the averages of the row (a few: insertion sort)
			for (a = 1; a < c; a++) for (b = a; b > 0 && avg[k, b - 1] > avg[k, b]; b--) {
				t = avg[k, b]; avg[k, b] = avg[k, b - 1]; avg[k, b - 1] = t }
			med = c % 2 ? avg[k, (c - 1) / 2] : (avg[k, c / 2 - 1] + avg[k, c / 2]) / 2
			print k, med, lo[k], hi[k], avg[k, 0], avg[k, c - 1] } }'
done | awk '
	{ k = $1 " " $2; if (!(k in row)) order[n++] = k
	  row[k] = row[k] sprintf(" | %.0f | %.0f | %.0f", $4, $5, $6)
	  if ($3 == "knemrs-rules") { rmed[k] = $4; rlo[k] = $7; rhi[k] = $8 }
	  else if (!(k in best) || $4 < best[k]) { best[k] = $4; bhi[k] = $8; bname[k] = $3 }
	  if ($3 == "tuned-cma") { tmed[k] = $4; tlo[k] = $7; thi[k] = $8 } }
	END { for (i = 0; i < n; i++) { k = order[i]; split(k, f, " ")
		v = rmed[k] <= best[k] ? "best" : (rlo[k] <= bhi[k] ? "within CI of " bname[k] : \
			sprintf("slower than %s (%.2fx)", bname[k], rmed[k] / best[k]))
		# The acceptance of #36: against Open MPI default over CMA.
		# Faster: all of knemrs-rules rounds below all of tuned-cma.
		d = rhi[k] < tlo[k] ? sprintf("faster (%.2fx)", tmed[k] / rmed[k]) : \
			(rlo[k] <= thi[k] ? "within CI" : sprintf("slower (%.2fx)", rmed[k] / tmed[k]))
		print "| " f[1] " | " f[2] row[k] " | " v " | " d " |" } }'
