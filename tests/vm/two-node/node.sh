#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Runs in each guest of tests/vm/two-guests.sh, in the host's root
# filesystem with knem.ko loaded and eth0 on the private link.
#
#   node.sh b          node B (10.77.0.2): the link, then rsh.py's server
#                      until node A stops it
#   node.sh a MPI_CHECK [UCX_PREFIX]  node A (10.77.0.1): the link, then
#                      Open MPI jobs started on both guests through rsh.py
#                      (over UCX too with UCX_PREFIX, UCX built with knem
#                      by tests/interop/build-ucx.sh); stops B
#
# Each check prints "two-node: <check>: ..." and the last line of node A
# is "two-node: N passed, N failed".
set -u
here=$(dirname "$0")
role=$1
passed=0
failed=0
pass() { echo "two-node: $1"; passed=$((passed + 1)); }
fail() { echo "two-node: $1: FAIL: $2"; failed=$((failed + 1)); }

case $role in
a) me=10.77.0.1 peer=10.77.0.2 ;;
b) me=10.77.0.2 peer=10.77.0.1 ;;
*) echo "usage: node.sh a MPI_CHECK [UCX_PREFIX] | node.sh b" >&2; exit 2 ;;
esac

# ---- The link ----------------------------------------------------------------

ip link set eth0 up && ip addr add "$me/24" dev eth0 || { echo "two-node: cannot configure eth0"; exit 1; }
# The guest has lo and eth0 and no other interface, routes only to the
# link's /24 (no default route), and reaches no address outside it.
nics=$(ls /sys/class/net | tr '\n' ' ')
routes=$(ip -4 route show | tr '\n' ';')
if [ "$nics" = "eth0 lo " ] && [ "$routes" = "10.77.0.0/24 dev eth0 proto kernel scope link src $me ;" ] &&
	! ip route get 10.0.2.2 > /dev/null 2>&1 && ! ip route get 8.8.8.8 > /dev/null 2>&1; then
	pass "$role: link only: interfaces $nics, routes $routes no route to 10.0.2.2 (QEMU user net) nor 8.8.8.8"
else
	fail "$role: link only" "interfaces '$nics', routes '$routes'"
	ip route get 10.0.2.2
fi

# The peer answers once it has booted too (up to 5 minutes under TCG).
i=0
until busybox ping -c 1 -W 1 "$peer" > /dev/null 2>&1; do
	i=$((i + 1))
	if [ "$i" -ge 300 ]; then
		fail "$role: ping $peer" "no answer in 300 tries"
		break
	fi
done
if [ "$i" -lt 300 ]; then
	if out=$(busybox ping -c 3 -W 2 "$peer" 2>&1); then
		pass "$role: ping $peer: $(echo "$out" | grep 'packets transmitted')"
	else
		fail "$role: ping $peer" "$(echo "$out" | tail -n 2 | tr '\n' ' ')"
	fi
fi

# Open MPI refuses root unless told; the guests run everything as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

if [ "$role" = b ]; then
	[ "$failed" -eq 0 ] || exit 1
	# Bound to the link's address only.
	"$here/rsh.py" serve "$me" 7022
	exit $?
fi

# ---- Node A: jobs across both guests -------------------------------------

mpi_check=$2
ucx=${3:-}
rsh=$here/rsh.py
# knem's bytes on node A (local) or B (through rsh.py).
knem_bytes() {
	sum='s=0; for c in bytes_inline_read bytes_inline_write bytes_region_copy bytes_async; do s=$((s + $(cat /sys/class/misc/knem/$c))); done; echo $s'
	if [ "$1" = a ]; then sh -c "$sum"; else "$rsh" "$peer" "$sum"; fi
}

if out=$(RSH_WAIT=300 "$rsh" "$peer" hostname) && [ "$out" = node-b ]; then
	pass "a: rsh.py $peer hostname: $out"
else
	fail "a: rsh.py $peer hostname" "'$out'"
fi

printf '%s slots=2\n%s slots=2\n' "$me" "$peer" > /tmp/hostfile
# Two ranks on each guest (by slot: ranks 0-1 on A, 2-3 on B); the
# daemon on B is started by rsh.py, and Open MPI's own traffic and the
# TCP BTL stay on the link.
mpirun_2x2() {
	mpirun --hostfile /tmp/hostfile -np 4 --map-by slot \
		--mca plm_rsh_agent "$rsh" \
		--mca oob_tcp_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 \
		"$@"
}

