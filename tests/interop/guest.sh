#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Runs in the VM, in the host's root filesystem (tests/vm/run --host-root),
# with knem.ko loaded: real UCX and Open MPI programs over /dev/knem, each
# checked against the module's counters.
#
#   guest.sh UCX_PREFIX MPI_CHECK KNEM_STAT KNEMRS_DIR COLL_CHECK [KNEMRS_SUITE]
#
# UCX_PREFIX is UCX rebuilt with knem (tests/interop/build-ucx.sh), MPI_CHECK
# tests/interop/mpi_check.c built with Debian's mpicc, KNEM_STAT the tool,
# KNEMRS_DIR the directory of mca_coll_knemrs.so, COLL_CHECK
# tests/interop/coll_check.c built with Debian's mpicc, KNEMRS_SUITE
# tests/interop/knemrs.sh's knemrs_suite (default all).
# Each check prints one line
#   interop: <check>: knem bytes +N (expected N), failed copies 0, regions 0, pinned 0
# and the last line is "interop: N passed, N failed".
set -u

ucx=$1
mpi_check=$2
knem_stat=$3
knemrs=$4
coll_check=$5
knemrs_suite=${6:-all}
. "$(dirname "$0")/checks.sh"

export LD_LIBRARY_PATH="$ucx/lib"
export PATH="$ucx/bin:$PATH"
# Open MPI refuses root unless told; the VM runs everything as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Every large message goes by rendezvous, whose zero-copy path is the only
# one that can use knem; mpi_check's and ucx_perftest's messages are all
# at least 512 KiB, their control messages a few bytes.
export UCX_RNDV_THRESH=65536
# Each rank sees variables that only some ranks use: no warning for those.
export UCX_WARN_UNUSED_ENV_VARS=n

# ---- UCX ---------------------------------------------------------------------

if ucx_info -d > /tmp/ucx_info.log 2>&1 && grep -q 'Transport: knem' /tmp/ucx_info.log; then
	echo "interop: ucx_info -d lists $(grep -c 'Transport: knem' /tmp/ucx_info.log) knem transport"
	passed=$((passed + 1))
else
	sed 's/^/    /' /tmp/ucx_info.log | tail -n 30
	fail ucx_info "no knem transport in ucx_info -d"
fi

