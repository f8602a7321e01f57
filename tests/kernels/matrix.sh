#!/bin/bash
# SPDX-License-Identifier: GPL-2.0-only
#
# tests/kernels/matrix.sh - knem.ko on the kernels of every Debian release,
# built as on a node of that release: in a debootstrap chroot of the release
# with its own gcc, linux-kbuild, headers and dkms, from the dist tarball.
#
#   matrix.sh prepare   one minbase chroot per release (in parallel), the
#                       release's toolchain, dkms and the headers of its
#                       kernels; each kernel's bzImage extracted from its
#                       package into the matrix directory (never installed
#                       on this machine), with the few modules the VM loads
#                       (virtio disk, ext4, 9p) next to it
#   matrix.sh build     knem.ko and the test-only DMA provider for every
#                       kernel, in its release's chroot, from the tarball of
#                       `make dist` (build/dist/knem-rs-*.tar.gz)
#   matrix.sh module NAME TREE KO [VAR=VALUE...]
#                       knem.ko for one kernel, built in its chroot as the
#                       build step does, from a work tree rather than the
#                       tarball (tests/fails-before/run.sh --release)
#   matrix.sh dkms      the knem-rs-dkms .deb (make deb) in each chroot: DKMS
#                       builds for every kernel, signed with a throwaway
#                       key where dkms 3 can be told to, a kernel upgrade,
#                       a kernel the module cannot build for
#                       (dkms-in-chroot.sh)
#   matrix.sh vm [NAME...|all]
#                       boot each kernel's image (tests/vm/run --kernel-image)
#                       with its chroot-built knem.ko: the shim's checks and
#                       the conformance programs; the whole suite
#                       (tests/vm/full-suite.sh) on the NAMEd kernels
#   matrix.sh report    the results as a table, and the time of each step
#   matrix.sh all [NAME...|all]
#                       all of the above, going on past a failing kernel
#   matrix.sh list      one line per kernel: NAME KVER IMAGE KNEM_KO DMA_KO
#   matrix.sh time      how long each step took (seconds)
#
# Kernels are named after the apt suite they come from (bullseye,
# bullseye-rt, ..., experimental); their versions are what the suite's
# meta-packages (linux-headers-amd64, linux-headers-rt-amd64) depend on.
#
# Environment:
#   KNEM_KERNELS_DIR       chroots and results (default build/kernels)
#   KNEM_KERNELS           names of the kernels to handle (default: all); the
#                          chroots they need are prepared, built and tested
#                          whole
#   KNEM_KERNELS_MIRROR    Debian mirror (default http://deb.debian.org/debian)
#   KNEM_KERNELS_TARBALL   the source tarball (default build/dist/knem-rs-*.tar.gz)
#   KNEM_KERNELS_REFRESH   1: prepare the chroots anew even if prepared before
#   KNEM_KERNELS_RPM       the chroot where the RPMs are installed, upgraded
#                          and removed with rpm --root (default bullseye;
#                          empty: none)
#   KNEM_KERNELS_DKMS      chroots whose package install, upgrade and failing
#                          kernel `dkms` tests (default: every chroot)
set -euo pipefail

