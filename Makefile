# knem-rs: one entry point.
#
#   make demo       fresh machine to a verified copy in the VM, in one command
#   make build      host crates, the Rust kernel object, knem.ko for every kernel
#   make test       everything CI runs: host tests, ABI checks, VM suites
#   make check      the fast tier (under 10 minutes): fmt, clippy, host tests,
#                   the VM suite's light pass on CHECK_KERNEL (6.1)
#   make vm-test    the in-VM suite on each kernel of VM_KERNELS
#   make kernels-test   every Debian release's kernels, built in its chroot
#   make test-kernels   the same with the in-VM suite on every kernel
#   make interop    UCX and Open MPI over the module on each kernel of INTEROP_KERNELS
#   make interop-smsc  smsc/knem in Debian's own Open MPI 5.0.7 and 6.0, in
#                   their releases' chroots booted in the VM
#   make interop-smsc-bench  coll_check's timings on 6.0: coll/knemrs, tuned
#                   over smsc cma and knem, coll/xhc (not part of make test)
#   make two-node   Open MPI across two guests joined by a private link
#                   (tests/vm/two-guests.sh)
#   make module     knem.ko for each kernel of KVERS
#   make test-debug-kernel  the suite, the DMA-provider suite and a 10-minute
#                   fuzz under a KASAN + lockdep kernel built once per machine
#                   (tests/debug-kernel; not part of make test, not in CI)
#   make test-mm    page migration, compaction, THP, KSM, fork, swap and the
#                   OOM killer against live regions (tests/vm/mm-suite.sh)
#   make test-faults  the fuzzer under the kernel's fault injection (failslab,
#                   fail_page_alloc, fail_usercopy, fail_function) on that
#                   kernel, kmemleak after (tests/faults; not in CI)
#   make uml-test   the suite in User-Mode Linux on real cores, 2 virtual CPUs
#                   (tests/uml; the UML kernel is built once per machine;
#                   not part of make test, not in CI)
#   make fuzz-hang-check  the fuzzer's own hang detection (a worker that
#                   stays past the deadline, busy or asleep) in one UML boot
#                   (tests/fuzzer/hang-check.sh; not in CI)
#   make bench-uml  knem-bench's first hardware numbers for knem: pingpong,
#                   solo copies, contention and collectives in UML
#   make bench-uml-coll  coll/knemrs with rules tuned in the same UML boot
#                   against tuned over CMA, on the host's Open MPI
#   make uml-payload  build/uml-payload/: UML kernel, knem.ko, static tools
#                   and one script that measures a node with nothing installed
#
# KVERS defaults to every kernel that has both an image in /boot and headers.

SHELL := /bin/bash
TOP := $(abspath .)
BUILD := $(TOP)/build
CARGO ?= cargo
HOST_TARGET := x86_64-unknown-linux-gnu

KVERS ?= $(sort $(foreach v,$(patsubst /boot/vmlinuz-%,%,$(wildcard /boot/vmlinuz-*)),\
	$(if $(wildcard /lib/modules/$(v)/build/Makefile),$(v))))
# Kernel series the full VM suite, the interop stage and the fuzz smoke run
# on (prefixes of installed versions): the current default and an RT
# kernel.  The kernel matrix (kernels-test) covers every other kernel.
VM_KERNELS ?= 6.1 6.12-rt

CORE_OBJ := $(BUILD)/knem_core.o
TESTS_BIN := $(TOP)/target/$(HOST_TARGET)/release/knem-tests

.PHONY: all build core-object core-repro module tests-bin bench-bin coll-bin bench demo demo-run check vm-check \
	uml-kernel uml-module uml-test fuzz-hang-check bench-uml bench-uml-coll uml-payload \
	bench-smoke fuzz fuzz-smoke fuzz-core-smoke stat-bin interop interop-smsc interop-smsc-bench two-node test-debug-kernel test-faults test-mm \
	host-test abi-test vm-test kernels-test test-kernels test \
	fmt-check clippy clean

all: build

build: core-object module
	$(CARGO) build --release --workspace

# The kernel-version independent Rust object, checked after every build.
core-object: $(CORE_OBJ)
$(CORE_OBJ): FORCE
	@mkdir -p $(BUILD)
	rust-core/build-kobj.sh $@
	rust-core/check-kobj.sh $@
	@cmp -s $@ c-shim/knem_core.prebuilt 2>/dev/null || cp $@ c-shim/knem_core.prebuilt

# The object's symbols, relocations and objtool (as after every build),
# plus a rebuild in a fresh target directory that must give the same bytes.
core-repro: core-object
	rust-core/check-kobj.sh --repro $(CORE_OBJ)

module: core-object
	@test -n "$(KVERS)" || { echo "no kernel with headers found (install linux-headers-<version>)"; exit 1; }
	@for v in $(KVERS); do c-shim/build-module.sh $$v $(BUILD)/$$v || exit 1; done

# Programs that run in the VM (and tools shipped for any distribution) are
# static, so the initramfs needs no libc.  The explicit --target keeps the
# flag off build scripts and proc-macros.
STATIC_BUILD = RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build \
	--release --target $(HOST_TARGET)

tests-bin:
	$(STATIC_BUILD) -p knem-vm-tests

# The C API's example test links libknem_rs.a, which `cargo test` alone
# does not produce.
host-test:
	$(CARGO) build -p knem-capi --quiet
	$(CARGO) test --workspace --quiet

abi-test: core-object
	tests/abi/check.sh
	tests/abi/core-marker.sh $(CORE_OBJ)

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --quiet -- -D warnings

# Per kernel: the whole in-VM suite (tests/vm/full-suite.sh: the shim's
# own checks, the C conformance programs, the suite alone and with the
# test-only DMA provider, the collectives over knem, 200
# unload/load cycles), and once, on VM_FULL_KERNEL, the refusal of an
# unsigned and of an untrusted-key-signed knem.ko under module.sig_enforce=1
# (tests/vm/sig-enforce.sh, two short boots) and the memory manager's
# movers against live regions (tests/vm/mm-suite.sh, one boot; make test-mm
# adds 7.3).
# Every collective and algorithm on teams of 1 to 8 is checked on the host
# over CMA and shm (knem-coll's tests/teams.rs, up to 16 MiB+3); in the VM
# the collectives check the knem transport.  TCG takes about 8 minutes per
# kernel for the whole check (teams of 1 to 8 up to 16 MiB+3), teams of 5
# to 8 on 2 vCPUs most of it, one handoff at a time, so make test runs the
# dense grid up to 1 MiB+3 (and 4 MiB+1) on teams of 1 to 4 and, for 8
# processes on the module at once, every algorithm on 8 ranks at 7 B,
# 64 KiB+1 and 1 MiB+3, on VM_FULL_KERNEL (SUITE_MAIN; the interop stage
# moves 16 MiB+3 messages over knem with real MPI), and gives the other
# kernels a lighter pass of the same steps (SUITE_LIGHT: every algorithm
# on teams of 2 and 4 from 1 B to 1 MiB+3, 50 load cycles, 2000 idle fds
# for the offload thread bound instead of 10,000).  Everywhere the pass
# with the DMA provider runs only the tests that need it; test-kernels (and
# test-debug-kernel) run the whole suite again with it.  Empty
# SUITE_MAIN and SUITE_LIGHT run the whole pass everywhere, as
# test-kernels does.
VM_FULL_KERNEL ?= 6.1
SUITE_MAIN ?= KNEM_SUITE_COLL="-n 4 --quick --all-teams; --teams 8 --sizes 7,65537 --big 1M+3" \
	KNEM_SUITE_DMA_TESTS=dma
