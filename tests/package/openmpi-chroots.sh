#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/package/openmpi-chroots.sh LIBKNEM_RS0_DEB LIBKNEM_RS RELEASE...
# (make package-test-openmpi): knem-rs-openmpi in each RELEASE's chroot
# (trixie: Open MPI 5.0.7, sid: 6.0; tests/interop/ompi-chroot.sh's,
# prepared when missing), as root:
#
#   1. packaging/openmpi/build-deb.sh builds the release's package against
#      LIBKNEM_RS (make capi-bin's libknem_rs.so); its Depends name the
#      exact version dpkg reports for the release's libopenmpi40, and
#      libknem-rs0;
#   2. dpkg -i LIBKNEM_RS0_DEB (make deb's libknem-rs0, the host-built
#      library, which loads with the releases' newer glibc) and the
#      package: both configured, every library the components need
#      resolves, and ompi_info, with no option and no environment, lists
#      MCA coll: knemrs and MCA smsc: knem and reports no component it
#      could not open, with the MCA and API versions of the release's own
#      components; coll_check (tests/interop) under a plain mpirun (no
#      component path given) from a login shell runs with coll/knemrs over
#      CMA, every byte verified;
#   3. dpkg --purge of both (trixie's knem-rs-openmpi has a conffile,
#      /etc/profile.d/knem-rs-openmpi.sh) leaves them unknown to dpkg and
#      the chroot's files as they were before step 2 (dpkg's database and
#      logs aside).
#
# The bookworm package is tested on this machine by make package-test.
# Ends with "N passed, N failed"; exits non-zero on any failure.
set -uo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top"
prog=tests/package/openmpi-chroots.sh
[ $# -ge 3 ] || { echo "usage: $prog LIBKNEM_RS0_DEB LIBKNEM_RS RELEASE..." >&2; exit 2; }
lib_deb=$(realpath "$1")
capi_lib=$(realpath "$2")
shift 2
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
logdir=$top/build/package-test-openmpi
out=$top/build/deb-openmpi
mkdir -p "$logdir"
work=$(mktemp -d "${TMPDIR:-/tmp}/knem-ompi-pkg.XXXXXX")
name=knem-rs-openmpi
# ok, bad, check, say.
. "$top/tests/package/dkms-checks.sh"

[ "$(id -u)" = 0 ] || { echo "$prog installs packages in the chroots: run it as root"; exit 1; }
[ -f "$lib_deb" ] || { echo "$prog: no $lib_deb (make deb)"; exit 1; }

root= release=
in_root() { "$top/tests/interop/ompi-chroot.sh" run "$release" "$@"; }

# Every file, link and directory of the chroot but what dpkg and apt keep
# about themselves, with mode, owner and size.
snapshot() {
	(cd "$root" && find . -xdev \( -path ./proc -o -path ./sys -o -path ./dev -o -path ./run -o -path ./tmp \
		-o -path ./var/lib/dpkg -o -path ./var/log -o -path ./var/cache -o -path ./var/lib/apt \) -prune \
		-o -printf '%M %u:%g %s %p\n') | sort
}

purge_pkgs() { in_root dpkg --purge "$name" libknem-rs0; }
remove_pkgs() {
	local p s
	in_root dpkg --purge "$name" libknem-rs0 || return 1
	for p in "$name" libknem-rs0; do
		s=$(in_root dpkg-query -W -f '${db:Status-Status}' "$p" 2>/dev/null)
		echo "$p: ${s:-unknown}"
		[ -z "$s" ] || [ "$s" = not-installed ] || return 1
	done
}

control_ok() {
	local deb=$1 ompi depends listing
	ompi=$(in_root dpkg-query -W -f '${Version}' libopenmpi40) || return 1
	depends=$(dpkg-deb -f "$deb" Depends)
	listing=$(dpkg-deb -c "$deb") || return 1
	echo "libopenmpi40 in the chroot: $ompi; Depends: $depends"
	echo "$listing"
	grep -qF "libopenmpi40 (= $ompi)" <<< "$depends" && grep -qF "libknem-rs0 (>= $version)" <<< "$depends" &&
		[ "$(dpkg-deb -f "$deb" Version)" = "$version-1~$release" ] &&
		grep -q " ./usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi40/mca_coll_knemrs.so\$" <<< "$listing" &&
		grep -q " ./usr/lib/x86_64-linux-gnu/openmpi/lib/openmpi40/mca_smsc_knem.so\$" <<< "$listing" &&
		grep -q "^-rwxr-xr-x .* ./usr/bin/knemrs-tune\$" <<< "$listing"
}

install_pkgs() {
	cp "$lib_deb" "$1" "$root/tmp/" || return 1
	in_root dpkg -i "/tmp/${lib_deb##*/}" "/tmp/${1##*/}" || return 1
	packages_configured_in libknem-rs0 "$name"
}

packages_configured_in() {
	local p s
	for p in "$@"; do
		s=$(in_root dpkg-query -W -f '${Status}' "$p") || return 1
		echo "$p: $s"
		[ "$s" = "install ok installed" ] || return 1
	done
}

libs_resolve() {
	local d=$1 o
	o=$(in_root ldd "$d") || return 1
	echo "$o"
	! grep -q 'not found' <<< "$o" && grep -qE 'libknem_rs\.so\.0 => (/usr)?/lib/x86_64-linux-gnu/libknem_rs\.so\.0 ' <<< "$o"
}

ompi_info_lists() {
	local o e rc=0 tuned cma
	o=$(in_root ompi_info 2> "$work/ompi_info.err") || rc=$?
	e=$(cat "$work/ompi_info.err")
	grep -E 'MCA (coll|smsc):' <<< "$o"
	echo "stderr: $e"
	# Ours carry the MCA, framework API and component versions of the
	# release's own coll/tuned and smsc/cma: built for this Open MPI.
	tuned=$(sed -n 's/^ *MCA coll: tuned //p' <<< "$o")
	cma=$(sed -n 's/^ *MCA smsc: cma //p' <<< "$o")
	[ $rc -eq 0 ] && [ -z "$e" ] && [ -n "$tuned" ] && [ -n "$cma" ] &&
		grep -qF "MCA coll: knemrs $tuned" <<< "$o" && grep -qF "MCA smsc: knem $cma" <<< "$o"
}

# tests/interop/coll_check.c's verify mode to 64 KiB on 2 ranks, built
# with the release's mpicc, under mpirun with the installed coll/knemrs and
# nothing else of ours: over CMA (no /dev/knem here), every byte verified,
# coll/knemrs enabled on MPI_COMM_WORLD and a team made on both ranks.  No
# component path is given: mpirun runs in a login shell, as a user's
# would, which on trixie reads the package's /etc/profile.d file (mpirun
# would otherwise hand the ranks PMIx's path); /tmp and /dev/shm are
# private tmpfs.
coll_check_runs() {
	local log=$logdir/$release-coll_check.log
	unshare --mount --propagation private -- /bin/sh -c \
		'mount -t proc proc "$0/proc" && mount -t tmpfs tmpfs "$0/tmp" && mount -t tmpfs tmpfs "$0/dev/shm" &&
		exec chroot "$0" "$@"' "$root" \
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C sh -lc \
		'cat > /tmp/coll_check.c && mpicc -O2 -Wall -Wextra -Werror -o /tmp/coll_check /tmp/coll_check.c &&
		echo "ranks get mca_base_component_path=$(mpirun --allow-run-as-root -np 1 printenv OMPI_MCA_mca_base_component_path)" &&
		cd /tmp && exec timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
			--mca coll_knemrs_transport cma --mca coll_knemrs_threshold 4096 --mca coll_base_verbose 10 \
			./coll_check verify 65536' < tests/interop/coll_check.c > "$log" 2>&1 || { tail -n 20 "$log"; return 1; }
	grep -a '^ranks get\|^coll_check:\|team knemrs' "$log"
	grep -aq '^coll_check: verify: ranks 2, .*, bad bytes 0,' "$log" &&
		[ "$(grep -ac 'coll:knemrs: enabled on MPI_COMM_WORLD' "$log")" -eq 2 ] &&
		[ "$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: team knemrs-[0-9a-f-]* of 2 ranks over cma;' "$log")" -eq 2 ]
}

# The packaged knemrs-tune as a user runs it (a login shell, nothing but
# Open MPI and the packages): every operation at 4 KiB and 64 KiB on 2
# ranks over CMA, then coll_check verify with those rules in force
# (threshold -1): every byte right, rank 0 saying the rules are in force.
tune_runs() {
	local log=$logdir/$release-knemrs-tune.log
	unshare --mount --propagation private -- /bin/sh -c \
		'mount -t proc proc "$0/proc" && mount -t tmpfs tmpfs "$0/tmp" && mount -t tmpfs tmpfs "$0/dev/shm" &&
		exec chroot "$0" "$@"' "$root" \
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C sh -lc \
		'cat > /tmp/coll_check.c && mpicc -O2 -Wall -Wextra -Werror -o /tmp/coll_check /tmp/coll_check.c &&
		cd /tmp && timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 knemrs-tune \
			--transport cma --sizes 4K,64K --reps 5,10 --out /tmp/rules.json &&
		exec timeout 300 mpirun --allow-run-as-root --oversubscribe -np 2 \
			--mca coll_knemrs_transport cma --mca coll_knemrs_threshold -1 \
			--mca coll_knemrs_rules /tmp/rules.json --mca coll_base_verbose 10 \
			./coll_check verify 65536 /tmp/rules.json' < tests/interop/coll_check.c > "$log" 2>&1 ||
		{ tail -n 20 "$log"; return 1; }
	grep -a '^knemrs-tune:\|^coll_check:\|rules' "$log"
	[ "$(grep -ac '^knemrs-tune: [a-z]* on 2 ranks, [0-9]* B per block: ' "$log")" -eq 10 ] &&
		grep -aq '^coll_check: verify: ranks 2, .*, bad bytes 0,' "$log" &&
		[ "$(grep -ac 'coll:knemrs: MPI_COMM_WORLD: rules /tmp/rules.json in force on 2 ranks' "$log")" -eq 1 ]
}

same_files() { diff -u "$1" <(snapshot); }

for release in "$@"; do
	say "knem-rs-openmpi in $release's chroot"
	t0=$SECONDS
	root=$(tests/interop/ompi-chroot.sh root "$release")
	deb=$out/${name}_$version-1~${release}_amd64.deb
	rm -f "$deb"
	if ! check "$release: build-deb.sh builds ${deb##*/}" packaging/openmpi/build-deb.sh "$release" "$out" "$capi_lib" ||
		[ ! -f "$deb" ]; then
		bad "$release: no package, nothing else checked"
		continue
	fi
	check "$release: Depends: libopenmpi40 (= the chroot's version), libknem-rs0; both components in it" control_ok "$deb"
	# Anything of ours an earlier, interrupted run left is purged first.
	purge_pkgs > "$logdir/$release-preclean.log" 2>&1
	snapshot > "$work/before"
	if check "$release: dpkg -i libknem-rs0 and $name: both configured" install_pkgs "$deb"; then
		pkglibdir=$(in_root ompi_info --parsable --path pkglibdir 2>/dev/null | sed -n 's/^path:pkglibdir://p')
		check "$release: mca_coll_knemrs.so's libraries resolve, libknem_rs.so.0 from libknem-rs0" \
			libs_resolve "$pkglibdir/mca_coll_knemrs.so"
		check "$release: ompi_info lists MCA coll: knemrs and MCA smsc: knem, opens every component" ompi_info_lists
		check "$release: coll_check verify on 2 ranks under a plain mpirun in a login shell: coll/knemrs enabled, team over CMA, every byte right" \
			coll_check_runs
		check "$release: knemrs-tune's libraries resolve, libknem_rs.so.0 from libknem-rs0" \
			libs_resolve /usr/bin/knemrs-tune
		check "$release: knemrs-tune on 2 ranks writes rules; coll_check verify with them in force: every byte right" \
			tune_runs
	fi
	check "$release: dpkg --purge $name libknem-rs0: neither installed nor half-removed" remove_pkgs
	check "$release: the chroot's files are as before the installation" same_files "$work/before"
	rm -f "$root/tmp/${lib_deb##*/}" "$root/tmp/${deb##*/}"
	echo "$release: $((SECONDS - t0)) s"
done
rm -rf "$work"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
