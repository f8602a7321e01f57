#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Runs in the VM, in the host's root filesystem (tests/vm/run --host-root),
# with knem.ko loaded: mpi_check over Open MPI 5's shared-memory transport
# with knem as its single-copy mechanism (smsc/knem), checked against the
# module's counters, and a control run with CMA.
#
#   guest-ompi5.sh OMPI5_PREFIX MPI_CHECK
set -u

prefix=$1
mpi_check=$2
. "$(dirname "$0")/checks.sh"

export PATH="$prefix/bin:$PATH" LD_LIBRARY_PATH="$prefix/lib"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_ALLOW_RUN_AS_ROOT=1 PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1

# The linear broadcast and all-to-all, for which mpi_check computes the
# bytes that cross between ranks (see mpi_check.c).
mpirun_smsc() {
	mpirun --oversubscribe -np "$1" \
		--mca pml ob1 --mca btl self,sm --mca smsc "$smsc" \
		--mca coll_tuned_use_dynamic_rules 1 \
		--mca coll_tuned_bcast_algorithm 1 --mca coll_tuned_alltoall_algorithm 1 \
		"$2"
}

smsc=knem
mpi_job ompi5-smsc-knem-2 all mpirun_smsc 2
mpi_job ompi5-smsc-knem-4 all mpirun_smsc 4
smsc=cma
mpi_job ompi5-smsc-cma-2 0 mpirun_smsc 2

echo "interop: $passed passed, $failed failed"
[ "$failed" -eq 0 ]
