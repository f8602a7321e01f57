#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# packaging/openmpi/build-deb.sh RELEASE OUTDIR LIBKNEM_RS
#
# knem-rs-openmpi for one Debian release: coll/knemrs (and, for Open MPI 5
# and later, smsc/knem) compiled against that release's libopenmpi-dev and
# installed into its Open MPI component directory, so that ompi_info and
# mpirun load them with no configuration.  An Open MPI component must be
# built against the exact Open MPI that loads it (Open MPI checks only the
# MCA version), so the package depends on exactly the release's
# libopenmpi version, and each release gets its own build:
#
#   bookworm  this machine (Open MPI 4.1.4): coll/knemrs only
#   trixie    in KNEM_KERNELS_DIR/root/trixie (5.0.7): coll/knemrs, smsc/knem
#   sid       in KNEM_KERNELS_DIR/root/sid (6.0): coll/knemrs, smsc/knem
#
# The chroots are tests/interop/ompi-chroot.sh's (prepared here when they
# have no mpicc or lack the headers libopenmpi-dev leaves out).  The
# compilers run in the chroot; the .deb is assembled here with dpkg-deb.
# LIBKNEM_RS is the libknem_rs.so the components link against (soname
# libknem_rs.so.0, the one libknem-rs0 ships; make capi-bin): it is only
# linked against, not packaged.  The .deb is OUTDIR/knem-rs-openmpi_
# VERSION-1~RELEASE_amd64.deb; its Version names the release.
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prog=packaging/openmpi/build-deb.sh
die() { echo "$prog: $*" >&2; exit 2; }

[ $# -eq 3 ] || die "usage: $prog bookworm|trixie|sid OUTDIR LIBKNEM_RS"
release=$1
out=$(realpath -m "$2")
capi_lib=$(realpath "$3")
pkg=knem-rs-openmpi
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$top/Cargo.toml")
deb_version=$version-1~$release
objdump -p "$capi_lib" | grep -qE '^ +SONAME +libknem_rs\.so\.0$' || die "$capi_lib: no SONAME libknem_rs.so.0"

# The release's Open MPI library package: it owns the component directory
# and the libraries the components link to.
case $release in
bookworm) ompi_pkg=libopenmpi3 smsc=0 ;;
trixie | sid) ompi_pkg=libopenmpi40 smsc=1 ;;
*) die "no knem-rs-openmpi for '$release' (bookworm, trixie, sid)" ;;
esac

if [ "$release" = bookworm ]; then
	. /etc/os-release
	[ "${VERSION_CODENAME:-}" = bookworm ] || die "bookworm's package is built on a bookworm machine (this is ${VERSION_CODENAME:-unknown})"
	root=
	in_root() { env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C "$@"; }
else
	root=$("$top/tests/interop/ompi-chroot.sh" root "$release")
	in_root() { "$top/tests/interop/ompi-chroot.sh" run "$release" "$@"; }
	if [ ! -x "$root/usr/bin/mpicc" ] || [ ! -d "$root/usr/src/knem-ompi-headers/opal" ]; then
		"$top/tests/interop/ompi-chroot.sh" prepare "$release"
	fi
fi

ompi_version=$(in_root dpkg-query -W -f '${Version}' "$ompi_pkg") ||
	die "$release: $ompi_pkg is not installed"
dev_version=$(in_root dpkg-query -W -f '${Version}' libopenmpi-dev) ||
	die "$release: libopenmpi-dev is not installed"
[ "$ompi_version" = "$dev_version" ] || die "$release: $ompi_pkg $ompi_version but libopenmpi-dev $dev_version"
pkglibdir=$(in_root ompi_info --parsable --path pkglibdir 2>/dev/null | sed -n 's/^path:pkglibdir://p')
[ -n "$pkglibdir" ] || die "$release: ompi_info names no pkglibdir"

# Debian 13's PMIx (5.0.7) sets mca_base_component_path in its
# pmix-mca-params.conf, and its launcher-side pmdl/ompi hands every value
# of that file whose name starts with an Open MPI prefix ("mca" is one) to
# the ranks as OMPI_MCA_<name>: the ranks then search only PMIx's plugin
# directory and load none of Open MPI's component files, ours included
# (docs/debian-pmix-component-path.md).  Asked of mpirun itself, so that a
# release whose PMIx is fixed gets no workaround.  Where the ranks get such
# a path, the package ships /etc/profile.d/knem-rs-openmpi.sh: login
# shells get Open MPI's own default path back in the environment (which
# the launcher passes on over the file's value), and PMIx its own.
launcher_path=
if [ "$release" != bookworm ]; then
	launcher_path=$(in_root env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		PRTE_ALLOW_RUN_AS_ROOT=1 PRTE_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
		mpirun -np 1 printenv OMPI_MCA_mca_base_component_path 2> /dev/null) || launcher_path=
	case $launcher_path in
	'' | *"$pkglibdir"*) launcher_path= ;;
	*) echo "$prog: $release: mpirun gives the ranks mca_base_component_path=$launcher_path: shipping /etc/profile.d/$pkg.sh" ;;
	esac
