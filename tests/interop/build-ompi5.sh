#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# Build Open MPI 5 from Debian's source package (trixie's openmpi 5.0.x)
# with knem's single-copy component (smsc/knem) against our
# include/knem_io.h, into PREFIX.  Installs what it needs (root, Debian 12).
#
#   tests/interop/build-ompi5.sh SRCDIR PREFIX
#
# SRCDIR receives the source (apt-get source, through a deb-src entry for
# trixie that this script adds).  Nothing is rebuilt when PREFIX already
# holds a build of the same source and header.  About 35 minutes on 2
# cores (OMPI5_JOBS, default 2, parallel jobs).
#
# What is built is the source package's upstream tarball, configured
# directly, without debian/rules:
#  - none of Debian's patches: they change configure.ac and Makefile.am
#    files (Debian's library layout, Fortran, other architectures), which
#    makes the build rerun the autotools; none touches the shared-memory
#    or single-copy path;
#  - the PMIx and PRRTE copies bundled in the tarball: trixie's package
#    builds against PMIx 5, which Debian 12 does not have;
#  - Debian 12's libevent and hwloc;
#  - no Fortran, Java, OpenSHMEM, MPI-IO, UCX or network transports, which a
#    single-node shared-memory check does not use.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
srcdir=$(realpath -m "${1:?usage: build-ompi5.sh SRCDIR PREFIX}")
prefix=$(realpath -m "${2:?usage: build-ompi5.sh SRCDIR PREFIX}")
jobs=${OMPI5_JOBS:-2}
export DEBIAN_FRONTEND=noninteractive

# The deb-src entry names the same keyring as Debian's own entry for the
# archive: apt refuses one URI listed with two Signed-By values.
list=/etc/apt/sources.list.d/knem-rs-src-trixie.list
line="deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main"
if ! grep -qxF "$line" "$list" 2>/dev/null; then
	echo "$line" > "$list"
	apt-get update -qq
fi
apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
	dpkg-dev build-essential pkg-config xz-utils libevent-dev libhwloc-dev \
	zlib1g-dev flex >/dev/null

if [ ! -f "$srcdir/.downloaded" ]; then
	rm -rf "$srcdir" && mkdir -p "$srcdir"
	(cd "$srcdir" && apt-get source -qq --download-only --only-source openmpi/trixie 2>&1 |
		grep -v 'unsandboxed as root' || true)
	touch "$srcdir/.downloaded"
fi
orig=$(ls "$srcdir"/openmpi_5.*.orig.tar.* 2>/dev/null | head -n 1)
[ -n "$orig" ] || { echo "build-ompi5.sh: no openmpi 5 source in $srcdir"; exit 1; }
version=${orig##*/openmpi_}
version=${version%.orig.tar.*}

# Open MPI 5 links its components into its libraries: ompi_info lists them.
has_smsc_knem() {
	LD_LIBRARY_PATH="$prefix/lib" "$prefix/bin/ompi_info" 2>/dev/null | grep 'MCA smsc: knem ' >/dev/null
}

stamp=$prefix/.build-stamp
want="openmpi $version, knem_io.h $(sha256sum < "$top/include/knem_io.h" | cut -d' ' -f1)"
if [ -x "$prefix/bin/mpicc" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && has_smsc_knem; then
	echo "build-ompi5.sh: $prefix is up to date (Open MPI $version)"
	exit 0
fi

src=$srcdir/upstream/openmpi-$version
if [ ! -f "$src/configure" ]; then
	rm -rf "$srcdir/upstream" && mkdir -p "$srcdir/upstream"
	tar -xf "$orig" -C "$srcdir/upstream"
fi

obj=$srcdir/obj
rm -rf "$obj" "$prefix" && mkdir -p "$obj"
cd "$obj"
# --with-knem=DIR wants DIR/include/knem_io.h: the repository's top.
"$src/configure" --prefix="$prefix" \
	--disable-silent-rules --disable-wrapper-runpath \
	--with-pmix=internal --with-prrte=internal \
	--with-libevent=external --with-hwloc=external \
	--with-knem="$top" --without-ucx --without-ucc --without-ofi \
	--without-psm2 --without-portals4 --without-cuda --without-xpmem \
	--disable-mpi-fortran --disable-oshmem --disable-mpi-java --disable-io-romio \
	> configure.log 2>&1 || { tail -n 30 configure.log; exit 1; }
make -j"$jobs" > make.log 2>&1 || { tail -n 40 make.log; exit 1; }
make install > install.log 2>&1 || { tail -n 40 install.log; exit 1; }
has_smsc_knem ||
	{ echo "build-ompi5.sh: configure did not build smsc/knem (see $obj/configure.log)"; exit 1; }
echo "$want" > "$stamp"
