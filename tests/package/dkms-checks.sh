# tests/package/dkms-checks.sh - sourced by tests/package/run.sh (on this
# machine) and tests/kernels/dkms-in-chroot.sh (in a release's chroot): the
# pass/fail bookkeeping and the checks of what DKMS installed.
#
# The caller sets name, version, logdir (one log per check) and work (a
# scratch directory).

passed=0
failed=0
skipped=0
ok() { echo "ok   $*"; passed=$((passed + 1)); }
bad() { echo "FAIL $*"; failed=$((failed + 1)); }
# A check that did not run, and why: counted apart, never as a pass.
skip() { echo "skip $*"; skipped=$((skipped + 1)); }
# check NAME COMMAND...: run COMMAND, output to the log, judge its status.
check() {
	local what=$1 log
	shift
	log=$logdir/$(printf '%s' "$what" | tr -c 'A-Za-z0-9._-' '_' | cut -c1-80).log
	if "$@" > "$log" 2>&1; then
		ok "$what"
	else
		bad "$what (log: $log)"
		tail -n 15 "$log" | sed 's/^/     | /'
	fi
}
say() { echo "---- $*"; }
# has GREP-ARGS...: grep -q on stdin that reads all of it.  grep -q leaves
# at the first match, and a producer that writes after that dies of
# SIGPIPE, which pipefail turns into a failed pipeline: a check that
# fails because what it looked for came early.
has() {
	local n
	n=$(grep -c "$@") || true
	[ "${n:-0}" -gt 0 ]
}

# packages_configured PKG...: dpkg knows every PKG and has it configured
# ("install ok installed"), and dpkg --audit has nothing to say.  A package
# dpkg does not know fails, it is not skipped.
packages_configured() {
	local p s
	for p in "$@"; do
		s=$(dpkg-query -W -f='${Status}' "$p" 2>&1) || { echo "$p: not known to dpkg: $s"; return 1; }
		echo "$p: $s"
		[ "$s" = "install ok installed" ] || return 1
	done
	s=$(dpkg --audit 2>&1)
	[ -z "$s" ] || { echo "dpkg --audit: $s"; return 1; }
}

# Kernels whose headers are installed.
kernels_with_headers() {
	local b k
	for b in /lib/modules/*/build; do
		[ -e "$b/include" ] || continue
		k=${b%/build}
		echo "${k##*/}"
	done
}

# The installed module of kernel $1, decompressed if DKMS compressed it.
module_of() {
	local k=$1 f
	for f in /lib/modules/"$k"/updates/dkms/knem.ko{,.xz,.zst,.gz}; do
		[ -e "$f" ] || continue
		case $f in
		*.xz) xz -dc "$f" > "$work/knem-$k.ko" && echo "$work/knem-$k.ko" ;;
		*.zst) zstd -qdc "$f" > "$work/knem-$k.ko" && echo "$work/knem-$k.ko" ;;
		*.gz) gzip -dc "$f" > "$work/knem-$k.ko" && echo "$work/knem-$k.ko" ;;
		*) echo "$f" ;;
		esac
		return 0
	done
	return 1
}

# No knem.ko for kernel $1: neither DKMS's record nor the file.
module_absent_for() {
	local ko
	if dkms_installed_for "$1"; then echo "dkms status: knem-rs installed for $1"; return 1; fi
	if ko=$(module_of "$1"); then echo "knem.ko present for $1: $ko"; return 1; fi
	return 0
}

dkms_installed_for() {
	dkms status -m "$name" -v "$version" -k "$1" | has ': installed'
}

module_matches_kernel() {
	local ko
	ko=$(module_of "$1") || { echo "no knem.ko for $1"; return 1; }
	modinfo -F vermagic "$ko" | tee /dev/stderr | has "^$1 "
}

# After the package's install: DKMS built and installed knem.ko for every
# kernel that has headers here (WHERE names the place in the message).
# Leaves their versions in $kernels.
check_built_for_every_kernel() {
	local k
	kernels=$(kernels_with_headers)
	echo "kernels with headers: $(echo $kernels)"
	[ -n "$kernels" ] || bad "no kernel with headers $1"
	for k in $kernels; do
		check "DKMS installed knem.ko for $k" dkms_installed_for "$k"
		check "knem.ko of $k is built for $k (vermagic)" module_matches_kernel "$k"
	done
}
