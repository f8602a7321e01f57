#!/bin/bash
# tests/uml/suite.sh [--ncpus N] [--timeout SECS] [KNEM_TESTS] - the in-VM
# suite (knem-tests --no-skip) in User-Mode Linux, on real cores: the fast
# tier of `make uml-test`.
#
# Every test must pass, except those listed in tests/uml/expected (one
# `NAME  REASON` line each: what this UML kernel cannot do, e.g. huge pages).
# A listed test must still not pass (a stale line fails the run: it would
# hide a regression later), but for one listed as `timing:` (its outcome in
# UML depends on the host's load, and the VM kernels judge it), and the run
# must pass tests/uml/run's verdict
# (no kernel warning, the module unloads, no new taint).  The test DMA
# provider does not build for UML (no DMA API: NO_DMA), so the tests that
# need it are the suite's own excused skips (--no-provider).
#
# Exits 0 when all that holds, 1 otherwise, with one line per surprise.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
prog=tests/uml/suite.sh
ncpus=2
timeout_s=900
while [ $# -gt 0 ]; do
	case $1 in
	--ncpus) ncpus=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	-*) echo "$prog: unknown option $1" >&2; exit 2 ;;
	*) break ;;
	esac
done
suite=${1:-$top/target/x86_64-unknown-linux-gnu/release/knem-tests}
[ -x "$suite" ] || { echo "$prog: no $suite (make tests-bin)" >&2; exit 2; }
expected=$here/expected

mkdir -p "$top/build/uml-logs"
out=$top/build/uml-logs/suite-$(date +%Y%m%d-%H%M%S).log
start=$(date +%s)
# The suite's status is printed, not returned: tests/uml/run's own status
# is then the kernel's verdict alone.
set +e
"$top/tests/uml/run" --ncpus "$ncpus" --timeout "$timeout_s" --scratch-ext4 --add "$suite" -- \
	/bin/sh -c '/opt/knem-tests --no-skip --no-provider; echo "KNEM-SUITE-STATUS $?"' 2>&1 |
	tee "$out"
run_status=${PIPESTATUS[0]}
set -e
secs=$(($(date +%s) - start))

bad=0
[ "$run_status" = 0 ] || { echo "$prog: tests/uml/run failed (status $run_status): see above"; bad=1; }
summary=$(grep -aE '^[0-9]+ passed, [0-9]+ failed, [0-9]+ skipped' "$out" | tail -n 1 || true)
[ -n "$summary" ] || { echo "$prog: no summary line from knem-tests"; exit 1; }
grep -aq '^KNEM-SUITE-STATUS ' "$out" || { echo "$prog: knem-tests did not finish"; bad=1; }

# Listed names, and the names that did not pass.
listed=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$expected" | awk '{ print $1 }' | sort -u)
# With --no-skip a skip left as a skip is one knem-tests itself excuses
# (a fault-injection-only part, a test that needs the DMA provider): only
# FAIL lines are non-passes here.
notpass=$(grep -aE '^FAIL [^ :]+' "$out" | sed -E 's/^FAIL ([^ :]+).*/\1/' | sort -u)
passed=$(grep -aE '^ok [^ ]+$' "$out" | sed 's/^ok //' | sort -u)
unexpected=$(comm -23 <(printf '%s\n' "$notpass" | sed '/^$/d') <(printf '%s\n' "$listed" | sed '/^$/d'))
# A `NAME  timing: REASON` line is a test whose verdict in UML depends on
# the host's timing (either outcome happens): it may pass or fail here and
# is judged on the VM kernels instead; its outcome is printed.
timing=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$expected" | awk '$2 == "timing:" { print $1 }' | sort -u)
stale=$(comm -12 <(printf '%s\n' "$listed" | sed '/^$/d') <(printf '%s\n' "$passed" | sed '/^$/d') |
	comm -23 - <(printf '%s\n' "$timing" | sed '/^$/d'))
for t in $timing; do
	if grep -qxF "$t" <<<"$passed"; then
		echo "$prog: $t passed (timing-dependent in UML: not judged here)"
	else
		echo "$prog: $t did not pass (timing-dependent in UML: not judged here)"
	fi
done
for t in $unexpected; do
	echo "$prog: FAIL $t did not pass and is not in tests/uml/expected: $(grep -aE "^FAIL $t[: ]" "$out" | head -n 1)"
	bad=1
done
for t in $stale; do
	echo "$prog: FAIL $t passed but tests/uml/expected lists it: drop its line"
	bad=1
done
# A listed name the suite no longer has would excuse nothing: say so.
all=$("$suite" --list | sort -u)
for t in $listed; do
	grep -qxF "$t" <<<"$all" || { echo "$prog: FAIL tests/uml/expected names $t, which knem-tests does not have"; bad=1; }
done
excused=$(comm -12 <(printf '%s\n' "$notpass" | sed '/^$/d') <(printf '%s\n' "$listed" | sed '/^$/d') | grep -c . || true)
echo "$prog: knem-tests in UML ($ncpus CPUs): $summary; $excused of the non-passes listed in tests/uml/expected; ${secs} s"
exit "$bad"
