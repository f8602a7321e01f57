// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_abi.c - build-time checks of everything the module and its
 * clients or the Rust core must agree on.  It emits no code: a mismatch
 * stops the build instead of corrupting a client's memory at run time.
 */
#include <linux/build_bug.h>
#include <linux/mm.h>
#include <linux/stddef.h>
#include <linux/types.h>

#include "knem_io.h"
#include "knem_core.h"

/* The ABI of KNEM 0x0d, as SPEC section 3 states it. */
#define KNEM_ABI_FACT(name, expr) static_assert(expr, "KNEM ABI: " #name);
#include "knem_abi_facts.h"
#undef KNEM_ABI_FACT

/* The core plans copies in 4 KiB pages and reuses that as the slot unit. */
static_assert(PAGE_SIZE == 4096);
static_assert(PAGE_SHIFT == KNEM_CORE_PAGE_SHIFT);

/* The core reserves room for our rcu_head inside its objects, 8-aligned. */
static_assert(sizeof(struct rcu_head) <= KNEM_CORE_RCU_HEAD_SIZE);
static_assert(__alignof__(struct rcu_head) <= 8);

/* knem_core.h passes user addresses as u64 and lengths to copy_*_user. */
static_assert(sizeof(unsigned long) == sizeof(u64));
static_assert(sizeof(void *) == sizeof(u64));

/* The statistics are exposed as one u64 per field (knem_stats.c). */
static_assert(sizeof(struct knem_core_stats) % sizeof(u64) == 0);
