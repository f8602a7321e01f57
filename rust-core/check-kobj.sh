#!/bin/sh
# check-kobj.sh [--repro] OBJ - check the Rust core object before linking.
# check-kobj.sh --uml OBJ - check the User-Mode Linux object (build-kobj.sh
# --uml, tests/uml/build.sh) instead.
#
#  * undefined symbols (`nm -u`) are only the shim's knem_shim_* functions
#    and the kernel's thunks: no panic path survived (it would reference
#    knem_core_panic_is_linked), no stray libcall;
#  * the global symbols are exactly the exports of exports.txt;
#  * no GOT-based relocation (a module has no GOT) and no unwind tables;
#  * objtool of every installed kernel headers tree accepts it with the
#    options Kbuild uses on a module link (IBT, retpoline, rethunk, SLS,
#    ORC, uaccess);
#  * with --repro, a rebuild in a fresh target directory gives the same
#    bytes (slow: rebuilds core and alloc).
#
# With --uml the first three checks are the same; then the object must be
# position independent (no 32-bit absolute relocation, R_X86_64_32/32S,
# which cannot reach a UML module's addresses above 2 GiB: the load fails
# with "overflow in relocation type 11"), and objtool is not run (UML
# kernels run no objtool on modules, and the object never goes into an x86
# kernel).
#
# The last line counts the objtool runs and the headers trees skipped
# (those without tools/objtool/objtool).  No objtool run at all fails the
# check, unless KNEM_KOBJ_OBJTOOL=optional says that a machine without
# kernel headers may skip it: then the line says "1 skipped".
set -eu

repro=0
uml=0
case ${1:-} in
--repro) repro=1; shift ;;
--uml) uml=1; shift ;;
esac
obj=${1:?usage: check-kobj.sh [--repro | --uml] OBJ}
here=$(cd "$(dirname "$0")" && pwd)
NM=${NM:-nm}
READELF=${READELF:-readelf}
fail=0
err() {
	echo "check-kobj: $*" >&2
	fail=1
}

[ -f "$obj" ] || { echo "check-kobj: $obj: no such file" >&2; exit 1; }

bad_undef=$("$NM" -u "$obj" | awk '{print $2}' | grep -Ev \
	'^(knem_shim_[A-Za-z0-9_]+|__x86_indirect_thunk_[a-z0-9]+|__x86_indirect_call_thunk_[a-z0-9]+|__x86_indirect_jump_thunk_[a-z0-9]+|__x86_return_thunk|__fentry__)$' || true)
[ -z "$bad_undef" ] || err "undefined symbols outside the allowlist: $(echo $bad_undef)"

globals=$("$NM" -g --defined-only "$obj" | awk '{print $3}' | sort)
want=$(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/exports.txt" | sort)
[ "$globals" = "$want" ] || err "global symbols differ from exports.txt: $(echo $globals)"

got=$("$READELF" -rW "$obj" | grep -E 'R_X86_64_(GOT|REX_GOT|GOTPC|TLS|DTP|TPOFF)' || true)
[ -z "$got" ] || err "GOT/TLS relocations: $(echo "$got" | head -3)"

"$READELF" -SW "$obj" | grep -Eq '\.eh_frame|\.debug_' && err "unwind or debug sections present"

abs32=$("$READELF" -rW "$obj" | grep -cE 'R_X86_64_32S? ' || true)
if [ "$uml" = 1 ]; then
	[ "$abs32" = 0 ] || err "$abs32 32-bit absolute relocations (R_X86_64_32/32S): not loadable by UML above 2 GiB (build it with build-kobj.sh --uml)"
	[ "$fail" = 0 ] || exit 1
	echo "check-kobj: $obj OK (UML: position independent, objtool not run)"
	exit 0
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT INT TERM

ran_objtool=0
skipped_objtool=0
for hdr in /usr/src/linux-headers-*; do
	[ -d "$hdr" ] || continue
	tool=$hdr/tools/objtool/objtool
	if [ ! -x "$tool" ]; then
		echo "check-kobj: objtool skipped for $(basename "$hdr"): no tools/objtool/objtool" >&2
		skipped_objtool=$((skipped_objtool + 1))
		continue
	fi
	help=$(SRCARCH=x86 "$tool" --help 2>&1 || true)
	args="--hacks=jump_label --hacks=noinstr --ibt --orc --retpoline --rethunk --sls --static-call --uaccess --link --module"
	case $help in *skylake*) args="$args --hacks=skylake" ;; esac
	case $help in *--prefix*) args="$args --prefix=16" ;; esac
	cp "$obj" "$tmp/o.o"
	# shellcheck disable=SC2086
	if ! out=$(SRCARCH=x86 "$tool" $args "$tmp/o.o" 2>&1) || [ -n "$out" ]; then
		err "objtool of $(basename "$hdr") complains: $out"
	fi
	ran_objtool=$((ran_objtool + 1))
done
if [ "$ran_objtool" -eq 0 ]; then
	if [ "${KNEM_KOBJ_OBJTOOL:-}" = optional ]; then
		echo "check-kobj: objtool skipped: none under /usr/src/linux-headers-* (KNEM_KOBJ_OBJTOOL=optional)" >&2
		[ "$skipped_objtool" -gt 0 ] || skipped_objtool=1
	else
		err "no objtool under /usr/src/linux-headers-*: install a kernel's headers, or set KNEM_KOBJ_OBJTOOL=optional to skip this check"
	fi
fi

if [ "$repro" = 1 ]; then
	KNEM_CORE_TARGET_DIR=$tmp/target "$here/build-kobj.sh" "$tmp/again.o"
	a=$(sha256sum <"$obj")
	b=$(sha256sum <"$tmp/again.o")
	[ "$a" = "$b" ] || err "not reproducible: a rebuild in a fresh target dir differs"
fi

[ "$fail" = 0 ] || exit 1
echo "check-kobj: $obj OK ($ran_objtool objtool run(s), $skipped_objtool skipped$( [ "$repro" = 1 ] && echo ', reproducible'))"
