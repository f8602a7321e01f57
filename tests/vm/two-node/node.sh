#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Runs in each guest of tests/vm/two-guests.sh, in the host's root
# filesystem with knem.ko loaded and eth0 on the private link.
#
#   node.sh b [NAME=VALUE]...  node B (10.77.0.2): the link, then rsh.py's
#                      server until node A stops it
#   node.sh a mpi_check=PATH [NAME=VALUE]...
#                      node A (10.77.0.1): the link, then Open MPI jobs
#                      started on both guests through rsh.py; stops B
#
#   ucx=PREFIX         also over UCX built with knem
#                      (tests/interop/build-ucx.sh)
#   knemrs=DIR coll_check=PATH   also coll_check, with coll/knemrs from DIR
#   release=ROOT release_out=DIR  (both nodes) also Open MPI 5 or 6 of the
#                      release chroot ROOT (read-only in the host root, so
#                      the guests chroot into it over tmpfs mounts), with
#                      our smsc/knem and that release's mpi_check from DIR
#                      (tests/interop/ompi-chroot.sh build): btl/sm with
#                      knem single copy inside each node
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
# fail_log NAME WHY: node A's job NAME failed; its whole log
# (/tmp/NAME.log, which dies with the guest) goes to the console first.
fail_log() {
	echo "two-node: a: $1: the whole of /tmp/$1.log ($(wc -l < "/tmp/$1.log") lines):"
	sed 's/^/    | /' "/tmp/$1.log"
	fail "a: $1" "$2"
}

case $role in
a) me=10.77.0.1 peer=10.77.0.2 ;;
b) me=10.77.0.2 peer=10.77.0.1 ;;
*) echo "usage: node.sh a|b [NAME=VALUE]..." >&2; exit 2 ;;
esac
shift
mpi_check= ucx= knemrs= coll_check= release= release_out=
for arg; do
	case $arg in
	mpi_check=*) mpi_check=${arg#*=} ;;
	ucx=*) ucx=${arg#*=} ;;
	knemrs=*) knemrs=${arg#*=} ;;
	coll_check=*) coll_check=${arg#*=} ;;
	release=*) release=${arg#*=} ;;
	release_out=*) release_out=${arg#*=} ;;
	*) echo "node.sh: unknown argument $arg" >&2; exit 2 ;;
	esac
done

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

# The release's root as the host root's chroot: its own files read-only,
# writable tmpfs where Open MPI writes, the guest's /dev (with /dev/knem
# and /dev/shm), /proc and /sys, and /opt for our programs.
in_release() {
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		"$@"
}
if [ -n "$release" ]; then
	for d in tmp run root; do mount -t tmpfs tmpfs "$release/$d"; done &&
		mount -t proc proc "$release/proc" && mount --rbind /sys "$release/sys" &&
		mount --rbind /dev "$release/dev" && mount --bind /opt "$release/opt" ||
		fail "$role: release root $release" "cannot mount into it"
fi

if [ "$role" = b ]; then
	[ "$failed" -eq 0 ] || exit 1
	# The release's server, for the release's mpirun on A (its own port;
	# its python and its orted run in the release's root).
	if [ -n "$release" ]; then
		in_release RSH_PORT=7023 chroot "$release" /opt/two-node/rsh.py serve "$me" 7023 &
	fi
	# Bound to the link's address only.
	"$here/rsh.py" serve "$me" 7022
	status=$?
	if [ -n "$release" ]; then
		RSH_PORT=7023 "$here/rsh.py" --stop "$me" > /dev/null 2>&1
		wait
	fi
	exit $status
fi

# ---- Node A: jobs across both guests -------------------------------------

