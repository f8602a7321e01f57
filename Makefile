# knem-rs: one entry point.
#
#   make build      host crates, the Rust kernel object, knem.ko for every kernel
#   make test       everything CI runs: host tests, ABI checks, VM suites
#   make vm-test    the in-VM suite on each kernel of VM_KERNELS
#   make module     knem.ko for each kernel of KVERS
#
# KVERS defaults to every kernel that has both an image in /boot and headers.

SHELL := /bin/bash
TOP := $(abspath .)
BUILD := $(TOP)/build
CARGO ?= cargo
HOST_TARGET := x86_64-unknown-linux-gnu

KVERS ?= $(sort $(foreach v,$(patsubst /boot/vmlinuz-%,%,$(wildcard /boot/vmlinuz-*)),\
	$(if $(wildcard /lib/modules/$(v)/build/Makefile),$(v))))
# Kernel series the VM suite runs on (prefixes of installed versions).
VM_KERNELS ?= 6.1 6.12

CORE_OBJ := $(BUILD)/knem_core.o
TESTS_BIN := $(TOP)/target/$(HOST_TARGET)/release/knem-tests

.PHONY: all build core-object module tests-bin host-test abi-test vm-test test \
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

module: core-object
	@test -n "$(KVERS)" || { echo "no kernel with headers found (install linux-headers-<version>)"; exit 1; }
	@for v in $(KVERS); do c-shim/build-module.sh $$v $(BUILD)/$$v || exit 1; done

# The in-VM suite is a static binary so the initramfs needs no libc.
tests-bin:
	RUSTFLAGS="-C target-feature=+crt-static" $(CARGO) build --release \
		-p knem-vm-tests --target $(HOST_TARGET)

host-test:
	$(CARGO) test --workspace --quiet

abi-test:
	tests/abi/check.sh

fmt-check:
	$(CARGO) fmt --all -- --check

clippy:
	$(CARGO) clippy --workspace --all-targets --quiet -- -D warnings

vm-test: module tests-bin
	@set -e; for k in $(VM_KERNELS); do \
		echo "=== VM suite on kernel $$k ==="; \
		tests/vm/run --kernel $$k --add $(TESTS_BIN) -- /opt/knem-tests; \
	done

test: fmt-check clippy host-test abi-test vm-test

clean:
	$(CARGO) clean
	rm -rf $(BUILD) c-shim/knem_core.prebuilt

FORCE:
