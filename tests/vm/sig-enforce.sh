#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/vm/sig-enforce.sh [--kernel VERSION] [RUN OPTIONS...] - what a
# node enforcing module signatures (Secure Boot, or module.sig_enforce=1)
# does with knem.ko: the kernel boots with module.sig_enforce=1 and
#
#   1. the unsigned knem.ko (c-shim/build-module.sh's, as tests/vm/run
#      loads by default) is refused: insmod says "Key was rejected by
#      service", the kernel "Loading of unsigned module is rejected";
#   2. the same module signed with a key the kernel does not trust (what
#      DKMS's own key is until it is enrolled with mokutil) is refused
#      too: "Loading of module with unavailable key is rejected";
#
# and in both cases tests/vm/run reports the refusal in one line quoting
# both messages, the lines docs/INSTALL.md quotes.  The key is a throwaway
# one (openssl), the module is signed with the kernel's sign-file.
# The arguments go to tests/vm/run (default --kernel 6.1).  The last line
# is "N passed, N failed".
set -uo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
args=("$@")
[ $# -gt 0 ] || args=(--kernel 6.1)
kver=$("$here/run" "${args[@]}" --resolve-kernel) || exit 2
module=$top/build/$kver/knem.ko
if [ ! -e "$module" ]; then
	"$top/c-shim/build-module.sh" "$kver" "$top/build/$kver" || exit 2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/knem-sig.XXXXXX")
trap 'rm -rf "$work"' EXIT

passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }

insmod_error="insmod: can't insert '/lib/knem/knem.ko': Key was rejected by service"

# refused KO KERNEL_MESSAGE WHAT: booted with module.sig_enforce=1,
# tests/vm/run fails and its only FAIL line names both refusals.
refused() {
	local ko=$1 kmsg=$2 what=$3 out rc=0 fails want
	out=$("$here/run" "${args[@]}" --module "$ko" --append module.sig_enforce=1 -- true 2>&1) || rc=$?
	printf '%s\n' "$out" > "$work/run.out"
	fails=$(grep -a '^tests/vm/run: FAIL: ' "$work/run.out")
	want="tests/vm/run: FAIL: insmod knem.ko failed: $insmod_error; kernel: $kmsg (log: "
	if [ "$rc" -eq 1 ] && [ "$(printf '%s\n' "$fails" | grep -c .)" -eq 1 ] &&
		[ "${fails#"$want"}" != "$fails" ]; then
		ok "module.sig_enforce=1: $what refused, reported in one line"
		echo "     > $fails"
	else
		bad "module.sig_enforce=1: $what: tests/vm/run exit $rc, expected 1 and one line starting '$want'"
		grep -a '^tests/vm/run: \|KNEM-VM-INSMOD' "$work/run.out" | sed 's/^/     | /'
	fi
}

echo "---- 1. unsigned knem.ko ($module)"
if [ -n "$(modinfo -F sig_id "$module")" ]; then
	bad "$module is signed (sig_id $(modinfo -F sig_id "$module")): not the unsigned module this case needs"
else
	refused "$module" "Loading of unsigned module is rejected" "the unsigned knem.ko"
fi

echo "---- 2. knem.ko signed with a key the kernel does not trust"
sign_file=
for f in "/lib/modules/$kver/build/scripts/sign-file" /usr/lib/linux-kbuild-*/scripts/sign-file; do
	[ -x "$f" ] && { sign_file=$f; break; }
done
cn="knem-rs sig-enforce test key"
if [ -z "$sign_file" ]; then
	bad "no sign-file (linux-kbuild) to sign the module with"
elif ! openssl req -new -x509 -nodes -days 1 -subj "/CN=$cn" -newkey rsa:2048 \
	-keyout "$work/key.pem" -outform DER -out "$work/cert.der" > "$work/openssl.log" 2>&1; then
	bad "openssl could not make a key pair: $(tail -n 1 "$work/openssl.log")"
else
	cp "$module" "$work/knem.ko"
	"$sign_file" sha256 "$work/key.pem" "$work/cert.der" "$work/knem.ko"
	signer=$(modinfo -F signer "$work/knem.ko")
	if [ "$signer" = "$cn" ]; then
		ok "the copy is signed: modinfo -F signer: $signer"
		refused "$work/knem.ko" "Loading of module with unavailable key is rejected" \
			"knem.ko signed with an untrusted key"
	else
		bad "signing failed: modinfo -F signer says '$signer', not '$cn'"
	fi
fi

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