fi

# Build in a scratch directory under the root (the host's /tmp for bookworm).
# A fixed path: it is in the debug information the build id covers.
b=/tmp/knem-rs-openmpi-build
trap 'rm -rf "$root$b"' EXIT
rm -rf "$root$b"
mkdir -p "$root$b/include" "$root$b/lib" "$root$b/coll-knemrs" "$root$b/out"
cp "$top/include/knem_io.h" "$top/userlib/knem-capi/include/knem_rs.h" "$root$b/include/"
cp "$capi_lib" "$root$b/lib/libknem_rs.so"
cp "$top"/mpi/openmpi/coll-knemrs/{Makefile,*.c,*.h} "$root$b/coll-knemrs/"
extra=
[ "$release" = bookworm ] || extra=EXTRA_INCLUDE=/usr/src/knem-ompi-headers
# KNEM_RS_LDFLAGS instead of KNEM_RS_LIB: no run path, the library comes
# from libknem-rs0 in the system's library directory.
in_root make -s -C "$b/coll-knemrs" KNEM_RS_INCLUDE="$b/include" \
	KNEM_RS_LDFLAGS="-L$b/lib -lknem_rs" $extra OUT="$b/out"
dsos=(mca_coll_knemrs.so)
mkdir -p "$root$b/knemrs-tune"
cp "$top"/mpi/openmpi/knemrs-tune/{Makefile,*.c} "$root$b/knemrs-tune/"
in_root make -s -C "$b/knemrs-tune" KNEM_RS_INCLUDE="$b/include" \
	KNEM_RS_LDFLAGS="-L$b/lib -lknem_rs" OUT="$b/out"
if [ "$smsc" = 1 ]; then
	mkdir -p "$root$b/smsc-knem"
	cp "$top"/mpi/openmpi/smsc-knem/{Makefile,*.c,*.h} "$root$b/smsc-knem/"
	in_root make -s -C "$b/smsc-knem" KNEM_INCLUDE="$b/include" $extra OUT="$b/out"
	dsos+=(mca_smsc_knem.so)
fi

# The package tree.
stage=$out/$pkg-$release
rm -rf "$stage"
mkdir -p "$stage/DEBIAN" "$stage$pkglibdir" "$stage/usr/share/doc/$pkg" "$stage/usr/bin"
glibc=0
files=()
for d in "${dsos[@]}"; do
	install -m 0644 "$root$b/out/$d" "$stage$pkglibdir/$d"
	files+=("$stage$pkglibdir/$d")
done
install -m 0755 "$root$b/out/knemrs-tune" "$stage/usr/bin/knemrs-tune"
files+=("$stage/usr/bin/knemrs-tune")
mkdir -p "$stage/usr/share/man/man1"
gzip -9n < "$top/mpi/openmpi/knemrs-tune/knemrs-tune.1" > "$stage/usr/share/man/man1/knemrs-tune.1.gz"
chmod 0644 "$stage/usr/share/man/man1/knemrs-tune.1.gz"
for f in "${files[@]}"; do
	strip --strip-unneeded --remove-section=.comment --remove-section=.note "$f"
	if objdump -p "$f" | grep -E '^ +(RPATH|RUNPATH) '; then die "${f##*/} has a run path"; fi
	# The newest glibc symbol version it needs (dpkg-shlibdeps would say
	# the same for libc6; the other libraries are the two packages below).
	v=$(objdump -T "$f" | grep -o 'GLIBC_[0-9.]*' | sed 's/GLIBC_//' | sort -V | tail -n 1)
	glibc=$(printf '%s\n%s\n' "$glibc" "$v" | sort -V | tail -n 1)
