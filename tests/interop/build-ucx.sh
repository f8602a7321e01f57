#!/usr/bin/env bash
# Build Debian's UCX 1.13.1 from its unpacked source package with the knem
# transport, against our include/knem_io.h, into PREFIX.  Configured as
# Debian's debian/rules does (multi-threading, no logging, devel headers,
# examples, CMA, NUMA), minus --with-verbs: the VM has no RDMA device, and
# building the InfiniBand transports would only lengthen the stage.
#
#   tests/interop/build-ucx.sh SRCDIR PREFIX
#
# SRCDIR holds ucx-1.13.1/ (tests/interop/setup.sh).  Nothing is rebuilt
# when PREFIX already holds a build of the same header.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
srcdir=$(realpath -m "${1:?usage: build-ucx.sh SRCDIR PREFIX}")
prefix=$(realpath -m "${2:?usage: build-ucx.sh SRCDIR PREFIX}")
src=$srcdir/ucx-1.13.1
[ -f "$src/configure.ac" ] || { echo "build-ucx.sh: no UCX source in $src"; exit 1; }

stamp=$prefix/.knem_io.h.sha256
want=$(sha256sum < "$top/include/knem_io.h" | cut -d' ' -f1)
if [ -x "$prefix/bin/ucx_info" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ]; then
	echo "build-ucx.sh: $prefix is up to date"
	exit 0
fi

# --with-knem=DIR wants DIR/include/knem_io.h: the repository's top.
[ -x "$src/configure" ] || (cd "$src" && ./autogen.sh >/dev/null 2>&1)
obj=$srcdir/obj
rm -rf "$obj" "$prefix" && mkdir -p "$obj"
cd "$obj"
"$src/configure" --prefix="$prefix" \
	--enable-mt --disable-backtrace-detail --disable-logging \
	--enable-devel-headers --enable-examples --enable-cma \
	--without-verbs --without-rdmacm --without-java \
	--with-knem="$top" > configure.log 2>&1 ||
	{ tail -n 30 configure.log; exit 1; }
make -j2 > make.log 2>&1 || { tail -n 40 make.log; exit 1; }
make install > install.log 2>&1 || { tail -n 40 install.log; exit 1; }
[ -e "$prefix/lib/ucx/libuct_knem.so" ] ||
	{ echo "build-ucx.sh: configure did not enable knem (see $obj/configure.log)"; exit 1; }
echo "$want" > "$stamp"
