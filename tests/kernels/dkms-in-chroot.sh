#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/kernels/dkms-in-chroot.sh DEBDIR UPGRADE_KVER [APT_OPTION...] - the
# Debian package's DKMS life on one release, run inside that release's
# chroot (tests/kernels/matrix.sh dkms) from the unpacked dist tarball:
#
#   1. with UPGRADE_KVER's headers removed, apt installs knem-rs-dkms from
#      DEBDIR: DKMS builds knem.ko for every other kernel with headers;
#   2. upgrade: apt installs linux-headers-UPGRADE_KVER (APT_OPTIONs, e.g.
#      -t experimental): the package's kernel hook builds knem.ko for it;
#   3. a kernel the module cannot build for (headers whose build fails):
#      apt exits 0, the one-line message names the kernel and the build
#      log, and knem-rs-dkms stays configured;
#   4. apt purge leaves no knem.ko behind.
#
# Module signing (Secure Boot): with KNEM_DKMS_MOK=DIR, a throwaway key
# pair made by matrix.sh (DIR/test.key, DIR/test.der; DIR/signer and
# DIR/sig_key hold its subject CN and serial as modinfo prints them), dkms 3
# is pointed at it (mok_signing_key, mok_certificate in
# /etc/dkms/framework.conf.d/) before step 1, and every knem.ko of steps 1
# and 2 must carry its signature (modinfo -F signer, -F sig_key).  dkms 2
# (bullseye) has no such setting: skipped, and said so.
#
# Prints "failing-kernel apt exit code: N"; the last line is
# "N passed, N failed, N skipped".
set -uo pipefail

