#!/usr/bin/env bash
# Fetch one linux-source .deb of Debian, checked against its sha256:
#   fetch-linux-source.sh CACHE SUITE PACKAGE VERSION SHA256 SNAPSHOT [MIRROR [DEB]]
# writes CACHE/src/PACKAGE_VERSION_all.deb (kept: a second call checks it
# and returns).  DEB: a copy already at hand, checked and copied instead.  apt fetches it from MIRROR's SUITE main through a private
# apt state under CACHE/apt, so the host's own configuration and lists are
# left alone; once SUITE has moved on, it comes from the snapshot.debian.org
# archive SNAPSHOT (e.g. https://snapshot.debian.org/archive/debian/20261101T000000Z).
# Used by tests/debug-kernel/build.sh and tests/uml/build.sh.
set -euo pipefail

prog=tests/lib/fetch-linux-source.sh
die() { echo "$prog: $*" >&2; exit 1; }

[ $# -ge 6 ] || die "usage: fetch-linux-source.sh CACHE SUITE PACKAGE VERSION SHA256 SNAPSHOT [MIRROR [DEB]]"
cache=$1 suite=$2 pkg=$3 version=$4 sha256=$5 snapshot=$6
mirror=${7:-http://deb.debian.org/debian} at_hand=${8:-}
name=${pkg}_${version}_all.deb
deb=$cache/src/$name apt=$cache/apt

deb_ok() { [ -f "$1" ] && echo "$sha256  $1" | sha256sum -c --status; }
deb_ok "$deb" && exit 0
if [ -n "$at_hand" ]; then
	deb_ok "$at_hand" || die "$at_hand: not $name (sha256)"
	mkdir -p "$cache/src"
	cp "$at_hand" "$deb.tmp" && mv "$deb.tmp" "$deb"
	exit 0
fi

mkdir -p "$cache/src" "$apt/lists/partial" "$apt/archives/partial" "$apt/etc"
echo "deb $mirror $suite main" > "$apt/etc/sources.list"
opts=(-o Dir::Etc::SourceList="$apt/etc/sources.list"
	-o Dir::Etc::SourceParts=/dev/null -o Dir::State::Lists="$apt/lists"
	-o Dir::Cache="$apt" -o Dir::Cache::Archives="$apt/archives"
	-o APT::Architecture=amd64 -o Debug::NoLocking=1
	-o Acquire::Check-Valid-Until=false -q)
echo "$prog: fetching $pkg=$version with apt ($suite)" >&2
if apt-get "${opts[@]}" update > /dev/null &&
	(cd "$cache/src" && apt-get "${opts[@]}" download "$pkg=$version" > /dev/null) &&
	deb_ok "$deb"; then
	exit 0
fi
echo "$prog: not on $mirror: fetching it from snapshot.debian.org" >&2
rm -f "$deb"
curl -fsSL -o "$deb.tmp" "$snapshot/pool/main/l/linux/$name" || die "could not fetch $name"
deb_ok "$deb.tmp" || die "$name from the snapshot: wrong sha256"
mv "$deb.tmp" "$deb"
