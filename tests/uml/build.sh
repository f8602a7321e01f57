#!/bin/bash
# tests/uml/build.sh [kernel|module|all|paths] - the User-Mode Linux lab's builds.
#
#   kernel  a UML kernel (ARCH=um SUBARCH=x86_64) from a pinned Debian
#           linux-source, `defconfig` plus tests/uml/config, built once per
#           machine: cached in $KNEM_UML_CACHE/<source version>-<hash of
#           the fragment>/linux (the tree, built in place: the kernel
#           binary is its `linux`, and it is the KDIR modules build against).
#   module  knem.ko for that kernel in build/uml/: the C shim unchanged,
#           with the Rust core built for UML (rust-core/build-kobj.sh
#           --uml: -Crelocation-model=pie, the small code model, because
#           UML loads modules at user addresses above 2 GiB, out of reach
#           of the kernel code model's sign-extended 32-bit relocations).
#           The test DMA provider is built too if the kernel has DMA (a UML
#           kernel without UML_DMA_EMULATION has NO_DMA: it is not).
#   all     both (the default).
#   paths   build nothing: print where they are (tests/uml/run's defaults).
#
# Prints the paths it produced as `KEY=VALUE` lines on stdout last:
# UML_KERNEL, UML_KDIR, UML_MODULE.
#
# The source: Debian's linux-source-7.2 7.2.13-1 (sid), the first Debian
# source with UML SMP (arch/um/Kconfig's SMP, one host thread per virtual
# CPU). It is fetched with apt from Debian's mirror through a private apt
# state under the cache (or from snapshot.debian.org once the mirror has
# moved on) and checked against its sha256.
#
# Environment: KNEM_UML_CACHE (default /var/cache/knem-rs/uml),
# KNEM_UML_MIRROR (default http://deb.debian.org/debian), KNEM_UML_JOBS
# (default: the number of CPUs), KNEM_UML_SOURCE_DEB (a .deb already at
# hand, still checked against the sha256).
set -euo pipefail

die() { echo "tests/uml/build.sh: $*" >&2; exit 1; }
log() { echo "tests/uml/build.sh: $*" >&2; }

what=${1:-all}
case $what in kernel | module | all | paths) ;; *) die "usage: build.sh [kernel|module|all|paths]" ;; esac

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)

src_pkg=linux-source-7.2
src_version=7.2.13-1
src_sha256=30a8c5fc63f9028a62e6d7b3f7f43bee67425dbce2a05fceba83f9b87c92083d
src_deb=${src_pkg}_${src_version}_all.deb
# The snapshot that holds it, for when sid has moved on.
snapshot=https://snapshot.debian.org/archive/debian/20261101T000000Z

