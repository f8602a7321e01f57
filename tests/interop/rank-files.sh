#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# What mpirun starts instead of a rank's program in the interop jobs that
# count lines of the ranks' output (tests/interop/knemrs.sh's coll_run):
#
#   rank-files.sh STEM PROGRAM [ARG]...
#
# runs PROGRAM with its stdout and stderr in files of its own,
# STEM.RANK.out and STEM.RANK.err (RANK: OMPI_COMM_WORLD_RANK).  mpirun
# forwards what the ranks write as it reads it, up to 4 KiB at a time, and
# a read can end inside a line: through mpirun, a line of one rank could
# be cut by another's (rank 0's report "coll_check: ..." was found after
# "[vm:01886] coll:bas", its rest further down).  One writer per file
# keeps every line whole.
stem=$1
shift
exec "$@" > "$stem.${OMPI_COMM_WORLD_RANK:?not started by mpirun}.out" \
	2> "$stem.$OMPI_COMM_WORLD_RANK.err"