top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
prog=tests/kernels/matrix.sh
dir=${KNEM_KERNELS_DIR:-$top/build/kernels}
mirror=${KNEM_KERNELS_MIRROR:-http://deb.debian.org/debian}
security=${mirror%/debian}/debian-security

die() { echo "$prog: $*" >&2; exit 2; }

# name  chroot  apt suite  meta-package flavour
table='
bullseye               bullseye  bullseye            amd64
bullseye-rt            bullseye  bullseye            rt-amd64
bookworm               bookworm  bookworm            amd64
bookworm-backports     bookworm  bookworm-backports  amd64
bookworm-backports-rt  bookworm  bookworm-backports  rt-amd64
trixie                 trixie    trixie              amd64
trixie-rt              trixie    trixie              rt-amd64
sid                    sid       sid                 amd64
sid-rt                 sid       sid                 rt-amd64
experimental           sid       experimental        amd64
'

# Kernels selected by KNEM_KERNELS, as "name chroot suite flavour" lines.
selected() {
	local name rest
	while read -r name rest; do
		[ -n "$name" ] || continue
		if [ -z "${KNEM_KERNELS:-}" ] || [[ " $KNEM_KERNELS " == *" $name "* ]]; then
			echo "$name $rest"
		fi
	done <<< "$table"
}

chroots() { selected | awk '{ print $2 }' | sort -u; }

# The apt sources of a chroot: the release with its updates and security
# archive, bookworm with backports, sid with experimental (pinned low, as
# Debian does; its kernels are installed with -t experimental).
sources_of() {
	case $1 in
	bullseye)
		echo "deb $mirror bullseye main"
		echo "deb $mirror bullseye-updates main"
		echo "deb $security bullseye-security main" ;;
	bookworm)
		echo "deb $mirror bookworm main"
		echo "deb $mirror bookworm-updates main"
		echo "deb $mirror bookworm-backports main"
		echo "deb $security bookworm-security main" ;;
	trixie)
		echo "deb $mirror trixie main"
		echo "deb $mirror trixie-updates main"
		echo "deb $security trixie-security main" ;;
	sid)
		echo "deb $mirror sid main"
		echo "deb $mirror experimental main" ;;
	*) die "no sources for $1" ;;
	esac
}

root_of() { echo "$dir/root/$1"; }

# in_root CHROOT COMMAND...: run COMMAND in the chroot with /proc mounted
# in a private mount namespace, so no mount outlives the command.
in_root() {
	local root
	root=$(root_of "$1")
	shift
	unshare --mount --propagation private -- /bin/sh -c \
		'mount -t proc proc "$0/proc" && exec chroot "$0" "$@"' "$root" \
		env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C \
		DEBIAN_FRONTEND=noninteractive "$@"
}

apt_in() {
	local c=$1
	shift
	in_root "$c" apt-get -y -q -o Dpkg::Use-Pty=0 "$@"
}

# The timings file: "STEP SECONDS" lines, appended by each step.
timing() { echo "$1 $2" >> "$dir/times"; }

# ---- prepare ----------------------------------------------------------------

# apt's target release for a kernel of SUITE in CHROOT: none for the
# release's own kernels (its security archive may have the newest).
target_of() { [ "$1" = "$2" ] || printf '%s\n' -t "$1"; }

# The kernel versions a suite's meta-package points to: its candidate first,
# then the other versions apt knows, newest first (a mirror may lack the
# newest image).
resolve_kvers() {
	local c=$1 suite=$2 flavour=$3 first
	first=$(in_root "$c" apt-cache $(target_of "$suite" "$c") depends "linux-headers-$flavour" |
		awk '/Depends: linux-headers-[0-9]/ { print $2; exit }')
	[ -n "$first" ] || die "$suite: linux-headers-$flavour depends on no linux-headers-<version>"
	{
		echo "${first#linux-headers-}"
		in_root "$c" apt-cache show "linux-headers-$flavour" |
			sed -n 's/^Depends: linux-headers-\([0-9][^ ,]*\).*/\1/p' | sort -rVu
	} | awk '!seen[$0]++'
}

