#!/bin/bash
# compare-modules.sh [--kernel VER] [--rounds N] OLD.ko NEW.ko BENCH_BIN
#                    [-- KNEM-BENCH PINGPONG ARGS...]
#
# Two builds of the module in one benchmark boot (tests/vm/run --bench):
# old, new, old, new, ... (N rounds), each loaded in turn and measured with
# `knem-bench pingpong`, so that both see the same guest and the same host
# load.  Prints, per mechanism and size, the best median of each module
# over the rounds and new/old (below 1: the new module is faster).
# Default pingpong arguments: cache-hot knem-read, knem-copy and cma-read
# from 64 B to 64 KiB.
set -euo pipefail

kernel=6.1
rounds=2
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	*) break ;;
	esac
done
[ $# -ge 3 ] || { sed -n '2,3p' "$0" | sed 's/^# //' >&2; exit 2; }
old=$1 new=$2 bin=$3
shift 3
[ "${1:-}" = -- ] && shift
args=("$@")
[ ${#args[@]} -gt 0 ] ||
	args=(--sizes 64..64K --mechs knem-read,knem-copy,cma-read --cache hot --reps 5)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../../.." && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/knem-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT
cp "$old" "$work/knem-old.ko"
cp "$new" "$work/knem-new.ko"

quoted=$(printf "'%s' " "${args[@]}")
cat > "$work/compare-in-vm.sh" <<EOF
#!/bin/sh
export KNEM_BENCH_NO_PROGRESS=1
r=1
while [ \$r -le $rounds ]; do
	for m in old new; do
		rmmod knem && insmod /opt/knem-\$m.ko || exit 1
		echo "=== round \$r, module \$m"
		knem-bench pingpong $quoted --out /tmp/\$m-\$r.csv || exit 1
	done
	r=\$((r + 1))
done
# Put back the module the runner loaded (it unloads it at the end).
rmmod knem && insmod /lib/knem/knem.ko || exit 1
for f in /tmp/old-*.csv /tmp/new-*.csv; do
	echo "=== \$(basename \$f)"
	cat "\$f"
done
EOF
chmod +x "$work/compare-in-vm.sh"

log=$work/console.log
"$top/tests/vm/run" --bench --kernel "$kernel" --timeout 3600 --add "$bin" \
	--add "$work/knem-old.ko" --add "$work/knem-new.ko" \
	--add "$work/compare-in-vm.sh" -- compare-in-vm.sh | tee "$log"

echo
echo "best median per module over $rounds rounds (us per one-way message); new/old < 1: new is faster"
tr -d '\r' < "$log" | awk -F, '
	/^=== old-[0-9]+\.csv$/ { m = "old"; on = 1; next }
	/^=== new-[0-9]+\.csv$/ { m = "new"; on = 1; next }
	/^=== / || /^KNEM-VM-/ { on = 0 }
	on && $1 == "pingpong" {
		k = $2 "," $3 "," $4
		if (!(k in seen)) { seen[k] = 1; order[++n] = k }
		if (!((m, k) in best) || $8 < best[m, k]) best[m, k] = $8
	}
	END {
		printf "%-10s %-5s %8s %10s %10s %8s\n", "mechanism", "cache", "size", "old us", "new us", "new/old"
		for (i = 1; i <= n; i++) {
			split(order[i], f, ",")
			o = best["old", order[i]]; w = best["new", order[i]]
			printf "%-10s %-5s %8d %10.2f %10.2f %7.3fx\n", f[1], f[2], f[3], o, w, (o > 0 ? w / o : 0)
		}
	}'
