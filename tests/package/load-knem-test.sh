#!/bin/bash
# tests/package/load-knem-test.sh - packaging/load-knem, the install command
# of knem in packaging/modprobe-knem.conf, on the host without loading
# anything: for each device.conf below, the modprobe it runs (a stand-in
# that prints its arguments) must get device_access= as the udev rule
# 60-knem.rules would read KNEM_RS_ACCESS, then modprobe's own options; and
# modprobe itself must take the modprobe.d file's install line for knem.
# Prints one line per case, exits 1 on any mismatch.
set -euo pipefail
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#!/bin/sh\necho "$*"\n' > "$tmp/modprobe"
chmod +x "$tmp/modprobe"
status=0
# case CONF WANT: device.conf holding CONF (printf %b) gives device_access=WANT.
case_() {
	local got want="--ignore-install knem device_access=$2 account_pinned=0"
	printf '%b' "$1" > "$tmp/device.conf"
	got=$(KNEM_RS_DEVICE_CONF=$tmp/device.conf KNEM_RS_MODPROBE=$tmp/modprobe \
		"$top/packaging/load-knem" account_pinned=0)
	if [ "$got" = "$want" ]; then
		echo "ok   '$(printf '%s' "$1")' -> device_access=$2"
	else
		echo "FAIL '$(printf '%s' "$1")': modprobe got '$got', expected '$want'"
		status=1
	fi
}
case_ 'KNEM_RS_ACCESS=all\n' all
case_ '# comment\nKNEM_RS_ACCESS=group\n' group
case_ '  KNEM_RS_ACCESS = "group"  \n' group
case_ "KNEM_RS_ACCESS='group'\n" group
case_ '# KNEM_RS_ACCESS=group\n' all
case_ 'KNEM_RS_ACCESS=groups\n' all
case_ 'KNEM_RS_ACCESS=group\nKNEM_RS_ACCESS=all\n' all
case_ '' all
got=$(KNEM_RS_DEVICE_CONF=$tmp/none KNEM_RS_MODPROBE=$tmp/modprobe "$top/packaging/load-knem")
if [ "$got" = "--ignore-install knem device_access=all" ]; then
	echo "ok   no device.conf -> device_access=all"
else
	echo "FAIL no device.conf: modprobe got '$got'"
	status=1
fi
if got=$(/sbin/modprobe -n -v -C "$top/packaging/modprobe-knem.conf" knem 2>&1 | sed 's/[[:space:]]*$//') &&
	[ "$got" = 'install /usr/lib/knem-rs/load-knem $CMDLINE_OPTS' ]; then
	echo "ok   modprobe takes the install line of modprobe-knem.conf"
else
	echo "FAIL modprobe -n -v knem with modprobe-knem.conf: $got"
	status=1
fi
exit $status