[ -n "$mpi_check" ] || { echo "node.sh a: mpi_check=PATH is required" >&2; exit 2; }
rsh=$here/rsh.py
# mpi_check's ping-pong goes from rank 0 on A to rank 3 on B: over TCP,
# outside knem's share; 1 MiB and 2 MiB+1 are enough there.
pingpong_max=2097153
# knem's bytes on node A (local) or B (through rsh.py): one number, or
# nothing and a failed status when it cannot be read (rsh.py failed, a
# counter file is missing), so that no caller takes an empty answer for 0.
knem_bytes() {
	sum='s=0; for c in bytes_inline_read bytes_inline_write bytes_region_copy bytes_async; do s=$((s + $(cat /sys/class/misc/knem/$c))) || exit 1; done; echo $s'
	if [ "$1" = a ]; then
		v=$(sh -c "$sum") || return 1
	else
		v=$("$rsh" "$peer" "$sum") || return 1
	fi
	case $v in
	'' | *[!0-9]*) return 1 ;;
	esac
	echo "$v"
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

# counted NAME PREFIX COMMAND...: COMMAND's output into /tmp/NAME.log,
# its lines that start with PREFIX shown; sets rc, secs, and dba and dbb,
# the bytes knem moved on node A and on node B meanwhile ("unknown", and
# counts_lost says why, when a count could not be read).
counted() {
	name=$1 prefix=$2
	shift 2
	counts_lost=
	ba0=$(knem_bytes a) || counts_lost="node-a's knem bytes unreadable before the job"
	bb0=$(knem_bytes b) || counts_lost=${counts_lost:-"node-b's knem bytes unreadable before the job (rsh.py failed)"}
	t0=$(date +%s)
	# The ranks' stdout apart from their stderr: mpirun may cut lines
	# where it reads (tests/interop/knemrs.sh's coll_run).
	"$@" > "/tmp/$name.log.out" 2> "/tmp/$name.log.err"
	rc=$?
	cat "/tmp/$name.log.out" "/tmp/$name.log.err" > "/tmp/$name.log"
	secs=$(($(date +%s) - t0))
	grep -a "^$prefix:" "/tmp/$name.log" | sed 's/^/    /'
	ba1=$(knem_bytes a) || counts_lost=${counts_lost:-"node-a's knem bytes unreadable after the job"}
	bb1=$(knem_bytes b) || counts_lost=${counts_lost:-"node-b's knem bytes unreadable after the job (rsh.py failed)"}
	if [ -n "$counts_lost" ]; then
		dba=unknown dbb=unknown
	else
		dba=$((ba1 - ba0)) dbb=$((bb1 - bb0))
	fi
}

