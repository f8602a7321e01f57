#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/kernels/rpm-in-chroot.sh ROOT TARBALL RPMDIR - the RPMs' scriptlets
# run for real (tests/kernels/matrix.sh dkms), in the Debian release chroot
# ROOT, which has dkms and kernel headers: this machine's rpm installs into
# it with --root (and runs the scriptlets chrooted there), with --nodeps
# for what only an RPM distribution provides (dkms, gcc and make as RPMs):
#
#   1. rpm -i of the four RPMs of RPMDIR (make rpm): %pre creates the group
#      knem, %post adds knem-rs to DKMS and builds knem.ko for every kernel
#      with headers; a kernel it cannot build for (headers whose build
#      fails) is reported in one line naming it and its build log, and rpm
#      exits 0;
#   2. upgrade: rpm -U of the same packages as version UPGRADE (the tarball
#      with its version raised, rebuilt with rpmbuild -bb): DKMS holds only
#      the new version, built for every kernel, the old source is gone;
#   3. rpm -e: nothing is left (DKMS, /usr/src, knem.ko, udev rule,
#      device.conf, library, headers, tools, the rpm database).
#
# Runs as root on this machine, in a private mount namespace with ROOT/proc
# mounted.  What it adds to ROOT (the rpm database, the broken kernel's
# headers, the group knem if it made it) is removed at the end, also when
# a check fails.  The last line is "N passed, N failed, N skipped".
set -uo pipefail

[ $# -eq 3 ] || { echo "usage: rpm-in-chroot.sh ROOT TARBALL RPMDIR" >&2; exit 2; }
if [ -z "${KNEM_RPM_IN_NS:-}" ]; then
	exec unshare --mount --propagation private env KNEM_RPM_IN_NS=1 "$0" "$@"
fi
root=$(cd "$1" && pwd)
tarball=$2
rpmdir=$3
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
name=knem-rs
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$top/Cargo.toml")
# A version above any real one, same major and minor: an ordinary upgrade.
upgrade=${version%.*}.$((${version##*.} + 1))
logdir=${KNEM_RPM_LOGDIR:-$top/build/rpm-in-chroot}
rm -rf "$logdir" && mkdir -p "$logdir"
work=$(mktemp -d "${TMPDIR:-/tmp}/knem-rpm.XXXXXX")
# ok, bad, skip, check, say.
. "$top/tests/package/dkms-checks.sh"

broken_kver=9.99.0-knem-broken-amd64
pkgs='knem-rs-dkms knem-rs-libs knem-rs-devel knem-rs-tools'

in_root() {
	chroot "$root" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C "$@"
}
# rpm as on a node: the scriptlets see a plain PATH and no host variables.
rpm_root() {
	env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C rpm --root "$root" "$@"
}

mount -t proc proc "$root/proc" || { echo "cannot mount $root/proc"; exit 1; }
had_rpmdb=
[ ! -e "$root/var/lib/rpm" ] || had_rpmdb=1
had_group=
in_root getent group knem > /dev/null && had_group=1

cleaned=
cleanup() {
	[ -z "$cleaned" ] || return 0
	cleaned=1
	local left
	left=$(rpm_root -qa 2> /dev/null | grep '^knem-rs' || true)
	# shellcheck disable=SC2086
	[ -z "$left" ] || rpm_root -e --nodeps $left > "$logdir/cleanup.log" 2>&1
	if in_root dkms status -m "$name" 2> /dev/null | has .; then
		in_root sh -c 'for v in $(ls /var/lib/dkms/knem-rs 2>/dev/null); do
			dkms remove -m knem-rs -v "$v" --all; done' >> "$logdir/cleanup.log" 2>&1
	fi
	rm -rf "$root/usr/src/linux-headers-$broken_kver" "$root/lib/modules/$broken_kver" \
		"$root/var/lib/dkms/$name"
	[ -n "$had_rpmdb" ] || rm -rf "$root/var/lib/rpm"
	[ -n "$had_group" ] || in_root groupdel knem 2> /dev/null
	umount "$root/proc" 2> /dev/null
	rm -rf "$work"
}
trap 'rc=$?; if [ -z "$cleaned" ]; then cleanup; fi; exit $rc' EXIT

# Kernels with headers in the chroot, the broken one left out.
good_kernels() {
	local b k t
	for b in "$root"/lib/modules/*/build; do
		# An absolute link points inside the chroot.
		t=$(readlink "$b") || continue
		case $t in
		/*) t=$root$t ;;
		*) t=${b%/build}/$t ;;
		esac
		[ -e "$t/include" ] || continue
		k=${b%/build}
		k=${k##*/}
		[ "$k" = "$broken_kver" ] || echo "$k"
	done
}

# knem.ko of VERSION is installed for kernel KVER: DKMS says so, the file
# is there, built for KVER, of VERSION.
module_ok() {
	local k=$1 v=$2 f ko=
	in_root dkms status -m "$name" -v "$v" -k "$k" | tee /dev/stderr | has ': installed' || return 1
	for f in "$root/lib/modules/$k/updates/dkms/knem.ko"{,.xz,.zst,.gz}; do
		[ -e "$f" ] || continue
		case $f in
		*.xz) xz -dc "$f" > "$work/knem.ko" ;;
		*.zst) zstd -qdc "$f" > "$work/knem.ko" ;;
		*.gz) gzip -dc "$f" > "$work/knem.ko" ;;
		*) cp "$f" "$work/knem.ko" ;;
		esac
		ko=$work/knem.ko
	done
	[ -n "$ko" ] || { echo "no knem.ko in $root/lib/modules/$k/updates/dkms"; return 1; }
	modinfo -F vermagic "$ko" | tee /dev/stderr | has "^$k " &&
		modinfo -F version "$ko" | tee /dev/stderr | has -x "$v"
}

