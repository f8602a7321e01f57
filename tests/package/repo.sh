#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/package/repo.sh [RELEASE...]  (make package-test, make repo-test):
# the signed repositories of make repo (packaging/repo/make-repo.sh), used
# the way a node uses them.  As root, on this machine:
#
#   1. make-repo.sh publishes make deb's packages, each release's
#      knem-rs-openmpi (build/deb-openmpi) and make rpm's RPMs into a fresh
#      repository, signed with a test key generated for the run;
#   2. dnf (Debian's, --installroot of its own): repoquery with
#      repo_gpgcheck lists the RPMs, and refuses a copy whose repomd.xml
#      was changed after signing;
#   3. in each RELEASE's chroot (the kernel matrix's, KNEM_KERNELS_DIR/
#      root/RELEASE, under a throwaway overlay: nothing is written to it),
#      with the repository as a file:// deb822 source whose Signed-By names
#      its key: apt-get update refuses a copy whose InRelease and Release
#      were changed after signing, and the repository signed by another key;
#      then apt-get install knem-rs-dkms knem-rs-tools libknem-rs0
#      knem-rs-openmpi: DKMS builds knem.ko for the chroot's newest
#      kernel (the others' headers are hidden in the overlay, to spare the
#      time of building for each), and Open MPI lists coll/knemrs;
#   4. 0.1.1 (the same packages with the version raised: the .debs rebuilt
#      from make deb's tarball, knem-rs-openmpi repacked) is published into
#      the same repository; apt-get update and apt-get upgrade take every
#      chroot to it (DKMS holds only 0.1.1);
#   5. apt-get purge leaves nothing: no package, no DKMS entry, no knem.ko,
#      no /usr/src/knem-rs-*.
#
# Default releases: KNEM_REPO_RELEASES, else bookworm trixie sid.  Needs
# make deb, make rpm and make deb-openmpi RELEASE=... for each release
# (the repository then lacks knem-rs-openmpi for a release without it,
# and this test fails).  Ends with "N passed, N failed".
set -uo pipefail

if [ -z "${KNEM_REPO_IN_NS:-}" ]; then
	exec unshare --mount --propagation private env KNEM_REPO_IN_NS=1 "$0" "$@"
fi
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$top"
prog=tests/package/repo.sh
# ok, bad, check, say.
. "$top/tests/package/dkms-checks.sh"
[ "$(id -u)" = 0 ] || { echo "$prog: run it as root (chroots, apt)"; exit 1; }