[ $# -ge 2 ] || { echo "usage: dkms-in-chroot.sh DEBDIR UPGRADE_KVER [APT_OPTION...]" >&2; exit 2; }
debdir=$1
upgrade_kver=$2
shift 2
apt_opts=("$@")

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
export DEBIAN_FRONTEND=noninteractive
name=knem-rs
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$top/Cargo.toml")
logdir=/build/dkms-logs
rm -rf "$logdir" && mkdir -p "$logdir"
work=$(mktemp -d)
. "$top/tests/package/dkms-checks.sh"

# A version DKMS accepts (above BUILD_EXCLUSIVE_KERNEL_MIN) that no Debian
# kernel has.
broken_kver=9.99.0-knem-broken-amd64

# A headers package for broken_kver whose kbuild fails, installed the way
# Debian's are: its postinst runs the header_postinst.d hooks.
make_broken_headers() {
	local d=$work/broken
	mkdir -p "$d/DEBIAN" "$d/usr/src/linux-headers-$broken_kver/include" \
		"$d/usr/lib/modules/$broken_kver"
	printf 'modules clean:\n\t@echo "deliberately broken kernel headers" >&2; exit 1\n' \
		> "$d/usr/src/linux-headers-$broken_kver/Makefile"
	ln -s "/usr/src/linux-headers-$broken_kver" "$d/usr/lib/modules/$broken_kver/build"
	cat > "$d/DEBIAN/control" <<-EOF
		Package: linux-headers-$broken_kver
		Version: 1
		Architecture: amd64
		Maintainer: knem-rs tests <root@localhost>
		Description: kernel headers knem.ko cannot build against (test only)
	EOF
	cat > "$d/DEBIAN/postinst" <<-EOF
		#!/bin/sh
		set -e
		if [ "\$1" = configure ] && [ -d /etc/kernel/header_postinst.d ]; then
			run-parts --report --exit-on-error --arg=$broken_kver /etc/kernel/header_postinst.d
		fi
	EOF
	chmod 0755 "$d/DEBIAN/postinst"
	dpkg-deb --root-owner-group --build "$d" "$work/linux-headers-$broken_kver.deb" 2> /dev/null ||
		dpkg-deb --build "$d" "$work/linux-headers-$broken_kver.deb"
}

no_module_left() {
	local f
	for f in /lib/modules/*/updates/dkms/knem.ko*; do
		[ -e "$f" ] && { echo "left behind: $f"; return 1; }
	done
	[ ! -e "/usr/src/$name-$version" ] || { echo "left behind: /usr/src/$name-$version"; return 1; }
}

mok=${KNEM_DKMS_MOK:-}
mok_conf=/etc/dkms/framework.conf.d/knem-rs-test-mok.conf
# The chroot is kept between runs: the test key must not outlive this one.
trap 'rm -f "$mok_conf"' EXIT

# knem.ko of kernel $1 is signed with the key in $mok.
module_signed() {
	local ko signer key
	ko=$(module_of "$1") || { echo "no knem.ko for $1"; return 1; }
	signer=$(modinfo -F signer "$ko")
	key=$(modinfo -F sig_key "$ko")
	echo "knem.ko of $1: signer: $signer"
	echo "knem.ko of $1: sig_key: $key"
	echo "knem.ko of $1: sig_hashalgo: $(modinfo -F sig_hashalgo "$ko")"
	echo "expected: signer $(cat "$mok/signer"), sig_key $(cat "$mok/sig_key")"
	[ -n "$signer" ] && [ "$signer" = "$(cat "$mok/signer")" ] && [ "$key" = "$(cat "$mok/sig_key")" ]
}
signing=
check_signed() {
	local k
	[ -n "$signing" ] || return 0
	for k in "$@"; do
		check "knem.ko of $k carries the configured key's signature (modinfo -F signer, sig_key)" module_signed "$k"
		# The output the check judged, for the run's summary.
		module_signed "$k" 2> /dev/null | grep '^knem.ko of' | sed 's/^/     > /'
	done
}

deb=$(ls "$debdir"/knem-rs-dkms_"$version"-*_all.deb 2> /dev/null | tail -n 1)
[ -n "$deb" ] || { echo "no knem-rs-dkms .deb in $debdir"; echo "0 passed, 1 failed, 0 skipped"; exit 1; }

dkms_version=$(dkms --version 2>&1 | head -n 1)
say "0. module signing key ($dkms_version)"
if [ -z "$mok" ]; then
	skip "module signing: no key pair given (KNEM_DKMS_MOK)"
elif ! [[ $dkms_version =~ ^dkms[-:]([0-9]+) ]] || [ "${BASH_REMATCH[1]}" -lt 3 ]; then
	skip "module signing: $dkms_version has no mok_signing_key/mok_certificate (dkms 3 has)"
elif mkdir -p /etc/dkms/framework.conf.d &&
	printf 'mok_signing_key=%s\nmok_certificate=%s\n' "$mok/test.key" "$mok/test.der" > "$mok_conf"; then
	signing=1
	ok "module signing: $mok_conf points dkms at the test key ($(cat "$mok/signer"))"
else
	bad "module signing: cannot write $mok_conf"
fi

say "1. install ($dkms_version, $(gcc --version | head -n 1))"
check "apt purge linux-headers-$upgrade_kver (until the upgrade)" \
	apt-get purge -y "linux-headers-$upgrade_kver"
check "apt install $(basename "$deb")" apt-get install -y "$deb"
check_built_for_every_kernel "in this chroot"
check_signed $kernels

say "2. kernel upgrade: $upgrade_kver"
check "apt install ${apt_opts[*]} linux-headers-$upgrade_kver" \
	apt-get install -y "${apt_opts[@]}" "linux-headers-$upgrade_kver"
check "the kernel hook built and installed knem.ko for $upgrade_kver" dkms_installed_for "$upgrade_kver"
check "knem.ko of $upgrade_kver is built for $upgrade_kver (vermagic)" module_matches_kernel "$upgrade_kver"
check_signed "$upgrade_kver"

say "3. a kernel knem.ko does not build for: $broken_kver"
make_broken_headers || bad "dpkg-deb could not build linux-headers-$broken_kver"
apt-get install -y "$work/linux-headers-$broken_kver.deb" > "$logdir/broken-install.log" 2>&1
rc=$?
echo "failing-kernel apt exit code: $rc"
# What follows is about a kernel whose headers are there: unpacked by dpkg
# (configured or not, which the checks below judge) with their Makefile.
# Without them apt's exit code, the missing knem.ko and the silent hook
# would prove nothing.
broken_status=$(dpkg-query -W -f='${Status}' "linux-headers-$broken_kver" 2>&1)
if [[ $broken_status == "install ok "* ]] && [ -f "/usr/src/linux-headers-$broken_kver/Makefile" ]; then
	ok "precondition: linux-headers-$broken_kver is unpacked ($broken_status)"
else
	bad "precondition: linux-headers-$broken_kver is not installed ($broken_status; log: $logdir/broken-install.log)"
fi
grep "^knem-rs: kernel $broken_kver" "$logdir/broken-install.log" | sed 's/^/     > /'
if [ "$rc" -eq 0 ]; then ok "apt install of the broken kernel's headers exits 0"; else
	bad "apt install of the broken kernel's headers exits $rc (log: $logdir/broken-install.log)"
	tail -n 15 "$logdir/broken-install.log" | sed 's/^/     | /'
fi
msg_log=$(sed -n "s|^knem-rs: kernel $broken_kver: knem.ko did not build (dkms status [0-9]*); see \(/.*\)\$|\1|p" \
	"$logdir/broken-install.log")
if [ "$(grep -c "^knem-rs: kernel $broken_kver" "$logdir/broken-install.log")" = 1 ] &&
	[ -n "$msg_log" ] && grep -q 'deliberately broken kernel headers' "$msg_log"; then
	ok "one line names $broken_kver and its build log, which shows the failure ($msg_log)"
else
	bad "no single line naming $broken_kver and an existing build log (log: $logdir/broken-install.log)"
fi
check "knem-rs-dkms and the broken headers are configured, dpkg --audit is empty" \
	packages_configured knem-rs-dkms "linux-headers-$broken_kver"
check "no knem.ko for $broken_kver" bash -c "! ls /lib/modules/$broken_kver/updates/dkms/knem.ko* 2>/dev/null"

say "4. purge"
check "apt purge knem-rs-dkms linux-headers-$broken_kver" \
	apt-get purge -y knem-rs-dkms "linux-headers-$broken_kver"
check "no knem.ko and no DKMS source left" no_module_left

rm -rf "$work"
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
