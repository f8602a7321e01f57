#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only
#
# Runs in the VM with a release's chroot as its root (tests/vm/run
# --root-dir) and knem.ko loaded: mpi_check over that release's own Open
# MPI (Debian's openmpi-bin, unmodified) on the shared-memory transport
# with our smsc/knem (mpi/openmpi/smsc-knem) as its single-copy mechanism,
# checked against the module's counters, and a control run with CMA.
#
#   guest-smsc.sh LABEL DIR    DIR: mca_smsc_knem.so, mpi_check, VERSION,
#                              and when built, knemrs/ (mca_coll_knemrs.so
#                              and its libknem_rs) and coll_check
#                              (tests/interop/ompi-chroot.sh build)
#
# Then coll/knemrs under coll_check (tests/interop/knemrs.sh: verify on 2
# and 4 ranks, the fallbacks, no transport) in the same Open MPI, and
# where Open MPI has coll/xhc (6.0), coll_check's bcast through xhc over
# our smsc/knem.
#
#   guest-smsc.sh LABEL DIR bench [ITERS [MAXSIZE [ROUNDS]]]
#                              instead: the timing table of
#                              tests/interop/smsc-bench.sh (make
#                              interop-smsc-bench)
#
# Each check prints one line
#   interop: <check>: knem bytes +N (expected N), failed copies 0, regions 0, pinned 0
# and the last line is "interop: N passed, N failed".
set -u

label=$1
dir=$2
mpi_check=$dir/mpi_check
. "$(dirname "$0")/checks.sh"

# Open MPI and PRRTE refuse root unless told; the VM runs everything as root.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export PRTE_ALLOW_RUN_AS_ROOT=1 PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1
pkglibdir=$(ompi_info --parsable --path pkglibdir | sed -n 's/^path:pkglibdir://p')

# knem-rs-openmpi installed in this root (smsc.sh --lib-deb: the release's
# package and libknem-rs0, dpkg -i'd in an overlay of the chroot;
# DIR/PACKAGE says so): a plain `mpirun -np 2 mpi_check` from a login
# shell, as a user types it, with no option and no component of ours
# anywhere but where the package put them (mpi_check's ping-pong only up
# to 1 MiB, for time; its broadcast and all-to-all of 16 MiB+3 as in the
# other jobs).  knem must move bytes (smsc/knem's and coll/knemrs's
# together, so their sum is not predicted), and each component alone must
# move some with the other turned off (--mca smsc ^knem, --mca coll
# ^knemrs: what any user may add), so both were loaded; every byte
# verified, no failed copy.  On trixie that needs the package's
# /etc/profile.d file (mpirun would hand the ranks PMIx's component path).
# Then the package's components are hidden (a tmpfs with Debian's own
# files over the component directory), so that the jobs below load the
# ones built from the tree.
plain_job() {
	name=$1
	shift
	b0=$(knem_bytes) f0=$(counter copies_failed)
	sh -lc 'cd /tmp && exec "$@"' sh "$@" "$mpi_check" 0 1048576 > "/tmp/$name.log" 2>&1
	rc=$?
	db=$(($(knem_bytes) - b0))
	df=$(($(counter copies_failed) - f0))
	line="knem bytes +$db (expected more than 0), failed copies $df, regions $(counter regions), pinned $(counter pinned_pages)"
	grep '^mpi_check:' "/tmp/$name.log" | sed 's/^/    /'
	if [ "$rc" -ne 0 ]; then
		fail "$name" "mpirun exited with status $rc"
	elif ! grep -q '^mpi_check: .*, bad bytes 0,' "/tmp/$name.log"; then
		fail "$name" "mpi_check did not verify every byte"
	elif [ "$db" -gt 0 ] && [ "$df" -eq 0 ] && [ "$(counter regions)" -eq 0 ] && [ "$(counter pinned_pages)" -eq 0 ]; then
		echo "interop: $name: $line"
		passed=$((passed + 1))
	else
		fail "$name" "$line"
	fi
}
# DIR/PACKAGE (written by smsc.sh) names the version it installed: the
# checks must then run.
if [ -f "$dir/PACKAGE" ]; then
	want_passed=$((want_passed + 3))
	installed=$(dpkg-query -W -f '${Status} ${Version}' knem-rs-openmpi 2>&1)
	if [ "$installed" != "install ok installed $(cat "$dir/PACKAGE")" ]; then
		fail "$label-plain-mpirun" "knem-rs-openmpi $(cat "$dir/PACKAGE") is not installed in this root: $installed"
	fi