releases=("$@")
[ ${#releases[@]} -gt 0 ] || read -r -a releases <<< "${KNEM_REPO_RELEASES:-bookworm trixie sid}"
kdir=${KNEM_KERNELS_DIR:-$top/build/kernels}
version=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
upgrade=${version%.*}.$((${version##*.} + 1))
logdir=$top/build/repo-test
rm -rf "$logdir" && mkdir -p "$logdir"
work=$(mktemp -d "${TMPDIR:-/tmp}/knem-repo-test.XXXXXX")
repo=$work/repo
pkgs=(knem-rs-dkms knem-rs-tools libknem-rs0 knem-rs-openmpi)
t_all=$SECONDS

cleaned=
cleanup() {
	local r
	[ -z "$cleaned" ] || return 0
	cleaned=1
	for r in "${releases[@]}"; do
		# A process left in the chroot (dkms's progress loop sleeps in
		# the background) keeps the mount busy: it goes first.
		for p in /proc/[0-9]*; do
			[ "$(readlink "$p/root" 2> /dev/null)" = "$work/$r/merged" ] &&
				kill -KILL "${p#/proc/}" 2> /dev/null
		done
		umount -R "$work/$r/merged" 2> /dev/null ||
			{ sleep 1; umount -R "$work/$r/merged" 2> /dev/null; }
	done
	# Never into a mount that is still there.
	rm -rf --one-file-system "$work"
}
# An early exit still cleans up and ends with the count.
trap 'rc=$?; if [ -z "$cleaned" ]; then cleanup; echo "$passed passed, $((failed + 1)) failed"; fi; exit $rc' EXIT
trap 'exit 130' INT TERM

# Run a command with its output in a log named after it; the log's last
# lines go to the console on failure (check does that).
in_root() {
	local r=$1
	shift
	chroot "$work/$r/merged" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C \
		DEBIAN_FRONTEND=noninteractive "$@"
}
# apt-get update and upgrade reading only our source: the release's own
# lists stay as the matrix left them (nothing is fetched from the mirror),
# and upgrade takes only what our repository has newer, not the release's
# own updates published since the chroot was made.  install and purge see
# the release's sources and ours (bookworm's chroot gets its Open MPI from
# the mirror for knem-rs-openmpi).
apt_ours() {
	local r=$1
	shift
	in_root "$r" apt-get -q -y -o Dpkg::Use-Pty=0 -o Dir::Etc::SourceList=/dev/null \
		-o Dir::Etc::SourceParts=/etc/apt/knem-rs.sources.d -o APT::Get::List-Cleanup=false "$@"
}
apt_all() {
	local r=$1
	shift
	in_root "$r" apt-get -q -y -o Dpkg::Use-Pty=0 -o Dir::Etc::SourceParts=/etc/apt/knem-rs.sources.d "$@"
}

# The source an admin writes (docs/INSTALL.md), at ROOT/etc/apt/knem-rs.sources.d.
write_source() {
	local r=$1 dir=$2 keyring=$3
	mkdir -p "$work/$r/merged/etc/apt/knem-rs.sources.d"
	cat > "$work/$r/merged/etc/apt/knem-rs.sources.d/knem-rs.sources" <<-EOF
		Types: deb
		URIs: file://$dir
		Suites: $r
		Components: main
		Signed-By: $keyring
	EOF
	rm -f "$work/$r/merged/var/lib/apt/lists/"*knem-rs*
}

# update must fail, name the signature, and leave no package of ours known.
update_refused() {
	local r=$1 out rc=0
	out=$(apt_ours "$r" update 2>&1) || rc=$?
	echo "$out"
	echo "apt-get update exit status $rc"
	[ "$rc" -ne 0 ] || return 1
	grep -qiE 'signature|NO_PUBKEY|not signed|Missing key|public key' <<< "$out" || return 1
	out=$(in_root "$r" apt-cache policy knem-rs-tools)
	echo "$out"
	! grep -qE 'Candidate: [0-9]' <<< "$out"
}

installed_at() {
	local r=$1 v=$2 p s status=0
	for p in "${pkgs[@]}"; do
		s=$(in_root "$r" dpkg-query -W -f '${db:Status-Status} ${Version}' "$p" 2> /dev/null)
		echo "$p: $s"
		case $p:$s in
		knem-rs-openmpi:"installed $v-1~$r") ;;
		knem-rs-openmpi:*) status=1 ;;
		*:"installed $v-1") ;;
		*) status=1 ;;
		esac
	done
	return $status
}

# DKMS: only version V, installed for kernel K, and its knem.ko in place.
dkms_only() {
	local r=$1 v=$2 k=$3 st
	st=$(in_root "$r" dkms status -m knem-rs)
	echo "$st"
	grep -q "^knem-rs/$v, $k, x86_64: installed" <<< "$st" &&
		[ "$(grep -c . <<< "$st")" -eq 1 ] &&
		ls "$work/$r/merged/lib/modules/$k/updates/dkms/"knem.ko* &&
		[ -d "$work/$r/merged/usr/src/knem-rs-$v" ] &&
		! ls -d "$work/$r/merged/usr/src/knem-rs-"* | grep -v -- "-$v\$"
}

# Where the release has ompi_info (openmpi-bin: trixie's and sid's
# chroots), it lists coll/knemrs; bookworm's chroot gets only the library
# package knem-rs-openmpi depends on, so there the component's libraries
# must all resolve.
ompi_lists_knemrs() {
	local r=$1 out f
	if [ -x "$work/$r/merged/usr/bin/ompi_info" ]; then
		out=$(in_root "$r" ompi_info 2>&1) || { echo "$out" | tail -n 5; return 1; }
		grep -E 'MCA (coll: knemrs|smsc: knem)' <<< "$out"
		grep -q 'MCA coll: knemrs ' <<< "$out"
	else
		f=$(in_root "$r" dpkg -L knem-rs-openmpi | grep '/mca_coll_knemrs\.so$') || return 1
		out=$(in_root "$r" ldd "$f") || return 1
		echo "$f"
		echo "$out"
		! grep -q 'not found' <<< "$out" && grep -q 'libmpi\.so\.40 => ' <<< "$out" &&
			grep -q 'libknem_rs\.so\.0 => ' <<< "$out"
	fi
}

nothing_left() {
	local r=$1 p status=0 f
	for p in "${pkgs[@]}" libknem-rs-dev; do
		if in_root "$r" dpkg-query -W "$p" > /dev/null 2>&1; then echo "still known to dpkg: $p"; status=1; fi
	done
	if in_root "$r" dkms status -m knem-rs 2> /dev/null | grep .; then status=1; fi
	for f in "$work/$r/merged"/usr/src/knem-rs-* "$work/$r/merged"/var/lib/dkms/knem-rs \
		"$work/$r/merged"/lib/modules/*/updates/dkms/knem.ko* "$work/$r/merged"/usr/bin/knem-stat; do
		[ -e "$f" ] && { echo "left behind: ${f#"$work/$r/merged"}"; status=1; }
	done
	return $status
}

# ---------------------------------------------------------------- 1
say "1. make-repo.sh: $version into a fresh repository, signed with a test key"
debs=$top/build/deb
ompi_debs=$top/build/deb-openmpi
rpms=$top/build/rpm/RPMS
[ -n "$(ls "$debs"/knem-rs-dkms_"$version"-*_all.deb 2> /dev/null)" ] || { bad "no make deb packages in $debs"; }
[ -n "$(ls "$rpms"/*/knem-rs-dkms-"$version"-*.rpm 2> /dev/null)" ] || { bad "no make rpm packages in $rpms"; }
check "make-repo.sh publishes $version for ${releases[*]}" packaging/repo/make-repo.sh --debs "$debs" \
	--openmpi-debs "$ompi_debs" --rpms "$rpms" --releases "${releases[*]}" "$repo"
grep -h 'make-repo.sh: apt:' "$logdir"/*make-repo* 2> /dev/null | sed 's/^/     > /'
for r in "${releases[@]}"; do
	check "$r: the repository holds ${pkgs[*]} $version" bash -c \
		"for p in ${pkgs[*]}; do reprepro -b '$repo/apt' list '$r' \"\$p\" | grep -q \" $version-1\" || { echo \"no \$p\"; exit 1; }; done"
done
# The other key, for the refusal: a repository signed by someone else.
wrong_home=$(mktemp -d "$work/wrong-gpg.XXXXXX")
GNUPGHOME=$wrong_home gpg --batch --quiet --passphrase '' --quick-generate-key 'not the knem-rs key <x@invalid>' ed25519 sign 1d &&
	GNUPGHOME=$wrong_home gpg --batch --export > "$work/wrong-keyring.gpg"
GNUPGHOME=$wrong_home gpgconf --kill all 2> /dev/null

# ---------------------------------------------------------------- 2
say "2. dnf: repoquery with repo_gpgcheck"
dnf_query() {
	local dir=$1 root=$work/dnf-root.$RANDOM
	mkdir -p "$root"
	dnf -q -y --installroot "$root" --setopt=reposdir=/dev/null --setopt=cachedir="$root/cache" \
		--releasever=9 --repofrompath=knem-rs,"file://$dir" --repo=knem-rs \
		--setopt=knem-rs.gpgcheck=1 --setopt=knem-rs.repo_gpgcheck=1 --setopt=knem-rs.skip_if_unavailable=False \
		--setopt=knem-rs.gpgkey="file://$repo/knem-rs-archive-keyring.asc" \
		repoquery --qf '%{name}-%{version}-%{release}.%{arch}' 2>&1
}
dnf_lists() {
	local out rc=0
	out=$(dnf_query "$repo/rpm") || rc=$?
	echo "$out"
	echo "dnf exit status $rc"
	[ "$rc" -eq 0 ] || return 1
	for p in knem-rs-dkms knem-rs-libs knem-rs-devel knem-rs-tools knem-rs-openmpi; do
		grep -q "^$p-$version-" <<< "$out" || { echo "no $p"; return 1; }
	done
}
dnf_refuses() {
	local out rc=0
	cp -a "$repo/rpm" "$work/rpm-tampered"
	sed -i 's|<revision>|<revision>1|' "$work/rpm-tampered/repodata/repomd.xml"
	out=$(dnf_query "$work/rpm-tampered") || rc=$?
	echo "$out"
	echo "dnf exit status $rc"
	[ "$rc" -ne 0 ] && grep -qi 'signature' <<< "$out" && ! grep -q '^knem-rs' <<< "$out"
}
# gpgcheck=1: each RPM carries the key's signature (rpm -K against an rpm
# database that knows only that key).
rpms_signed() {
	local db=$work/rpmdb f out
	mkdir -p "$db"
	rpmkeys --dbpath "$db" --import "$repo/knem-rs-archive-keyring.asc" || return 1
	for f in "$repo"/rpm/*.rpm; do
		out=$(rpmkeys --dbpath "$db" -Kv "$f") || { echo "$out"; return 1; }
		echo "$out" | head -n 3
		grep -q 'Header V4 EdDSA/SHA[0-9]* Signature, key ID [0-9a-f]*: OK' <<< "$out" || return 1
	done
}
check "dnf --repofrompath repoquery (gpgcheck, repo_gpgcheck) lists the 5 RPMs of $version" dnf_lists
check "every RPM is signed with the repository's key (rpmkeys -K)" rpms_signed
check "dnf refuses a repomd.xml changed after signing" dnf_refuses

# ---------------------------------------------------------------- 3
declare -A kernel
t=$SECONDS
for r in "${releases[@]}"; do
	say "3. $r: refusals, then apt-get install from the repository"
	lower=$kdir/root/$r
	if [ ! -x "$lower/usr/sbin/dkms" ] && [ ! -x "$lower/usr/bin/dkms" ]; then
		bad "$r: no chroot with dkms at $lower (tests/kernels/matrix.sh prepare)"
		continue
	fi
	m=$work/$r/merged
	mkdir -p "$work/$r/up" "$work/$r/work" "$m"
	mount -t overlay overlay -o "lowerdir=$lower,upperdir=$work/$r/up,workdir=$work/$r/work" "$m" &&
		mount -t proc proc "$m/proc" && mount -t tmpfs tmpfs "$m/tmp" &&
		mkdir -p "$m/srv/knem-rs" "$m/srv/knem-rs-tampered" &&
		mount --bind -o ro "$repo" "$m/srv/knem-rs" || { bad "$r: cannot set up the overlay"; continue; }
	# The newest kernel of the release (not rt) is the one DKMS builds for.
	kernel[$r]=$(ls "$m/lib/modules" | grep -v -- '-rt-' | sort -V | tail -n 1)
	for b in "$m"/lib/modules/*/build; do
		[ "${b%/build}" = "$m/lib/modules/${kernel[$r]}" ] || rm -f "$b"
	done
	mkdir -p "$m/etc/apt/keyrings"
	cp "$repo/knem-rs-archive-keyring.gpg" "$work/wrong-keyring.gpg" "$m/etc/apt/keyrings/"

	# A copy of the repository whose InRelease and Release say one more
	# thing than was signed.
	cp -a "$repo/apt/dists" "$m/srv/knem-rs-tampered/"
	ln -s ../knem-rs/apt/pool "$m/srv/knem-rs-tampered/pool"
	sed -i '/^Codename:/a Suite: stable' "$m/srv/knem-rs-tampered/dists/$r/InRelease" \
		"$m/srv/knem-rs-tampered/dists/$r/Release"
	write_source "$r" /srv/knem-rs-tampered /etc/apt/keyrings/knem-rs-archive-keyring.gpg
	check "$r: apt-get update refuses a Release changed after signing" update_refused "$r"
	write_source "$r" /srv/knem-rs/apt /etc/apt/keyrings/wrong-keyring.gpg
	check "$r: apt-get update refuses the repository when Signed-By names another key" update_refused "$r"

	write_source "$r" /srv/knem-rs/apt /etc/apt/keyrings/knem-rs-archive-keyring.gpg
	check "$r: apt-get update (file:// source, Signed-By)" apt_ours "$r" update
	check "$r: apt-get install ${pkgs[*]}" apt_all "$r" install "${pkgs[@]}"
	grep -h '^knem-rs:\|^Setting up \(knem-rs\|libknem\)' "$logdir"/"${r}__apt-get_install"* 2> /dev/null | sed 's/^/     > /'
	check "$r: installed at $version" installed_at "$r" "$version"
	check "$r: DKMS built knem.ko $version for ${kernel[$r]}" dkms_only "$r" "$version" "${kernel[$r]}"
	check "$r: Open MPI finds coll/knemrs (ompi_info, or its libraries resolve without openmpi-bin)" ompi_lists_knemrs "$r"
done
echo "     ($((SECONDS - t)) s)"

# ---------------------------------------------------------------- 4
say "4. $upgrade: rebuilt, published into the same repository, apt-get upgrade"
t=$SECONDS
build_upgrade() {
	local src=$work/src d=knem-rs-$upgrade o
	mkdir -p "$src" "$work/debs-$upgrade" "$work/ompi-$upgrade"
	tar -xzf "$debs/knem-rs_$version.orig.tar.gz" -C "$src" && mv "$src/knem-rs-$version" "$src/$d" || return 1
	sed -i '/^\[workspace\.package\]/,/^\[/s/^version *= *".*"/version = "'"$upgrade"'"/' "$src/$d/Cargo.toml"
	sed -i "s/^PACKAGE_VERSION=.*/PACKAGE_VERSION=\"$upgrade\"/" "$src/$d/dkms.conf"
	sed -i "s/^Version:.*/Version:        $upgrade/" "$src/$d/rpm/knem-rs.spec"
	sed -i "1s/($version-/($upgrade-/" "$src/$d/debian/changelog"
	(cd "$src/$d" && dpkg-buildpackage -b -us -uc) || return 1
	mv "$src"/*.deb "$work/debs-$upgrade/"
	# knem-rs-openmpi: the same components, the version raised.
	for o in "$ompi_debs"/knem-rs-openmpi_"$version"-1~*_amd64.deb; do
		rm -rf "$work/x" && dpkg-deb -R "$o" "$work/x" || return 1
		sed -i -e "s/^Version: $version-1~/Version: $upgrade-1~/" \
			-e "s/libknem-rs0 (>= $version)/libknem-rs0 (>= $upgrade)/" "$work/x/DEBIAN/control"
		dpkg-deb --root-owner-group -Zxz --build "$work/x" \
			"$work/ompi-$upgrade/$(basename "${o/_$version-1~/_$upgrade-1~}")" || return 1
	done
	ls "$work/debs-$upgrade" "$work/ompi-$upgrade"
}
check "the packages rebuilt as $upgrade" build_upgrade
check "make-repo.sh publishes $upgrade into the same repository" packaging/repo/make-repo.sh \
	--debs "$work/debs-$upgrade" --openmpi-debs "$work/ompi-$upgrade" --releases "${releases[*]}" "$repo"
for r in "${releases[@]}"; do
	[ -n "${kernel[$r]:-}" ] || continue
	check "$r: apt-get update" apt_ours "$r" update
	check "$r: apt-get upgrade" apt_ours "$r" upgrade
	check "$r: installed at $upgrade" installed_at "$r" "$upgrade"
	check "$r: DKMS holds only $upgrade, built for ${kernel[$r]}; /usr/src/knem-rs-$version is gone" \
		dkms_only "$r" "$upgrade" "${kernel[$r]}"
	say "5. $r: purge"
	check "$r: apt-get purge ${pkgs[*]}" apt_all "$r" purge "${pkgs[@]}"
	check "$r: nothing left (dpkg, dkms, /usr/src, knem.ko, tools)" nothing_left "$r"
done
echo "     ($((SECONDS - t)) s)"

cleanup
echo "repo test: ${releases[*]} in $((SECONDS - t_all)) s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
