#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/fuzzer/hang-check.sh - make fuzz-hang-check: the fuzzer's own hang
# detection, checked in one User-Mode Linux boot (tests/uml/run) with a
# short grace (--grace 3: first look 3 s after the deadline, again every
# second while the processes use CPU, at most 12 s).  Worker w0 stays past
# its deadline (--linger):
#   busy 8 s   spinning: slow, not hung; the run must pass and say it waited
#   idle 8 s   asleep: hung; the run must fail, naming the worker, at 4-5 s
#   busy 30 s  spinning past the limit: hung at 12 s; the run must fail
# Exits 0 when all three hold, 1 otherwise, with one line per surprise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
prog=tests/fuzzer/hang-check.sh
fuzz=$top/target/x86_64-unknown-linux-gnu/release/knem-fuzz
[ -x "$fuzz" ] || { echo "$prog: no $fuzz (cargo build --release -p knem-fuzz)" >&2; exit 2; }

guest=$(mktemp -d)
trap 'rm -rf "$guest"' EXIT
cat > "$guest/hang-check-guest.sh" <<'GUEST'
#!/bin/sh
for c in busy:8 idle:8 busy:30; do
	/opt/knem-fuzz --seed 1 --duration 3 --procs 1 --no-setuid --grace 3 --linger "$c" \
		> "/tmp/$c.log" 2>&1
	echo "CASE $c status $?"
	sed "s/^/CASE $c | /" "/tmp/$c.log"
done
GUEST
out=$top/build/uml-logs/hang-check-$(date +%Y%m%d-%H%M%S).log
mkdir -p "${out%/*}"
rc=0
"$top/tests/uml/run" --timeout 300 --add "$fuzz" --add "$guest/hang-check-guest.sh" -- \
	sh /opt/hang-check-guest.sh > "$out" 2>&1 || rc=$?
[ "$rc" = 0 ] || { tail -n 20 "$out"; echo "$prog: FAIL: the UML boot ended with status $rc (log $out)"; exit 1; }

bad=0
fail() { echo "$prog: FAIL: $*"; bad=1; }
status() { sed -n "s/^CASE $1 status \\([0-9]*\\)\$/\\1/p" "$out"; }
lines() { grep -a "^CASE $1 | " "$out" || true; }

[ "$(status busy:8)" = 0 ] || fail "busy 8 s: exit status $(status busy:8), expected 0: $(lines busy:8 | grep -a FAIL | head -n 3)"
lines busy:8 | grep -aq 'still running after the deadline, but using CPU: waiting up to 12 s' ||
	fail "busy 8 s: no line saying it waited for a worker using CPU"
[ "$(status idle:8)" = 1 ] || fail "idle 8 s: exit status $(status idle:8), expected 1"
lines idle:8 | grep -aEq 'FAIL still running [45] s after the deadline: pid [0-9]+ \(worker\)' ||
	fail "idle 8 s: the sleeping worker was not declared hung 4-5 s after the deadline"
[ "$(status busy:30)" = 1 ] || fail "busy 30 s: exit status $(status busy:30), expected 1"
lines busy:30 | grep -aEq 'FAIL still running 1[23] s after the deadline: pid [0-9]+ \(worker\)' ||
	fail "busy 30 s: the spinning worker was not declared hung at the 12 s limit"
if [ "$bad" = 0 ]; then
	grep -a '^CASE .*\(FAIL still running\|but using CPU\)' "$out" | sed "s|^|$prog: |"
	echo "$prog: passed (log $out)"
fi
exit "$bad"
