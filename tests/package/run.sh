#!/bin/bash
# tests/package/run.sh (make package-test) - the packages, end to end, on
# this Debian machine (as root; it installs and purges packages):
#
#   1. build the .deb packages (make deb), lintian finds no error, their
#      contents match expected-files.txt, their dkms.conf is the tree's;
#   2. apt install: DKMS builds knem.ko for every kernel with headers (and
#      rebuilds it from the Rust sources with KNEM_RS_REBUILD_CORE=1, bit
#      for bit), each kernel that has an image boots in the VM with that
#      knem.ko and passes tests/vm/smoke.sh, knem_io.h and the tools work;
#      /dev/knem's two access modes (device.conf, udev, the group knem)
#      hold in the VM; the C API's installed example compiles with pkg-config knem_rs
#      against the installed library only, shared and static, and passes as
#      a knem-run team here (CMA, shm) and in the VM over the knem module;
#      man finds the tools' pages and renders them without warnings, every
#      flag of their --help documented (tests/package/man-pages.sh), and
#      knem-stat-prometheus's units are installed disabled;
#   3. kernel upgrade: installing another kernel's headers builds knem.ko
#      for it through DKMS's hook; its image, if apt has it, boots too;
#   4. apt purge leaves nothing behind;
#   5. rpmbuild -ba, then the RPMs' contents, scripts, provides, requires
#      and dkms.conf are checked.
#
# knem-rs-openmpi (make deb-openmpi RELEASE=bookworm, for this machine's
# Open MPI 4.1.4) goes along: built and checked in 1, installed in 2,
# where ompi_info must list coll/knemrs and an mpirun job runs with it,
# purged in 4; its RPM subpackage in 5.  trixie's and sid's are make
# package-test-openmpi's (tests/package/openmpi-chroots.sh).
#
# Re-runnable: an earlier installation is purged first, and the packages
# are purged at the end even when a check fails. The extra kernel packages
# are removed again only if this run installed them.
#
# Environment:
#   KNEM_PKG_UPGRADE_KERNEL  kernel of step 3 (default 6.12.95+deb12-rt-amd64)
#   KNEM_PKG_UPGRADE_IMAGE   0: install its headers only, do not boot it
#   KNEM_PKG_NO_VM           1: skip the VM boots
#   KNEM_PKG_NO_REBUILD      1: skip rebuilding the Rust core through DKMS
#                            (KNEM_RS_REBUILD_CORE=1; done only with cargo)
#   KNEM_RS_NO_CORE_BUILD    1: package the existing Rust object (see Makefile)
#
# A check that does not run says "skip" and why, and is counted apart: the
# last line is "N passed, N failed, N skipped".  Only the two opt-outs
# above and a kernel without an image in /boot skip; anything else this
# test is meant to run and cannot is a failure.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top"
export DEBIAN_FRONTEND=noninteractive

name=knem-rs
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
# Where the Debian packages put libknem_rs (the multiarch libdir).
libdir=/usr/lib/$(dpkg-architecture -qDEB_HOST_MULTIARCH)
upgrade_kver=${KNEM_PKG_UPGRADE_KERNEL:-6.12.95+deb12-rt-amd64}
upgrade_image=${KNEM_PKG_UPGRADE_IMAGE:-1}
no_vm=${KNEM_PKG_NO_VM:-0}
no_rebuild=${KNEM_PKG_NO_REBUILD:-0}
logdir=$top/build/package-test
mkdir -p "$logdir"
work=$(mktemp -d "${TMPDIR:-/tmp}/knem-pkg.XXXXXX")
# ok, bad, check, say; the DKMS checks shared with tests/kernels.
. "$top/tests/package/dkms-checks.sh"

installed() { dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null | has -x installed; }

# Kernel packages this run installs are removed at the end, and the
# /vmlinuz-style symlinks that linux-base moves meanwhile are put back.
links_before=$(for l in /vmlinuz /vmlinuz.old /initrd.img /initrd.img.old; do
	[ -L "$l" ] && echo "$l $(readlink "$l")"; done)
pkgs_before=$(dpkg-query -W -f='${Package}\n' | sort)
added_kernel_pkgs() {
	comm -13 <(echo "$pkgs_before") <(dpkg-query -W -f='${Package}\n' | sort) |
		grep -E '^linux-(headers|image|kbuild)-' || true
}

