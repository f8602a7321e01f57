#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# make interop-smsc (make test's interop-smsc stage): our smsc/knem
# (mpi/openmpi/smsc-knem) with Debian's own, unmodified Open MPI 5 and 6.
# Per release (trixie: 5.0.7, sid: 6.0): its chroot gets Open MPI
# (tests/interop/ompi-chroot.sh prepare, kept once made), the component
# and mpi_check are built there with its mpicc, then the VM boots each
# kernel with the chroot as its root and runs tests/interop/guest-smsc.sh:
# mpi_check over btl/sm with --mca smsc knem on 2 ranks, chosen by
# priority on 4 ranks, and a CMA control run, each checked against knem's
# byte counters; with --capi-lib (libknem_rs.so, built on the host) also
# coll/knemrs, built in the chroot against that Open MPI, under coll_check
# (verify on 2 and 4 ranks, the fallbacks, no transport).  With --lib-deb
# (make deb's libknem-rs0) too, for each release named by --plain (default:
# every release), the release's knem-rs-openmpi is built
# (packaging/openmpi/build-deb.sh) and both are installed with dpkg in an
# overlay of the chroot (the chroot itself is left alone), which the VM
# boots as its root: there, first, a plain mpirun with the packaged
# components (guest-smsc.sh).  Everything of one release runs in one boot.
#
#   tests/interop/smsc.sh [--capi-lib LIB [--lib-deb DEB [--plain RELEASE]...]] [--release RELEASE]...
#                         [--kernel VERSION]... [--bench ITERS MAXSIZE [--rounds N]]
#
# --bench (make interop-smsc-bench; needs --capi-lib): instead of the
# checks, coll_check's timing mode under coll/knemrs, tuned over smsc cma
# and knem, and coll/xhc over smsc/knem, in one boot, N rounds (default
# 3) of the four runs interleaved (tests/interop/smsc-bench.sh); default
# release sid.
#
# Default: trixie and sid on kernel 6.1.  Work files go to build/smsc/;
# each phase's time is printed.
set -euo pipefail

# The overlays live in a mount namespace of this script's own.
if [ -z "${KNEM_SMSC_IN_NS:-}" ]; then
	exec unshare --mount --propagation private env KNEM_SMSC_IN_NS=1 "$0" "$@"
fi
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
. "$top/tests/interop/on-kernels.sh"
out=$top/build/smsc
export KNEM_KERNELS_DIR=${KNEM_KERNELS_DIR:-$top/build/kernels}
kernels=()
releases=()
capi_lib=
lib_deb=
plain=()
bench=()
bench_tag=
rounds=3
while [ $# -gt 0 ]; do
	case $1 in
	--kernel) kernels+=("$2"); shift 2 ;;
	--release) releases+=("$2"); shift 2 ;;
	--capi-lib) capi_lib=$2; shift 2 ;;
	--lib-deb) lib_deb=$(realpath "$2"); shift 2 ;;
	--plain) plain+=("$2"); shift 2 ;;
	--bench) bench=(bench "$2" "$3") bench_tag=-bench; shift 3 ;;
	--rounds) rounds=$2; shift 2 ;;
	*) echo "usage: tests/interop/smsc.sh [--capi-lib LIB [--lib-deb DEB [--plain RELEASE]...]] [--release RELEASE]... [--kernel VERSION]... [--bench ITERS MAXSIZE [--rounds N]]" >&2; exit 2 ;;
	esac
done
[ ${#kernels[@]} -gt 0 ] || kernels=(6.1)
if [ ${#bench[@]} -gt 0 ]; then
	[ -n "$capi_lib" ] || { echo "interop-smsc: --bench needs --capi-lib" >&2; exit 2; }
	[ ${#releases[@]} -gt 0 ] || releases=(sid)
	bench+=("$rounds")
fi
[ ${#releases[@]} -gt 0 ] || releases=(trixie sid)

mkdir -p "$out"
t=$SECONDS
t_all=$SECONDS
phase() { echo "interop-smsc: $1 took $((SECONDS - t)) s"; t=$SECONDS; }

status=0
results=()
for rel in "${releases[@]}"; do
	chroot_log=$out/prepare-$rel.log
	if ! "$top/tests/interop/ompi-chroot.sh" prepare "$rel" > "$chroot_log" 2>&1; then
		tail -n 20 "$chroot_log" >&2
		echo "interop-smsc: preparing the $rel chroot failed; see $chroot_log" >&2
		exit 1
	fi
	grep '^tests/interop/ompi-chroot.sh:' "$chroot_log"
	phase "$rel chroot"
	rm -rf "${out:?}/$rel"
	"$top/tests/interop/ompi-chroot.sh" build "$rel" "$out/$rel" ${capi_lib:+"$capi_lib"}
	phase "$rel build"
	vm_root_dir=$("$top/tests/interop/ompi-chroot.sh" root "$rel")
	if [ -n "$lib_deb" ] && [ -n "$capi_lib" ] && [ ${#bench[@]} -eq 0 ] &&
		{ [ ${#plain[@]} -eq 0 ] || [[ " ${plain[*]} " == *" $rel "* ]]; }; then
		# knem-rs-openmpi for this release, installed with libknem-rs0 in
		# an overlay of the chroot, which the VM then boots.
		pkg=$out/$rel-pkg
		rm -rf "$pkg" && mkdir -p "$pkg/deb" "$pkg/up" "$pkg/work" "$pkg/root"
		"$top/packaging/openmpi/build-deb.sh" "$rel" "$pkg/deb" "$capi_lib"
		mount -t overlay overlay -o "lowerdir=$vm_root_dir,upperdir=$pkg/up,workdir=$pkg/work" "$pkg/root"
		cp "$lib_deb" "$pkg"/deb/knem-rs-openmpi_*.deb "$pkg/root/tmp/"
		unshare --mount --propagation private -- /bin/sh -c 'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' \
			"$pkg/root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C sh -c 'dpkg -i /tmp/*.deb && rm /tmp/*.deb'
		vm_root_dir=$pkg/root
		# guest-smsc.sh's plain-mpirun checks must then run.
		dpkg-deb -f "$pkg"/deb/knem-rs-openmpi_*.deb Version > "$out/$rel/PACKAGE"
		phase "$rel package"
	fi
	vm_add=$out/$rel
	if run_on_kernels "interop-smsc $rel" "guest-$rel$bench_tag" \
		/opt/interop/guest-smsc.sh "$rel" "/opt/$rel" ${bench[@]+"${bench[@]}"}; then
		results+=("$rel: ok")
	else
		results+=("$rel: FAILED")
		status=1
	fi
	if [ "$vm_root_dir" = "$out/$rel-pkg/root" ]; then
		umount "$vm_root_dir" && rm -rf "$out/$rel-pkg"
	fi
done
for r in "${results[@]}"; do
	echo "interop-smsc: $r"
done
echo "interop-smsc: all took $((SECONDS - t_all)) s"
exit $status
