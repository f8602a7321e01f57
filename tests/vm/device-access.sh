#!/bin/sh
# tests/vm/device-access.sh [--from-tree] - the two access modes of
# /etc/knem-rs/device.conf, applied by the real udev (systemd-udevd) to the
# loaded module, in the VM with --host-root (as root, with device-access,
# built from tests/vm/device-access.c, in /opt):
#
#   all    /dev/knem root 0666 and the counters 0444: a user in no group
#          copies through the module (bytes verified) and reads a counter;
#   group  /dev/knem root:knem 0660 and the counters root:knem 0440: a user
#          outside knem gets EACCES on both, a member copies (bytes
#          verified) and sees bytes_inline_read grow by the copy's length;
#   all    again: switching back restores 0666 and 0444.
#
# Without --from-tree it checks what the installed package provides (the
# rule in /usr/lib/udev/rules.d, /usr/lib/knem-rs/counters-access,
# /etc/knem-rs/device.conf, the group knem); with it, the rule, the helper
# and device.conf come from /opt (copied by --add) and the group is made
# here.  The host's /etc is read-only in the VM: the test writes device.conf
# in a copy on tmpfs (of /etc/knem-rs, or with --from-tree of all /etc).
# The last line is "N passed, N failed"; exit status 1 on any failure.
set -u
# udevadm refuses to trigger or settle in a chroot, which --host-root is.
export SYSTEMD_IGNORE_CHROOT=1
dev=/dev/knem
sys=/sys/class/misc/knem
counter=$sys/bytes_inline_read
outsider=65001
member=65002
passed=0
failed=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
# check NAME COMMAND...: the command's output, indented, then its verdict.
check() {
	what=$1
	shift
	if out=$("$@" 2>&1); then ok "$what"; else bad "$what"; fi
	[ -z "$out" ] || printf '%s\n' "$out" | sed 's/^/     | /'
}
finish() {
	udevadm control --exit 2> /dev/null
	echo "$passed passed, $failed failed"
	[ "$failed" -eq 0 ]
	exit $?
}
as_outsider() { setpriv --reuid=$outsider --regid=$outsider --clear-groups "$@"; }
as_member() { setpriv --reuid=$member --regid=$member --groups="$gid" "$@"; }
# perms FILE WANT: FILE's mode and owner:group are WANT ("666 root:root").
perms() {
	got=$(stat -c '%a %U:%G' "$1") || return 1
	echo "$1: $got"
	[ "$got" = "$2" ]
}
counters_perms() {
	files=
	for f in "$sys"/*; do
		[ -f "$f" ] || continue
		case ${f##*/} in uevent|dev) continue ;; esac
		files="$files $f"
	done
	set -- "$1" $files
	want=$1
	shift
	# One stat for all (each program started over 9p costs a second of TCG).
	got=$(stat -c '%a %U:%G' "$@" | sort -u)
	echo "$# counter files: $got"
	[ "$#" -gt 10 ] && [ "$got" = "$want" ]
}
apply() {
	printf 'KNEM_RS_ACCESS=%s\n' "$1" > /etc/knem-rs/device.conf &&
		udevadm trigger --action="$2" "$sys" && udevadm settle --timeout=60
}
counter_of() { as_member /opt/device-access read "$counter" | sed -n 's/.*: \([0-9][0-9]*\)$/\1/p'; }
member_copy_counted() {
	before=$(counter_of) && as_member /opt/device-access copy && after=$(counter_of) &&
		echo "bytes_inline_read $before -> $after" && [ $((after - before)) -eq 1048576 ]
}

[ -c "$dev" ] || { bad "$dev is not there"; finish; }
if [ "${1:-}" = --from-tree ]; then
	mkdir -p /run/knem-etc && cp -a /etc/. /run/knem-etc/ && mount --bind /run/knem-etc /etc ||
		{ bad "a writable copy of /etc"; finish; }
	mkdir -p /etc/knem-rs /etc/udev/rules.d
	cp /opt/device.conf /etc/knem-rs/device.conf
	sed 's|/usr/lib/knem-rs/counters-access|/opt/counters-access|' /opt/60-knem.rules \
		> /etc/udev/rules.d/60-knem.rules
	getent group knem > /dev/null || groupadd --system knem
else
	check "installed: the udev rule, counters-access, device.conf saying all" sh -c \
		'ls -l /usr/lib/udev/rules.d/60-knem.rules /usr/lib/knem-rs/counters-access /etc/knem-rs/device.conf &&
		 grep -x "KNEM_RS_ACCESS=all" /etc/knem-rs/device.conf'
	check "installed: the package created the system group knem" getent group knem
	mkdir -p /run/knem-etc && cp -a /etc/knem-rs/. /run/knem-etc/ && mount --bind /run/knem-etc /etc/knem-rs ||
		{ bad "a writable copy of /etc/knem-rs"; finish; }
fi
gid=$(getent group knem | cut -d: -f3)
[ -n "$gid" ] || { bad "no group knem"; finish; }

/lib/systemd/systemd-udevd --daemon || { bad "systemd-udevd does not start"; finish; }

echo "---- access all (the default)"
check "udev applies device.conf (all)" apply all add
check "/dev/knem is root:root 0666" perms "$dev" "666 root:root"
check "the counters are root:root 0444" counters_perms "444 root:root"
check "uid $outsider (no group) copies 1 MiB through /dev/knem, bytes verified" as_outsider /opt/device-access copy
check "uid $outsider reads a counter" as_outsider /opt/device-access read "$counter"

echo "---- access group"
check "udev applies device.conf (group)" apply group change
check "/dev/knem is root:knem 0660" perms "$dev" "660 root:knem"
check "the counters are root:knem 0440" counters_perms "440 root:knem"
check "uid $outsider (not in knem): EACCES opening /dev/knem" as_outsider /opt/device-access denied "$dev"
check "uid $outsider (not in knem): EACCES opening a counter" as_outsider /opt/device-access denied "$counter"
check "uid $member (in knem) copies 1 MiB, bytes verified; bytes_inline_read grows by 1 MiB" member_copy_counted
check "root still opens /dev/knem and copies" /opt/device-access copy

echo "---- access all again"
check "udev applies device.conf (all)" apply all change
check "/dev/knem is root:root 0666 again" perms "$dev" "666 root:root"
check "the counters are root:root 0444 again" counters_perms "444 root:root"
check "uid $outsider copies again" as_outsider /opt/device-access copy
finish
