#!/bin/sh
# build-kobj.sh OUT.o - build the Rust core as a relocatable kernel object.
# build-kobj.sh --print-flags - the compiler and cargo flags it uses, as
# BUILDINFO records them (paths as $root, $sysroot, $cargo_home).
# build-kobj.sh --uml OUT.o - the same object for a User-Mode Linux kernel
# (tests/uml): the one difference is the code model.  UML loads modules at
# user addresses above 2 GiB, which the kernel code model's sign-extended
# 32-bit absolute relocations (R_X86_64_32S) cannot reach, so the UML object
# is position independent with the small code model (-Crelocation-model=pie,
# as arch/um/Makefile builds the kernel's own Rust).  The object shipped for
# x86 kernels (c-shim/knem_core.prebuilt) is never built this way.
#
# The object sees no kernel header, so it is independent of the kernel
# version.  It is compiled with the kernel's x86-64 codegen (code-model
# kernel, static relocations, no SSE/red zone, panic=abort) and every
# mitigation a supported kernel may need (retpoline external thunks, return
# thunk, IBT landing pads, no jump tables).  core and alloc are rebuilt with
# the same flags (-Zbuild-std), so no precompiled code without them gets in.
# Only the knem_core_* exports of exports.txt stay global.
#
# Environment: KNEM_CORE_TARGET_DIR (default: <root>/target/kobj),
# V=1 for cargo's output, LD / OBJCOPY to override the binutils.
set -eu

uml=0
kasan=0
case ${1:-} in
--uml) uml=1; shift ;;
--kasan) kasan=1; shift ;;
esac
out=${1:?usage: build-kobj.sh [--uml | --kasan] OUT.o | --print-flags}
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
target=x86_64-unknown-none
target_dir=${KNEM_CORE_TARGET_DIR:-$root/target/kobj}
[ "$uml" = 0 ] || target_dir=${KNEM_CORE_TARGET_DIR:-$root/target/kobj-uml}
[ "$kasan" = 0 ] || target_dir=${KNEM_CORE_TARGET_DIR:-$root/target/kobj-kasan}
exports=$here/exports.txt
LD=${LD:-ld}
OBJCOPY=${OBJCOPY:-objcopy}
NM=${NM:-nm}

sysroot=$(rustc --print sysroot)
cargo_home=${CARGO_HOME:-$HOME/.cargo}

# Kernel codegen (SPEC §5); the in-tree Rust build of 6.12 passes the same.
rustflags="-Ccode-model=kernel -Crelocation-model=static -Cpanic=abort"
[ "$uml" = 0 ] || rustflags="-Crelocation-model=pie -Cpanic=abort"
rustflags="$rustflags -Copt-level=2 -Cdebuginfo=0 -Coverflow-checks=n -Cdebug-assertions=n"
rustflags="$rustflags -Cforce-unwind-tables=n -Cjump-tables=n"
# Direct (PLT32) calls to memset & co: the target's default (no PLT) would
# call them through the GOT, which a module cannot have.
rustflags="$rustflags -Zplt=yes"
rustflags="$rustflags -Zretpoline-external-thunk -Zfunction-return=thunk-extern"
rustflags="$rustflags -Zindirect-branch-cs-prefix -Zcf-protection=branch"
# Reproducible bytes whatever the checkout, toolchain or cargo home path.
rustflags="$rustflags --remap-path-prefix=$root=/knem-rs"
rustflags="$rustflags --remap-path-prefix=$sysroot=/rustc"
rustflags="$rustflags --remap-path-prefix=$cargo_home=/cargo"

# --kasan: every load and store checked by the kernel's generic KASAN, as
# the kernel's own Rust is built under CONFIG_KASAN (scripts/Makefile.kasan):
# without it a use-after-free in the core is invisible to the debug lab
# kernel, whose KASAN sees only C.  Inline checks against the x86-64 shadow
# offset, reports through __asan_report_*_noabort (the kernel's); no stack
# or global redzones (the kernel's KASAN_STACK is off in the lab config).
if [ "$kasan" = 1 ]; then
	rustflags="$rustflags -Zsanitizer=kernel-address -Zsanitizer-recover=kernel-address"
	rustflags="$rustflags -Cllvm-args=-asan-mapping-offset=0xdffffc0000000000"
	rustflags="$rustflags -Cllvm-args=-asan-stack=0 -Cllvm-args=-asan-globals=0"
fi

# core and alloc rebuilt with the flags above.
cargo_flags="-Zbuild-std=core,alloc -Zbuild-std-features=compiler-builtins-mem"

if [ "$out" = --print-flags ]; then
	# shellcheck disable=SC2016
	printf 'rustflags: %s\ncargo-flags: %s\n' "$(printf '%s' "$rustflags" |
		sed -e "s|$root=|\$root=|" -e "s|$sysroot=|\$sysroot=|" -e "s|$cargo_home=|\$cargo_home=|")" \
		"$cargo_flags"
	exit 0
fi

quiet=--quiet
[ "${V:-0}" = 1 ] && quiet=

# The workspace manifest sets panic=abort and codegen-units=1 for release.
# shellcheck disable=SC2086
env -u RUSTFLAGS -u CARGO_ENCODED_RUSTFLAGS \
	RUSTC_BOOTSTRAP=1 \
	CARGO_TARGET_DIR="$target_dir" \
	CARGO_ENCODED_RUSTFLAGS="$(printf '%s' "$rustflags" | tr ' ' '\037')" \
	SOURCE_DATE_EPOCH=0 \
	cargo rustc $quiet --release -p knem-core --lib \
		--manifest-path "$root/Cargo.toml" \
		--target "$target" \
		$cargo_flags \
		--crate-type staticlib

lib=$target_dir/$target/release/libknem_core.a
[ -f "$lib" ] || { echo "build-kobj.sh: $lib was not produced" >&2; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

# Pull in only what the exports need (no --whole-archive), drop the rest.
undefs=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' -e 's/^/-u /' "$exports")
# shellcheck disable=SC2086
"$LD" -r --gc-sections $undefs -o "$tmp/core.o" "$lib"

# Undefined symbols left behind by discarded sections (the panic handler's
# knem_core_panic_is_linked when no panic survives) are dropped unless a
# relocation still needs them, so `nm -u` lists exactly what is used.
strip_unused=$("$NM" -u "$tmp/core.o" | awk '{print "--strip-unneeded-symbol=" $2}')

# Only the exports stay global: memcpy, memset and friends become local so
# the C side never binds to Rust's copies.  Unwind tables, debug info and
# toolchain notes go.
# shellcheck disable=SC2086
"$OBJCOPY" --keep-global-symbols="$exports" \
	$strip_unused \
	--strip-debug \
	--remove-section=.comment \
	--remove-section=.eh_frame \
	--remove-section=.rela.eh_frame \
	--remove-section='.note.gnu.*' \
	"$tmp/core.o" "$tmp/out.o"

mkdir -p "$(dirname "$out")"
mv -f "$tmp/out.o" "$out"
