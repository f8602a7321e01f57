#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/debug-kernel/build.sh [--print | --dir] - build (once per machine)
# the debug lab kernel: Debian's linux-source of $KNEM_DEBUG_SERIES (6.1,
# the default, or 7.3) with KASAN (generic, inline), lockdep
# (PROVE_LOCKING), DEBUG_ATOMIC_SLEEP and full preemption, from
# x86_64_defconfig + kvm_guest.config + tests/debug-kernel/debug.config.
# KCSAN is not on: the kernel refuses KCSAN with KASAN, and KASAN is the one
# that sees a use-after-free.
#
# The sources: 6.1 is bookworm's linux-source-6.1 (apt, on this Debian 12
# host); 7.3 is experimental's linux-source-7.3 7.3~rc7-1~exp1, fetched
# with apt through a private apt state (or from snapshot.debian.org once
# experimental has moved on) and checked against its sha256.
#
# The result lives outside the tree, in $KNEM_DEBUG_KERNEL_DIR (default
# /var/cache/knem-rs/debug-kernel for 6.1, .../debug-kernel-7.3 for 7.3):
#   bzImage            the image (tests/vm/run --kernel-image)
#   bzImage.modules/   its modules (lib/modules/KVER), as tests/vm/run wants
#   obj/               the build tree, the KDIR for knem.ko and the provider
#   kver               the kernel's version string
# A build whose inputs (source package version, config fragment) have not
# changed is reused; the build takes about an hour on 2 busy cores.  Never
# in CI (CI=true): it would not fit in CI's time.
#
# --print: print "KVER" of a finished build and exit (1 when there is none).
# --dir: print the build's directory and exit.
#
# Needs root for apt-get (flex, bison, libelf-dev, bc, libssl-dev, and
# linux-source-6.1 for 6.1).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
prog=tests/debug-kernel/build.sh
die() { echo "$prog: $*" >&2; exit 2; }

series=${KNEM_DEBUG_SERIES:-6.1}
case $series in
6.1) cache=${KNEM_DEBUG_KERNEL_DIR:-/var/cache/knem-rs/debug-kernel} ;;
7.3)
	cache=${KNEM_DEBUG_KERNEL_DIR:-/var/cache/knem-rs/debug-kernel-7.3}
	src_version=7.3~rc7-1~exp1
	src_sha256=8bf8ca5ea8b1b307ca698db982ba48d6d223263b4d3dfb1973d055e316c44e75
	snapshot=https://snapshot.debian.org/archive/debian/20261120T000000Z ;;
*) die "KNEM_DEBUG_SERIES=$series: the lab kernel is built from 6.1 or 7.3" ;;
esac
fragment=$here/debug.config

if [ "${1:-}" = --dir ]; then
	echo "$cache"
	exit 0
fi
if [ "${1:-}" = --print ]; then
	[ -s "$cache/kver" ] && [ -e "$cache/bzImage" ] || exit 1
	cat "$cache/kver"
	exit 0
fi
[ "${CI:-}" != true ] || die "the debug kernel is not built in CI (about an hour on 2 cores)"

mkdir -p "$cache"
cache=$(cd "$cache" && pwd)
# One build at a time per machine.
exec 9> "$cache/.lock"
flock 9

export DEBIAN_FRONTEND=noninteractive
pkgs=(flex bison libelf-dev bc libssl-dev)
[ "$series" != 6.1 ] || pkgs+=(linux-source-6.1)
missing=()
for p in "${pkgs[@]}"; do
	grep -q 'install ok installed' <<< "$(dpkg-query -W -f '${Status}' "$p" 2>/dev/null)" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "$prog: apt-get install ${missing[*]}"
	apt-get install -y -qq --no-install-recommends -o DPkg::Lock::Timeout=1800 \
		"${missing[@]}" > /dev/null
fi
if [ "$series" = 6.1 ]; then
	srcver=$(dpkg-query -W -f '${Version}' "linux-source-$series")
	tarball=/usr/src/linux-source-$series.tar.xz