cache=${KNEM_UML_CACHE:-/var/cache/knem-rs/uml}
mirror=${KNEM_UML_MIRROR:-http://deb.debian.org/debian}
jobs=${KNEM_UML_JOBS:-$(nproc)}
fragment=$here/config
# The options only: a comment in the fragment does not rebuild the kernel.
options_sum() {
	grep -E '^(CONFIG_[A-Z0-9_]+=.*|# CONFIG_[A-Z0-9_]+ is not set)$' "$fragment" | sha256sum | cut -d' ' -f1
}
key=$src_version-$(options_sum | cut -c1-12)
kdir=$cache/$key/linux

# ---- the source package -------------------------------------------------

# The source .deb into $cache/src (a .deb at hand is still checked).
fetch_source() {
	"$top/tests/lib/fetch-linux-source.sh" "$cache" sid "$src_pkg" "$src_version" \
		"$src_sha256" "$snapshot" "$mirror" "${KNEM_UML_SOURCE_DEB:-}" || die "no $src_deb"
}

# ---- the kernel ----------------------------------------------------------

build_kernel() {
	if [ -x "$kdir/linux" ] && [ -f "$kdir/.knem-uml-built" ]; then
		log "UML kernel cached: $kdir"
		return 0
	fi
	local work=$cache/$key.tmp start seed=
	start=$(date +%s)
	rm -rf "$work"
	mkdir -p "$work"
	# A tree built from the same source under another fragment seeds this
	# one: Kbuild then recompiles only what the changed options touch.
	for seed in "$cache/$src_version"-*/linux; do
		[ -f "$seed/.knem-uml-built" ] && break
		seed=
	done
	if [ -n "$seed" ]; then
		log "starting from $seed (same source, another fragment)"
		cp -a "$seed" "$work/linux"
		rm -f "$work/linux/.knem-uml-built"
	else
		fetch_source
		log "unpacking $src_deb"
		dpkg-deb --fsys-tarfile "$cache/src/$src_deb" |
			tar -xO "./usr/src/$src_pkg.tar.xz" | tar -xJ -C "$work"
		mv "$work/$src_pkg" "$work/linux"
	fi
	local m=(make -C "$work/linux" ARCH=um SUBARCH=x86_64)
	"${m[@]}" -s defconfig >&2
	(cd "$work/linux" && ARCH=um SUBARCH=x86_64 scripts/kconfig/merge_config.sh \
		-m .config "$fragment" >&2)
	"${m[@]}" -s olddefconfig >&2
	# Every line of the fragment must have survived olddefconfig (a
	# dependency the fragment misses silently drops an option).
	local line missing=0
	while IFS= read -r line; do
		case $line in
		CONFIG_*=*) grep -qxF "$line" "$work/linux/.config" ||
			{ log "fragment: $line did not survive (.config: $(grep "^${line%%=*}=" "$work/linux/.config" || echo unset))"; missing=1; } ;;
		"# CONFIG_"*" is not set")
			local opt=${line#\# }
			opt=${opt%% *}
			! grep -q "^$opt=" "$work/linux/.config" ||
				{ log "fragment: $line, but .config has $(grep "^$opt=" "$work/linux/.config")"; missing=1; } ;;
		esac
	done < "$fragment"
	[ $missing = 0 ] || die "the config fragment does not apply to $src_pkg $src_version"
	log "building the UML kernel ($jobs jobs; about 20 minutes on 2 cores)"
	"${m[@]}" -j"$jobs" >&2
	[ -x "$work/linux/linux" ] || die "no UML kernel binary after the build"
	echo "$src_pkg $src_version, fragment options $(options_sum), $(( $(date +%s) - start )) s${seed:+, from $seed}" \
		> "$work/linux/.knem-uml-built"
	rm -rf "${cache:?}/$key"
	mv "$work" "$cache/$key"
	log "UML kernel built: $kdir ($(cat "$kdir/.knem-uml-built"))"
}

# ---- the module ----------------------------------------------------------

build_module() {
	[ -x "$kdir/linux" ] && [ -f "$kdir/.knem-uml-built" ] ||
		die "no UML kernel at $kdir (run tests/uml/build.sh kernel)"
	local out=$top/build/uml
	mkdir -p "$out"
	"$top/rust-core/build-kobj.sh" --uml "$out/knem_core_uml.o" >&2
	"$top/rust-core/check-kobj.sh" --uml "$out/knem_core_uml.o" >&2
	# The kernel's make reads ARCH from the environment (else the host's).
	KNEM_CORE_OBJ=$out/knem_core_uml.o KDIR=$kdir ARCH=um SUBARCH=x86_64 \
		"$top/c-shim/build-module.sh" uml "$out/knem" >&2
	cp "$out/knem/knem.ko" "$out/knem.ko"
}

if [ "$what" = paths ]; then
	printf 'UML_KERNEL=%s\nUML_KDIR=%s\nUML_MODULE=%s\n' "$kdir/linux" "$kdir" "$top/build/uml/knem.ko"
	exit 0
fi

# One build at a time per cache: a second caller waits, then finds it built.
mkdir -p "$cache"
exec 8> "$cache/build.lock"
flock 8
case $what in
kernel) build_kernel ;;
module) build_module ;;
all) build_kernel && build_module ;;
esac
echo "UML_KERNEL=$kdir/linux"
echo "UML_KDIR=$kdir"
[ "$what" = kernel ] || echo "UML_MODULE=$top/build/uml/knem.ko"