# Headers of broken_kver whose build fails, as a kernel the module does not
# build for (a file tree: rpm knows no Debian package).
make_broken_headers() {
	local h=$root/usr/src/linux-headers-$broken_kver
	mkdir -p "$h/include" "$root/lib/modules/$broken_kver"
	printf 'modules clean:\n\t@echo "deliberately broken kernel headers" >&2; exit 1\n' > "$h/Makefile"
	ln -sfn "/usr/src/linux-headers-$broken_kver" "$root/lib/modules/$broken_kver/build"
}

# broken_reported LOG VERSION: the scriptlet's one line names the broken
# kernel and a build log (inside the chroot) that shows the failure.
broken_reported() {
	local log=$1 v=$2 n path
	n=$(grep -c "^knem-rs: .*$broken_kver" "$log")
	path=$(sed -n "s|^knem-rs: could not build knem.ko for kernel $broken_kver; see \(/[^ ]*\)\$|\1|p" "$log")
	echo "lines naming $broken_kver: $n; build log named: ${path:-none}"
	grep "^knem-rs: .*$broken_kver" "$log"
	[ "$n" -eq 1 ] && [ -n "$path" ] && [ "${path#/var/lib/dkms/$name/$v/}" != "$path" ] &&
		grep -q 'deliberately broken kernel headers' "$root$path"
}

# The tarball as version $upgrade, and its four RPMs built with rpmbuild -bb.
build_upgrade_rpms() {
	local src=$work/src d=$name-$upgrade
	mkdir -p "$src" && tar -xzf "$tarball" -C "$src" || return 1
	mv "$src/$name-$version" "$src/$d" || return 1
	sed -i '/^\[workspace\.package\]/,/^\[/s/^version *= *".*"/version = "'"$upgrade"'"/' "$src/$d/Cargo.toml"
	sed -i "s/^PACKAGE_VERSION=.*/PACKAGE_VERSION=\"$upgrade\"/" "$src/$d/dkms.conf"
	sed -i "s/^Version:.*/Version:        $upgrade/" "$src/$d/rpm/$name.spec"
	sed -i "1s/($version-/($upgrade-/" "$src/$d/debian/changelog"
	(cd "$src/$d" && tests/package/check-versions.sh) || return 1
	mkdir -p "$work/rpmbuild/SOURCES" "$work/rpmbuild/SPECS"
	tar -czf "$work/rpmbuild/SOURCES/$d.tar.gz" -C "$src" "$d" || return 1
	cp "$src/$d/rpm/$name.spec" "$work/rpmbuild/SPECS/"
	rpmbuild -bb --nodeps --define "_topdir $work/rpmbuild" "$work/rpmbuild/SPECS/$name.spec"
}