else
	"$here/../lib/fetch-linux-source.sh" "$cache" experimental "linux-source-$series" \
		"$src_version" "$src_sha256" "$snapshot" || die "no linux-source-$series $src_version"
	srcver=$src_version
	tarball=$cache/src/linux-source-$series.tar.xz
	if [ ! -r "$tarball" ]; then
		dpkg-deb --fsys-tarfile "$cache/src/linux-source-${series}_${src_version}_all.deb" |
			tar -xO "./usr/src/linux-source-$series.tar.xz" > "$tarball.tmp"
		mv "$tarball.tmp" "$tarball"
	fi
fi
[ -r "$tarball" ] || die "no $tarball for linux-source-$series"

# What the cached build was made from: a change of either rebuilds.
stamp="linux-source-$series $srcver config $(sha256sum < "$fragment" | cut -c1-16)"
if [ -e "$cache/bzImage" ] && [ -s "$cache/kver" ] && [ "$(cat "$cache/stamp" 2>/dev/null)" = "$stamp" ]; then
	echo "$prog: cached: $cache/bzImage ($(cat "$cache/kver"), $stamp)"
	exit 0
fi
rm -f "$cache/bzImage" "$cache/kver" "$cache/stamp"

src=$cache/linux-source-$series
if [ "$(cat "$cache/src-version" 2>/dev/null)" != "$srcver" ]; then
	echo "$prog: unpacking $tarball ($srcver)"
	rm -rf "$src" "$cache/obj"
	tar -C "$cache" -xaf "$tarball"
	echo "$srcver" > "$cache/src-version"
fi
[ -f "$src/Makefile" ] || die "no kernel tree at $src"

obj=$cache/obj
mkdir -p "$obj"
mk() { nice -n 15 make -C "$src" O="$obj" "$@"; }
start=$SECONDS
mk -s defconfig
# merge_config.sh -m: merge only, olddefconfig below resolves dependencies.
(cd "$obj" && "$src/scripts/kconfig/merge_config.sh" -m -O "$obj" .config \
	"$src/kernel/configs/kvm_guest.config" "$fragment" > /dev/null)
mk -s olddefconfig
# Every option the fragment sets must have stuck (a missing dependency makes
# olddefconfig drop it silently).
bad=
while IFS= read -r line; do
	case $line in
	CONFIG_*=n) want="# ${line%=n} is not set"; alt= ;;
	CONFIG_*) want=$line; alt= ;;
	*) continue ;;
	esac
	if ! grep -qxF "$want" "$obj/.config"; then
		# =n is also met by an option that is absent altogether.
		if [ "${line##*=}" = n ] && ! grep -q "^${line%=n}=" "$obj/.config"; then
			continue
		fi
		echo "$prog: config: wanted '$line', got '$(grep -E "^(# )?${line%%=*}[= ]" "$obj/.config" || echo absent)'" >&2
		bad=1
	fi
done < "$fragment"
[ -z "$bad" ] || die "the config fragment did not apply (see above)"

echo "$prog: building linux-source-$series $srcver in $obj (nice -n 15 make -j2)"
mk -j2 bzImage modules > "$cache/build.log" 2>&1 ||
	{ tail -n 40 "$cache/build.log"; die "the kernel build failed (log: $cache/build.log)"; }
kver=$(mk -s kernelrelease)
rm -rf "$cache/bzImage.modules"
mk -s INSTALL_MOD_PATH="$cache/bzImage.modules" modules_install > /dev/null
# The knem and provider builds use obj/ as KDIR; the modules directory's
# build link would point at it too.
rm -f "$cache/bzImage.modules/lib/modules/$kver/build" "$cache/bzImage.modules/lib/modules/$kver/source"
cp "$obj/arch/x86/boot/bzImage" "$cache/bzImage"
echo "$kver" > "$cache/kver"
echo "$stamp" > "$cache/stamp"
echo "$prog: built $kver in $(( (SECONDS - start) / 60 )) min: $cache/bzImage"
