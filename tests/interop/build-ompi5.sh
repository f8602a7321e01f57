#!/usr/bin/env bash
# Build Open MPI 5 from Debian's source package (trixie's openmpi 5.0.7)
# with knem's single-copy component (smsc/knem) against our
# include/knem_io.h, into PREFIX.  Configured as Debian's debian/rules does
# for what matters here (without Debian's patches, see below), except that
# PMIx and PRRTE are the copies bundled
# in the source (Debian 12 has no PMIx 5 to build against), and without
# Fortran, Java, UCX and the network transports, which a single-node
# shared-memory check does not use.
#
#   tests/interop/build-ompi5.sh SRCDIR PREFIX
#
# SRCDIR receives the source (apt-get source, through a deb-src entry for
# trixie that this script adds).  Takes about 15 minutes on 2 cores.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
srcdir=$(realpath -m "${1:?usage: build-ompi5.sh SRCDIR PREFIX}")
prefix=$(realpath -m "${2:?usage: build-ompi5.sh SRCDIR PREFIX}")
version=5.0.7
export DEBIAN_FRONTEND=noninteractive

if [ -x "$prefix/bin/mpicc" ] && [ -e "$prefix/lib/openmpi/mca_smsc_knem.so" ]; then
	echo "build-ompi5.sh: $prefix is up to date"
	exit 0
fi

list=/etc/apt/sources.list.d/knem-rs-src-trixie.list
line="deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian trixie main"
if ! grep -qxF "$line" "$list" 2>/dev/null; then
	echo "$line" > "$list"
	apt-get update -qq
fi
apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
	dpkg-dev build-essential libevent-dev libhwloc-dev zlib1g-dev flex >/dev/null
if [ ! -f "$srcdir/.unpacked" ]; then
	rm -rf "$srcdir" && mkdir -p "$srcdir"
	(cd "$srcdir" && apt-get source -qq --download-only --only-source "openmpi=$version-1" >/dev/null)
	touch "$srcdir/.unpacked"
fi
# The source package's upstream tarball, without Debian's patches: they
# touch configure.ac and Makefile.am files (for Debian's own layout), which
# would make the build rerun the autotools, as debian/rules does with
# autogen.pl.  None of them matters to the single-copy path.
src=$srcdir/upstream/openmpi-$version
if [ ! -f "$src/configure" ]; then
	rm -rf "$srcdir/upstream" && mkdir -p "$srcdir/upstream"
	tar -xJf "$srcdir/openmpi_$version.orig.tar.xz" -C "$srcdir/upstream"
fi

obj=$srcdir/obj
rm -rf "$obj" "$prefix" && mkdir -p "$obj"
cd "$obj"
"$src/configure" --prefix="$prefix" \
	--disable-silent-rules --disable-wrapper-runpath \
	--with-pmix=internal --with-prrte=internal \
	--with-libevent=external --with-hwloc=external \
	--with-knem="$top" --without-ucx --without-verbs --without-ofi \
	--disable-mpi-fortran --disable-oshmem --disable-mpi-java \
	> configure.log 2>&1 || { tail -n 30 configure.log; exit 1; }
make -j2 > make.log 2>&1 || { tail -n 40 make.log; exit 1; }
make install > install.log 2>&1 || { tail -n 40 install.log; exit 1; }
[ -e "$prefix/lib/openmpi/mca_smsc_knem.so" ] ||
	{ echo "build-ompi5.sh: configure did not build smsc/knem (see $obj/configure.log)"; exit 1; }