purge_ours() {
	local p pkgs=()
	for p in knem-rs-openmpi knem-rs-dkms libknem-rs-dev libknem-rs0 knem-rs-tools; do
		dpkg-query -W "$p" >/dev/null 2>&1 && pkgs+=("$p")
	done
	[ ${#pkgs[@]} -eq 0 ] || apt-get purge -y "${pkgs[@]}"
}

cleaned=
cleanup() {
	[ -z "$cleaned" ] || return 0
	cleaned=1
	say "cleanup"
	purge_ours > "$logdir/cleanup-purge.log" 2>&1 || echo "cleanup: purge failed, see $logdir/cleanup-purge.log"
	local added_pkgs
	mapfile -t added_pkgs < <(added_kernel_pkgs)
	if [ ${#added_pkgs[@]} -gt 0 ]; then
		echo "cleanup: removing ${added_pkgs[*]}"
		apt-get purge -y "${added_pkgs[@]}" > "$logdir/cleanup-kernel.log" 2>&1 ||
			echo "cleanup: removing the extra kernel failed, see $logdir/cleanup-kernel.log"
		# depmod's files for a kernel that is gone again.
		if [ ! -e "/boot/vmlinuz-$upgrade_kver" ] && [ -d "/lib/modules/$upgrade_kver" ] &&
			[ -z "$(find "/lib/modules/$upgrade_kver" -type f ! -name 'modules.*' | head -n 1)" ]; then
			rm -rf "/lib/modules/$upgrade_kver"
		fi
		local l target
		while read -r l target; do
			[ -n "$l" ] && [ -e "/${target#/}" ] && ln -sfn "$target" "$l"
		done <<< "$links_before"
	fi
	rm -rf "$work"
}
# On an early exit: clean up, then still end with the count.
trap 'rc=$?; if [ -z "$cleaned" ]; then cleanup; echo "$passed passed, $((failed + 1)) failed, $skipped skipped"; fi; exit $rc' EXIT
trap 'exit 130' INT TERM


# DKMS with KNEM_RS_REBUILD_CORE=1 rebuilds the Rust object from the shipped
# sources; the module must come out bit for bit the same as with the shipped
# object (DKMS signs both with the same key, deterministically).
rebuilt_core_same_module() {
	local k=$1 m a b
	m=/var/lib/dkms/$name/$version/$k/$(uname -m)
	dkms build -m "$name" -v "$version" -k "$k" --force || return 1
	a=$(sha256sum < "$m/module/knem.ko")
	KNEM_RS_REBUILD_CORE=1 dkms build -m "$name" -v "$version" -k "$k" --force || { cat "$m/log/make.log"; return 1; }
	grep -q 'check-kobj' "$m/log/make.log" || { echo "the core was not rebuilt"; cat "$m/log/make.log"; return 1; }
	b=$(sha256sum < "$m/module/knem.ko")
	echo "knem.ko, shipped core: $a"
	echo "knem.ko, rebuilt core: $b"
	[ "$a" = "$b" ]
}

boot_smoke() {
	local ko
	ko=$(module_of "$1") || { echo "no knem.ko for $1"; return 1; }
	tests/vm/run --kernel "$1" --module "$ko" --add tests/vm/smoke.sh -- smoke.sh
}

# The C API, as an MPI transport developer would use it: the example that
# libknem-rs-dev ships, compiled with pkg-config knem_rs and nothing from
# this tree (no search path from the environment either), then run as a
# team by the installed knem-run.
capi_env() {
	env -u CPATH -u C_INCLUDE_PATH -u LIBRARY_PATH -u LD_LIBRARY_PATH \
		-u PKG_CONFIG_PATH -u PKG_CONFIG_LIBDIR "$@"
}

# PATH is the installed libknem_rs.so.0 (seen through /lib or /usr/lib: with
# merged /usr both are the same file).
is_installed_lib() {
	[ -n "$1" ] && [ "$(readlink -f "$1")" = "$(readlink -f "$libdir/libknem_rs.so.0")" ]
}

capi_soname() {
	objdump -p "$libdir/libknem_rs.so.0" | tee /dev/stderr | has -E '^ +SONAME +libknem_rs\.so\.0$' &&
		is_installed_lib "$(ldconfig -p | tee /dev/stderr |
			sed -n 's/^[[:space:]]*libknem_rs\.so\.0 (libc6,x86-64) => //p')"
}

capi_build_shared() {
	cp /usr/share/doc/libknem-rs-dev/examples/example.c "$work/example.c" || return 1
	(cd "$work" && capi_env sh -c 'cc -std=c99 -Wall -Wextra -Werror -O2 -o capi-example example.c \
		$(pkg-config --cflags --libs knem_rs)') || return 1
	objdump -p "$work/capi-example" | grep -E '^ +NEEDED +libknem_rs\.so\.0$' &&
		is_installed_lib "$(capi_env ldd "$work/capi-example" | tee /dev/stderr |
			sed -n 's/^[[:space:]]*libknem_rs\.so\.0 => \([^ ]*\) .*/\1/p')"
}

# --static adds Libs.private; -static makes the linker take libknem_rs.a.
capi_build_static() {
	cp /usr/share/doc/libknem-rs-dev/examples/example.c "$work/example.c" || return 1
	(cd "$work" && capi_env sh -c 'cc -std=c99 -Wall -Wextra -Werror -O2 -static -o capi-example-static \
		example.c $(pkg-config --static --cflags --libs knem_rs)') || return 1
	objdump -p "$work/capi-example-static" > "$work/static.objdump" || return 1
	if grep NEEDED "$work/static.objdump"; then echo "not statically linked"; return 1; fi
}

# capi_run N TRANSPORT|auto PROGRAM: the team passes and rank 0 reports
# the transport expected (auto: the first that works here).
capi_run() {
	local n=$1 transport=$2 prog=$3 want=$2 out
	if [ "$transport" = auto ]; then
		want=cma
		[ -c /dev/knem ] && want=knem
		out=$(capi_env /usr/bin/knem-run -n "$n" -- "$prog" 2>&1)
	else
		out=$(capi_env /usr/bin/knem-run -n "$n" --transport "$transport" -- "$prog" 2>&1)
	fi || { echo "$out"; return 1; }
	echo "$out"
	grep -qx "example: $n ranks over $want ok" <<< "$out"
}

# The static example in the VM, over the knem module DKMS built for kernel $1.
# One boot with boot_smoke's: smoke.sh first.
capi_vm_knem() {
	local ko out
	ko=$(module_of "$1") || { echo "no knem.ko for $1"; return 1; }
	out=$(tests/vm/run --kernel "$1" --module "$ko" --add tests/vm/smoke.sh --add "$work/capi-example-static" \
		--add /usr/bin/knem-run -- sh -c 'smoke.sh && mkdir -p /dev/shm && mount -t tmpfs tmpfs /dev/shm &&
		knem-run -n 3 --transport knem -- /opt/capi-example-static' 2>&1) || { echo "$out"; return 1; }
	echo "$out"
	tr -d '\r' <<< "$out" | has -x "example: 3 ranks over knem ok"
}

# The installed udev rule, helper, device.conf and group, in the VM over
# the host's root (tests/vm/device-access.sh): both access modes.
device_access_vm() {
	local ko
	ko=$(module_of "$1") || { echo "no knem.ko for $1"; return 1; }
	cc -static -O2 -Wall -Wextra -Werror -Iinclude -o "$work/device-access" tests/vm/device-access.c || return 1
	tests/vm/run --kernel "$1" --module "$ko" --host-root --add "$work/device-access" \
		--add tests/vm/device-access.sh -- device-access.sh
}

# FORMAT PACKAGE LISTING: compare a package's file list with expected-files.txt.
# Every "=" path must be listed, and every listed file must be an "=" path
# or lie under a "~" prefix.  A package without "~" lines has no prefix at
# all (not an empty one, which every path would start with); one without
# "=" lines has no entry in expected-files.txt, and fails.
contents_match() {
	local fmt=$1 pkg=$2 listing=$3 want allow line f p status=0
	want=$(awk -v k="$fmt:$pkg" '$1 == k && $2 == "=" { print $3 }' tests/package/expected-files.txt | sed "s/@VERSION@/$version/g")
	allow=$(awk -v k="$fmt:$pkg" '$1 == k && $2 == "~" { print $3 }' tests/package/expected-files.txt | sed "s/@VERSION@/$version/g")
	[ -n "$want" ] || { echo "no '$fmt:$pkg =' line in tests/package/expected-files.txt"; return 1; }
	[ -s "$listing" ] || { echo "empty listing $listing"; return 1; }
	while read -r line; do
		[ -n "$line" ] || continue
		grep -qxF "$line" "$listing" || { echo "missing: $line"; status=1; }
	done <<< "$want"
	while read -r f; do
		grep -qxF "$f" <<< "$want" && continue
		line=
		while read -r p; do
			[ -n "$p" ] || continue
			case $f in "$p"*) line=y; break ;; esac
		done <<< "$allow"
		[ -n "$line" ] || { echo "unexpected: $f"; status=1; }
	done < "$listing"
	return $status
}

deb_listing() {
	dpkg-deb --fsys-tarfile "$1" | tar -tf - | grep -v '/$' | sed 's|^\./|/|' | sort
}

same_dkms_conf_deb() {
	dpkg-deb --fsys-tarfile "$1" | tar -xOf - "./usr/src/$name-$version/dkms.conf" | diff -u dkms.conf -
}

same_dkms_conf_rpm() {
	(cd "$work" && rpm2cpio "$1" | cpio -idm --quiet "./usr/src/$name-$version/dkms.conf") &&
		diff -u dkms.conf "$work/usr/src/$name-$version/dkms.conf"
}

nothing_left() {
	local status=0 f
	if dkms status -m "$name" 2>/dev/null | has .; then
		echo "dkms status still lists:"; dkms status -m "$name"; status=1
	fi
	for f in /usr/src/$name-* /var/lib/dkms/$name /lib/modules/*/updates/dkms/knem.ko* \
		/usr/lib/udev/rules.d/60-knem.rules /usr/lib/modules-load.d/knem.conf /usr/lib/modprobe.d/knem-rs.conf \
		/etc/security/limits.d/knem-rs.conf /etc/knem-rs/device.conf /usr/lib/knem-rs \
		/usr/include/knem_io.h /usr/include/knem_rs.h /usr/share/pkgconfig/knem-rs.pc \
		$libdir/libknem_rs.* $libdir/pkgconfig/knem_rs.pc \
		/usr/share/doc/knem-rs-dkms /usr/share/doc/libknem-rs0 /usr/share/doc/libknem-rs-dev \
		/usr/bin/knem-bench /usr/bin/knem-stat /usr/bin/knem-run /usr/bin/knem-coll \
		/usr/share/man/man1/knem-stat.1.gz /usr/share/bash-completion/completions/knem-stat \
		/lib/systemd/system/knem-stat-prometheus.timer \
		"$ompi_pkglibdir/mca_coll_knemrs.so" /usr/share/doc/knem-rs-openmpi; do
		[ -e "$f" ] || [ -L "$f" ] && { echo "left behind: $f"; status=1; }
	done
	# ldconfig's trigger must have dropped the library from the cache too.
	ldconfig -p | grep libknem_rs && { echo "left behind in ld.so.cache"; status=1; }
	for f in knem-rs-dkms libknem-rs-dev libknem-rs0 knem-rs-tools knem-rs-openmpi; do
		dpkg-query -W "$f" >/dev/null 2>&1 && { echo "still known to dpkg: $f"; status=1; }
	done
	return $status
}

# lintian over the .changes of make deb: it must exist, name the packages,
# and lintian must exit 0 (its default --fail-on is error; it also fails
# when it cannot run) with no E: line.  Without --show-overrides: with it,
# lintian 2.116 counts the errors our overrides accept (the prebuilt
# object) towards --fail-on and exits 2.
lintian_clean() {
	local changes=$1 out=$2 rc=0
	[ -n "$changes" ] && [ -s "$changes" ] || { echo "no .changes from make deb (or an empty one): '$changes'"; return 1; }
	grep -q "knem-rs-dkms_${version}-.*_all\.deb" "$changes" || { echo "$changes names no knem-rs-dkms .deb"; return 1; }
	lintian --pedantic "$changes" > "$out" 2>&1 || rc=$?
	echo "lintian exit status $rc, $(grep -c '^E: ' "$out") errors, $(grep -c '^W: ' "$out") warnings ($out)"
	grep '^E: ' "$out"
	[ "$rc" -eq 0 ] && ! grep -q '^E: ' "$out"
}

# knem-stat-prometheus's units, installed: in /lib/systemd/system, left
# disabled (no .wants link: the admin enables the timer), and accepted by
# systemd-analyze verify with not a word (it checks the syntax, that
# /usr/bin/knem-stat is there and that the timer has its service).
prometheus_units() {
	local u out
	for u in knem-stat-prometheus.service knem-stat-prometheus.timer; do
		[ -f "/lib/systemd/system/$u" ] || { echo "no /lib/systemd/system/$u"; return 1; }
	done
	if ls /etc/systemd/system/*.wants/knem-stat-prometheus.* 2> /dev/null; then
		echo "enabled by the installation"
		return 1
	fi
	out=$(systemd-analyze verify --man=no /lib/systemd/system/knem-stat-prometheus.timer \
		/lib/systemd/system/knem-stat-prometheus.service 2>&1) || { echo "$out"; return 1; }
	[ -z "$out" ] || { echo "systemd-analyze verify: $out"; return 1; }
	grep -qx 'ExecStart=/usr/bin/knem-stat --prometheus --output /var/lib/prometheus/node-exporter/knem-rs.prom' \
		/lib/systemd/system/knem-stat-prometheus.service
}

# knem-rs-openmpi: this machine's Open MPI, its library package's version
# (the package must depend on exactly it) and its component directory.
ompi_pkglibdir=$(ompi_info --parsable --path pkglibdir 2>/dev/null | sed -n 's/^path:pkglibdir://p')
ompi_deb_version=$(dpkg-query -W -f='${Version}' libopenmpi3 2>/dev/null)
ompi_version=$(ompi_info --parsable 2>/dev/null | sed -n 's/^ompi:version:full://p')

ompi_deb_control() {
	local d=$1 depends
	depends=$(dpkg-deb -f "$d" Depends)
	echo "Version: $(dpkg-deb -f "$d" Version); Depends: $depends"
	[ -n "$ompi_deb_version" ] && [ "$(dpkg-deb -f "$d" Version)" = "$version-1~bookworm" ] &&
		grep -qF "libopenmpi3 (= $ompi_deb_version)" <<< "$depends" &&
		grep -qF "libknem-rs0 (>= $version)" <<< "$depends" &&
		[ "$(dpkg-deb -f "$d" Architecture)" = amd64 ]
}

# lintian on the .deb alone (make deb-openmpi assembles it with dpkg-deb,
# there is no .changes): exit status 0 and no E: line.
lintian_deb_clean() {
	local rc=0
	lintian --pedantic "$1" > "$2" 2>&1 || rc=$?
	cat "$2"
	[ "$rc" -eq 0 ] && ! grep -q '^E: ' "$2"
}

# ompi_info, no option, no environment: coll/knemrs, with the MCA and API
# versions of coll/tuned (built for this Open MPI), every component opened.
ompi_info_knemrs() {
	local o e rc=0 tuned
	o=$(env -i PATH=/usr/bin:/bin HOME=/root ompi_info 2> "$work/ompi_info.err") || rc=$?
	e=$(cat "$work/ompi_info.err")
	grep -E 'MCA coll:' <<< "$o"
	echo "stderr: $e"
	tuned=$(sed -n 's/^ *MCA coll: tuned //p' <<< "$o")
	[ $rc -eq 0 ] && [ -z "$e" ] && [ -n "$tuned" ] && grep -qF "MCA coll: knemrs $tuned" <<< "$o"
}

# tests/interop/coll_check.c's verify mode to 64 KiB on 2 ranks under
# mpirun, with the installed coll/knemrs and nothing from this tree: over
# CMA (no /dev/knem here), every byte verified, coll/knemrs enabled on
# MPI_COMM_WORLD and a team made on both ranks.
ompi_coll_check() {
	local log=$logdir/openmpi-coll_check.log
	mpicc -O2 -Wall -Wextra -Werror -o "$work/coll_check" tests/interop/coll_check.c || return 1
	(cd "$work" && env -i PATH=/usr/bin:/bin HOME=/root timeout 300 mpirun --allow-run-as-root --oversubscribe \
		-np 2 --mca coll_knemrs_transport cma --mca coll_knemrs_threshold 4096 --mca coll_base_verbose 10 \
		./coll_check verify 65536) > "$log" 2>&1 || { tail -n 20 "$log"; return 1; }
	grep -a '^coll_check:\|team knemrs' "$log"
	grep -aq '^coll_check: verify: ranks 2, .*, bad bytes 0,' "$log" &&
		[ "$(grep -ac 'coll:knemrs: enabled on MPI_COMM_WORLD' "$log")" -eq 2 ] &&
		[ "$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: team knemrs-[0-9a-f-]* of 2 ranks over cma;' "$log")" -eq 2 ]
}

# --------------------------------------------------------------------------
say "preconditions"
[ "$(id -u)" = 0 ] || { echo "package-test installs packages: run it as root"; exit 1; }
for tool in dpkg-buildpackage dh dh_dkms lintian dkms rpmbuild rpm2cpio cpio cc pkg-config objdump mpicc ompi_info man lexgrog systemd-analyze; do
	command -v "$tool" >/dev/null || {
			echo "missing $tool: apt-get install debhelper dh-dkms lintian dkms rpm cpio gcc pkg-config binutils libopenmpi-dev openmpi-bin man-db systemd"; exit 1; }
done
check "versions agree (Cargo.toml, dkms.conf, debian/changelog, spec)" tests/package/check-versions.sh
check "earlier installation purged" purge_ours
check "load-knem passes device_access= from device.conf (tests/package/load-knem-test.sh)" tests/package/load-knem-test.sh

# --------------------------------------------------------------------------
say "1. build the .deb packages"
check "make deb" make deb
deb_dkms=$(ls build/deb/knem-rs-dkms_"$version"-*_all.deb 2>/dev/null | tail -n 1)
deb_lib=$(ls build/deb/libknem-rs0_"$version"-*_amd64.deb 2>/dev/null | tail -n 1)
deb_dev=$(ls build/deb/libknem-rs-dev_"$version"-*_amd64.deb 2>/dev/null | tail -n 1)
deb_tools=$(ls build/deb/knem-rs-tools_"$version"-*_amd64.deb 2>/dev/null | tail -n 1)
changes=$(ls build/deb/${name}_"$version"-*_*.changes 2>/dev/null | tail -n 1)
if [ -z "$deb_dkms" ] || [ -z "$deb_lib" ] || [ -z "$deb_dev" ] || [ -z "$deb_tools" ]; then
	bad "no .deb produced; the rest of the Debian checks are skipped"
else
	check "lintian: exit status 0, no errors (the .changes of make deb, $logdir/lintian.txt)" \
		lintian_clean "$changes" "$logdir/lintian.txt"
	deb_listing "$deb_dkms" > "$work/deb-dkms.list"
	deb_listing "$deb_lib" > "$work/deb-lib.list"
	deb_listing "$deb_dev" > "$work/deb-dev.list"
	deb_listing "$deb_tools" > "$work/deb-tools.list"
	check "dpkg -c knem-rs-dkms matches expected-files.txt" contents_match deb knem-rs-dkms "$work/deb-dkms.list"
	check "dpkg -c libknem-rs0 matches expected-files.txt" contents_match deb libknem-rs0 "$work/deb-lib.list"
	check "dpkg -c libknem-rs-dev matches expected-files.txt" contents_match deb libknem-rs-dev "$work/deb-dev.list"
	check "dpkg -c knem-rs-tools matches expected-files.txt" contents_match deb knem-rs-tools "$work/deb-tools.list"
	check "knem-rs-tools owns /etc/knem-rs (the node-wide model of knem-coll calibrate --system)" bash -c \
		"dpkg-deb --fsys-tarfile '$deb_tools' | tar -tvf - | grep -qE '^d.* \\./etc/knem-rs/\$'"
	check "the .deb's dkms.conf is the tree's" same_dkms_conf_deb "$deb_dkms"
	check "libknem-rs0: shlibs file, ldconfig trigger, Depends from shlibs (libc6), Multi-Arch same" bash -c \
		"dpkg-deb -I '$deb_lib' shlibs | tee /dev/stderr | grep -qx 'libknem_rs 0 libknem-rs0 (>= $version)' &&
		 dpkg-deb -I '$deb_lib' triggers | grep -qx 'activate-noawait ldconfig' &&
		 dpkg-deb -f '$deb_lib' Depends | tee /dev/stderr | grep -q 'libc6 (>= ' &&
		 dpkg-deb -f '$deb_lib' Multi-Arch | grep -qx same"
	check "libknem-rs-dev: amd64, Multi-Arch same, depends on libknem-rs0 of the same version" bash -c \
		"dpkg-deb -f '$deb_dev' Architecture | grep -qx amd64 && dpkg-deb -f '$deb_dev' Multi-Arch | grep -qx same &&
		 dpkg-deb -f '$deb_dev' Depends | tee /dev/stderr | grep -q 'libknem-rs0 (= $version-'"
	if check "make deb-openmpi RELEASE=bookworm (knem-rs-openmpi for Open MPI $ompi_deb_version)" \
		make deb-openmpi RELEASE=bookworm; then
		deb_ompi=$(ls build/deb-openmpi/knem-rs-openmpi_"$version"-1~bookworm_amd64.deb 2>/dev/null)
	fi
	if [ -n "${deb_ompi:-}" ]; then
		deb_listing "$deb_ompi" > "$work/deb-openmpi.list"
		check "dpkg -c knem-rs-openmpi matches expected-files.txt" contents_match deb knem-rs-openmpi "$work/deb-openmpi.list"
		check "knem-rs-openmpi: Version $version-1~bookworm, Depends: libopenmpi3 (= $ompi_deb_version), libknem-rs0 (>= $version)" \
			ompi_deb_control "$deb_ompi"
		check "lintian knem-rs-openmpi: exit status 0, no errors ($logdir/lintian-openmpi.txt)" \
			lintian_deb_clean "$deb_ompi" "$logdir/lintian-openmpi.txt"
	else
		bad "no knem-rs-openmpi .deb: its checks are skipped"
	fi
	check "the .deb's BUILDINFO names rustc and the object's sha256" bash -c \
		"dpkg-deb --fsys-tarfile '$deb_dkms' | tar -xOf - ./usr/src/$name-$version/BUILDINFO > '$work/BUILDINFO' &&
		 grep -q '^rustc-vV: rustc ' '$work/BUILDINFO' &&
		 dpkg-deb --fsys-tarfile '$deb_dkms' | tar -xOf - ./usr/src/$name-$version/c-shim/knem_core.prebuilt | sha256sum |
		 cut -d' ' -f1 | sed 's/^/object-sha256: /' | grep -qxFf - '$work/BUILDINFO'"

	# ----------------------------------------------------------------------
	say "2. install"
	check "apt install ./knem-rs-dkms ./libknem-rs0 ./libknem-rs-dev ./knem-rs-tools" \
		apt-get install -y "./$deb_dkms" "./$deb_lib" "./$deb_dev" "./$deb_tools"
	check_built_for_every_kernel "on this machine"
	check "udev rule and modules-load.d entry installed" bash -c \
		"grep -q 'IMPORT{file}=\"/etc/knem-rs/device.conf\"' /usr/lib/udev/rules.d/60-knem.rules && grep -qx knem /usr/lib/modules-load.d/knem.conf"
	check "modprobe.d: knem loads through /usr/lib/knem-rs/load-knem" bash -c \
		"grep -qx 'install knem /usr/lib/knem-rs/load-knem \$CMDLINE_OPTS' /usr/lib/modprobe.d/knem-rs.conf &&
		 test -x /usr/lib/knem-rs/load-knem"
	check "device access: /etc/knem-rs/device.conf says all (the default), the group knem exists, counters-access runs" \
		bash -c "grep -qx KNEM_RS_ACCESS=all /etc/knem-rs/device.conf && getent group knem &&
		 test -x /usr/lib/knem-rs/counters-access"
	check "knem_io.h compiles from /usr/include with pkg-config" bash -c \
		"printf '#include <knem_io.h>\nint main(void) { return KNEM_ABI_VERSION != 0x0d; }\n' > '$work/t.c' &&
		 cc \$(pkg-config --cflags knem-rs) -o '$work/t' '$work/t.c' && '$work/t' && pkg-config --modversion knem-rs | grep -qx '$version'"
	first=$(echo $kernels | cut -d' ' -f1)
	if [ "$no_rebuild" = 1 ]; then
		skip "KNEM_RS_REBUILD_CORE=1 rebuild of the core through DKMS (KNEM_PKG_NO_REBUILD=1)"
	elif [ -z "$first" ]; then
		bad "KNEM_RS_REBUILD_CORE=1 rebuild of the core through DKMS: no kernel with headers"
	elif ! command -v cargo >/dev/null; then
		bad "KNEM_RS_REBUILD_CORE=1 rebuild of the core through DKMS: no cargo on PATH (KNEM_PKG_NO_REBUILD=1 skips it)"
	else
		check "KNEM_RS_REBUILD_CORE=1: DKMS rebuilds the core, same knem.ko for $first" rebuilt_core_same_module "$first"
	fi
	check "knem-bench runs from /usr/bin (--help)" /usr/bin/knem-bench --help
	check "knem-stat runs from /usr/bin (--help)" /usr/bin/knem-stat --help
	check "knem-run runs from /usr/bin (--help)" /usr/bin/knem-run --help
	check "knem-coll runs from /usr/bin (--help)" /usr/bin/knem-coll --help
	check "man pages: man finds each tool's and renders it without warnings, every flag of its --help texts documented; bash, zsh, fish completions (tests/package/man-pages.sh)" \
		tests/package/man-pages.sh knem-stat knem-bench knem-run knem-coll
	check "knem-stat-prometheus.service and .timer installed disabled, systemd-analyze verify clean" prometheus_units
	if [ -n "${deb_ompi:-}" ] && check "apt install ./knem-rs-openmpi (bookworm)" apt-get install -y "./$deb_ompi"; then
		check "ompi_info lists MCA coll: knemrs (API of coll/tuned), no option, every component opened" ompi_info_knemrs
		check "man knemrs-tune: found, rendered without warnings, every flag of knemrs-tune --help documented (man-pages.sh)" \
			tests/package/man-pages.sh --no-completions knemrs-tune
		check "knem-rs-openmpi: coll_check verify on 2 ranks under mpirun: coll/knemrs enabled, team over CMA, every byte right" \
			ompi_coll_check
	fi
	check "C API: $libdir/libknem_rs.so.0 has SONAME libknem_rs.so.0 (objdump -p), ldconfig knows it" capi_soname
	if check "C API: the installed example.c builds with pkg-config knem_rs, links the installed libknem_rs.so.0" \
		capi_build_shared; then
		check "C API: the example passes on 3 ranks, automatic transport (no /dev/knem here: CMA)" \
			capi_run 3 auto "$work/capi-example"
		check "C API: the example passes on 3 ranks over shm" capi_run 3 shm "$work/capi-example"
	fi
	capi_static=
	if check "C API: the example links statically with pkg-config --static knem_rs (libknem_rs.a)" \
		capi_build_static; then
		capi_static=1
		check "C API: the static example passes on 2 ranks over CMA" capi_run 2 cma "$work/capi-example-static"
	fi
	if [ "$no_vm" = 1 ]; then
		skip "VM boots of every kernel with the DKMS-built knem.ko, and the C API over knem (KNEM_PKG_NO_VM=1)"
	else
		# The first kernel that boots also runs the C API over the module
		# (in the same boot) and both access modes of device.conf applied
		# by the real udev.
		booted=
		for k in $kernels; do
			if [ ! -e "/boot/vmlinuz-$k" ]; then
				skip "VM: kernel $k has headers but no /boot/vmlinuz-$k to boot"
			elif [ -z "$booted" ] && [ -n "$capi_static" ]; then
				check "VM: kernel $k boots with the DKMS-built knem.ko, smoke.sh passes, the static C API example passes on 3 ranks over the knem transport" \
					capi_vm_knem "$k"
				booted=$k
			else
				[ -n "$booted" ] ||
					skip "VM: the static C API example over knem (its static build failed above)"
				check "VM: kernel $k boots with the DKMS-built knem.ko, smoke.sh passes" boot_smoke "$k"
				booted=${booted:-$k}
			fi
		done
		if [ -z "$booted" ]; then
			bad "VM: no kernel with headers has an image in /boot: nothing booted the DKMS-built knem.ko"
		else
			check "VM: kernel $booted, udev applies device.conf: all (0666), group (root:knem 0660, EACCES outside knem), all" \
				device_access_vm "$booted"
		fi
	fi

	# ----------------------------------------------------------------------
	say "3. kernel upgrade: $upgrade_kver"
	hdr=linux-headers-$upgrade_kver
	img=linux-image-$upgrade_kver
	if [ -z "$(apt-cache policy "$hdr" 2>/dev/null | sed -n 's/^ *Candidate: //p' | grep -v '(none)')" ]; then
		bad "apt offers no $hdr (set KNEM_PKG_UPGRADE_KERNEL)"
	else
		if installed "$hdr"; then
			# Already there: take its module away and replay the install, so
			# that DKMS's header hook is what builds it again.  Its absence
			# is checked: a module left from step 2 would pass the hook's
			# checks below without the hook doing anything.
			dkms remove -m "$name" -v "$version" -k "$upgrade_kver" > "$logdir/upgrade-remove.log" 2>&1
			check "precondition: no knem.ko for $upgrade_kver before the reinstall (dkms remove: $logdir/upgrade-remove.log)" \
				module_absent_for "$upgrade_kver"
			check "apt reinstall $hdr" apt-get install -y --reinstall --no-install-recommends "$hdr"
		else
			check "apt install $hdr" apt-get install -y --no-install-recommends "$hdr"
		fi
		check "DKMS hook built and installed knem.ko for $upgrade_kver" dkms_installed_for "$upgrade_kver"
		check "knem.ko of $upgrade_kver is built for $upgrade_kver (vermagic)" module_matches_kernel "$upgrade_kver"
		if [ "$upgrade_image" != 1 ] || [ "$no_vm" = 1 ]; then
			skip "VM: kernel $upgrade_kver boot (KNEM_PKG_UPGRADE_IMAGE=$upgrade_image, KNEM_PKG_NO_VM=$no_vm)"
		else
			if installed "$img" || apt-get install -y --no-install-recommends "$img" > "$logdir/upgrade-image.log" 2>&1; then
				check "VM: kernel $upgrade_kver boots with the DKMS-built knem.ko, smoke.sh passes" boot_smoke "$upgrade_kver"
			else
				bad "apt install $img (log: $logdir/upgrade-image.log)"
			fi
		fi
	fi

	# ----------------------------------------------------------------------
	say "4. purge"
	check "apt purge knem-rs-openmpi knem-rs-dkms libknem-rs0 libknem-rs-dev knem-rs-tools" \
		apt-get purge -y knem-rs-openmpi knem-rs-dkms libknem-rs0 libknem-rs-dev knem-rs-tools
	check "nothing left behind (dkms status, /usr/src, updates/dkms, udev, include, libdir, ld.so.cache)" nothing_left
fi

# --------------------------------------------------------------------------
say "5. RPM"
# From the very tarball the .deb was built from, when there is one.
orig=$top/build/deb/${name}_$version.orig.tar.gz
if [ -f "$orig" ]; then
	check "make rpm (rpmbuild -ba)" make rpm KNEM_RS_TARBALL="$orig"
else
	check "make rpm (rpmbuild -ba)" make rpm
fi
rpm_dkms=$(ls "$top"/build/rpm/RPMS/noarch/knem-rs-dkms-"$version"-*.noarch.rpm 2>/dev/null | tail -n 1)
rpm_libs=$(ls "$top"/build/rpm/RPMS/x86_64/knem-rs-libs-"$version"-*.x86_64.rpm 2>/dev/null | tail -n 1)
rpm_devel=$(ls "$top"/build/rpm/RPMS/x86_64/knem-rs-devel-"$version"-*.x86_64.rpm 2>/dev/null | tail -n 1)
rpm_tools=$(ls "$top"/build/rpm/RPMS/x86_64/knem-rs-tools-"$version"-*.x86_64.rpm 2>/dev/null | tail -n 1)
rpm_ompi=$(ls "$top"/build/rpm/RPMS/x86_64/knem-rs-openmpi-"$version"-*.x86_64.rpm 2>/dev/null | tail -n 1)
if [ -z "$rpm_dkms" ] || [ -z "$rpm_libs" ] || [ -z "$rpm_devel" ] || [ -z "$rpm_tools" ]; then
	bad "no RPM produced; the RPM checks are skipped"
else
	# rpm -qpl lists directories too; keep the files, as dpkg -c does above.
	rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm_dkms" 2>/dev/null |
		awk '$1 !~ /^d/ { print $2 }' | sort > "$work/rpm-dkms.list"
	rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm_libs" 2>/dev/null |
		awk '$1 !~ /^d/ { print $2 }' | sort > "$work/rpm-libs.list"
	rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm_devel" 2>/dev/null |
		awk '$1 !~ /^d/ { print $2 }' | sort > "$work/rpm-devel.list"
	check "rpm -qpl knem-rs-dkms matches expected-files.txt" contents_match rpm knem-rs-dkms "$work/rpm-dkms.list"
	check "rpm -qpl knem-rs-libs matches expected-files.txt" contents_match rpm knem-rs-libs "$work/rpm-libs.list"
	rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm_tools" 2>/dev/null |
		awk '$1 !~ /^d/ { print $2 }' | sort > "$work/rpm-tools.list"
	check "rpm -qpl knem-rs-devel matches expected-files.txt" contents_match rpm knem-rs-devel "$work/rpm-devel.list"
	check "rpm -qpl knem-rs-tools matches expected-files.txt" contents_match rpm knem-rs-tools "$work/rpm-tools.list"
	check "knem-rs-tools owns /etc/knem-rs (%dir)" bash -c \
		"rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\\n]' '$rpm_tools' | grep -qx 'd[rwx-]* /etc/knem-rs'"
	check "knem-rs-dkms is noarch, provides kmod(knem.ko), requires dkms" bash -c \
		"rpm -qp --qf '%{ARCH}\n' '$rpm_dkms' | grep -qx noarch &&
		 rpm -qp --provides '$rpm_dkms' | grep -q '^kmod(knem.ko)' &&
		 rpm -qp --requires '$rpm_dkms' | grep -qx dkms"
	check "knem-rs-dkms scripts: dkms add/install in %post, remove --all --rpm_safe_upgrade in %preun" bash -c \
		"rpm -qp --scripts '$rpm_dkms' > '$work/scripts' &&
		 grep -q 'dkms add -m knem-rs' '$work/scripts' && grep -q 'dkms install -m knem-rs' '$work/scripts' &&
		 grep -q 'dkms remove -m knem-rs -v $version --all --rpm_safe_upgrade' '$work/scripts'"
	check "the RPM's dkms.conf is the tree's" same_dkms_conf_rpm "$rpm_dkms"
	# rpm derives the provides from the soname, the requires from DT_NEEDED.
	check "knem-rs-libs provides libknem_rs.so.0()(64bit), requires libc; ldconfig in %post" bash -c \
		"rpm -qp --provides '$rpm_libs' | grep -qx 'libknem_rs.so.0()(64bit)' &&
		 rpm -qp --requires '$rpm_libs' | grep -qx 'libc.so.6()(64bit)' &&
		 rpm -qp --scripts '$rpm_libs' | grep -q ldconfig"
	check "knem-rs-devel requires knem-rs-libs of its version, provides pkgconfig(knem_rs) and pkgconfig(knem-rs)" bash -c \
		"rpm -qp --requires '$rpm_devel' | grep -qx 'knem-rs-libs(x86-64) = $version-[^ ]*' &&
		 rpm -qp --provides '$rpm_devel' | grep -qx 'pkgconfig(knem_rs) = $version' &&
		 rpm -qp --provides '$rpm_devel' | grep -qx 'pkgconfig(knem-rs) = $version'"
	check "source RPM built" bash -c "ls build/rpm/SRPMS/knem-rs-$version-*.src.rpm"
	# Built against this machine's Open MPI (no RPM Open MPI here).
	if [ -z "$rpm_ompi" ]; then
		bad "no knem-rs-openmpi RPM"
	else
		rpm -qp --qf '[%{FILEMODES:perms} %{FILENAMES}\n]' "$rpm_ompi" 2>/dev/null |
			awk '$1 !~ /^d/ { print $2 }' | sort > "$work/rpm-openmpi.list"
		check "rpm -qpl knem-rs-openmpi matches expected-files.txt" contents_match rpm knem-rs-openmpi "$work/rpm-openmpi.list"
		check "knem-rs-openmpi requires openmpi = $ompi_version, knem-rs-libs of its version, libknem_rs.so.0, libmpi.so.40" bash -c \
			"rpm -qpR '$rpm_ompi' | tee /dev/stderr > '$work/rpm-openmpi.req' &&
			 grep -qx 'openmpi(x86-64) = $ompi_version' '$work/rpm-openmpi.req' &&
			 grep -qx 'knem-rs-libs(x86-64) = $version-[^ ]*' '$work/rpm-openmpi.req' &&
			 grep -qx 'libknem_rs.so.0()(64bit)' '$work/rpm-openmpi.req' &&
			 grep -qx 'libmpi.so.40()(64bit)' '$work/rpm-openmpi.req'"
	fi
fi

cleanup
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