fi
if [ -f "$dir/PACKAGE" ] && [ "$failed" -eq 0 ]; then
	echo "interop: $label: knem-rs-openmpi $(dpkg-query -W -f '${Version}' knem-rs-openmpi) installed;" \
		"a login shell's mpirun gives the ranks mca_base_component_path='$(sh -lc \
		'mpirun -np 1 printenv OMPI_MCA_mca_base_component_path' 2> /dev/null)'"
	plain_t0=$(date +%s)
	plain_job "$label-plain-mpirun-2" mpirun -np 2
	plain_job "$label-plain-coll-knemrs-2" mpirun -np 2 --mca smsc ^knem
	plain_job "$label-plain-smsc-knem-2" mpirun -np 2 --mca coll ^knemrs
	echo "interop: plain mpirun checks took $(($(date +%s) - plain_t0)) s"
	mkdir -p /tmp/pkglibdir
	for f in "$pkglibdir"/*; do
		dpkg -S "$f" 2> /dev/null | grep -q '^knem-rs-openmpi:' || cp -a "$f" /tmp/pkglibdir/
	done
	mount -t tmpfs tmpfs "$pkglibdir" && cp -a /tmp/pkglibdir/. "$pkglibdir/" ||
		fail "$label-hide-package" "cannot hide the package's components"
fi
# The component where every Open MPI finds a user's components (the
# default mca_base_component_path ends with it); HOME is a tmpfs here.
mkdir -p "$HOME/.openmpi/components"
cp "$dir/mca_smsc_knem.so" "$HOME/.openmpi/components/"
echo "interop: $label: Open MPI $(cat "$dir/VERSION") (Debian's openmpi-bin), kernel $(uname -r)"

# Debian's PMIx sets its own mca_base_component_path (pmix-mca-params.conf),
# and mpirun passes it to the ranks as Open MPI's too: there the ranks
# find no component outside libopen-pal and libmpi (Debian's are all built
# in), not ours.  So the ranks get Open MPI's default path back, with the
# PMIx plugin directory kept (mpirun sets the PMIx path from the same
# option).  PMIx then notes each file there that is not a PMIx plugin.
launcher_path=$(mpirun -np 1 printenv OMPI_MCA_mca_base_component_path 2>/dev/null)
component_path=$pkglibdir${launcher_path:+:$launcher_path}:$HOME/.openmpi/components
echo "interop: the ranks' component path from mpirun: '$launcher_path'; given: $component_path"

if ompi_info > /tmp/ompi_info.log 2>&1 && grep -q 'MCA smsc: knem ' /tmp/ompi_info.log; then
	echo "interop: ompi_info lists$(grep 'MCA smsc: knem ' /tmp/ompi_info.log | sed 's/^ */ /')"
	passed=$((passed + 1))
else
	sed 's/^/    /' /tmp/ompi_info.log | tail -n 30
	fail ompi_info "no smsc knem component in ompi_info"
fi

# ompi_info's line; in bench mode the tuning run and the five runs of
# each round, else the three mpi_check jobs here (knemrs.sh and xhc add
# theirs).
want_passed=$((want_passed + 1))
if [ "${3:-}" = bench ]; then
	want_passed=$((want_passed + 5 * ${6:-3} + 1))
	. "$(dirname "$0")/smsc-bench.sh"
	passed_line
	exit
fi
want_passed=$((want_passed + 3))

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
		--mca mca_base_component_path "$component_path" \
		--mca pml ob1 --mca btl self,sm ${smsc:+--mca smsc "$smsc"} \
		--mca coll_tuned_use_dynamic_rules 1 \
		--mca coll_tuned_bcast_algorithm 1 --mca coll_tuned_alltoall_algorithm 1 \
		"$2" "${eager:-0}"
}