# job NAME KNEM LAUNCH-ARGS...: mpi_check on 2 x 2 ranks, every byte
# verified, then knem's bytes on each guest against what it must have
# moved: KNEM "intra" is the guest's intra-node share, which mpi_check
# prints per node; "none" is nothing.  $launch (default mpirun_2x2)
# starts the job, $program is the mpi_check it runs (and its arguments).
job() {
	name=$1 want=$2
	shift 2
	# shellcheck disable=SC2086 # the launcher, the program and its arguments
	counted "$name" mpi_check ${launch:-mpirun_2x2} --mca coll_tuned_use_dynamic_rules 1 \
		--mca coll_tuned_bcast_algorithm 1 --mca coll_tuned_alltoall_algorithm 1 \
		"$@" ${program:-$mpi_check 0 $pingpong_max}
	if [ "$want" = intra ]; then
		wa=$(sed -n 's/^mpi_check: node node-a, ranks 2, intra-node bytes \([0-9]*\)$/\1/p' "/tmp/$name.log")
		wb=$(sed -n 's/^mpi_check: node node-b, ranks 2, intra-node bytes \([0-9]*\)$/\1/p' "/tmp/$name.log")
	else
		wa=0 wb=0
	fi
	line="knem bytes node-a +$dba (expected ${wa:-none}), node-b +$dbb (expected ${wb:-none}), $secs s"
	if [ "$rc" -ne 0 ]; then
		fail_log "$name" "mpirun exited with status $rc"
	elif [ -n "$counts_lost" ]; then
		fail_log "$name" "$counts_lost"
	elif ! grep -q '^mpi_check: ranks 4, .*, bad bytes 0,' "/tmp/$name.log"; then
		fail_log "$name" "mpi_check did not verify every byte on 4 ranks"
	elif [ -z "$wa" ] || [ -z "$wb" ] || [ "$dba" -ne "$wa" ] || [ "$dbb" -ne "$wb" ]; then
		fail_log "$name" "$line"
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
	ucx_args="--mca pml ucx --mca btl self --mca opal_common_ucx_tls any --mca opal_common_ucx_devices any
		-x LD_LIBRARY_PATH -x UCX_TLS -x UCX_NET_DEVICES -x UCX_RNDV_THRESH -x UCX_WARN_UNUSED_ENV_VARS"
	# shellcheck disable=SC2086 # an option list
	job ompi-ucx-tcp-knem-2x2 intra $ucx_args
fi

# coll/knemrs across the guests (ob1: TCP between them, vader inside).
# MPI_COMM_WORLD spans both nodes, so coll/knemrs must step aside there:
# coll_check verifies every operation's bytes, and knem moves nothing.
# Under coll/han (its simple bcast: the root's node-leaders over TCP,
# then a bcast inside each node on an intra-node sub-communicator, which
# Open MPI selects normally), coll/knemrs must take each node's
# sub-communicator and move its share: one copy per other rank of the
# node, of every bcast from the threshold (4096) on.  coll_check reports
# the bytes a single copy per receiving rank of MPI_COMM_WORLD moves
# (3 per bcast on 4 ranks); a node's share is a third of that.
# coll NAME MODE MAXSIZE WANT MPIRUN-ARGS...: coll_check MODE MAXSIZE
# across the guests; WANT "none" (knem moves nothing) or "han".
coll() {
	name=$1 mode=$2 maxsize=$3 want=$4
	shift 4
	counted "$name" coll_check mpirun_2x2 --mca mca_base_component_path "$pkglibdir:$knemrs" \
		--mca coll_knemrs_threshold 4096 --mca coll_base_verbose 10 \
		"$@" "$coll_check" "$mode" "$maxsize"
	k=$(sed -n "s/^coll_check: $mode: ranks 4, .*, bad bytes 0, knem bytes expected \([0-9]*\)\$/\1/p" "/tmp/$name.log")
	aside=$(grep -ac 'coll:knemrs: not for MPI_COMM_WORLD: ranks on other nodes' "/tmp/$name.log")
	intra=$(grep -ac 'coll:knemrs: enabled on .* (2 ranks on this node)' "/tmp/$name.log")
	teams=$(grep -ac 'coll:knemrs: .*: team knemrs-[0-9a-f-]* of 2 ranks over knem;' "/tmp/$name.log")
	if [ "$want" = han ]; then
		w=$((${k:-0} / 3))
	else
		w=0
	fi
	line="knem bytes node-a +$dba (expected $w), node-b +$dbb (expected $w); knemrs stepped aside on MPI_COMM_WORLD on $aside ranks, enabled on $intra intra-node communicators, $teams teams over knem; $secs s"
	if [ "$rc" -ne 0 ]; then
		fail_log "$name" "mpirun exited with status $rc"
	elif [ -n "$counts_lost" ]; then
		fail_log "$name" "$counts_lost"
	elif [ -z "$k" ]; then
		fail_log "$name" "coll_check did not verify every byte on 4 ranks"
	elif [ "$aside" -ne 4 ]; then
		fail_log "$name" "coll/knemrs did not step aside on MPI_COMM_WORLD on all 4 ranks: $line"
	elif [ "$want" = han ] && { [ "$intra" -lt 4 ] || [ "$teams" -lt 4 ] ||
		! grep -aq 'coll:base:comm_select: selecting *han, priority *100, Enabled' "/tmp/$name.log"; }; then
		fail_log "$name" "coll/han with coll/knemrs inside each node was not selected on every rank: $line"
	elif [ "$dba" -ne "$w" ] || [ "$dbb" -ne "$w" ] || { [ "$want" = han ] && [ "$w" -eq 0 ]; }; then
		fail_log "$name" "$line"
	else
		pass "a: $name: $line"
	fi
}

if [ -n "$knemrs" ]; then
	pkglibdir=$(ompi_info --parsable --path pkglibdir | sed 's/^path:pkglibdir://')
	ob1="--mca pml ob1 --mca btl tcp,vader,self"
	han="--mca coll_han_priority 100 --mca coll_han_use_simple_bcast 1"
	# shellcheck disable=SC2086 # option lists
	coll coll-ob1-knemrs-aside-2x2 verify 65536 none $ob1
	# shellcheck disable=SC2086
	coll coll-ob1-han-knemrs-bcast-2x2 bcast 2097152 han $ob1 $han
	# shellcheck disable=SC2086
	[ -z "$ucx" ] || coll coll-ucx-han-knemrs-bcast-2x2 bcast 2097152 han $ucx_args $han
fi

# The release's Open MPI (5 or 6) across the guests, launched by PRRTE
# (its plm_ssh_agent is rsh.py, as plm_rsh_agent is for 4.1's ORTE): ob1
# with TCP between them and btl/sm inside each, whose single copy is our
# smsc/knem (our component beside the release's own).  ob1 sends by RDMA
# only the messages above sm's eager limit, so each guest's knem moves
# exactly its intra-node share of those (mpi_check LIMIT counts only
# them).  Open MPI 5 and 6 choose coll/han for a communicator across
# nodes; mpi_check's shares are those of tuned's linear algorithms, so
# han stays out (the 4.1 jobs above cover han).
mpirun_release() {
	in_release RSH_PORT=7023 chroot "$release" mpirun --hostfile /tmp/hostfile -np 4 --map-by slot \
		--prtemca plm_ssh_agent /opt/two-node/rsh.py \
		--prtemca prte_if_include 10.77.0.0/24 --mca btl_tcp_if_include 10.77.0.0/24 \
		--mca mca_base_component_path "$release_path" "$@"
}
if [ -n "$release" ]; then
	printf '%s slots=2\n%s slots=2\n' "$me" "$peer" > "$release/tmp/hostfile"
	release_pkglib=$(in_release chroot "$release" ompi_info --parsable --path pkglibdir | sed 's/^path:pkglibdir://')
	release_path=$release_pkglib:$release_out
	# The limit depends on the smsc component (4096 when it cannot map
	# peer memory, as knem cannot): ask with ours on the path.
	limit=$(in_release chroot "$release" ompi_info --mca mca_base_component_path "$release_path" \
		--mca smsc knem --parsable --param btl sm --level 9 |
		sed -n 's/^mca:btl:sm:param:btl_sm_eager_limit:value://p')
	version=$(cat "$release_out/VERSION" 2>/dev/null)
	if [ -z "$limit" ]; then
		fail "a: release $release" "no btl_sm_eager_limit from its ompi_info: $(in_release chroot "$release" ompi_info 2>&1 | tail -n 3)"
	else
		echo "two-node: a: Open MPI $version from $release, sm eager limit $limit"
		launch=mpirun_release program="$release_out/mpi_check $limit $pingpong_max" \
			job "ompi$(echo "$version" | cut -d. -f1)-ob1-tcp-sm-smsc-knem-2x2" intra \
			--mca pml ob1 --mca btl tcp,sm,self --mca smsc knem --mca coll ^han
	fi
fi

if "$rsh" --stop "$peer"; then
	pass "a: stopped node B's rsh.py"
else
	fail "a: stop node B" "rsh.py --stop failed"
fi
echo "two-node: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
