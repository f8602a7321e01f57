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
# ucx_info, three perftests, three mpi_check jobs, the memlock job,
# knem-stat --prometheus (knemrs.sh adds its own).
want_passed=9

# ---- UCX ---------------------------------------------------------------------

if ucx_info -d > /tmp/ucx_info.log 2>&1 && grep -q 'Transport: knem' /tmp/ucx_info.log; then
	echo "interop: ucx_info -d lists $(grep -c 'Transport: knem' /tmp/ucx_info.log) knem transport"
	passed=$((passed + 1))
else
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
# reaching the server is a failure, never retried.  With $perftest_trace
# set, each side runs under strace, which records its ioctls in
# $perftest_trace.server and .client (knem_copies counts them).
perftest() {
	port=$1
	shift
	server_wrap= client_wrap=
	if [ -n "${perftest_trace:-}" ]; then
		server_wrap="strace -f -qq -e trace=ioctl -e raw=ioctl -o $perftest_trace.server"
		client_wrap="strace -f -qq -e trace=ioctl -e raw=ioctl -o $perftest_trace.client"
	fi
	# shellcheck disable=SC2086 # the wrapper's words
	$server_wrap ucx_perftest -p "$port" > "/tmp/perftest-server-$port.log" 2>&1 &
	server=$!
	i=0
	until listening "$port"; do
		i=$((i + 1))
		if [ "$i" -ge 300 ] || ! kill -0 "$server" 2>/dev/null; then
			echo "perftest: the server never listened on port $port"
			sed 's/^/    server: /' "/tmp/perftest-server-$port.log"
			kill "$server" 2>/dev/null
			wait "$server"
			return 1
		fi
		sleep 0.1
	done
	# shellcheck disable=SC2086 # the wrapper's words
	if ! $client_wrap ucx_perftest -p "$port" -w 0 "$@" 127.0.0.1; then
		sed 's/^/    server: /' "/tmp/perftest-server-$port.log"
		kill "$server" 2>/dev/null
		wait "$server"
		return 1
	fi
	wait "$server"
}

# knem_copies STRACE: the KNEM_CMD_INLINE_COPY ioctls (and _BOUNDED:
# request numbers 0x33 and 0x35 of type 'K') strace recorded (-e raw=ioctl
# prints the fd and the request in hex).
knem_copies() {
	grep -c 'ioctl(0x[0-9a-f]*, 0x[0-9a-f]*4b3[35],' "$1"
}

size=4194304
iters=8
# UCT put, zero-copy: each iteration is one put of the whole buffer to the
# server, then one more put carries the end-of-test sentinel.
run_check uct-put-zcopy $((size * (iters + 1))) \
	perftest 13337 -t put_bw -x knem -d memory -D zcopy -s $size -n $iters
# UCT get, zero-copy: one get of the whole buffer per iteration by the
# client, while the server polls for the end of the test with gets of the
# same size, one per millisecond at most (perftest's responder): how many
# polls depends on the clock.  So each side's knem copies are counted from
# its own system calls (strace, perftest_trace): the client must have made
# exactly one per get, the server at least one, and knem must have moved
# exactly one buffer per copy of either side (an extra copy per get, or a
# copy of more than its size, shows).  UCX cuts a zero-copy get into
# UCX_KNEM_SEG_SIZE pieces (512 KiB), one ioctl each: here a piece is the
# whole buffer.
b0=$(knem_bytes) f0=$(counter copies_failed)
perftest_trace=/tmp/uct-get-zcopy
UCX_KNEM_SEG_SIZE=$size
export UCX_KNEM_SEG_SIZE
if perftest 13338 -t get -x knem -d memory -D zcopy -s $size -n $iters \
	> /tmp/uct-get-zcopy.log 2>&1; then
	gets=$(knem_copies /tmp/uct-get-zcopy.client) polls=$(knem_copies /tmp/uct-get-zcopy.server)
	if [ "$gets" -ne "$iters" ] || [ "$polls" -lt 1 ]; then
		fail uct-get-zcopy "knem copies: client $gets (expected $iters, one per get), server $polls (expected 1 or more)"
	else
		verify "uct-get-zcopy ($gets gets + $polls polls, each side's copies from its ioctls)" \
			$((size * (gets + polls))) "$b0" "$f0"
	fi
else
	fail uct-get-zcopy "ucx_perftest failed"
