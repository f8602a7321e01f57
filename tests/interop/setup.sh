#!/usr/bin/env bash
# Install what the interop stage needs on a Debian 12 machine (root): Debian's
# Open MPI 4.1.4 (runtime and mpicc), strace (the guest counts the knem
# ioctls of ucx_perftest and of the memlock job), the source of Debian's
# UCX 1.13.1 and what building it needs.  Safe to re-run.
#
#   tests/interop/setup.sh SRCDIR   unpack UCX's Debian source into SRCDIR
set -euo pipefail

srcdir=${1:?usage: tests/interop/setup.sh SRCDIR}
export DEBIAN_FRONTEND=noninteractive

# The deb-src entry names the same keyring as Debian's own deb822 entry
# for the archive: apt refuses one URI listed with two Signed-By values.
list=/etc/apt/sources.list.d/knem-rs-src.list
line="deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm main"
if ! grep -qxF "$line" "$list" 2>/dev/null; then
	echo "$line" > "$list"
	apt-get update -qq
fi

# UCX is built only for its shared-memory transports, so its Build-Depends
# for verbs, RDMA-CM and CUDA-less GPU probes are not needed: configure
# finds them absent and skips them.
apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=600 \
	dpkg-dev build-essential autoconf automake libtool pkg-config \
	libnuma-dev openmpi-bin libopenmpi-dev strace >/dev/null

if [ ! -f "$srcdir/.unpacked" ]; then
	rm -rf "$srcdir" && mkdir -p "$srcdir"
	(cd "$srcdir" && apt-get source -qq --only-source ucx=1.13.1-1 >/dev/null)
	touch "$srcdir/.unpacked"
fi
