#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/conformance/run.sh [--kernel VER] [RUN OPTIONS...] - build the
# conformance programs (static, against include/knem_io.h alone) into
# build/conformance/ and run all of them in one boot of tests/vm/run.
# Other options (--module, --timeout) go to tests/vm/run as they are.
# The last line is "N passed, N failed" over every case; exits nonzero on
# any failure.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
bin=$top/build/conformance
mkdir -p "$bin"

cc=${CC:-gcc}
cflags="-static -O2 -Wall -Wextra -Werror -I$top/include"
progs=(ucx ompi-smsc ompi-sm mpich abi-edges)
adds=(--add "$here/in-vm.sh")
names=()
for p in "${progs[@]}"; do
	# shellcheck disable=SC2086
	"$cc" $cflags -o "$bin/conf-$p" "$here/$p.c"
	adds+=(--add "$bin/conf-$p")
	names+=("conf-$p")
done

exec "$top/tests/vm/run" --timeout 900 "$@" "${adds[@]}" \
	-- in-vm.sh "${names[@]}"