SUITE_LIGHT ?= KNEM_SUITE_COLL="--teams 2,4 --sizes 1,4097,65537 --big 1M+3" KNEM_SUITE_CYCLES=50 \
	KNEM_SUITE_IDLE_FDS=2000 \
	KNEM_SUITE_DMA_TESTS=dma
vm-test: module tests-bin coll-bin
	@set -e; for k in $(VM_KERNELS); do \
		echo "=== VM checks on kernel $$k ==="; \
		if [ "$$k" = "$(VM_FULL_KERNEL)" ]; then \
			$(SUITE_MAIN) tests/vm/full-suite.sh --kernel $$k; \
		else \
			$(SUITE_LIGHT) tests/vm/full-suite.sh --kernel $$k; \
		fi; \
	done
	@echo "=== module signatures enforced (module.sig_enforce=1) on kernel $(VM_FULL_KERNEL) ==="
	tests/vm/sig-enforce.sh --kernel $(VM_FULL_KERNEL)
	@echo "=== the memory manager's movers against live regions on kernel $(VM_FULL_KERNEL) ==="
	tests/vm/mm-suite.sh --kernel $(VM_FULL_KERNEL)

# The kernel matrix (tests/kernels/matrix.sh): a debootstrap chroot per
# Debian release, bullseye to experimental; in each, knem.ko built for every
# kernel of the release from the dist tarball, and the .deb's DKMS install,
# kernel upgrade and failing kernel.  Every kernel's own image boots with
# its chroot-built module: the shim's checks and the conformance programs,
# the full suite on KERNELS_FULL (the oldest and the newest; the current
# default 6.1 and an RT kernel have it in vm-test), in make test as the
# lighter pass, with the package's DKMS tests in the chroots of
# KERNELS_DKMS (sid: the newest kernels; the host's package-test covers
# bookworm), the RPMs installed, upgraded and removed with rpm --root in the
# bullseye chroot (their scriptlets against a real dkms, beside sid's .deb
# test), and the DKMS-built knem.ko's signature with a throwaway MOK key
# where dkms 3 is.  test-kernels: the whole suite on every kernel, DKMS in
# every release.
KERNELS_FULL ?= bullseye experimental
KERNELS_DKMS ?= sid
kernels-test: tests-bin coll-bin deb rpm
	$(SUITE_LIGHT) KNEM_KERNELS_DKMS="$(KERNELS_DKMS)" tests/kernels/matrix.sh all $(KERNELS_FULL)

test-kernels:
	$(MAKE) kernels-test KERNELS_FULL=all KERNELS_DKMS= SUITE_MAIN= SUITE_LIGHT=
	$(MAKE) vm-test SUITE_MAIN= SUITE_LIGHT=

# Real clients over the module, on each kernel of INTEROP_KERNELS: Debian's
# UCX rebuilt with knem, Debian's Open MPI 4.1.4 over it, and coll/knemrs
# over libknem_rs in that Open MPI, each job checked against knem's byte
# counters (tests/interop/run.sh).  make test runs it on 6.1; the RT
# kernel gets the same UCX and Open MPI 4.1.4 jobs, across two guests, in
# the two-node stage (TWO_NODE_KERNEL).
INTEROP_KERNELS ?= 6.1
STAT_BIN := $(TOP)/target/$(HOST_TARGET)/release/knem-stat
stat-bin:
	$(STATIC_BUILD) -p knem-stat

interop: module stat-bin capi-bin
	tests/interop/run.sh --knem-stat $(STAT_BIN) --capi-lib target/$(HOST_TARGET)/release/libknem_rs.so \
		$(foreach k,$(INTEROP_KERNELS),--kernel $(k))

# Our smsc/knem (mpi/openmpi/smsc-knem) with Debian's own Open MPI 5.0.7
# (trixie) and 6.0 (sid), each built and run in its release's chroot
# (KNEM_KERNELS_DIR/root/RELEASE, made when missing) booted as the VM's
# root: mpi_check over btl/sm, and coll/knemrs (built there against
# libknem_rs) under coll_check, checked against knem's byte counters
# (tests/interop/smsc.sh), on the 6.1 kernel: the releases' userspace runs
# on it.  First in the same boot, on SMSC_PLAIN_RELEASES (trixie, whose
# package carries the /etc/profile.d workaround), the release's
# knem-rs-openmpi (built here, installed with make deb's libknem-rs0 in an
# overlay of the chroot) under a plain mpirun from a login shell: about
# 2 minutes of VM time under load, 30 s to build and install.  A stage of make test of its own, after kernels-test (whose
# matrix prepares the same chroots; .ci/run adds Open MPI to them in the
# background).
SMSC_RELEASES ?= trixie sid
SMSC_PLAIN_RELEASES ?= trixie
SMSC_KERNELS ?= 6.1
interop-smsc: module capi-bin
	@deb='$(LIBKNEM_DEB)'; [ -n "$$deb" ] || { $(DEB_MAKE) && \
		deb=$$(ls $(BUILD)/deb/libknem-rs0_$(PKG_VERSION)-*_amd64.deb | head -n 1); }; \
	tests/interop/smsc.sh --capi-lib target/$(HOST_TARGET)/release/libknem_rs.so --lib-deb "$$deb" \
		$(foreach r,$(SMSC_PLAIN_RELEASES),--plain $(r)) \
		$(foreach r,$(SMSC_RELEASES),--release $(r)) \
		$(foreach k,$(SMSC_KERNELS),--kernel $(k))

# coll_check's timing mode on Open MPI 6.0 (sid) in one boot: coll/knemrs,
# tuned over smsc cma and over smsc/knem, coll/xhc over smsc/knem, one
# OSU-style table (docs/PERFORMANCE.md); not in make test.
SMSC_BENCH_ITERS ?= 5
SMSC_BENCH_MAX ?= 1048576
SMSC_BENCH_ROUNDS ?= 3
interop-smsc-bench: module capi-bin
	tests/interop/smsc.sh --capi-lib target/$(HOST_TARGET)/release/libknem_rs.so \
		--release sid $(foreach k,$(SMSC_KERNELS),--kernel $(k)) \
		--bench $(SMSC_BENCH_ITERS) $(SMSC_BENCH_MAX) --rounds $(SMSC_BENCH_ROUNDS)