# The modules tests/vm/run loads into a guest (the scratch ext4 disk, the
# host root over 9p), with what they depend on, from the package extracted
# at X, kept as DEST/lib/modules/KVER with a modules.dep made for them.
# Fails when they cannot be had: the full suite's scratch ext4 needs them
# (tests/vm/run --scratch-ext4 fails without), and a kernel must not go
# on to the VM steps as if it had them.
vm_modules='virtio_pci virtio_blk ext4 crc32c_generic 9pnet_virtio 9p'
keep_modules() {
	local x=$1 kver=$2 dest=$3 src= d m line todo done_=' ' path
	for d in "$x/lib/modules/$kver" "$x/usr/lib/modules/$kver"; do
		[ -d "$d/kernel" ] && src=$d
	done
	if [ -z "$src" ]; then
		echo "$kver: the image package holds no modules: the VM would get no ext4 or 9p" >&2
		return 1
	fi
	# depmod reads BASE/lib/modules/KVER.
	depmod -b "${src%/lib/modules/"$kver"}" "$kver" ||
		{ echo "$kver: depmod failed: the VM would get no ext4 or 9p" >&2; return 1; }
	rm -rf "$dest"
	mkdir -p "$dest/lib/modules/$kver"
	cp "$src/modules.dep" "$dest/lib/modules/$kver/"
	[ ! -f "$src/modules.builtin" ] || cp "$src/modules.builtin" "$dest/lib/modules/$kver/"
	todo=$vm_modules
	while [ -n "$todo" ]; do
		set -- $todo
		m=$1
		shift
		todo=$*
		case $done_ in *" $m "*) continue ;; esac
		done_+="$m "
		line=$(grep -E "(^|/)${m}\.ko(\.[a-z]+)?:" "$src/modules.dep" | head -n 1 || true)
		[ -n "$line" ] || continue
		path=${line%%:*}
		mkdir -p "$dest/lib/modules/$kver/$(dirname "$path")"
		cp "$src/$path" "$dest/lib/modules/$kver/$path"
		for d in ${line#*:}; do
			d=${d##*/}
			todo+=" ${d%%.ko*}"
		done
	done
}

# The bzImage of KVER from its package (linux-image-KVER, its unsigned
# twin, or linux-binary-KVER on kernels that split the image out), copied
# to OUT; its modules for the VM next to it, as OUT.modules.  Status 1: no
# image of KVER to be had; 2: an image without the modules the VM needs.
fetch_image() {
	local c=$1 kver=$2 out=$3 root tmp pkg f
	root=$(root_of "$c")
	tmp=$root/tmp/image-$kver
	for pkg in "linux-image-$kver" "linux-image-$kver-unsigned" "linux-binary-$kver"; do
		rm -rf "$tmp" && mkdir -p "$tmp"
		in_root "$c" sh -c 'cd "$1" && apt-get download -q "$2"' sh \
			"/tmp/image-$kver" "$pkg" > /dev/null 2>&1 || continue
		dpkg-deb -x "$tmp"/*.deb "$tmp/x"
		for f in "$tmp/x/boot/vmlinuz-$kver" "$tmp/x/usr/lib/modules/$kver/vmlinuz" \
			"$tmp/x/lib/modules/$kver/vmlinuz"; do
			if [ -f "$f" ]; then
				cp "$f" "$out"
				# Kernels that split the image out ship the modules
				# in a package of their own.
				if [ ! -d "$tmp/x/lib/modules/$kver/kernel" ] &&
					[ ! -d "$tmp/x/usr/lib/modules/$kver/kernel" ]; then
					rm -f "$tmp"/*.deb
					if in_root "$c" sh -c 'cd "$1" && apt-get download -q "$2"' sh \
						"/tmp/image-$kver" "linux-modules-$kver" > /dev/null 2>&1; then
						dpkg-deb -x "$tmp"/*.deb "$tmp/x"
					fi
				fi
				if ! keep_modules "$tmp/x" "$kver" "$out.modules"; then
					rm -rf "$tmp" "$out"
					return 2
				fi
				rm -rf "$tmp"
				echo "$kver: image from $pkg"
				return 0
			fi
		done
	done
	rm -rf "$tmp"
	return 1
}

prepare_chroot() {
	local c=$1 root t0 t1 name chroot suite flavour kver found rc
	root=$(root_of "$c")
	t0=$SECONDS
	if [ ! -x "$root/usr/bin/apt-get" ] || [ ! -f "$root/.debootstrap-done" ]; then
		rm -rf "$root"
		mkdir -p "$root"
		debootstrap --variant=minbase "$c" "$root" "$mirror"
		touch "$root/.debootstrap-done"
	fi
	t1=$SECONDS
	timing "debootstrap-$c" $((t1 - t0))

	sources_of "$c" > "$root/etc/apt/sources.list"
	cat > "$root/etc/apt/apt.conf.d/90knem-matrix" <<-EOF
		APT::Install-Recommends "false";
		APT::Install-Suggests "false";
		Acquire::Languages "none";
		Acquire::Check-Valid-Until "false";
	EOF
	# A chroot thrown away after the run: no fsync per file.
	echo force-unsafe-io > "$root/etc/dpkg/dpkg.cfg.d/90knem-matrix"
	cp /etc/resolv.conf "$root/etc/resolv.conf"
	apt_in "$c" update
	timing "apt-update-$c" $((SECONDS - t1))
	t1=$SECONDS

	# Each kernel: the newest version whose image can be had.
	mkdir -p "$dir/images"
	: > "$dir/kernels-$c"
	while read -r name chroot suite flavour; do
		[ "$chroot" = "$c" ] || continue
		found=
		for kver in $(resolve_kvers "$c" "$suite" "$flavour"); do
			rc=0
			fetch_image "$c" "$kver" "$dir/images/$name.vmlinuz" || rc=$?
			if [ "$rc" -eq 0 ]; then
				found=$kver
				break
			fi
			[ "$rc" -eq 1 ] || die "$suite: the image of $kver comes without the modules its VM needs"
			echo "$suite: no image of $kver to be had, trying an older one"
		done
		[ -n "$found" ] || die "$suite: no linux-headers-$flavour version with an image"
		echo "$name $found $suite" >> "$dir/kernels-$c"
	done < <(KNEM_KERNELS='' selected)
	timing "images-$c" $((SECONDS - t1))

	# The release's compiler and dkms, then each kernel's headers from its
	# suite (they pull in its linux-kbuild and the gcc it was built with).
	t1=$SECONDS
	apt_in "$c" install make gcc libc6-dev dkms kmod xz-utils zstd
	while read -r name kver suite; do
		apt_in "$c" install $(target_of "$suite" "$c") "linux-headers-$kver"
	done < "$dir/kernels-$c"
	timing "apt-$c" $((SECONDS - t1))
	timing "prepare-$c" $((SECONDS - t0))
}

# A chroot prepared once is kept (KNEM_KERNELS_REFRESH=1: made anew); the
# lock lets a prepare started early in the background (.ci/run) finish
# before the stage's own prepare looks.
cmd_prepare() {
	local c pids=() failed=0 i=0 cs=() todo=()
	command -v debootstrap > /dev/null || die "debootstrap is missing (tests/setup-deps.sh)"
	mkdir -p "$dir/logs"
	exec 9> "$dir/prepare.lock"
	flock 9
	mapfile -t cs < <(chroots)
	for c in "${cs[@]}"; do
		if [ "${KNEM_KERNELS_REFRESH:-0}" = 1 ] || [ ! -f "$dir/prepared-$c" ]; then
			rm -f "$dir/prepared-$c"
			todo+=("$c")
		else
			echo "prepared $c earlier: $(tr '\n' ' ' < "$dir/kernels-$c")"
		fi
	done
	# Downloads dominate: every release at once.
	for c in "${todo[@]}"; do
		prepare_chroot "$c" > "$dir/logs/prepare-$c.log" 2>&1 &
		pids+=($!)
	done
	for c in "${todo[@]}"; do
		if wait "${pids[$i]}"; then
			touch "$dir/prepared-$c"
			echo "prepared $c: $(tr '\n' ' ' < "$dir/kernels-$c")"
		else
			echo "$prog: preparing $c failed; see $dir/logs/prepare-$c.log" >&2
			tail -n 20 "$dir/logs/prepare-$c.log" >&2
			failed=1
		fi
		i=$((i + 1))
	done
	exec 9>&-
	return $failed
}

# ---- build ------------------------------------------------------------------

tarball() {
	local t=${KNEM_KERNELS_TARBALL:-}
	[ -z "$t" ] || { echo "$t"; return; }
	t=$(ls "$top"/build/dist/knem-rs-*.tar.gz 2> /dev/null | tail -n 1)
	[ -n "$t" ] || die "no build/dist/knem-rs-*.tar.gz (make dist)"
	echo "$t"
}

# "name kver suite chroot" for every selected kernel of the prepared chroots.
prepared() {
	local c name rest
	for c in $(chroots); do
		[ -f "$dir/kernels-$c" ] || die "chroot $c is not prepared ($prog prepare)"
		while read -r name rest; do
			if [ -z "${KNEM_KERNELS:-}" ] || [[ " $KNEM_KERNELS " == *" $name "* ]]; then
				echo "$name $rest $c"
			fi
		done < "$dir/kernels-$c"
	done
}

# result NAME KEY VALUE: one cell of the report's table.
result() { mkdir -p "$dir/results/$1" && echo "$3" > "$dir/results/$1/$2"; }

# module_in CHROOT SRC KVER OUT [VAR=VALUE...]: knem.ko for KVER built in
# the chroot by the c-shim/build-module.sh of the tree at SRC into OUT
# (both paths inside the chroot), with the VARs in its environment.
module_in() {
	local c=$1 src=$2 kver=$3 out=$4
	shift 4
	in_root "$c" "$@" sh -c 'cd "$1" && c-shim/build-module.sh "$2" "$3"' sh "$src" "$kver" "$out"
}

# The kernels of one chroot, one after the other.
build_chroot() {
	local c=$1 tb=$2 name kver suite cc root src out t0 failed=0
	root=$(root_of "$c")
	src=$(basename "$tb" .tar.gz)
	while read -r name kver suite; do
		t0=$SECONDS
		rm -rf "$root/build" && mkdir -p "$root/build"
		tar -xzf "$tb" -C "$root/build"
		out=$dir/modules/$name
		rm -rf "$out" && mkdir -p "$out"
		if { module_in "$c" "/build/$src" "$kver" /build/out/knem &&
			in_root "$c" sh -c 'cd /build/"$1" &&
				tests/dma-provider/build.sh "$2" /build/out/dma' sh "$src" "$kver"; } \
			> "$dir/logs/build-$name.log" 2>&1; then
			cp "$root/build/out/knem/knem.ko" "$root/build/out/dma/knem_dma_test.ko" "$out/"
			# The compiler the kernel's own build files chose.
			cc=$(readelf -p .comment "$out/knem.ko" | sed -n 's/.*\(GCC: .*\)/\1/p' | sort -u | tail -n 1)
			echo "built $name ($kver) with $cc in $((SECONDS - t0)) s"
			result "$name" build "ok ($((SECONDS - t0)) s, ${cc#GCC: })"
		else
			echo "$prog: $name ($kver): build failed; see $dir/logs/build-$name.log" >&2
			tail -n 20 "$dir/logs/build-$name.log" >&2
			result "$name" build FAIL
			failed=1
		fi
		timing "build-$name" $((SECONDS - t0))
	done < "$dir/kernels-$c"
	return $failed
}

# two_at_a_time FUNCTION ARG...: FUNCTION CHROOT ARG... for every chroot
# ($only_chroots, when set, limits them), two at a time (the machine's two
# cores).
only_chroots=
two_at_a_time() {
	local fn=$1 failed=0 pids=() cs i p
	shift
	mapfile -t cs < <(chroots | if [ -n "$only_chroots" ]; then
		grep -xF -f <(tr ' ' '\n' <<< "$only_chroots"); else cat; fi)
	for ((i = 0; i < ${#cs[@]}; i += 2)); do
		pids=()
		"$fn" "${cs[$i]}" "$@" & pids+=($!)
		if [ $((i + 1)) -lt ${#cs[@]} ]; then
			"$fn" "${cs[$((i + 1))]}" "$@" & pids+=($!)
		fi
		for p in "${pids[@]}"; do wait "$p" || failed=1; done
	done
	return $failed
}

cmd_build() {
	local tb
	tb=$(tarball)
	mkdir -p "$dir/logs" "$dir/modules"
	prepared > /dev/null
	two_at_a_time build_chroot "$tb"
}

# module NAME TREE KO [VAR=VALUE...]: knem.ko for the kernel NAME, built as
# the build step builds it, in its release's chroot, but from the work tree
# TREE (its c-shim/, include/ and Cargo.toml, with the Rust core object
# $KNEM_CORE_OBJ, default TREE/c-shim/knem_core.prebuilt), copied to KO;
# the VARs (e.g. KNEM_FAULT_INJECT=1) in build-module.sh's environment.
cmd_module() {
	[ $# -ge 3 ] || die "usage: $prog module NAME TREE KO [VAR=VALUE...]"
	local name=$1 tree=$2 ko=$3 kver= c= tmp rc=0
	shift 3
	read -r kver c < <(KNEM_KERNELS=$name prepared | awk -v n="$name" '$1 == n { print $2, $4 }') || true
	[ -n "$kver" ] || die "no kernel $name in a prepared chroot ($prog list)"
	tmp=$(mktemp -d "$(root_of "$c")/tmp/module.XXXXXX")
	mkdir "$tmp/src"
	cp -r "$tree/c-shim" "$tree/include" "$tree/Cargo.toml" "$tmp/src/" &&
		cp "${KNEM_CORE_OBJ:-$tree/c-shim/knem_core.prebuilt}" "$tmp/src/c-shim/knem_core.prebuilt" &&
		module_in "$c" "/tmp/${tmp##*/}/src" "$kver" "/tmp/${tmp##*/}/out" "$@" &&
		cp "$tmp/out/knem.ko" "$ko" || rc=1
	rm -rf "$tmp"
	return $rc
}

# ---- dkms -------------------------------------------------------------------

# make_test_mok DIR CN: a throwaway key pair for DKMS to sign with (DIR/test.key,
# DIR/test.der), and what modinfo must then print: DIR/signer (the CN) and
# DIR/sig_key (the serial, as colon-separated hex).  Made here: the
# chroots have no openssl.
make_test_mok() {
	local d=$1 cn=$2
	rm -rf "$d" && mkdir -p "$d"
	openssl req -new -x509 -nodes -days 2 -subj "/CN=$cn" -newkey rsa:2048 \
		-keyout "$d/test.key" -outform DER -out "$d/test.der" || return 1
	echo "$cn" > "$d/signer"
	openssl x509 -inform DER -in "$d/test.der" -noout -serial |
		sed 's/^serial=//; s/\(..\)/\1:/g; s/:$//' > "$d/sig_key"
}

# Per chroot: the .deb packages installed there, DKMS building for each
# kernel, an upgrade to the chroot's last kernel, a kernel that fails
# (tests/kernels/dkms-in-chroot.sh).
dkms_chroot() {
	local c=$1 tb=$2 debdir=$3 root src up up_suite t0=$SECONDS log rc name kver suite
	root=$(root_of "$c")
	src=$(basename "$tb" .tar.gz)
	log=$dir/logs/dkms-$c.log
	rm -rf "$root/build" && mkdir -p "$root/build/deb"
	tar -xzf "$tb" -C "$root/build"
	cp "$debdir"/knem-rs-dkms_*_all.deb "$root/build/deb/"
	read -r _ up up_suite < <(tail -n 1 "$dir/kernels-$c")
	make_test_mok "$root/build/mok" "knem-rs test signing key ($c)" > "$dir/logs/mok-$c.log" 2>&1 ||
		die "$c: openssl could not make the test signing key; see $dir/logs/mok-$c.log"
	rc=0
	in_root "$c" KNEM_DKMS_MOK=/build/mok "/build/$src/tests/kernels/dkms-in-chroot.sh" /build/deb "$up" \
		$(target_of "$up_suite" "$c") > "$log" 2>&1 || rc=$?
	grep -E '^(ok|FAIL|skip|----|     >)|^kernels with|^failing-kernel|passed, .* failed(, [0-9]+ skipped)?$' "$log" | sed "s/^/[$c] /"
	timing "dkms-$c" $((SECONDS - t0))
	local apt_rc
	apt_rc=$(sed -n 's/^failing-kernel apt exit code: //p' "$log")
	while read -r name kver suite; do
		if grep -qx "ok   DKMS installed knem.ko for $kver" "$log" &&
			grep -qx "ok   knem.ko of $kver is built for $kver (vermagic)" "$log"; then
			result "$name" dkms ok
		elif [ "$kver" = "$up" ]; then
			result "$name" dkms "(upgrade)"
		else
			result "$name" dkms FAIL
		fi
		if [ "$kver" = "$up" ]; then
			if grep -qx "ok   the kernel hook built and installed knem.ko for $kver" "$log" &&
				grep -qx "ok   knem.ko of $kver is built for $kver (vermagic)" "$log"; then
				result "$name" upgrade ok
			else
				result "$name" upgrade FAIL
			fi
		fi
		result "$name" failing-apt-rc "${apt_rc:-none}"
	done < "$dir/kernels-$c"
	return $rc
}

# The RPMs of make rpm installed, upgraded and removed in chroot $1 with
# this machine's rpm (tests/kernels/rpm-in-chroot.sh): their scriptlets run
# for real against the release's dkms and headers.
rpm_chroot() {
	local c=$1 tb=$2 t0=$SECONDS log rc=0 name kver suite
	log=$dir/logs/rpm-$c.log
	KNEM_RPM_LOGDIR=$dir/logs/rpm-$c "$top/tests/kernels/rpm-in-chroot.sh" "$(root_of "$c")" "$tb" \
		"$top/build/rpm/RPMS" > "$log" 2>&1 || rc=$?
	grep -E '^(ok|FAIL|skip|----|     >)|^kernels with|passed, .* failed(, [0-9]+ skipped)?$' "$log" | sed "s/^/[rpm $c] /"
	timing "rpm-$c" $((SECONDS - t0))
	while read -r name kver suite; do
		if [ "$rc" -eq 0 ]; then result "$name" rpm ok; else result "$name" rpm FAIL; fi
	done < "$dir/kernels-$c"
	return $rc
}

# KNEM_KERNELS_RPM (default bullseye, whose chroot the dkms step of make
# test leaves idle: the RPM test runs beside sid's .deb test): the chroot
# of the RPM test; empty: none.
cmd_dkms() {
	local tb debdir=$top/build/deb failed=0 rpm_c=${KNEM_KERNELS_RPM-bullseye} rpm_pid=
	tb=$(tarball)
	ls "$debdir"/knem-rs-dkms_*_all.deb > /dev/null 2>&1 || die "no knem-rs-dkms .deb in $debdir (make deb)"
	prepared > /dev/null
	if [ -n "$rpm_c" ]; then
		[ -f "$dir/kernels-$rpm_c" ] || die "KNEM_KERNELS_RPM=$rpm_c: chroot $rpm_c is not prepared"
		ls "$top"/build/rpm/RPMS/noarch/knem-rs-dkms-*.rpm > /dev/null 2>&1 || die "no RPMs in build/rpm (make rpm)"
		# Not beside a .deb test in the same chroot.
		if [[ " ${KNEM_KERNELS_DKMS:-$(chroots | tr '\n' ' ')} " == *" $rpm_c "* ]]; then
			rpm_chroot "$rpm_c" "$tb" || failed=1
		else
			rpm_chroot "$rpm_c" "$tb" & rpm_pid=$!
		fi
	fi
	only_chroots=${KNEM_KERNELS_DKMS:-} two_at_a_time dkms_chroot "$tb" "$debdir" || failed=1
	[ -z "$rpm_pid" ] || wait "$rpm_pid" || failed=1
	return $failed
}

# ---- vm ---------------------------------------------------------------------

# vm [NAME...|all]: on every kernel the shim's checks and the conformance
# programs; on the NAMEd kernels (all: every one) the full suite instead,
# which begins with those two.
cmd_vm() {
	local full=" $* " name kver suite c img ko dma t0 start log failed=0 opts k
	while read -r name kver suite c; do
		img=$dir/images/$name.vmlinuz
		ko=$dir/modules/$name/knem.ko
		dma=$dir/modules/$name/knem_dma_test.ko
		opts=(--kernel-image "$img" --module "$ko")
		[ -f "$ko" ] || { echo "$prog: $name: no knem.ko (build failed)"; failed=1; continue; }
		log=$dir/logs/vm-$name.log
		start=$SECONDS
		t0=$SECONDS
		echo "=== $name ($kver) ==="
		if [[ $full == *" all "* || $full == *" $name "* ]]; then
			# full-suite.sh stops at the first step that fails.
			if tests/vm/full-suite.sh "${opts[@]}" --dma-module "$dma" > "$log" 2>&1; then
				result "$name" full "ok ($((SECONDS - t0)) s)"
			else
				result "$name" full FAIL
				failed=1
			fi
		else
			result "$name" full -
			# The shim's checks and the conformance programs, one boot.
			tests/vm/check-shim --conformance "${opts[@]}" > "$log" 2>&1 || failed=1
		fi
		# Each half is judged by the line the guest printed for it.
		for k in "smoke:shim checks" conformance:conformance; do
			if grep -aq "^check-shim: ${k#*:} passed" "$log"; then
				result "$name" "${k%%:*}" ok
			else
				result "$name" "${k%%:*}" FAIL
				failed=1
			fi
		done
		# insmod succeeded: the runner printed the module's taint.
		if grep -aq '^KNEM-VM-TAINT module=' "$log"; then result "$name" loads ok; else result "$name" loads FAIL; fi
		grep -aE '^tests/vm/run: (FAIL|module taint|boot to shell)|^(full-suite.sh|check-shim): |passed, [0-9]+ failed(, [0-9]+ skipped)?$' "$log" | sed "s/^/[$name] /"
		timing "vm-$name" $((SECONDS - start))
	done < <(prepared)
	return $failed
}

# ---- report -----------------------------------------------------------------

cmd_report() {
	local name kver suite c k v
	printf '| kernel | suite | build (own chroot) | loads | smoke | conformance | full suite | DKMS install | upgrade | failing-kernel apt rc | RPM scriptlets |\n'
	printf '|---|---|---|---|---|---|---|---|---|---|---|\n'
	while read -r name kver suite c; do
		printf '| %s | %s' "$kver" "$suite"
		for k in build loads smoke conformance full dkms upgrade failing-apt-rc rpm; do
			if [ -f "$dir/results/$name/$k" ]; then
				v=$(cat "$dir/results/$name/$k")
			elif [ "$k" = upgrade ]; then
				v=-	# only the chroot's last kernel is the upgrade
			elif [ "$k" = rpm ]; then
				v=-	# only KNEM_KERNELS_RPM's chroot has the RPM test
			else
				v="not run"
			fi
			printf ' | %s' "$v"
		done
		printf ' |\n'
	done < <(prepared)
	echo
	echo "seconds per step:"
	sed 's/^/  /' "$dir/times"
}

cmd_list() {
	local name kver suite c
	while read -r name kver suite c; do
		echo "$name $kver $dir/images/$name.vmlinuz $dir/modules/$name/knem.ko" \
			"$dir/modules/$name/knem_dma_test.ko"
	done < <(prepared)
}

# all [NAME...|all]: every step; a failing kernel does not stop the others,
# the table is printed, and the exit status says whether all passed.
cmd_all() {
	local failed=0 t0=$SECONDS
	cmd_prepare || { cmd_report; return 1; }
	cmd_build || failed=1
	cmd_dkms || failed=1
	cmd_vm "$@" || failed=1
	timing total $((SECONDS - t0))
	cmd_report
	return $failed
}

case ${1:-} in
all) shift; cmd_all "$@" ;;
prepare) cmd_prepare ;;
build) cmd_build ;;
module) shift; cmd_module "$@" ;;
dkms) cmd_dkms ;;
vm) shift; cmd_vm "$@" ;;
report) cmd_report ;;
list) cmd_list ;;
time) cat "$dir/times" ;;
*) die "usage: $prog all|prepare|build|module NAME TREE KO|dkms|vm [NAME...|all]|report|list|time" ;;
esac
