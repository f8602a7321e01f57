#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# A Debian release's own Open MPI in a minbase chroot, for components that
# must be built against, and run with, exactly that Open MPI (smsc/knem,
# mpi/openmpi/smsc-knem).  The chroots are the kernel matrix's
# (tests/kernels/matrix.sh: KNEM_KERNELS_DIR/root/RELEASE), made the same
# way when missing; this adds Open MPI to them.
#
#   ompi-chroot.sh prepare RELEASE    once (kept, under the kernel
#                       matrix's prepare lock): debootstrap (if missing), then
#                       libopenmpi-dev (with the pmix and hwloc headers its
#                       headers include), openmpi-bin, gcc and make from the
#                       release, and the headers Debian's libopenmpi-dev
#                       leaves out, from the release's openmpi source
#                       package (unpacked under /usr/src/knem-ompi-headers
#                       in the chroot, never in this tree; trixie's when
#                       the mirror lacks the release's source)
#   ompi-chroot.sh build RELEASE OUT [CAPI_LIB]
#                       mca_smsc_knem.so and mpi_check, built in the
#                       chroot with its mpicc, copied to OUT with a file
#                       VERSION holding the Open MPI version; with
#                       CAPI_LIB (the host's libknem_rs.so: the releases'
#                       glibc is newer than the host's, so it runs there)
#                       also coll/knemrs and coll_check: OUT/knemrs/
#                       holds mca_coll_knemrs.so, knemrs-tune and
#                       lib/libknem_rs.so.0,
#                       its run path ($ORIGIN/lib)
#   ompi-chroot.sh root RELEASE       print the chroot's directory
#   ompi-chroot.sh run RELEASE CMD... CMD in the chroot (/proc mounted in
#                       a private mount namespace, a clean environment)
#
# Environment: KNEM_KERNELS_DIR (default build/kernels), KNEM_KERNELS_MIRROR.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prog=tests/interop/ompi-chroot.sh
dir=${KNEM_KERNELS_DIR:-$top/build/kernels}
mirror=${KNEM_KERNELS_MIRROR:-http://deb.debian.org/debian}
security=${mirror%/debian}/debian-security

die() { echo "$prog: $*" >&2; exit 2; }

[ $# -ge 2 ] || die "usage: $prog prepare|build|root|run RELEASE [OUT | CMD...]"
cmd=$1 release=$2
root=$dir/root/$release

# The suites, as matrix.sh's sources_of has them, with their sources.
sources_of() {
	local kind
	for kind in deb deb-src; do
		case $release in
		trixie)
			echo "$kind $mirror trixie main"
			echo "$kind $mirror trixie-updates main"
			echo "$kind $security trixie-security main" ;;
		sid)
			echo "$kind $mirror sid main" ;;
		*) die "no Open MPI 5 or later in $release" ;;
		esac
	done
}

# As matrix.sh's in_root: /proc in a private mount namespace.
in_root() {
	unshare --mount --propagation private -- /bin/sh -c \
		'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" \
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C \
		DEBIAN_FRONTEND=noninteractive "$@"
}
apt_in() { in_root apt-get -y -q -o Dpkg::Use-Pty=0 "$@"; }

# The kernel matrix's lock (tests/kernels/matrix.sh prepare): the chroot
# is the matrix's too, and .ci/run prepares both in the background, so
# that neither debootstraps or runs apt in it while the other does.  A
# chroot prepared here is marked inside itself, so a chroot made anew
# (KNEM_KERNELS_REFRESH) is prepared anew.
prepare() {
	local t0=$SECONDS src done_mark=$root/.knem-ompi-prepared
	sources_of > /dev/null
	mkdir -p "$dir"
	exec 8> "$dir/prepare.lock"
	flock 8
	echo "$prog: $release: waited $((SECONDS - t0)) s for $dir/prepare.lock"
	if [ -f "$done_mark" ] && [ -x "$root/usr/bin/mpicc" ] && [ -x "$root/usr/bin/python3" ]; then
		echo "$prog: $release: prepared earlier: Open MPI $(ompi_version)"
		return
	fi
	t0=$SECONDS
	if [ ! -x "$root/usr/bin/apt-get" ] || [ ! -f "$root/.debootstrap-done" ]; then
		command -v debootstrap > /dev/null || die "debootstrap is missing (tests/setup-deps.sh)"
		rm -rf "$root"
		mkdir -p "$root"
		debootstrap --variant=minbase "$release" "$root" "$mirror"
		touch "$root/.debootstrap-done"
		# The release's suites, as matrix.sh writes them.
		sources_of | grep '^deb ' > "$root/etc/apt/sources.list"
		echo "$prog: debootstrap $release took $((SECONDS - t0)) s"
	fi
	t0=$SECONDS
	# matrix.sh writes sources.list; the source lines go beside it.
	[ -f "$root/etc/apt/sources.list" ] || sources_of | grep '^deb ' > "$root/etc/apt/sources.list"
	sources_of | grep '^deb-src ' > "$root/etc/apt/sources.list.d/knem-ompi-src.list"
	cat > "$root/etc/apt/apt.conf.d/90knem-matrix" <<-EOT
		APT::Install-Recommends "false";
		APT::Install-Suggests "false";
		Acquire::Languages "none";
		Acquire::Check-Valid-Until "false";
	EOT
	echo force-unsafe-io > "$root/etc/dpkg/dpkg.cfg.d/90knem-matrix"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	apt_in update
	# python3: tests/vm/two-node/rsh.py, the launcher of the two-guest jobs.
	apt_in install make gcc libc6-dev libopenmpi-dev libpmix-dev libhwloc-dev pkgconf openmpi-bin bzip2 xz-utils \
		python3
	# The source package's headers, for those libopenmpi-dev leaves out.
	src=/usr/src/knem-ompi-headers
	if [ ! -f "$root$src/.done-$(ompi_version)" ]; then
		rm -rf "$root$src"
		mkdir -p "$root$src/dl"
		if in_root sh -c 'cd "$1" && apt-get source -q --download-only openmpi' sh "$src/dl"; then
			tar -C "$root$src" --strip-components=1 --wildcards -xf "$root$src"/dl/openmpi_*.orig.tar.* \
				'*/opal/mca/threads/pthreads/threads_pthreads*.h'
		else
			# The mirror may lack the source of a suite's newest
			# upload (sid's 6.0.0~rc2-2 here).  opal_config.h names
			# these headers, but smsc/knem uses no type they define:
			# trixie's do, and the log says so.
			[ -d "$dir/root/trixie$src/opal" ] || die "$release: no openmpi source, and no trixie headers to fall back on (prepare trixie first)"
			echo "$prog: $release: WARNING: no openmpi source from the mirror; the threads_pthreads headers come from trixie's"
			cp -a "$dir/root/trixie$src/opal" "$root$src/"
		fi
		rm -rf "$root$src/dl"
		touch "$root$src/.done-$(ompi_version)"
	fi
	touch "$done_mark"
	echo "$prog: $release: Open MPI $(ompi_version), apt took $((SECONDS - t0)) s"
}

