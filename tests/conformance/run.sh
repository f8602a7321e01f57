#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/conformance/run.sh [--kernel VER] [RUN OPTIONS...] - build the
# conformance programs (build.sh here) and run all of them in one boot of
# tests/vm/run.  Other options (--module, --timeout) go to tests/vm/run as
# they are.  The last line is "N passed, N failed" over every case; exits
# nonzero on any failure.  tests/vm/check-shim --conformance runs them in
# the same boot as the shim's checks.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)

progs=$("$here/build.sh")
adds=(--add "$here/in-vm.sh")
names=()
for p in $progs; do
	adds+=(--add "$p")
	names+=("$(basename "$p")")
done

exec "$top/tests/vm/run" --timeout 900 "$@" "${adds[@]}" \
	-- in-vm.sh "${names[@]}"
