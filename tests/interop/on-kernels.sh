# SPDX-License-Identifier: GPL-2.0-only
#
# Sourced by tests/interop/run.sh and smsc.sh, which set top, out, kernels
# and phase(); smsc.sh also sets vm_root_dir (a chroot to boot as the root
# instead of the host's) and vm_add (one more path for /opt).
#
# run_on_kernels NAME TAG GUEST-COMMAND...: boot each kernel in the host's
# root filesystem (or vm_root_dir), run GUEST-COMMAND there with
# tests/interop as /opt/interop,
# keep its console in $out/TAG-KERNEL.log, then print one summary line per
# kernel.  Fails if any kernel did.
# 2 GiB guests: coll_check verify's 16 MiB blocks on 4 ranks take
# 4 x 128 MiB of buffers.
run_on_kernels() {
	local name=$1 tag=$2 k log r s status=0 summary=() vm_args=(--host-root)
	shift 2
	[ -z "${vm_root_dir:-}" ] || vm_args=(--root-dir "$vm_root_dir")
	vm_args+=(--mem 2048)
	[ -z "${vm_add:-}" ] || vm_args+=(--add "$vm_add")
	for k in "${kernels[@]}"; do
		echo "=== $name on kernel $k ==="
		log=$out/$tag-$k.log
		if "$top/tests/vm/run" --kernel "$k" "${vm_args[@]}" --timeout 1800 \
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