ompi_version() {
	in_root dpkg-query -W -f '${Version}' libopenmpi-dev
}

build() {
	local out=$1 capi_lib=${2:-} b=/tmp/knem-smsc-build v
	[ -x "$root/usr/bin/mpicc" ] || die "$release: no Open MPI in $root (prepare first)"
	rm -rf "$root$b"
	mkdir -p "$root$b/include" "$root$b/smsc-knem" "$out"
	cp "$top/include/knem_io.h" "$root$b/include/"
	cp "$top"/mpi/openmpi/smsc-knem/{Makefile,*.c,*.h} "$root$b/smsc-knem/"
	cp "$top/tests/interop/mpi_check.c" "$root$b/"
	in_root make -s -C "$b/smsc-knem" KNEM_INCLUDE="$b/include" \
		EXTRA_INCLUDE=/usr/src/knem-ompi-headers OUT="$b"
	in_root mpicc -O2 -Wall -Wextra -Werror -o "$b/mpi_check" "$b/mpi_check.c"
	v=$(ompi_version)
	cp "$root$b/mca_smsc_knem.so" "$root$b/mpi_check" "$out/"
	if [ -n "$capi_lib" ]; then
		# libknem_rs under its soname beside the component, found
		# through the component's run path wherever OUT lands.
		mkdir -p "$root$b/coll-knemrs" "$root$b/knemrs/lib" "$root$b/capi-include" \
			"$root$b/knemrs-tune"
		cp "$top"/mpi/openmpi/coll-knemrs/{Makefile,*.c,*.h} "$root$b/coll-knemrs/"
		cp "$top"/mpi/openmpi/knemrs-tune/{Makefile,*.c} "$root$b/knemrs-tune/"
		cp "$top/userlib/knem-capi/include/knem_rs.h" "$root$b/capi-include/"
		cp "$capi_lib" "$root$b/knemrs/lib/libknem_rs.so.0"
		ln -sf libknem_rs.so.0 "$root$b/knemrs/lib/libknem_rs.so"
		cp "$top/tests/interop/coll_check.c" "$root$b/"
		in_root make -s -C "$b/coll-knemrs" KNEM_RS_INCLUDE="$b/capi-include" \
			KNEM_RS_LIB="$b/knemrs/lib" 'KNEM_RS_RPATH=$$ORIGIN/lib' \
			EXTRA_INCLUDE=/usr/src/knem-ompi-headers OUT="$b/knemrs"
		in_root make -s -C "$b/knemrs-tune" KNEM_RS_INCLUDE="$b/capi-include" \
			KNEM_RS_LIB="$b/knemrs/lib" 'KNEM_RS_RPATH=$$ORIGIN/lib' OUT="$b/knemrs"
		in_root mpicc -O2 -Wall -Wextra -Werror -o "$b/coll_check" "$b/coll_check.c"
		# The host-built library must load with the release's libc.
		if in_root ldd "$b/knemrs/mca_coll_knemrs.so" | grep -E 'not found|version .* not found'; then
			die "$release: mca_coll_knemrs.so does not link in the chroot"
		fi
		rm -f "$root$b/knemrs/lib/libknem_rs.so"
		rm -rf "$out/knemrs"
		cp -a "$root$b/knemrs" "$out/"
		cp "$root$b/coll_check" "$out/"
	fi
	echo "$v" > "$out/VERSION"
	rm -rf "$root$b"
	echo "$prog: $release: mca_smsc_knem.so and mpi_check${capi_lib:+, mca_coll_knemrs.so and coll_check} for Open MPI $v in $out"
}

case $cmd in
prepare) prepare ;;
build)
	[ $# -eq 3 ] || [ $# -eq 4 ] || die "usage: $prog build RELEASE OUT [CAPI_LIB]"
	build "$(realpath -m "$3")" ${4:+"$(realpath "$4")"} ;;
root) echo "$root" ;;
run)
	shift 2
	[ $# -ge 1 ] || die "usage: $prog run RELEASE CMD..."
	in_root "$@" ;;
*) die "usage: $prog prepare|build|root|run RELEASE [OUT | CMD...]" ;;
esac
