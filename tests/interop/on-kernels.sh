# SPDX-License-Identifier: GPL-2.0-only
#
# Sourced by tests/interop/run.sh and ompi5.sh, which set top, out, kernels
# and phase().
#
# run_on_kernels NAME TAG GUEST-COMMAND...: boot each kernel in the host's
# root filesystem, run GUEST-COMMAND there with tests/interop as /opt/interop,
# keep its console in $out/TAG-KERNEL.log, then print one summary line per
# kernel.  Fails if any kernel did.
run_on_kernels() {
	local name=$1 tag=$2 k log r s status=0 summary=()
	shift 2
	for k in "${kernels[@]}"; do
		echo "=== $name on kernel $k ==="
		log=$out/$tag-$k.log
		if "$top/tests/vm/run" --kernel "$k" --host-root --timeout 1800 \
			--add "$top/tests/interop" -- "$@" | tee "$log"; then
			r=ok
		else
			r=FAILED
			status=1
		fi
		summary+=("kernel $k: $r, $(grep -a '^interop: [0-9]* passed' "$log" | tail -n 1 | tr -d '\r' || echo 'no result line')")
		phase "kernel $k"
	done
	for s in "${summary[@]}"; do
		echo "$name: $s"
	done
	return $status
}