# Two guests (1 vCPU each) on a QEMU socket link and nothing else, mpirun
# starting ranks on both through tests/vm/two-node/rsh.py: Debian's Open
# MPI 4.1.4 over ob1 (tcp, vader) and over UCX with knem (the interop
# stage's UCX build, reused when up to date), coll_check with coll/knemrs
# alone and under coll/han, and TWO_NODE_RELEASE's Open MPI (its chroot,
# as interop-smsc's) with btl/sm over our smsc/knem; each guest's knem must
# move exactly its intra-node share.  A stage of make test, after interop
# and interop-smsc, on the RT kernel (interop has 6.1).
TWO_NODE_RELEASE ?= sid
TWO_NODE_KERNEL ?= 6.12-rt
TWO_NODE_OUT := $(BUILD)/two-node/$(TWO_NODE_RELEASE)
two-node: module capi-bin
	tests/interop/setup.sh $(BUILD)/interop/src
	tests/interop/build-ucx.sh $(BUILD)/interop/src $(BUILD)/interop/ucx
	tests/interop/ompi-chroot.sh prepare $(TWO_NODE_RELEASE)
	tests/interop/ompi-chroot.sh build $(TWO_NODE_RELEASE) $(TWO_NODE_OUT)
	tests/vm/two-guests.sh --kernel $(TWO_NODE_KERNEL) --ucx $(BUILD)/interop/ucx \
		--capi-lib target/$(HOST_TARGET)/release/libknem_rs.so \
		--release "$$(tests/interop/ompi-chroot.sh root $(TWO_NODE_RELEASE))" --release-out $(TWO_NODE_OUT)

# knem-bench, static so the same binary runs on the host and in the VM.
BENCH_BIN := $(TOP)/target/$(HOST_TARGET)/release/knem-bench
bench-bin:
	$(STATIC_BUILD) -p knem-bench

COLL_BIN := $(TOP)/target/$(HOST_TARGET)/release/knem-coll
coll-bin:
	$(STATIC_BUILD) -p knem-coll

# Host and VM, every mechanism side by side; tables on stdout, CSV and PNG
# in build/bench/.  The VM boots for measuring (tests/vm/run --bench: no
# memory debugging, KVM when a probe boot works, TCG otherwise, as the
# tables say).  BENCH_ARGS=--quick for the smoke run of `make test`.
BENCH_ARGS ?=
bench: module bench-bin
	userlib/knem-bench/scripts/bench.sh $(BENCH_ARGS) $(BENCH_BIN) $(BUILD)/bench

# make demo: on a fresh Debian 12 machine, install what is needed, build,
# boot Debian's kernel in the VM with the module, declare a region in one
# process, copy and verify it from another, compare with memcpy.
DEMO_KERNEL ?= 6.1
DEMO_BIN := $(TOP)/target/$(HOST_TARGET)/release/examples/demo
demo:
	tests/setup-deps.sh
	@$(MAKE) --no-print-directory demo-run

demo-run: module
	$(STATIC_BUILD) -p knem --example demo
	@mkdir -p $(BUILD)
	@tests/vm/run --kernel $(DEMO_KERNEL) --add $(DEMO_BIN) -- /opt/demo \
		> $(BUILD)/demo.log 2>&1 || { tail -n 30 $(BUILD)/demo.log; exit 1; }
	@tr -d '\r' < $(BUILD)/demo.log | sed -n '/^knem-rs demo/,/^module copy/p'

# Fuzz /dev/knem in the VM: make fuzz [KERNEL=6.12] [DURATION=1800] [SEED=N]
# Both runs load the test DMA provider and its conductor (knem-fuzz --dma:
# stalls, injected failures, lowered dma_timeout_ms, SIGKILLs in the middle
# of ioctls); FUZZ_DMA= (empty) fuzzes without it.
KERNEL ?= 6.1
DURATION ?= 1800
SEED ?=
FUZZ_ARGS ?=
FUZZ_DMA ?= 1
fuzz: module
	tests/fuzzer/run.sh --kernel $(KERNEL) --duration $(DURATION) $(if $(FUZZ_DMA),--dma) \
		$(if $(SEED),--seed $(SEED)) -- $(FUZZ_ARGS)

# The short fuzz run of `make test`: 20 s on each kernel.
fuzz-smoke: module
	@set -e; for k in $(VM_KERNELS); do \
		echo "=== fuzz 20 s on kernel $$k ==="; \
		tests/fuzzer/run.sh --kernel $$k --duration 20 $(if $(FUZZ_DMA),--dma) -- $(FUZZ_ARGS); \
	done

# The debug lab kernel (tests/debug-kernel): Debian's 6.1 with KASAN,
# lockdep, DEBUG_ATOMIC_SLEEP and full preemption, built once per machine
# into /var/cache/knem-rs/debug-kernel (about an hour on 2 busy cores; never
# in CI), then the suite, the DMA-provider suite and a FUZZ_DEBUG-second
# fuzz under it, knem.ko built as a fault-injection build.
FUZZ_DEBUG ?= 600
test-debug-kernel: core-object tests-bin
	tests/debug-kernel/run.sh --fuzz $(FUZZ_DEBUG)

# The fuzzer under the kernel's own fault injection on the debug lab kernel
# (tests/faults): failslab, fail_page_alloc, fail_usercopy and
# fail_function on the module's error-injectable functions, each at
# FAULTS_PROBS percent for FAULTS_SECS seconds, kmemleak at the end.
# The memory manager's movers against live regions (tests/vm/mm-suite.sh,
# knem-tests --mm) on MM_KERNELS: installed kernels by version, matrix
# kernels by release name (experimental is 7.3).
MM_KERNELS ?= --kernel 6.1 --release experimental
test-mm: module tests-bin
	tests/vm/mm-suite.sh $(MM_KERNELS)

FAULTS_SECS ?= 30
FAULTS_PROBS ?= 1 10 50
# The lab kernel's series: 6.1 or 7.3 (tests/debug-kernel/build.sh).
FAULTS_SERIES ?= 6.1
test-faults: core-object
	tests/faults/run.sh --series $(FAULTS_SERIES) --secs $(FAULTS_SECS) --probs "$(FAULTS_PROBS)"

# The User-Mode Linux lab (tests/uml): a UML kernel with SMP from Debian's
# linux-source-7.2, built once per machine (about 20 minutes on 2 cores,
# cached in /var/cache/knem-rs/uml), and knem.ko for it with the Rust
# core's UML object (rust-core/build-kobj.sh --uml, checked by
# check-kobj.sh --uml).  Not part of make test: CI starts from a fresh
# machine, where the kernel build alone would not fit.
UML_NCPUS ?= 2
uml-kernel:
	tests/uml/build.sh kernel
uml-module:
	tests/uml/build.sh module
uml-test: uml-kernel uml-module tests-bin
	tests/uml/suite.sh --ncpus $(UML_NCPUS)
fuzz-hang-check: uml-kernel uml-module
	$(CARGO) build --release -q -p knem-fuzz --target $(HOST_TARGET)
	tests/fuzzer/hang-check.sh