t0=$(date +%s)
if out=$(mpirun_2x2 hostname 2>&1) &&
	[ "$(echo "$out" | sort | tr '\n' ' ')" = "node-a node-a node-b node-b " ]; then
	pass "a: mpirun 2x2 hostname: $(echo "$out" | sort | tr '\n' ' ')($(($(date +%s) - t0)) s)"
else
	fail "a: mpirun 2x2 hostname" "$(echo "$out" | tail -n 20)"
fi

# job NAME KNEM LAUNCH-ARGS...: mpi_check on 2 x 2 ranks, every byte
# verified, then knem's bytes on each guest against what it must have
# moved: KNEM "intra" is the guest's intra-node share, which mpi_check
# prints per node; "none" is nothing.
job() {
	name=$1 want=$2
	shift 2
	ba0=$(knem_bytes a) bb0=$(knem_bytes b)
	t0=$(date +%s)
	mpirun_2x2 --mca coll_tuned_use_dynamic_rules 1 \
		--mca coll_tuned_bcast_algorithm 1 --mca coll_tuned_alltoall_algorithm 1 \
		"$@" "$mpi_check" > "/tmp/$name.log" 2>&1
	rc=$?
	secs=$(($(date +%s) - t0))
	grep '^mpi_check:' "/tmp/$name.log" | sed 's/^/    /'
	dba=$(($(knem_bytes a) - ba0)) dbb=$(($(knem_bytes b) - bb0))
	if [ "$want" = intra ]; then
		wa=$(sed -n 's/^mpi_check: node node-a, ranks 2, intra-node bytes \([0-9]*\)$/\1/p' "/tmp/$name.log")
		wb=$(sed -n 's/^mpi_check: node node-b, ranks 2, intra-node bytes \([0-9]*\)$/\1/p' "/tmp/$name.log")
	else
		wa=0 wb=0
	fi
	line="knem bytes node-a +$dba (expected ${wa:-none}), node-b +$dbb (expected ${wb:-none}), $secs s"
	if [ "$rc" -ne 0 ]; then
		sed 's/^/    /' "/tmp/$name.log" | tail -n 30
		fail "a: $name" "mpirun exited with status $rc"
	elif ! grep -q '^mpi_check: ranks 4, .*, bad bytes 0,' "/tmp/$name.log"; then
		fail "a: $name" "mpi_check did not verify every byte on 4 ranks"
	elif [ -z "$wa" ] || [ -z "$wb" ] || [ "$dba" -ne "$wa" ] || [ "$dbb" -ne "$wb" ]; then
		fail "a: $name" "$line"
	else
		pass "a: $name: $line"
	fi
}

# ob1: TCP between the guests, vader inside each.  Debian's Open MPI 4.1.4
# has no knem in vader (its single copy is CMA): knem moves nothing.
job ompi-ob1-tcp-vader-2x2 none --mca pml ob1 --mca btl tcp,vader,self

# UCX rebuilt with knem: TCP between the guests, knem for every large
# message inside each (rendezvous from 64 KiB), so each guest's module
# moves exactly its intra-node share.
if [ -n "$ucx" ]; then
	export LD_LIBRARY_PATH="$ucx/lib" UCX_TLS=self,posix,knem,tcp UCX_NET_DEVICES=eth0 \
		UCX_RNDV_THRESH=65536 UCX_WARN_UNUSED_ENV_VARS=n
	job ompi-ucx-tcp-knem-2x2 intra --mca pml ucx --mca btl self \
		--mca opal_common_ucx_tls any --mca opal_common_ucx_devices any \
		-x LD_LIBRARY_PATH -x UCX_TLS -x UCX_NET_DEVICES -x UCX_RNDV_THRESH -x UCX_WARN_UNUSED_ENV_VARS
fi

if "$rsh" --stop "$peer"; then
	pass "a: stopped node B's rsh.py"
else
	fail "a: stop node B" "rsh.py --stop failed"
fi
echo "two-node: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
