#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/vm/two-guests.sh - two guests (tests/vm/run --host-root, knem.ko
# loaded in each, 1 vCPU each) joined by a QEMU socket netdev over the
# host's loopback and nothing else: node B (10.77.0.2) listens, node A
# (10.77.0.1) connects.  Node A checks the link, starts Open MPI jobs on
# both guests through tests/vm/two-node/rsh.py (mpirun's rsh agent), and
# stops B; see tests/vm/two-node/node.sh.  rsh.py is first checked on the
# host (tests/vm/two-node/rsh-test.sh).
#
#   tests/vm/two-guests.sh [--kernel VERSION] [--module PATH] [--timeout SECS]
#                          [--ucx PREFIX] [--capi-lib PATH]
#                          [--release ROOT --release-out DIR]
#
# --ucx PREFIX: UCX rebuilt with knem (tests/interop/build-ucx.sh); node A
# then also runs mpi_check over UCX, where each guest's knem must move
# exactly its intra-node share.
# --capi-lib PATH: libknem_rs.so; coll/knemrs is built against it and
# Debian's Open MPI, and node A also runs coll_check across the guests:
# once with coll/knemrs stepping aside on MPI_COMM_WORLD, once under
# coll/han, whose intra-node sub-communicators coll/knemrs must carry.
# --release ROOT --release-out DIR: a release chroot with Open MPI 5 or 6
# (tests/interop/ompi-chroot.sh prepare) and what ompi-chroot.sh build put
# in DIR (smsc/knem, mpi_check); node A also runs that Open MPI's
# mpi_check across the guests with btl/sm over our smsc/knem.
#
# The consoles go to build/two-node/node-a.log and node-b.log; node B's is
# printed after node A's, prefixed "node-b| ".  Exits 0 only if both guests
# did.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
kernel=6.1
timeout_s=1200
module=()
ucx=
capi_lib=
release=
release_out=
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernel=$2; shift 2 ;;
	--timeout) timeout_s=$2; shift 2 ;;
	--module) module=(--module "$2"); shift 2 ;;
	--ucx) ucx=$(realpath "$2"); shift 2 ;;
	--capi-lib) capi_lib=$(realpath "$2"); shift 2 ;;
	--release) release=$(realpath "$2"); shift 2 ;;
	--release-out) release_out=$(realpath "$2"); shift 2 ;;
	*) echo "usage: tests/vm/two-guests.sh [--kernel VERSION] [--module PATH] [--timeout SECS] [--ucx PREFIX] [--capi-lib PATH] [--release ROOT --release-out DIR]" >&2; exit 2 ;;
	esac
done

[ -z "$release" ] || [ -f "$release_out/mpi_check" ] ||
	{ echo "two-guests: --release needs --release-out DIR holding that release's mpi_check" >&2; exit 2; }
[ -z "$release" ] || [ -x "$release/usr/bin/python3" ] ||
	{ echo "two-guests: $release has no python3 for rsh.py (tests/interop/ompi-chroot.sh prepare)" >&2; exit 2; }
out=$top/build/two-node
mkdir -p "$out"
# The launcher on the host's loopback first: seconds, where a boot is minutes.
"$top/tests/vm/two-node/rsh-test.sh"
mpicc -O2 -Wall -Wextra -Werror -o "$out/mpi_check" "$top/tests/interop/mpi_check.c"
knemrs_args=()
if [ -n "$capi_lib" ]; then
	"$top/tests/interop/build-knemrs.sh" "$out" "$capi_lib"
	knemrs_args=(--add "$out/knemrs" --add "$out/coll_check")
fi
# What both nodes are told; node A also gets its programs.
node_args=()
if [ -n "$release" ]; then
	knemrs_args+=(--add "$release_out")
	node_args+=("release=$release" "release_out=/opt/$(basename "$release_out")")
fi
a_args=(mpi_check=/opt/mpi_check ${ucx:+"ucx=$ucx"})
[ -z "$capi_lib" ] || a_args+=(knemrs=/opt/knemrs coll_check=/opt/coll_check)

# A free port of the host's loopback for the link.
port=
for p in $(shuf -i 20000-60000 -n 20); do
	if [ -z "$(ss -Htln "sport = :$p")" ]; then port=$p; break; fi
done
[ -n "$port" ] || { echo "two-guests: no free port on 127.0.0.1" >&2; exit 2; }

common=(--kernel "$kernel" "${module[@]+"${module[@]}"}" --host-root --smp 1 --timeout "$timeout_s"
	--add "$top/tests/vm/two-node" --add "$out/mpi_check" "${knemrs_args[@]+"${knemrs_args[@]}"}")
start=$SECONDS
# Node B in its own process group, so that it can be ended (qemu and all)
# if node A never stops it.
setsid "$top/tests/vm/run" "${common[@]}" --hostname node-b \
	--link "listen=127.0.0.1:$port" --link-mac 52:54:00:77:00:02 \
	-- /opt/two-node/node.sh b "${node_args[@]+"${node_args[@]}"}" > "$out/node-b.log" 2>&1 &
node_b=$!
i=0
until [ -n "$(ss -Htln "sport = :$port")" ]; do
	i=$((i + 1))
	if [ "$i" -ge 600 ] || ! kill -0 "$node_b" 2>/dev/null; then
		echo "two-guests: node B's QEMU never listened on 127.0.0.1:$port" >&2
		sed 's/^/node-b| /' "$out/node-b.log" | tail -n 30
		kill -- -"$node_b" 2>/dev/null || true
		exit 1
	fi
	sleep 0.5
done
echo "two-guests: node B's QEMU listens on 127.0.0.1:$port ($((SECONDS - start)) s)"

status_a=0
"$top/tests/vm/run" "${common[@]}" --hostname node-a \
	--link "connect=127.0.0.1:$port" --link-mac 52:54:00:77:00:01 \
	-- /opt/two-node/node.sh a "${a_args[@]}" "${node_args[@]+"${node_args[@]}"}" 2>&1 | tee "$out/node-a.log" || status_a=1

# Node A stopped B at its end; give B's guest a minute to power off.
i=0
while kill -0 "$node_b" 2>/dev/null && [ "$i" -lt 120 ]; do
	sleep 0.5
	i=$((i + 1))
done
if kill -0 "$node_b" 2>/dev/null; then
	echo "two-guests: node B did not finish after node A; ending it" >&2
	kill -- -"$node_b" 2>/dev/null || true
fi
status_b=0
wait "$node_b" || status_b=$?
sed 's/^/node-b| /' "$out/node-b.log"
echo "two-guests: node A $([ $status_a -eq 0 ] && echo ok || echo FAILED), node B $([ $status_b -eq 0 ] && echo ok || echo "FAILED (status $status_b)"), $((SECONDS - start)) s"
[ "$status_a" -eq 0 ] && [ "$status_b" -eq 0 ]
