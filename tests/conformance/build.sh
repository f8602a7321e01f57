#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/conformance/build.sh - build the conformance programs (static,
# against include/knem_io.h alone) into build/conformance/ and print their
# paths, one per line, in the order they run.  CC overrides the compiler.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=$top/build/conformance
mkdir -p "$bin"

cc=${CC:-gcc}
cflags="-static -O2 -Wall -Wextra -Werror -I$top/include"
for p in ucx ompi-smsc ompi-sm mpich abi-edges; do
	# shellcheck disable=SC2086
	"$cc" $cflags -o "$bin/conf-$p" "$here/$p.c"
	echo "$bin/conf-$p"
done
