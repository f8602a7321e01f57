#!/usr/bin/env bash
# Install what building and testing knem-rs needs on a Debian 12 machine
# (run as root): Debian's 6.1, 6.12 and 6.12-rt kernels with their headers,
# QEMU, busybox, libclang for bindgen, the packaging tools, and the Rust
# target and components.  Used by .ci/run and `make demo`; safe to re-run.
set -euo pipefail

export DEBIAN_FRONTEND=noninteractive
echo "deb http://deb.debian.org/debian bookworm-backports main" \
	> /etc/apt/sources.list.d/knem-rs-backports.list
apt-get update -qq

# Debian's own kernels: the current 6.1 of bookworm, 6.12 and 6.12-rt of
# bookworm-backports, each with its headers.
kernel_of() { apt-cache depends "$@" | awk '/Depends: linux-image-[0-9]/ { print $2; exit }'; }
k61=$(kernel_of linux-image-amd64)
k612=$(kernel_of -t bookworm-backports linux-image-amd64)
k612rt=$(kernel_of -t bookworm-backports linux-image-rt-amd64)
echo "kernels: $k61 $k612 $k612rt"
for k in "$k61" "$k612" "$k612rt"; do
	test -n "$k" || { echo "cannot resolve a Debian kernel package"; exit 1; }
done

apt-get install -y -qq --no-install-recommends \
	"$k61" "${k61/image/headers}" >/dev/null
apt-get install -y -qq --no-install-recommends -t bookworm-backports \
	"$k612" "${k612/image/headers}" "$k612rt" "${k612rt/image/headers}" \
	qemu-system-x86 >/dev/null
# The VM lab (its scratch ext4 disk and the matrix kernels' module lists
# too), bindgen, packaging (DKMS, Debian, RPM; Open MPI for
# knem-rs-openmpi, which make rpm builds too), the release chroots of
# tests/kernels and plot fonts.
apt-get install -y -qq --no-install-recommends \
	busybox-static cpio gzip e2fsprogs kmod libclang-dev dkms debootstrap \
	build-essential debhelper dh-dkms fakeroot lintian rpm libopenmpi-dev openmpi-bin \
	fonts-dejavu-core >/dev/null
# The tools' man pages (man, lexgrog: userlib/knem-gen-docs's test and
# tests/package/man-pages.sh) and Prometheus's reference text parser
# (tests/interop/prometheus-check.py, run in the VM from the host's root).
apt-get install -y -qq --no-install-recommends man-db python3-prometheus-client >/dev/null
# make repo and its test (tests/package/repo.sh): the signed apt and dnf
# repositories, and Debian's dnf to read the latter.
apt-get install -y -qq --no-install-recommends reprepro createrepo-c dnf >/dev/null

rustup target add x86_64-unknown-none >/dev/null
rustup component add rust-src clippy rustfmt >/dev/null

# `make fuzz-core-smoke`: cargo-fuzz 0.13, run with the nightly toolchain.
if ! rustup toolchain list | grep '^nightly-' >/dev/null; then
	rustup toolchain install nightly --profile minimal >/dev/null
fi
if ! cargo fuzz --version 2>/dev/null | grep '^cargo-fuzz 0\.13\.' >/dev/null; then
	cargo install --quiet --locked cargo-fuzz --version '~0.13'
fi