# listening PORT: a TCP socket of this machine listens on PORT
# (/proc/net/tcp and tcp6: local address ...:PORT in hex, state 0A).
listening() {
	awk -v p="$(printf ':%04X' "$1")" '$4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
		END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

# ucx_perftest: the server (rank 0) in the background, the client (rank 1)
# names it.  No warm-up (-w 0): its iteration count depends on the clock.
# The client starts once the server listens (it does after opening its
# transports; up to 30 s) and runs once: a client that fails after
# reaching the server is a failure, never retried.
perftest() {
	port=$1
	shift
	ucx_perftest -p "$port" > "/tmp/perftest-server-$port.log" 2>&1 &
	server=$!
	i=0
	until listening "$port"; do
		i=$((i + 1))
		if [ "$i" -ge 300 ] || ! kill -0 "$server" 2>/dev/null; then
			echo "perftest: the server never listened on port $port"
			sed 's/^/    server: /' "/tmp/perftest-server-$port.log" | tail -n 20
			kill "$server" 2>/dev/null
			wait "$server"
			return 1
		fi
		sleep 0.1
	done
	if ! ucx_perftest -p "$port" -w 0 "$@" 127.0.0.1; then
		sed 's/^/    server: /' "/tmp/perftest-server-$port.log" | tail -n 20
		kill "$server" 2>/dev/null
		wait "$server"
		return 1
	fi
	wait "$server"
}

# get_polls DB SIZE ITERS MAX: the server's polls in a get test that moved
# DB bytes, ITERS gets of SIZE by the client plus one poll of SIZE at a
# time.  The poll count is bounded apart from the bytes: at least 1 (the
# end of the test), at most MAX (one per millisecond of the run).  Prints
# the count; fails, saying why, when DB is not ITERS gets plus 1 to MAX
# polls, so that extra copies beyond the bound show.
get_polls() {
	db=$1 size=$2 iters=$3 max=$4
	if [ $((db % size)) -ne 0 ]; then
		echo "knem bytes +$db are not a whole number of $size-byte copies"
		return 1
	fi
	polls=$((db / size - iters))
	if [ "$polls" -lt 1 ] || [ "$polls" -gt "$max" ]; then
		echo "knem bytes +$db are $((db / size)) copies of $size: $iters gets and $polls polls, expected 1 to $max polls"
		return 1
	fi
	echo "$polls"
}

size=4194304
iters=8
# UCT put, zero-copy: each iteration is one put of the whole buffer to the
# server, then one more put carries the end-of-test sentinel.
run_check uct-put-zcopy $((size * (iters + 1))) \
	perftest 13337 -t put_bw -x knem -d memory -D zcopy -s $size -n $iters
# UCT get, zero-copy: one get of the whole buffer per iteration, while the
# server polls for the end of the test with gets of the same size, one per
# millisecond at most (perftest's responder): knem must have moved the
# client's gets plus at least one poll, and no more polls than the run
# lasted milliseconds (get_polls).
b0=$(knem_bytes) f0=$(counter copies_failed)
t0=$(date +%s%N)
if perftest 13338 -t get -x knem -d memory -D zcopy -s $size -n $iters \
	> /tmp/uct-get-zcopy.log 2>&1; then
	ms=$((($(date +%s%N) - t0) / 1000000))
	db=$(($(knem_bytes) - b0))
	if polls=$(get_polls "$db" "$size" "$iters" $((ms + 1))); then
		verify "uct-get-zcopy ($iters gets + $polls polls in $ms ms)" $((size * (iters + polls))) "$b0" "$f0"
	else
		fail uct-get-zcopy "$polls"
	fi
else
	sed 's/^/    /' /tmp/uct-get-zcopy.log | tail -n 30
	fail uct-get-zcopy "ucx_perftest failed"
fi
# UCP tag matching, knem the only zero-copy transport: each message is one
# rendezvous, one knem copy of the whole message.
UCX_TLS=self,posix,knem
export UCX_TLS
run_check ucp-tag-bw $((size * iters)) \
	perftest 13339 -t tag_bw -s $size -n $iters

# ---- Open MPI over UCX -----------------------------------------------------

# The linear broadcast and all-to-all, for which mpi_check computes the
# bytes that cross between ranks; shared-memory-only UCX needs the two
# opal_common_ucx settings.
mpirun_ucx() {
	np=$1
	shift
	mpirun --oversubscribe -np "$np" \
		--mca pml ucx --mca btl self \
		--mca opal_common_ucx_tls any --mca opal_common_ucx_devices any \
		--mca coll_tuned_use_dynamic_rules 1 \
		--mca coll_tuned_bcast_algorithm 1 --mca coll_tuned_alltoall_algorithm 1 \
		-x LD_LIBRARY_PATH -x UCX_TLS -x UCX_RNDV_THRESH -x UCX_WARN_UNUSED_ENV_VARS \
		"$@"
}

mpi_job ompi-ucx-knem-2 all mpirun_ucx 2
mpi_job ompi-ucx-knem-4 all mpirun_ucx 4
# The control: CMA instead of knem moves nothing through the module.
UCX_TLS=self,posix,cma
mpi_job ompi-ucx-cma-2 0 mpirun_ucx 2
UCX_TLS=self,posix,knem

# ---- RLIMIT_MEMLOCK --------------------------------------------------------

# As an unprivileged user under the usual 8 MiB memlock limit, the 16 MiB
# messages cannot be pinned: the job still succeeds (UCX falls back), but
# the module counts the refusals and knem-stat says what to change.
refused0=$(counter pins_refused_memlock)
b0=$(knem_bytes) f0=$(counter copies_failed)
mkdir -p /tmp/nobody && chown nobody /tmp/nobody
if (ulimit -l 8192 && exec setpriv --reuid=nobody --regid=nogroup --clear-groups \
	env HOME=/tmp/nobody TMPDIR=/tmp/nobody sh -c "$(command -v mpirun) --oversubscribe -np 2 \
	--mca pml ucx --mca btl self \
	--mca opal_common_ucx_tls any --mca opal_common_ucx_devices any \
	--mca coll_tuned_use_dynamic_rules 1 \
	--mca coll_tuned_bcast_algorithm 1 --mca coll_tuned_alltoall_algorithm 1 \
	-x LD_LIBRARY_PATH -x UCX_TLS -x UCX_RNDV_THRESH -x UCX_WARN_UNUSED_ENV_VARS $mpi_check") \
	> /tmp/memlock.log 2>&1 && grep -q '^mpi_check: .*, bad bytes 0,' /tmp/memlock.log; then
	refused=$(($(counter pins_refused_memlock) - refused0))
	"$knem_stat" > /tmp/knem-stat.log 2>&1
	warning=$(grep '^knem-stat: warning: RLIMIT_MEMLOCK refused' /tmp/knem-stat.log | head -n 1)
	df=$(($(counter copies_failed) - f0))
	line="pins refused +$refused, knem bytes +$(($(knem_bytes) - b0)), failed copies $df, regions $(counter regions), pinned $(counter pinned_pages)"
	if [ "$refused" -gt 0 ] && [ -n "$warning" ] && [ "$df" -eq 0 ] &&
		[ "$(counter regions)" -eq 0 ] && [ "$(counter pinned_pages)" -eq 0 ]; then
		echo "interop: ompi-ucx-memlock-nobody: $line"
		echo "    $warning"
		passed=$((passed + 1))
	else
		sed 's/^/    /' /tmp/knem-stat.log
		fail ompi-ucx-memlock-nobody "$line; knem-stat warning: '${warning:-none}'"
	fi
else
	sed 's/^/    /' /tmp/memlock.log | tail -n 30
	fail ompi-ucx-memlock-nobody "the job failed or did not verify every byte"
fi

# ---- coll/knemrs --------------------------------------------------------------

. "$(dirname "$0")/knemrs.sh"

echo "interop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
