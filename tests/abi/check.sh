#!/bin/sh
# SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause
#
# check.sh - compile-time check of include/knem_io.h against the KNEM 0x0d
# ABI facts (c-shim/knem_abi_facts.h), as C89, C99, C++98 and C++17, with
# warnings as errors.  Prints one line per language and exits non-zero on
# the first failure.  CC and CXX override the compilers.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
out=$(mktemp -d "${TMPDIR:-/tmp}/knem-abi.XXXXXX")
trap 'rm -rf "$out"' EXIT

cc=${CC:-cc}
cxx=${CXX:-c++}
warn="-pedantic -Werror -Wall -Wextra"
inc="-I$top/include -I$top/c-shim"

run() {
	lang=$1
	shift
	if "$@" $warn $inc -o "$out/abi_check" && "$out/abi_check"; then
		echo "abi: $lang ok"
	else
		echo "abi: $lang FAILED" >&2
		exit 1
	fi
}

run c89 "$cc" -std=c89 -x c "$here/abi_check.c"
run c99 "$cc" -std=c99 -x c "$here/abi_check.c"
run c++98 "$cxx" -std=c++98 -x c++ "$here/abi_check.c"
run c++17 "$cxx" -std=c++17 -x c++ "$here/abi_check.c"
