#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/uml/coll-bench.sh [ITERS [MAXSIZE [ROUNDS [SIZES]]]] - make
# bench-uml-coll: the interleaved collectives benchmark of
# tests/interop/smsc-bench.sh on real cores, in a UML boot for measuring,
# on the host's Open MPI (4.1 on Debian 12: no smsc, so the columns are
# coll/knemrs, tuned over vader's CMA single copy, and coll/knemrs with
# rules knemrs-tune measured in the same boot).  2 ranks, one per
# virtual CPU.  UML's system calls cost ~20 µs: sizes from 1 MiB mean
# something.  Prints the table and, per row, knemrs-rules against
# tuned-cma over the rounds' averages (faster / within CI / slower).
# Defaults: 10 iterations, to 16 MiB, 5 rounds, tuned at 1M,4M,16M.
set -euo pipefail
iters=${1:-10} max=${2:-16777216} rounds=${3:-5} sizes=${4:-1M,4M,16M}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
out=$top/build/uml-coll
"$top/tests/interop/build-knemrs.sh" "$out" \
	"$top/target/x86_64-unknown-linux-gnu/release/libknem_rs.so" > /dev/null
log=$out/console.log
echo "=== host: $(uptime)"
"$here/run" --bench --timeout 3600 --add "$out/knemrs" --add "$out/coll_check" \
	--add "$here/coll-bench-guest.sh" -- \
	sh /opt/coll-bench-guest.sh "$iters" "$max" "$rounds" "$sizes" | tee "$log" |
	grep -a '^coll-bench:\|^knemrs-tune:\|^tests/uml/run'
echo "=== host: $(uptime)"
echo "| op | size | knemrs | tuned-cma | knemrs-rules | rules vs tuned-cma |"
echo "| --- | ---: | ---: | ---: | ---: | --- |"
grep -a '^RUN ' "$log" | awk '
	{ k = $4 " " $5; c = $2; v = $6
	  if (!(k in seen)) { seen[k] = 1; order[n++] = k }
	  s[k, c] = s[k, c] " " v
	  if (!((k, c) in lo) || v < lo[k, c]) lo[k, c] = v
	  if (!((k, c) in hi) || v > hi[k, c]) hi[k, c] = v }
	function med(list,   a, m, i, j, t) {
		m = split(list, a, " ")
		for (i = 2; i <= m; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) {
			t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
		return m % 2 ? a[(m + 1) / 2] : (a[m / 2] + a[m / 2 + 1]) / 2 }
	END { for (i = 0; i < n; i++) { k = order[i]; split(k, f, " ")
		r = med(s[k, "knemrs-rules"]); t = med(s[k, "tuned-cma"])
		v = hi[k, "knemrs-rules"] < lo[k, "tuned-cma"] ? sprintf("faster (%.2fx)", t / r) : \
			(lo[k, "knemrs-rules"] > hi[k, "tuned-cma"] ? sprintf("slower (%.2fx)", r / t) : "within CI")
		printf "| %s | %s | %.0f | %.0f | %.0f | %s |\n", f[1], f[2], med(s[k, "knemrs"]), t, r, v } }'