# Named on 2 ranks; then, with no smsc option, chosen over cma by its
# priority, on 4 ranks (the same code paths as a named 4-rank run: knem
# carried it if its counters grew by mpi_check's total, which the CMA
# control below shows they do not otherwise).
smsc=knem
mpi_job "$label-smsc-knem-2" all mpirun_smsc 2
smsc=
mpi_job "$label-smsc-default-4" all mpirun_smsc 4
# The control: CMA instead of knem moves nothing through the module.
smsc=cma
mpi_job "$label-smsc-cma-2" 0 mpirun_smsc 2

# coll/knemrs in this Open MPI: its component directory instead of ours
# (smsc/knem stays out: CMA carries point to point, so that knem's
# counters see only what coll/knemrs moved).
if [ -f "$dir/knemrs/mca_coll_knemrs.so" ]; then
	knemrs=$dir/knemrs
	coll_check=$dir/coll_check
	knemrs_launch="--map-by :OVERSUBSCRIBE --bind-to none"
	knemrs_path=$pkglibdir${launcher_path:+:$launcher_path}:$knemrs
	knemrs_transport="--mca pml ob1 --mca btl self,sm --mca smsc cma"
	knemrs_label=$label-
	knemrs_suite=no-bench
	. "$(dirname "$0")/knemrs.sh"
else
	fail "$label-knemrs" "no coll/knemrs built in $dir"
fi

# Open MPI 6.0's coll/xhc over our smsc/knem: its bcast reads the root's
# buffer through smsc (one copy per receiving rank), and when xhc sets up
# a communicator each of the 2 ranks reads 5 of its peer's 4136-byte
# control records through smsc too: 10 x 4136 bytes per communicator
# (strace of this job over smsc cma on the host shows those 40 reads
# beside the payload's; 6.0.0~rc2).  coll_check bcast uses 4
# communicators (MPI_COMM_WORLD and 3 duplicates): xhc must be selected
# for each on both ranks, 8 times (on 2 ranks the payload's bytes are the
# same under tuned: only the setup's tell xhc's apart).  coll/knemrs is loaded
# only for coll_check's MPI_T variable (priority 0: never selected);
# MPI_Bcast is the only large call.  coll_run is knemrs.sh's, sourced
# above.
xhc_bcast() {
	b0=$(knem_bytes) f0=$(counter copies_failed)
	coll_run "$label-xhc-bcast-2" mpirun --map-by :OVERSUBSCRIBE --bind-to none -np 2 \
		--mca mca_base_component_path "$component_path:$knemrs" \
		--mca pml ob1 --mca btl self,sm --mca smsc knem \
		--mca coll_knemrs_priority 0 --mca coll_knemrs_threshold 4096 \
		--mca coll_xhc_priority 100 --mca coll_base_verbose 10 \
		"$rank_files" "/tmp/$label-xhc-bcast-2.log" "$coll_check" bcast || return
	selected=$(grep -ac 'coll:base:comm_select: selecting *xhc, priority *100, Enabled' "$log")
	single=$(coll_expected)
	db=$(($(knem_bytes) - b0))
	df=$(($(counter copies_failed) - f0))
	setup=$((4 * 10 * 4136))
	line="knem bytes +$db (one copy per receiving rank from 4 KiB: $single, xhc's setup: $setup), failed copies $df, regions $(counter regions), pinned $(counter pinned_pages), xhc selected on $selected"
	if [ "$selected" -eq 8 ] && [ -n "$single" ] && [ "$db" -eq $((single + setup)) ] && [ "$df" -eq 0 ] &&
		[ "$(counter regions)" -eq 0 ] && [ "$(counter pinned_pages)" -eq 0 ]; then
		echo "interop: $name: $line"
		passed=$((passed + 1))
	else
		fail "$name" "$line"
	fi
}
# Open MPI 6 has coll/xhc (5.0.7 has not): there it must be listed and
# its check must run and pass.
if [ "$(cut -d. -f1 "$dir/VERSION")" -ge 6 ]; then
	want_passed=$((want_passed + 1))
	if ! grep -q 'MCA coll: xhc ' /tmp/ompi_info.log; then
		fail "$label-xhc-bcast-2" "Open MPI $(cat "$dir/VERSION") lists no coll/xhc"
	elif [ -f "$dir/knemrs/mca_coll_knemrs.so" ]; then
		xhc_bcast
	fi
fi

passed_line
