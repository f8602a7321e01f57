#!/bin/sh
# check-buildinfo.sh BUILDINFO OBJECT PREBUILT_DIR NAME... - check that
# BUILDINFO describes the bytes it ships: the Rust object OBJECT
# (object-sha256) and each NAME of PREBUILT_DIR (a "tool:" or "library:"
# line with its sha256).  One line on stderr and exit 1 at the first
# mismatch.  Called by `make buildinfo` and, through `make check-buildinfo`,
# by debian/rules and the rpm spec.
set -eu

[ $# -ge 3 ] || { echo "usage: check-buildinfo.sh BUILDINFO OBJECT PREBUILT_DIR NAME..." >&2; exit 2; }
info=$1 obj=$2 dir=$3
shift 3

sha() { sha256sum < "$1" | cut -d' ' -f1; }
fail() { echo "$info does not describe $1" >&2; exit 1; }

[ -f "$info" ] || { echo "$info is missing" >&2; exit 1; }
[ -f "$obj" ] || { echo "$obj is missing" >&2; exit 1; }
grep -qx "object-sha256: $(sha "$obj")" "$info" || fail "$obj"
for name in "$@"; do
	f=$dir/$name
	[ -f "$f" ] || { echo "$f is missing" >&2; exit 1; }
	grep -qxE "(tool|library): prebuilt/$name sha256 $(sha "$f")" "$info" || fail "$f"
done