# knem-bench on real cores: one virtual CPU per host CPU.  BENCH_UML_ARGS=
# --quick for a short run.  Tables on stdout, CSVs in build/bench-uml/.
BENCH_UML_ARGS ?=
bench-uml: uml-kernel uml-module bench-bin
	tests/uml/bench.sh $(BENCH_UML_ARGS) $(BENCH_BIN) $(BUILD)/bench-uml

# The interleaved collectives benchmark on real cores (tests/uml/coll-bench.sh):
# coll/knemrs, tuned over CMA and coll/knemrs with rules tuned in the
# same UML boot, on the host's Open MPI.  BENCH_UML_COLL_ARGS: ITERS
# MAXSIZE ROUNDS SIZES.
BENCH_UML_COLL_ARGS ?=
bench-uml-coll: uml-kernel uml-module capi-bin
	tests/uml/coll-bench.sh $(BENCH_UML_COLL_ARGS)

# A directory that measures any x86-64 Linux node as root, nothing
# installed: build/uml-payload/measure.
uml-payload: uml-kernel uml-module bench-bin tests-bin coll-bin
	tests/uml/payload.sh $(BUILD)/uml-payload

# The cargo-fuzz targets of the Rust core (rust-core/fuzz, nightly): each
# runs FUZZ_CORE_TIME seconds from a copy of its checked-in corpus under
# build/ (the tree is left alone); any failure fails the stage and leaves
# the input in build/fuzz-core/artifacts/.  FUZZ_CORE_SEED=0: a random seed
# (libFuzzer prints it).
FUZZ_CORE_TARGETS := ioctl plan
FUZZ_CORE_TIME ?= 15
FUZZ_CORE_SEED ?= 1
FUZZ_CORE_DIR := $(BUILD)/fuzz-core
FUZZ_CORE_BIN := $(FUZZ_CORE_DIR)/target/$(HOST_TARGET)/release
fuzz-core-smoke:
	$(CARGO) +nightly fuzz build --fuzz-dir rust-core/fuzz --target-dir $(FUZZ_CORE_DIR)/target
	@set -e; for t in $(FUZZ_CORE_TARGETS); do \
		rm -rf $(FUZZ_CORE_DIR)/corpus/$$t $(FUZZ_CORE_DIR)/artifacts/$$t; \
		mkdir -p $(FUZZ_CORE_DIR)/corpus/$$t $(FUZZ_CORE_DIR)/artifacts/$$t; \
		cp rust-core/fuzz/corpus/$$t/* $(FUZZ_CORE_DIR)/corpus/$$t/; \
		echo "=== cargo-fuzz target $$t: $(FUZZ_CORE_TIME) s, seed $(FUZZ_CORE_SEED)"; \
		$(FUZZ_CORE_BIN)/$$t $(FUZZ_CORE_DIR)/corpus/$$t -max_total_time=$(FUZZ_CORE_TIME) \
			-seed=$(FUZZ_CORE_SEED) -timeout=30 -print_final_stats=1 \
			-artifact_prefix=$(FUZZ_CORE_DIR)/artifacts/$$t/ > $(FUZZ_CORE_DIR)/$$t.log 2>&1 || { \
			tail -n 60 $(FUZZ_CORE_DIR)/$$t.log; \
			echo "fuzz target $$t failed; rerun: $(FUZZ_CORE_BIN)/$$t $(FUZZ_CORE_DIR)/artifacts/$$t/*"; \
			exit 1; }; \
		grep -E '^INFO: Seed:|^#[0-9]+.*DONE|stat::(number_of_executed_units|average_exec_per_sec|new_units_added)' \
			$(FUZZ_CORE_DIR)/$$t.log; \
	done

# make check: the fast tier for contributors, what to run before a commit.
# fmt, clippy and the host tests, then the kernel suite in the fastest lab
# the machine has (CHECK_LAB): auto takes the User-Mode Linux lab when its
# kernel is built (tests/uml: the suite on real cores, about a minute; the
# kernel is built once per machine by make uml-kernel, about an hour), else
# the in-VM suite's light pass (SUITE_LIGHT, as make test gives every
# kernel but VM_FULL_KERNEL) on one kernel, CHECK_KERNEL, under TCG.
# CHECK_LAB=uml or vm chooses.  It leaves out what make test adds: the
# full pass on 6.1, the RT kernel, the kernel matrix (every Debian
# release's kernels, DKMS in their chroots), module signature enforcement,
# the ABI and reproducibility checks, interop (UCX, Open MPI 4.1.4, 5.0.7
# and 6.0, two nodes), both fuzz smoke runs, the packages and the benchmark
# smoke run; the UML lab also leaves out what tests/uml/expected lists.
CHECK_LAB ?= auto
CHECK_KERNEL ?= 6.1
CHECK_KVERS ?= $(firstword $(filter $(CHECK_KERNEL).% $(CHECK_KERNEL)-%,$(KVERS)))
check:
	@t0=$$(date +%s); rc=0; lab=$(CHECK_LAB); \
	if [ "$$lab" = auto ]; then \
		lab=vm; k=$$(tests/uml/build.sh paths 2>/dev/null | sed -n 's/^UML_KERNEL=//p'); \
		[ -n "$$k" ] && [ -x "$$k" ] && [ -f "$$(dirname "$$k")/.knem-uml-built" ] && lab=uml; \
	fi; \
	case $$lab in uml) target=uml-test ;; vm) target=vm-check ;; \
	*) echo "CHECK_LAB wants auto, uml or vm, not '$$lab'"; exit 2 ;; esac; \
	echo "make check: kernel suite in the $$lab lab ($$target)"; \
	$(MAKE) --no-print-directory fmt-check clippy host-test && \
	$(MAKE) --no-print-directory $$target || rc=$$?; \
	echo "make check: $$([ $$rc -eq 0 ] && echo passed || echo FAILED) in $$(( $$(date +%s) - t0 )) s, $$lab lab (load average: $$(cut -d' ' -f1-3 /proc/loadavg))"; \
	exit $$rc

vm-check: tests-bin coll-bin
	@test -n "$(CHECK_KVERS)" || { echo "no installed kernel $(CHECK_KERNEL) with headers (CHECK_KERNEL)"; exit 1; }
	@$(MAKE) --no-print-directory module KVERS="$(CHECK_KVERS)"
	$(SUITE_LIGHT) tests/vm/full-suite.sh --kernel $(CHECK_KERNEL)

# Every stage runs even after one fails (make -k), in one make, so what
# stages share (core-object, module) is built once; a stage that passed
# appends its name to build/test-stages.passed, and the summary counts the
# stages that did not as failed.  make test exits non-zero on any failure.
TEST_STAGES := fmt-check clippy host-test fuzz-core-smoke abi-test core-repro vm-test kernels-test \
	interop interop-smsc two-node fuzz-smoke package-test package-test-openmpi bench-smoke
STAGES_PASSED := $(BUILD)/test-stages.passed
test:
	@mkdir -p $(BUILD) && : > $(STAGES_PASSED)
	@t0=$$(date +%s); rc=0; $(MAKE) -k --no-print-directory $(addprefix test-stage-,$(TEST_STAGES)) || rc=$$?; \
	passed=0; failed=0; failed_names=; \
	for s in $(TEST_STAGES); do \
		if grep -qx "$$s" $(STAGES_PASSED); then passed=$$((passed + 1)); \
		else failed=$$((failed + 1)); failed_names="$$failed_names $$s"; fi; \
	done; \
	[ $$failed -eq 0 ] || echo "make test: failed stages:$$failed_names"; \
	echo "make test stages: $$passed passed, $$failed failed, in $$(( $$(date +%s) - t0 )) s"; \
	[ $$failed -eq 0 ] && [ $$rc -eq 0 ]

# Serial make takes prerequisites left to right: the start mark, the stage,
# then the line with its time (stages share prerequisites such as the
# module; the first stage that needs one pays for it).
.PHONY: $(addprefix test-stage-,$(TEST_STAGES)) $(addprefix test-stage-start-,$(TEST_STAGES))
$(addprefix test-stage-start-,$(TEST_STAGES)): test-stage-start-%:
	@date +%s > $(BUILD)/.test-stage-$*.start
$(addprefix test-stage-,$(TEST_STAGES)): test-stage-%: test-stage-start-% %
	@echo "$*" >> $(STAGES_PASSED)
	@echo "make test: stage $* passed in $$(( $$(date +%s) - $$(cat $(BUILD)/.test-stage-$*.start) )) s"

bench-smoke:
	$(MAKE) bench BENCH_ARGS=--quick

clean:
	$(CARGO) clean
	rm -rf $(BUILD) c-shim/knem_core.prebuilt

FORCE:

# ---------------------------------------------------------------------------
# Packaging: source tarball, .deb, .rpm, and their end-to-end test.
#
#   make dist          build/dist/knem-rs-VERSION.tar.gz: the source tree with
#                      the prebuilt Rust object, the tools and the C API
#                      library (prebuilt/) and the BUILDINFO that describes
#                      them
#   make deb           .deb packages in build/deb/ (built from that tarball)
#   make rpm           .rpm packages in build/rpm/ (rpmbuild -ba on the tarball)
#   make package-test  install, kernel upgrade and purge on this machine (root)
#   make deb-openmpi RELEASE=bookworm|trixie|sid   knem-rs-openmpi for that
#                      release's Open MPI, in build/deb-openmpi/
#   make repo          signed apt and dnf repositories of those, in build/repo/
#                      (REPO_KEY=FILE signs with that key, else a test key)
#   make repo-test     the repositories used in each release's chroot
#
# Packages never run cargo: the Rust object, the tools and libknem_rs are
# built here, before them, and shipped in c-shim/knem_core.prebuilt and
# prebuilt/ (tools statically linked, so one binary serves every
# distribution; the library linked against this machine's glibc, as any
# shared library is).
# KNEM_RS_NO_CORE_BUILD=1 makes `dist` reuse what an earlier run built
# (build/prebuilt/, build/knem_core.BUILDINFO) instead;
# KNEM_RS_TARBALL=PATH makes `deb` and `rpm` package that tarball (one made by
# `make dist`) without running `dist`.
# ---------------------------------------------------------------------------

PKG_NAME := knem-rs
PKG_VERSION := $(shell sed -n '/^\[workspace\.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' $(TOP)/Cargo.toml)
DIST_NAME := $(PKG_NAME)-$(PKG_VERSION)
DIST_DIR := $(BUILD)/dist
DIST_TARBALL := $(DIST_DIR)/$(DIST_NAME).tar.gz
PKG_TARBALL = $(abspath $(or $(KNEM_RS_TARBALL),$(DIST_TARBALL)))
BUILDINFO := $(BUILD)/knem_core.BUILDINFO
# The command-line tools shipped in knem-rs-tools, and the crates that
# build them (knem-run, the team launcher of the C API, and knem-coll, the
# collectives' calibration, are in knem-coll).
PKG_TOOLS := knem-bench knem-stat knem-run knem-coll
PKG_TOOL_CRATES := knem-bench knem-stat knem-coll
# Their man pages and bash, zsh and fish completions, generated from their
# clap definitions by userlib/knem-gen-docs into $(PREBUILT)/doc
# (man1/TOOL.1, bash/TOOL, zsh/_TOOL, fish/TOOL.fish).
DOCS_GEN := $(TOP)/target/$(HOST_TARGET)/release/knem-gen-docs
# The C API of userlib/knem-capi: libknem_rs.so and libknem_rs.a. The
# soname's number is set by userlib/knem-capi/build.rs and is part of the
# Debian package name (libknem-rs0); capi-bin checks they agree.
CAPI_SOMAJOR := 0
CAPI_SONAME := libknem_rs.so.$(CAPI_SOMAJOR)
CAPI_FILES := libknem_rs.so libknem_rs.a
CAPI_BUILD_ARGS := --release --locked --target $(HOST_TARGET) -p knem-capi
PREBUILT := $(BUILD)/prebuilt
SOURCE_DATE_EPOCH ?= $(shell git -C $(TOP) log -1 --format=%ct 2>/dev/null || echo 0)
RPMBUILD_FLAGS ?= $(if $(shell rpm -q --quiet make 2>/dev/null && echo y),,--nodeps)

# Installation layout, shared by debian/rules and rpm/knem-rs.spec.
DESTDIR ?=
PREFIX ?= /usr
INCLUDEDIR ?= $(PREFIX)/include
# knem-rs.pc describes only a header, so it is architecture-independent;
# knem_rs.pc names the library and lives next to it.
PKGCONFIGDIR ?= $(PREFIX)/share/pkgconfig
LIBDIR ?= $(PREFIX)/lib
LIBPKGCONFIGDIR ?= $(LIBDIR)/pkgconfig
DKMS_SRCDIR ?= $(PREFIX)/src/$(DIST_NAME)
UDEVRULESDIR ?= $(PREFIX)/lib/udev/rules.d
MODULESLOADDIR ?= $(PREFIX)/lib/modules-load.d
# knem-rs.conf: modprobe loads knem through load-knem (device_access=).
MODPROBEDIR ?= $(PREFIX)/lib/modprobe.d
SECLIMITSDIR ?= /etc/security/limits.d
# /etc/knem-rs/device.conf: who may open /dev/knem (read by 60-knem.rules).
KNEMCONFDIR ?= /etc/knem-rs
# Helpers run by udev and the kernel hooks; 60-knem.rules names this path.
KNEMLIBEXECDIR ?= $(PREFIX)/lib/$(PKG_NAME)
BINDIR ?= $(PREFIX)/bin
SYSCONFDIR ?= /etc
MANDIR ?= $(PREFIX)/share/man
BASHCOMPDIR ?= $(PREFIX)/share/bash-completion/completions
# Debian's zsh and fish directories for packages' completions (the RPM
# passes Fedora's zsh/site-functions).
ZSHCOMPDIR ?= $(PREFIX)/share/zsh/vendor-completions
FISHCOMPDIR ?= $(PREFIX)/share/fish/vendor_completions.d
SYSTEMDUNITDIR ?= $(PREFIX)/lib/systemd/system

.PHONY: buildinfo check-buildinfo tools-bin capi-bin dist deb rpm package-test package-check \
	install-dkms install-dkms-hooks install-dev install-lib install-tools

tools-bin:
	$(STATIC_BUILD) --locked $(foreach c,$(PKG_TOOL_CRATES),-p $(c))
	@mkdir -p $(PREBUILT)
	@for t in $(PKG_TOOLS); do cp target/$(HOST_TARGET)/release/$$t $(PREBUILT)/$$t.tmp && \
		mv $(PREBUILT)/$$t.tmp $(PREBUILT)/$$t; done
	$(STATIC_BUILD) --locked -p knem-gen-docs
	@rm -rf $(PREBUILT)/doc.tmp && SOURCE_DATE_EPOCH=$(SOURCE_DATE_EPOCH) $(DOCS_GEN) $(PREBUILT)/doc.tmp > /dev/null && \
		for t in $(PKG_TOOLS); do test -f $(PREBUILT)/doc.tmp/man1/$$t.1 || \
			{ echo "knem-gen-docs wrote no man page for $$t"; exit 1; }; done && \
		rm -rf $(PREBUILT)/doc && mv $(PREBUILT)/doc.tmp $(PREBUILT)/doc

# Not crt-static: a shared library uses the libc of the program loading it.
capi-bin:
	$(CARGO) build $(CAPI_BUILD_ARGS)
	@objdump -p target/$(HOST_TARGET)/release/libknem_rs.so | grep -qE '^ +SONAME +$(CAPI_SONAME)$$' || \
		{ echo "libknem_rs.so: soname is not $(CAPI_SONAME) (userlib/knem-capi/build.rs, CAPI_SOMAJOR)"; exit 1; }
	@mkdir -p $(PREBUILT)
	@for f in $(CAPI_FILES); do cp target/$(HOST_TARGET)/release/$$f $(PREBUILT)/$$f.tmp && \
		mv $(PREBUILT)/$$f.tmp $(PREBUILT)/$$f; done

# What went into the prebuilt object, so a package can be rebuilt bit for bit.
buildinfo: $(if $(KNEM_RS_NO_CORE_BUILD),,core-object tools-bin capi-bin)
	@test -f c-shim/knem_core.prebuilt || { echo "c-shim/knem_core.prebuilt is missing: run make core-object"; exit 1; }
	@if [ -z "$(KNEM_RS_NO_CORE_BUILD)" ]; then \
		{ echo "# How c-shim/knem_core.prebuilt of $(DIST_NAME) was built."; \
		  echo "package: $(PKG_NAME) $(PKG_VERSION)"; \
		  echo "object: c-shim/knem_core.prebuilt"; \
		  echo "object-sha256: $$(sha256sum < c-shim/knem_core.prebuilt | cut -d' ' -f1)"; \
		  if c=$$(git rev-parse -q --verify HEAD 2>/dev/null); then \
		    git diff --quiet HEAD -- rust-core Cargo.toml Cargo.lock || c="$$c (rust-core modified)"; \
		  else c="unknown (not a git checkout)"; fi; \
		  echo "source-commit: $$c"; \
		  echo "build-command: rust-core/build-kobj.sh OUT.o"; \
		  echo "build-script-sha256: $$(sha256sum < rust-core/build-kobj.sh | cut -d' ' -f1)"; \
		  echo "cargo: $$($(CARGO) -V)"; \
		  rustc -vV | sed 's/^/rustc-vV: /'; \
		  rust-core/build-kobj.sh --print-flags; \
		  echo "ld: $$(ld --version | head -n 1)"; \
		  echo "objcopy: $$(objcopy --version | head -n 1)"; \
		  for t in $(PKG_TOOLS); do \
		    echo "tool: prebuilt/$$t sha256 $$(sha256sum < $(PREBUILT)/$$t | cut -d' ' -f1)"; done; \
		  echo "tools-build-command: RUSTFLAGS=\"-C target-feature=+crt-static\" cargo build --release --locked$(foreach c,$(PKG_TOOL_CRATES), -p $(c)) --target $(HOST_TARGET)"; \
		  echo "docs: prebuilt/doc, the tools' man pages and completions, written by knem-gen-docs (cargo build --release --locked -p knem-gen-docs, run with the directory)"; \
		  for f in $(CAPI_FILES); do \
		    echo "library: prebuilt/$$f sha256 $$(sha256sum < $(PREBUILT)/$$f | cut -d' ' -f1)"; done; \
		  echo "library-build-command: cargo build $(CAPI_BUILD_ARGS)"; \
		  echo "library-soname: $(CAPI_SONAME)"; \
		  echo "library-glibc: $$(ldd --version | head -n 1)"; \
		} > $(BUILDINFO).tmp && mv $(BUILDINFO).tmp $(BUILDINFO); \
	fi
	@test -f $(BUILDINFO) || { echo "$(BUILDINFO) is missing: run make buildinfo without KNEM_RS_NO_CORE_BUILD"; exit 1; }
	@$(MAKE) --no-print-directory check-buildinfo BUILDINFO_FILE=$(BUILDINFO) PREBUILT_DIR=$(PREBUILT)

# BUILDINFO against the bytes it describes: here after `buildinfo`, and in
# the unpacked tarball (debian/rules, the rpm spec) with the defaults.
BUILDINFO_FILE ?= BUILDINFO
PREBUILT_DIR ?= prebuilt
check-buildinfo:
	packaging/check-buildinfo.sh $(BUILDINFO_FILE) c-shim/knem_core.prebuilt $(PREBUILT_DIR) \
		$(PKG_TOOLS) $(CAPI_FILES)

# Tracked and untracked (not ignored) files, the prebuilt object, BUILDINFO.
dist: buildinfo package-check
	@rm -rf $(DIST_DIR)/$(DIST_NAME) && mkdir -p $(DIST_DIR)/$(DIST_NAME)
	@{ git ls-files --cached --others --exclude-standard; echo c-shim/knem_core.prebuilt; } | \
		sort -u | while read -r f; do [ -f "$$f" ] && echo "$$f"; done | \
		tar -cf - -T - | tar -xf - -C $(DIST_DIR)/$(DIST_NAME)
	@cp $(BUILDINFO) $(DIST_DIR)/$(DIST_NAME)/BUILDINFO
	@mkdir -p $(DIST_DIR)/$(DIST_NAME)/prebuilt && \
		for f in $(PKG_TOOLS) $(CAPI_FILES); do cp $(PREBUILT)/$$f $(DIST_DIR)/$(DIST_NAME)/prebuilt/; done && \
		cp -R $(PREBUILT)/doc $(DIST_DIR)/$(DIST_NAME)/prebuilt/doc
	@tar --sort=name --mtime=@$(SOURCE_DATE_EPOCH) --owner=0 --group=0 --numeric-owner \
		--format=gnu -C $(DIST_DIR) -cf - $(DIST_NAME) | gzip -n -9 > $(DIST_TARBALL).tmp
	@mv $(DIST_TARBALL).tmp $(DIST_TARBALL) && rm -rf $(DIST_DIR)/$(DIST_NAME)
	@echo "$(DIST_TARBALL)"

# The version is written in four places; they must agree.
package-check:
	@tests/package/check-versions.sh

deb: $(if $(KNEM_RS_TARBALL),,dist)
	@rm -rf $(BUILD)/deb && mkdir -p $(BUILD)/deb
	cp $(PKG_TARBALL) $(BUILD)/deb/$(PKG_NAME)_$(PKG_VERSION).orig.tar.gz
	tar -xzf $(PKG_TARBALL) -C $(BUILD)/deb
	cd $(BUILD)/deb/$(DIST_NAME) && dpkg-buildpackage -us -uc
	@ls $(BUILD)/deb/*.deb

rpm: $(if $(KNEM_RS_TARBALL),,dist)
	@rm -rf $(BUILD)/rpm && mkdir -p $(BUILD)/rpm/SOURCES $(BUILD)/rpm/SPECS
	cp $(PKG_TARBALL) $(BUILD)/rpm/SOURCES/$(DIST_NAME).tar.gz
	tar -xzOf $(PKG_TARBALL) $(DIST_NAME)/rpm/$(PKG_NAME).spec > $(BUILD)/rpm/SPECS/$(PKG_NAME).spec
	rpmbuild -ba $(RPMBUILD_FLAGS) --define "_topdir $(BUILD)/rpm" $(BUILD)/rpm/SPECS/$(PKG_NAME).spec
	@ls $(BUILD)/rpm/RPMS/*/*.rpm $(BUILD)/rpm/SRPMS/*.rpm

# Then the signed repositories (repo-test, on REPO_TEST_RELEASES), also
# when run.sh failed.
package-test:
	@rc=0; tests/package/run.sh || rc=1; $(MAKE) --no-print-directory repo-test || rc=1; exit $$rc

# knem-rs-openmpi for one Debian release (packaging/openmpi/build-deb.sh):
# coll/knemrs, and smsc/knem from Open MPI 5 on, built against RELEASE's
# Open MPI (bookworm: this machine's 4.1.4; trixie, sid: in their chroots,
# KNEM_KERNELS_DIR/root/RELEASE) into build/deb-openmpi/.
# package-test-openmpi: each of OMPI_PKG_RELEASES' packages installed with
# make deb's libknem-rs0 in its chroot, listed by ompi_info, run by an
# mpirun job over CMA, removed without a trace
# (tests/package/openmpi-chroots.sh; bookworm's is in
# package-test).
RELEASE ?= bookworm
OMPI_PKG_RELEASES ?= trixie sid
LIBKNEM_DEB = $(firstword $(wildcard $(BUILD)/deb/libknem-rs0_$(PKG_VERSION)-*_amd64.deb))
.PHONY: deb-openmpi package-test-openmpi
deb-openmpi: capi-bin
	packaging/openmpi/build-deb.sh $(RELEASE) $(BUILD)/deb-openmpi $(PREBUILT)/libknem_rs.so
# make deb only when package-test (or an earlier make deb) has not left
# the package: it is looked for when the recipe runs, not when make starts
# (through DEB_MAKE, so that make -n does not run the recipe).
DEB_MAKE = $(MAKE) --no-print-directory deb
package-test-openmpi: capi-bin
	@deb='$(LIBKNEM_DEB)'; [ -n "$$deb" ] || { $(DEB_MAKE) && \
		deb=$$(ls $(BUILD)/deb/libknem-rs0_$(PKG_VERSION)-*_amd64.deb | head -n 1); }; \
	tests/package/openmpi-chroots.sh "$$deb" $(PREBUILT)/libknem_rs.so $(OMPI_PKG_RELEASES)

# make repo: a signed apt repository (one distribution per release of
# REPO_RELEASES, every .deb of make deb and the release's knem-rs-openmpi)
# and a signed dnf repository (make rpm's RPMs) in REPO_DIR
# (packaging/repo/make-repo.sh).  What is missing is built first.  The
# signing key is REPO_KEY (an OpenPGP secret key file without a
# passphrase), else a test key generated once into REPO_DIR/test-key/;
# REPO_URL is where the repository will be served (the example
# knem-rs.sources and knem-rs.repo name it; default file://REPO_DIR).
# Publishing into an existing REPO_DIR adds to it: a newer version
# replaces the older one.
REPO_DIR ?= $(BUILD)/repo
REPO_RELEASES ?= bookworm trixie sid
REPO_KEY ?=
REPO_URL ?=
RPM_MAKE = $(MAKE) --no-print-directory rpm $(if $(wildcard $(BUILD)/deb/$(PKG_NAME)_$(PKG_VERSION).orig.tar.gz),KNEM_RS_TARBALL=$(BUILD)/deb/$(PKG_NAME)_$(PKG_VERSION).orig.tar.gz)
# The releases' knem-rs-openmpi that are not built yet (make deb-openmpi).
OMPI_DEBS_MAKE = for r in $(1); do \
		ls $(BUILD)/deb-openmpi/knem-rs-openmpi_$(PKG_VERSION)-1~$${r}_amd64.deb > /dev/null 2>&1 || \
		$(MAKE) --no-print-directory deb-openmpi RELEASE=$$r || exit 1; done
.PHONY: repo repo-test
repo:
	@ls $(BUILD)/deb/knem-rs-dkms_$(PKG_VERSION)-*_all.deb > /dev/null 2>&1 || $(DEB_MAKE)
	@ls $(BUILD)/rpm/RPMS/noarch/knem-rs-dkms-$(PKG_VERSION)-*.rpm > /dev/null 2>&1 || $(RPM_MAKE)
	@$(call OMPI_DEBS_MAKE,$(REPO_RELEASES))
	packaging/repo/make-repo.sh --debs $(BUILD)/deb --openmpi-debs $(BUILD)/deb-openmpi --rpms $(BUILD)/rpm/RPMS \
		--releases "$(REPO_RELEASES)" $(if $(REPO_KEY),--key $(REPO_KEY)) $(if $(REPO_URL),--url $(REPO_URL)) $(REPO_DIR)

# make repo-test: tests/package/repo.sh, a fresh repository of the same
# packages with a key made for the run: in each of REPO_TEST_RELEASES'
# chroots (KNEM_KERNELS_DIR/root/RELEASE, under a throwaway overlay) apt
# refuses a tampered Release and a wrong key, installs, upgrades to the
# next version published into the same repository, purges; dnf repoquery
# verifies repomd.xml's signature and refuses a tampered one.  make
# package-test runs it on trixie (Debian's stable release, about 3
# minutes); make repo-test REPO_TEST_RELEASES="bookworm trixie sid" on all.
REPO_TEST_RELEASES ?= trixie
repo-test:
	@ls $(BUILD)/deb/knem-rs-dkms_$(PKG_VERSION)-*_all.deb > /dev/null 2>&1 || $(DEB_MAKE)
	@ls $(BUILD)/rpm/RPMS/noarch/knem-rs-dkms-$(PKG_VERSION)-*.rpm > /dev/null 2>&1 || $(RPM_MAKE)
	@$(call OMPI_DEBS_MAKE,$(REPO_TEST_RELEASES))
	tests/package/repo.sh $(REPO_TEST_RELEASES)

# Installation steps the packages call inside the unpacked tarball; they
# never build anything.
DKMS_TREE_EXCLUDE := ./debian ./rpm ./packaging ./docs ./mpi ./.ci ./build ./target ./prebuilt ./tests/package ./tests/dma-provider ./.git
install-dkms:
	@test -f c-shim/knem_core.prebuilt || { echo "c-shim/knem_core.prebuilt is missing"; exit 1; }
	@test -f BUILDINFO || { echo "BUILDINFO is missing: install from the make dist tarball"; exit 1; }
	install -d $(DESTDIR)$(DKMS_SRCDIR)
	find . \( $(foreach d,$(DKMS_TREE_EXCLUDE),-path $(d) -o) -name '.git*' \) -prune -o \
		-type f -print | sort | tar -cf - --no-recursion -T - | tar -xf - -C $(DESTDIR)$(DKMS_SRCDIR)
	install -D -m 0644 packaging/60-knem.rules $(DESTDIR)$(UDEVRULESDIR)/60-knem.rules
	install -D -m 0644 packaging/modules-load-knem.conf $(DESTDIR)$(MODULESLOADDIR)/knem.conf
	install -D -m 0644 packaging/limits-knem-rs.conf $(DESTDIR)$(SECLIMITSDIR)/knem-rs.conf
	install -D -m 0644 packaging/device.conf $(DESTDIR)$(KNEMCONFDIR)/device.conf
	install -D -m 0755 packaging/counters-access $(DESTDIR)$(KNEMLIBEXECDIR)/counters-access
	install -D -m 0644 packaging/modprobe-knem.conf $(DESTDIR)$(MODPROBEDIR)/knem-rs.conf
	install -D -m 0755 packaging/load-knem $(DESTDIR)$(KNEMLIBEXECDIR)/load-knem

# The Debian package's kernel hooks (see packaging/dkms-build.in).
KERNELHOOKDIR ?= /etc/kernel
install-dkms-hooks:
	sed 's|@VERSION@|$(PKG_VERSION)|' packaging/dkms-build.in | \
		install -D -m 0755 /dev/stdin $(DESTDIR)$(PREFIX)/lib/$(PKG_NAME)/dkms-build
	install -D -m 0755 packaging/kernel-hook-knem-rs $(DESTDIR)$(KERNELHOOKDIR)/postinst.d/$(PKG_NAME)
	install -D -m 0755 packaging/kernel-hook-knem-rs $(DESTDIR)$(KERNELHOOKDIR)/header_postinst.d/$(PKG_NAME)

# The tools with their man pages and completions, the directory of the
# node-wide collective model (`knem-coll calibrate --system` writes
# model.json there, every team reads it: the tools package owns it), and
# the units that feed node_exporter's textfile collector (shipped
# disabled).
install-tools:
	@for t in $(PKG_TOOLS); do test -f prebuilt/$$t && test -f prebuilt/doc/man1/$$t.1 || \
		{ echo "prebuilt/$$t or its man page is missing: install from the make dist tarball"; exit 1; }; done
	for t in $(PKG_TOOLS); do install -D -m 0755 prebuilt/$$t $(DESTDIR)$(BINDIR)/$$t && \
		install -D -m 0644 prebuilt/doc/man1/$$t.1 $(DESTDIR)$(MANDIR)/man1/$$t.1 && \
		install -D -m 0644 prebuilt/doc/bash/$$t $(DESTDIR)$(BASHCOMPDIR)/$$t && \
		install -D -m 0644 prebuilt/doc/zsh/_$$t $(DESTDIR)$(ZSHCOMPDIR)/_$$t && \
		install -D -m 0644 prebuilt/doc/fish/$$t.fish $(DESTDIR)$(FISHCOMPDIR)/$$t.fish || exit 1; done
	install -d -m 0755 $(DESTDIR)$(SYSCONFDIR)/knem-rs
	for u in knem-stat-prometheus.service knem-stat-prometheus.timer; do \
		install -D -m 0644 packaging/$$u $(DESTDIR)$(SYSTEMDUNITDIR)/$$u || exit 1; done

# The runtime library: the file named after the release, and the soname
# link that the dynamic linker looks for (ldconfig would make the same one).
install-lib:
	@test -f prebuilt/libknem_rs.so || { echo "prebuilt/libknem_rs.so is missing: install from the make dist tarball"; exit 1; }
	install -D -m 0755 prebuilt/libknem_rs.so $(DESTDIR)$(LIBDIR)/libknem_rs.so.$(PKG_VERSION)
	ln -sfn libknem_rs.so.$(PKG_VERSION) $(DESTDIR)$(LIBDIR)/$(CAPI_SONAME)

# Headers, the static library, the link-time libknem_rs.so -> soname link
# (its target comes with install-lib) and both pkg-config files.
install-dev:
	@test -f prebuilt/libknem_rs.a || { echo "prebuilt/libknem_rs.a is missing: install from the make dist tarball"; exit 1; }
	install -D -m 0644 include/knem_io.h $(DESTDIR)$(INCLUDEDIR)/knem_io.h
	install -D -m 0644 userlib/knem-capi/include/knem_rs.h $(DESTDIR)$(INCLUDEDIR)/knem_rs.h
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@INCLUDEDIR@|$(INCLUDEDIR)|' \
		-e 's|@VERSION@|$(PKG_VERSION)|' packaging/knem-rs.pc.in | \
		install -D -m 0644 /dev/stdin $(DESTDIR)$(PKGCONFIGDIR)/$(PKG_NAME).pc
	sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@LIBDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(LIBDIR))|' \
		-e 's|@INCLUDEDIR@|$(patsubst $(PREFIX)/%,$${prefix}/%,$(INCLUDEDIR))|' \
		-e 's|@VERSION@|$(PKG_VERSION)|' userlib/knem-capi/knem_rs.pc.in | \
		install -D -m 0644 /dev/stdin $(DESTDIR)$(LIBPKGCONFIGDIR)/knem_rs.pc
	install -D -m 0644 prebuilt/libknem_rs.a $(DESTDIR)$(LIBDIR)/libknem_rs.a
	ln -sfn $(CAPI_SONAME) $(DESTDIR)$(LIBDIR)/libknem_rs.so