rpms_of() {
	local dir=$1 v=$2 p f out=
	for p in $pkgs; do
		f=$(ls "$dir"/*/"$p-$v"-*.rpm 2> /dev/null | tail -n 1)
		[ -n "$f" ] || { echo "no $p-$v RPM in $dir" >&2; return 1; }
		out+="$f "
	done
	echo "$out"
}

nothing_left() {
	local status=0 f
	if in_root dkms status -m "$name" 2> /dev/null | has .; then
		echo "dkms status still lists:"; in_root dkms status -m "$name"; status=1
	fi
	for f in "$root"/usr/src/$name-* "$root/var/lib/dkms/$name" "$root"/lib/modules/*/updates/dkms/knem.ko* \
		"$root/usr/lib/udev/rules.d/60-knem.rules" "$root/usr/lib/modules-load.d/knem.conf" \
		"$root/usr/lib/modprobe.d/knem-rs.conf" \
		"$root/etc/security/limits.d/knem-rs.conf" "$root/etc/knem-rs/device.conf" \
		"$root/usr/lib/knem-rs" "$root"/usr/lib64/libknem_rs.* "$root/usr/lib64/pkgconfig/knem_rs.pc" \
		"$root/usr/include/knem_io.h" "$root/usr/include/knem_rs.h" "$root/usr/share/pkgconfig/knem-rs.pc" \
		"$root"/usr/share/doc/knem-rs-* "$root/usr/bin/knem-bench" "$root/usr/bin/knem-stat" \
		"$root/usr/bin/knem-run" "$root/usr/bin/knem-coll" "$root"/usr/share/man/man1/knem-stat.1* \
		"$root/usr/lib/systemd/system/knem-stat-prometheus.timer"; do
		[ -e "$f" ] || [ -L "$f" ] && { echo "left behind: ${f#"$root"}"; status=1; }
	done
	f=$(rpm_root -qa | grep '^knem-rs' || true)
	[ -z "$f" ] || { echo "still in the rpm database: $f"; status=1; }
	return $status
}

# --------------------------------------------------------------------------
say "0. preconditions ($(in_root dkms --version 2>&1 | head -n 1), $(rpm --version))"
for tool in rpm rpmbuild unshare chroot modinfo; do
	command -v "$tool" > /dev/null || { bad "missing $tool on this machine"; exit 1; }
done
rpms1=$(rpms_of "$rpmdir" "$version") || { bad "no RPMs of $version in $rpmdir (make rpm)"; exit 1; }
kernels=$(good_kernels)
echo "kernels with headers: $(echo $kernels)"
[ -n "$kernels" ] || { bad "no kernel with headers in $root"; exit 1; }
check "no knem-rs in the chroot before (rpm, dkms)" bash -c \
	"! rpm --root '$root' -qa 2>/dev/null | grep '^knem-rs' && ! chroot '$root' dkms status -m $name | grep ."
check "rpmbuild -bb of the same packages as version $upgrade" build_upgrade_rpms
make_broken_headers

say "1. rpm -i $version (and a kernel knem.ko does not build for: $broken_kver)"
[ -n "$had_rpmdb" ] || rpm_root --initdb
# shellcheck disable=SC2086
rpm_root -ivh --nodeps $rpms1 > "$logdir/install.log" 2>&1
rc=$?
if [ "$rc" -eq 0 ]; then ok "rpm -i --nodeps $pkgs exits 0"; else
	bad "rpm -i exits $rc (log: $logdir/install.log)"; tail -n 15 "$logdir/install.log" | sed 's/^/     | /'
fi
grep "^knem-rs: " "$logdir/install.log" | sed 's/^/     > /'
check "%pre created the system group knem" in_root getent group knem
for k in $kernels; do
	check "%post: knem.ko $version installed for $k (dkms status, vermagic, version)" module_ok "$k" "$version"
done
check "%post: one line names $broken_kver and its build log, which shows the failure" \
	broken_reported "$logdir/install.log" "$version"
check "no knem.ko for $broken_kver" bash -c "! ls '$root'/lib/modules/$broken_kver/updates/dkms/knem.ko* 2>/dev/null"

say "2. rpm -U $upgrade"
if rpms2=$(rpms_of "$work/rpmbuild/RPMS" "$upgrade"); then
	# shellcheck disable=SC2086
	rpm_root -Uvh --nodeps $rpms2 > "$logdir/upgrade.log" 2>&1
	rc=$?
	if [ "$rc" -eq 0 ]; then ok "rpm -U --nodeps to $upgrade exits 0"; else
		bad "rpm -U exits $rc (log: $logdir/upgrade.log)"; tail -n 15 "$logdir/upgrade.log" | sed 's/^/     | /'
	fi
	grep "^knem-rs: " "$logdir/upgrade.log" | sed 's/^/     > /'
	check "rpm -qa: only $upgrade of the four packages" bash -c \
		"rpm --root '$root' -qa | grep '^knem-rs' | sort | tee /dev/stderr | grep -c -- '-$upgrade-' | grep -qx 4 &&
		 ! rpm --root '$root' -qa | grep -- '^knem-rs.*-$version-'"
	for k in $kernels; do
		check "knem.ko $upgrade installed for $k after the upgrade (dkms status, vermagic, version)" \
			module_ok "$k" "$upgrade"
	done
	check "DKMS holds only $upgrade; /usr/src/$name-$version is gone" bash -c \
		"chroot '$root' dkms status -m $name | tee /dev/stderr | grep -v -- '$upgrade' | grep . && exit 1;
		 ! ls -d '$root/usr/src/$name-$version' '$root/var/lib/dkms/$name/$version' 2>/dev/null"
	check "%post of $upgrade: one line names $broken_kver and its build log" \
		broken_reported "$logdir/upgrade.log" "$upgrade"
else
	bad "no RPMs of $upgrade were built (log: $logdir/rpmbuild_-bb_of_the_same_packages_as_version_$upgrade.log)"
fi

say "3. rpm -e"
rm -rf "$root/usr/src/linux-headers-$broken_kver" "$root/lib/modules/$broken_kver"
# shellcheck disable=SC2086
check "rpm -e $pkgs" rpm_root -e $pkgs
check "nothing left (dkms status, /usr/src, /var/lib/dkms, knem.ko, udev, /etc, lib64, include, bin, rpm -qa)" nothing_left

cleanup
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