done
if [ -n "$launcher_path" ]; then
	mkdir -p "$stage/etc/profile.d"
	sed -e "s|@LAUNCHER_PATH@|$launcher_path|g" -e "s|@RELEASE@|$release|g" \
		"$top/packaging/openmpi/profile.sh.in" > "$stage/etc/profile.d/$pkg.sh"
	chmod 0644 "$stage/etc/profile.d/$pkg.sh"
	echo "/etc/profile.d/$pkg.sh" > "$stage/DEBIAN/conffiles"
	cat > "$stage/usr/share/doc/$pkg/README.Debian" <<-EOT
		knem-rs-openmpi for Debian $release
		===================================

		$release's PMIx sets mca_base_component_path in its pmix-mca-params.conf
		(to $launcher_path), and mpirun hands that value to every rank as
		Open MPI's own mca_base_component_path, so ranks load no component
		file from Open MPI's directory ($pkglibdir), coll/knemrs and
		smsc/knem included, although ompi_info lists them.

		/etc/profile.d/$pkg.sh puts Open MPI's default path back in the
		environment of login shells (OMPI_MCA_mca_base_component_path=
		SYSTEM_DEFAULT:USER_DEFAULT), which mpirun passes on over PMIx's
		value, and gives PMIx its own directory
		(PMIX_MCA_mca_base_component_path).  Elsewhere (a non-login shell,
		a batch script started without one, a systemd unit) set the same two
		variables, or give mpirun the option itself:

		  mpirun --mca mca_base_component_path $pkglibdir:$launcher_path -np 4 ./app

		Check what the ranks get with:

		  mpirun -np 1 printenv OMPI_MCA_mca_base_component_path
	EOT
	chmod 0644 "$stage/usr/share/doc/$pkg/README.Debian"
fi
install -m 0644 "$top/debian/copyright" "$stage/usr/share/doc/$pkg/copyright"
epoch=${SOURCE_DATE_EPOCH:-$(git -C "$top" log -1 --format=%ct 2>/dev/null || echo 0)}
date=$(date -R -u -d "@$epoch")
{
	echo "knem-rs ($deb_version) $release; urgency=medium"
	echo
	echo "  * knem-rs-openmpi for $release, built against its Open MPI ($ompi_pkg"
	echo "    $ompi_version) by packaging/openmpi/build-deb.sh."
	echo
	echo " -- knem-rs maintainers <maintainers@users.noreply.a-seed-46caf81f.example>  $date"
} | gzip -n -9 > "$stage/usr/share/doc/$pkg/changelog.Debian.gz"
chmod 0644 "$stage/usr/share/doc/$pkg/changelog.Debian.gz"
comps="coll/knemrs"
[ "$smsc" = 1 ] && comps="coll/knemrs and smsc/knem"
ompi_upstream=${ompi_version%%-*}
cat > "$stage/DEBIAN/control" <<EOF
Package: $pkg
Source: knem-rs
Version: $deb_version
Architecture: amd64
Maintainer: knem-rs maintainers <maintainers@users.noreply.a-seed-46caf81f.example>
Installed-Size: $(du -sk --exclude=DEBIAN "$stage" | cut -f1)
Depends: $ompi_pkg (= $ompi_version), libknem-rs0 (>= $version), libc6 (>= $glibc)
Recommends: knem-rs-dkms
Suggests: knem-rs-tools
Section: libs
Priority: optional
Description: knem-rs components for Debian $release's Open MPI $ompi_upstream
 knem-rs is a Linux kernel module that lets processes of one node copy
 memory regions of one another with a single copy. It implements the
 /dev/knem interface of KNEM (ABI 0x0d).
 .
 This package adds $comps to Open MPI $ompi_version
 of Debian $release, in its component directory, so that ompi_info and
 mpirun find them with no configuration. coll/knemrs runs MPI_Bcast,
 MPI_Scatter, MPI_Gather, MPI_Allgather and MPI_Alltoall of communicators
 within one node with libknem_rs's contention-aware single-copy
 collectives, and leaves every other case to Open MPI's own components.
 knemrs-tune (mpirun -np N knemrs-tune) measures on the node which
 algorithm, or Open MPI's own module, is fastest per operation, team size
 and size, and writes the rules coll/knemrs then follows
 (/etc/knem-rs/coll-rules.json).
EOF
[ "$smsc" = 0 ] || cat >> "$stage/DEBIAN/control" <<EOF
 smsc/knem gives Open MPI's shared-memory transport (btl/sm) single-copy
 transfers over /dev/knem.
EOF
off="--mca coll ^knemrs"
[ "$smsc" = 0 ] || off="$off and --mca smsc ^knem"
cat >> "$stage/DEBIAN/control" <<EOF
 .
 Turn off with $off. The package works only
 with exactly this Open MPI build: it is rebuilt for each.
EOF
mkdir -p "$out"
deb=$out/${pkg}_${deb_version}_amd64.deb
rm -f "$deb"
# The same bytes from the same commit and Open MPI.
find "$stage" -exec touch -h -d "@$epoch" {} +
SOURCE_DATE_EPOCH=$epoch dpkg-deb --root-owner-group -Zxz --build "$stage" "$deb" > /dev/null
rm -rf "$stage"
echo "$prog: $deb ($comps for $ompi_pkg $ompi_version, $pkglibdir)"
