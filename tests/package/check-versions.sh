#!/bin/bash
# The package version is written in the workspace (Cargo.toml), dkms.conf,
# debian/changelog and rpm/knem-rs.spec; fail unless all four agree.
set -euo pipefail
cd "$(dirname "$0")/../.."

cargo=$(sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' Cargo.toml)
dkms=$(sed -n 's/^PACKAGE_VERSION="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' dkms.conf)
deb=$(sed -n '1s/^[^ ]* (\([^)]*\)).*/\1/p' debian/changelog)
deb=${deb%-*}
rpm=$(sed -n 's/^Version:[[:space:]]*//p' rpm/knem-rs.spec)
name=$(sed -n 's/^PACKAGE_NAME="\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' dkms.conf)

status=0
for pair in "dkms.conf:$dkms" "debian/changelog:$deb" "rpm/knem-rs.spec:$rpm"; do
	if [ "${pair#*:}" != "$cargo" ]; then
		echo "version mismatch: Cargo.toml has $cargo, ${pair%%:*} has ${pair#*:}" >&2
		status=1
	fi
done
[ "$name" = knem-rs ] || { echo "dkms.conf: PACKAGE_NAME is '$name', not knem-rs" >&2; status=1; }
exit $status
