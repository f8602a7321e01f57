#!/bin/bash
# tests/uml/payload.sh OUTDIR - write the portable UML payload (make
# uml-payload): a directory that measures any x86-64 Linux node as root,
# with nothing installed, before the module is: the UML kernel of
# tests/uml/build.sh (statically linked), knem.ko for it, static
# knem-bench, knem-tests and knem-coll, a static busybox for the guest,
# and one script, `measure`.
#
#   OUTDIR/measure [--quick] [--suite] [--ncpus N]
#
# boots the kernel (one virtual CPU per CPU of the node), prints the
# node's own system call and hand-off costs, then knem-bench's tables
# (solo copies, pingpong, contention, collectives over knem, CMA and shm);
# --suite runs the module's test suite there first.  It keeps the layout
# of the tree (tests/uml/run, tests/vm/verdict.sh), so the same runner and
# verdict as `make uml-test` judge the run; its logs go to OUTDIR/build/.
set -euo pipefail

out=${1:?usage: tests/uml/payload.sh OUTDIR}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
rel=$top/target/x86_64-unknown-linux-gnu/release

paths=$("$here/build.sh" paths)
kernel=$(sed -n 's/^UML_KERNEL=//p' <<<"$paths")
module=$(sed -n 's/^UML_MODULE=//p' <<<"$paths")
for f in "$kernel" "$module" "$rel/knem-bench" "$rel/knem-tests" "$rel/knem-coll" /bin/busybox; do
	[ -e "$f" ] || { echo "payload.sh: missing $f (make uml-payload builds them)" >&2; exit 1; }
done
# Nothing of the host's libraries may be needed on the node.
for f in "$kernel" "$rel/knem-bench" "$rel/knem-tests" "$rel/knem-coll" /bin/busybox; do
	if readelf -lW "$f" | grep -q 'program interpreter'; then
		echo "payload.sh: $f is dynamically linked: the payload needs static programs" >&2
		exit 1
	fi
done

rm -rf "$out"
mkdir -p "$out/tests/uml" "$out/tests/vm" "$out/bin"
cp "$kernel" "$out/linux"
cp "$module" "$out/knem.ko"
cp "$rel/knem-bench" "$rel/knem-tests" "$rel/knem-coll" "$out/bin/"
cp /bin/busybox "$out/busybox"
cp "$here/run" "$here/bench-guest.sh" "$out/tests/uml/"
cp "$top/tests/vm/verdict.sh" "$out/tests/vm/"

cat > "$out/measure" <<'EOF'
#!/bin/bash
# measure [--quick] [--suite] [--ncpus N] - knem-rs's benchmark tables for
# this node, from User-Mode Linux on its real cores (run as root; nothing
# needs installing: the kernel and the programs here are static).
set -euo pipefail
d=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
quick=()
suite=
ncpus=()
while [ $# -gt 0 ]; do
	case $1 in
	--quick) quick=(--quick); shift ;;
	--suite) suite=1; shift ;;
	--ncpus) ncpus=(--ncpus "$2"); shift 2 ;;
	*) echo "usage: measure [--quick] [--suite] [--ncpus N]" >&2; exit 2 ;;
	esac
done
[ "$(id -u)" = 0 ] || { echo "measure: run it as root (UML's hostfs root and its module load)" >&2; exit 2; }
run=("$d/tests/uml/run" --kernel "$d/linux" --module "$d/knem.ko")
if [ -n "$suite" ]; then
	echo "=== knem-tests in UML"
	# Informative: a node's kernel config is not the lab's, so some tests
	# may not apply (make uml-test holds the lab's kernel to a list).
	"${run[@]}" --ncpus 2 --timeout 1800 --add "$d/bin/knem-tests" -- knem-tests --no-provider ||
		echo "=== knem-tests: not every test passed (above); the tables follow"
fi
echo "=== node: $(uptime)"
host=$("$d/bin/knem-bench" overhead --env)
envs=()
while read -r l; do
	[ -n "$l" ] && envs+=(--env "$l")
done <<<"$host"
"${run[@]}" --bench "${ncpus[@]+"${ncpus[@]}"}" --timeout 7200 "${envs[@]}" \
	--add "$d/bin/knem-bench" --add "$d/tests/uml/bench-guest.sh" -- \
	bench-guest.sh "${quick[@]+"${quick[@]}"}"
echo "=== node: $(uptime)"
EOF
chmod +x "$out/measure"
echo "payload.sh: $out ($(du -sh "$out" | cut -f1)); run $out/measure as root"
