#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Runs in the VM, in the host's root filesystem (tests/vm/run --host-root),
# with knem.ko loaded: mpi_check over Open MPI 5's shared-memory transport
# with knem as its single-copy mechanism (smsc/knem), checked against the
# module's counters, and a control run with CMA.
#
#   guest-ompi5.sh OMPI5_PREFIX MPI_CHECK
#
# Each check prints one line
#   interop: <check>: knem bytes +N (expected N), failed copies 0, regions 0, pinned 0
# and the last line is "interop: N passed, N failed".
set -u

prefix=$1
mpi_check=$2
. "$(dirname "$0")/checks.sh"

export PATH="$prefix/bin:$PATH" LD_LIBRARY_PATH="$prefix/lib"
# Open MPI and PRRTE refuse root unless told; the VM runs everything as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_ALLOW_RUN_AS_ROOT=1 PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1

if ompi_info > /tmp/ompi_info.log 2>&1 && grep -q 'MCA smsc: knem ' /tmp/ompi_info.log; then
	echo "interop: ompi_info lists$(grep 'MCA smsc: knem ' /tmp/ompi_info.log | sed 's/^ */ /')"
	passed=$((passed + 1))
else
	sed 's/^/    /' /tmp/ompi_info.log | tail -n 30
	fail ompi_info "no smsc knem component in ompi_info"
fi

# What goes through knem.  ob1 sends a message of at most the sm BTL's
# eager limit (less ob1's header) through the shared-memory segment, a
# copy in and a copy out.  A larger contiguous message goes by RDMA: the
# sender registers its buffer (smsc/knem: KNEM_CMD_CREATE_REGION) and
# sends the cookie, the receiver reads the whole message with
# KNEM_CMD_INLINE_COPY (btl_sm_get, one copy per get fragment); no part
# of it is sent inline.  So knem moves exactly the bytes of the messages
# above the eager limit: mpi_check counts those, given the limit, which
# ompi_info reports (4096 when the smsc component cannot map peer
# memory, as knem cannot).  Its other messages (MPI_Reduce's 8 bytes,
# MPI_Init's and MPI_Finalize's synchronisation) are all far below it.
eager=$(ompi_info --param btl sm --level 9 --parsable |
	sed -n 's/^mca:btl:sm:param:btl_sm_eager_limit:value://p')
if [ -n "$eager" ]; then
	echo "interop: btl_sm_eager_limit $eager: mpi_check counts the messages above it"
else
	fail btl_sm_eager_limit "ompi_info reports no btl_sm_eager_limit"
fi

# Two vCPUs: 4 ranks oversubscribe, unbound.  The linear broadcast and
# all-to-all, for which mpi_check computes the bytes that cross between
# ranks (see mpi_check.c).
mpirun_smsc() {
	mpirun -np "$1" --map-by :OVERSUBSCRIBE --bind-to none \
		--mca pml ob1 --mca btl self,sm --mca smsc "$smsc" \
		--mca coll_tuned_use_dynamic_rules 1 \
		--mca coll_tuned_bcast_algorithm 1 --mca coll_tuned_alltoall_algorithm 1 \
		"$2" "${eager:-0}"
}

smsc=knem
mpi_job ompi5-smsc-knem-2 all mpirun_smsc 2
mpi_job ompi5-smsc-knem-4 all mpirun_smsc 4
# The control: CMA instead of knem moves nothing through the module.
smsc=cma
mpi_job ompi5-smsc-cma-2 0 mpirun_smsc 2

echo "interop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