fi
perftest_trace=
unset UCX_KNEM_SEG_SIZE
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
# the module counts the refusals and knem-stat says what to change.  The
# ranks run under strace: every refusal the module counts must be one of
# their knem ioctls that failed with ENOMEM, and no other.  Which of the
# smaller messages UCX gets pinned depends on its registration cache, so
# knem's bytes are bounded: at least the smallest message (512 KiB + 5)
# and at most 8 MiB for each knem copy the ranks made (UCX_KNEM_SEG_SIZE
# 64 MiB: one copy per message), and never a byte of the messages above
# the limit (mpi_check 8388608 counts those; the 2-rank job above counted
# them all).
refused0=$(counter pins_refused_memlock)
b0=$(knem_bytes) f0=$(counter copies_failed)
rm -rf /tmp/nobody && mkdir -p /tmp/nobody && chown nobody /tmp/nobody
limit=8388608
if (ulimit -l $((limit / 1024)) && exec setpriv --reuid=nobody --regid=nogroup --clear-groups \
	env HOME=/tmp/nobody TMPDIR=/tmp/nobody UCX_KNEM_SEG_SIZE=64m \
	strace -ff -qq --seccomp-bpf -e trace=ioctl -e raw=ioctl -o /tmp/nobody/memlock.strace \
	sh -c "$(command -v mpirun) --oversubscribe -np 2 \
	--mca pml ucx --mca btl self \
	--mca opal_common_ucx_tls any --mca opal_common_ucx_devices any \
	--mca coll_tuned_use_dynamic_rules 1 \
	--mca coll_tuned_bcast_algorithm 1 --mca coll_tuned_alltoall_algorithm 1 \
	-x LD_LIBRARY_PATH -x UCX_TLS -x UCX_RNDV_THRESH -x UCX_WARN_UNUSED_ENV_VARS -x UCX_KNEM_SEG_SIZE \
	$mpi_check $limit") \
	> /tmp/memlock.log.out 2> /tmp/memlock.log.err; then
	cat /tmp/memlock.log.out /tmp/memlock.log.err > /tmp/memlock.log
	refused=$(($(counter pins_refused_memlock) - refused0))
	enomem=$(cat /tmp/nobody/memlock.strace.* | grep -c 'ioctl(0x[0-9a-f]*, 0x[0-9a-f]*4b[0-9a-f][0-9a-f], .*) *= -1 ENOMEM')
	copies=$(cat /tmp/nobody/memlock.strace.* | grep -c 'ioctl(0x[0-9a-f]*, 0x[0-9a-f]*4b3[35], .*) *= 0$')
	"$knem_stat" > /tmp/knem-stat.log 2>&1
	warning=$(grep '^knem-stat: warning: RLIMIT_MEMLOCK refused' /tmp/knem-stat.log | head -n 1)
	db=$(($(knem_bytes) - b0)) df=$(($(counter copies_failed) - f0))
	above=$(mpi_moved memlock) all=$(mpi_moved ompi-ucx-knem-2)
	lo=$((copies * (512 * 1024 + 5))) hi=$((copies * limit))
	[ -z "$all" ] || [ -z "$above" ] || [ $((all - above)) -ge "$hi" ] || hi=$((all - above))
	line="pins refused +$refused (the ranks' knem ioctls that failed with ENOMEM: $enomem)"
	line="$line, knem bytes +$db in $copies copies (expected $lo to $hi; above the limit: ${above:-?} of ${all:-?})"
	line="$line, failed copies $df, regions $(counter regions), pinned $(counter pinned_pages)"
	if ! grep -q '^mpi_check: .*, bad bytes 0,' /tmp/memlock.log; then
		fail ompi-ucx-memlock-nobody "mpi_check did not verify every byte" /tmp/memlock.log
	elif [ "$refused" -gt 0 ] && [ "$refused" -eq "$enomem" ] && [ -n "$warning" ] &&
		[ -n "$above" ] && [ "$above" -gt 0 ] && [ -n "$all" ] && [ "$copies" -gt 0 ] &&
		[ "$db" -ge "$lo" ] && [ "$db" -le "$hi" ] && [ "$df" -eq 0 ] &&
		[ "$(counter regions)" -eq 0 ] && [ "$(counter pinned_pages)" -eq 0 ]; then
		echo "interop: ompi-ucx-memlock-nobody: $line"
		echo "    $warning"
		passed=$((passed + 1))
	else
		sed 's/^/    /' /tmp/knem-stat.log
		fail ompi-ucx-memlock-nobody "$line; knem-stat warning: '${warning:-none}'" /tmp/memlock.log
	fi
else
	cat /tmp/memlock.log.out /tmp/memlock.log.err > /tmp/memlock.log
	fail ompi-ucx-memlock-nobody "the job failed" /tmp/memlock.log
fi

# ---- knem-stat --prometheus ---------------------------------------------------

# What knem-stat-prometheus.service writes for node_exporter, read by the
# reference parser (prometheus_client, Debian's python3-prometheus-client
# in the host's root) against every counter in sysfs, now that the jobs
# above moved bytes through the module and had pins refused (the warning
# gauge is then 1).
t0=$(date +%s)
if /usr/bin/python3 "$(dirname "$0")/prometheus-check.py" "$knem_stat" \
	--nonzero regions_created,bytes_inline_read,bytes_inline_write > /tmp/prometheus.log 2>&1; then
	echo "$(cat /tmp/prometheus.log) in $(($(date +%s) - t0)) s"
	passed=$((passed + 1))
else
	fail prometheus "knem-stat --prometheus does not agree with $sysfs" /tmp/prometheus.log
fi

# ---- coll/knemrs --------------------------------------------------------------

. "$(dirname "$0")/knemrs.sh"

passed_line
