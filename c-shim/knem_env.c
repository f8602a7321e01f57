// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_env.c - the small services the Rust core needs from the kernel:
 * memory for its objects, user copies of ioctl arguments, randomness,
 * RCU and the region table's writer lock.
 */
#include <linux/kernel.h>
#include <linux/mm.h>
#include <linux/mutex.h>
#include <linux/random.h>
#include <linux/rcupdate.h>
#include <linux/slab.h>
#include <linux/uaccess.h>

#include "knem_core.h"
#include "knem_shim.h"

/*
 * kvmalloc() and copy_*_user() WARN on sizes above INT_MAX, and the VM
 * tests boot with panic_on_warn, so a bogus size from the core must fail
 * politely here rather than take the machine down.
 */
#define KNEM_MAX_KERNEL_SIZE ((u64)INT_MAX)

void *knem_shim_alloc(u64 size)
{
	knem_might_sleep();
	if (!size || size > KNEM_MAX_KERNEL_SIZE)
		return NULL;
	/*
	 * Charged to the caller's memcg: every object is made for a user.
	 * Sizes come from user arguments (iovec counts, page counts), so a
	 * request the machine cannot satisfy must fail with ENOMEM: no OOM
	 * killer on its behalf, and no allocation-failure splat in the log.
	 */
	return kvmalloc(size, GFP_KERNEL_ACCOUNT | __GFP_NOWARN |
			      __GFP_RETRY_MAYFAIL);
}

void knem_shim_free(void *ptr)
{
	kvfree(ptr);
}

int knem_shim_copy_from_user(void *dst, u64 src, u64 len)
{
	knem_might_sleep();
	if (len > KNEM_MAX_KERNEL_SIZE)
		return -EFAULT;
	if (copy_from_user(dst, u64_to_user_ptr(src), len))
		return -EFAULT;
	return 0;
}

int knem_shim_copy_to_user(u64 dst, const void *src, u64 len)
{
	knem_might_sleep();
	if (len > KNEM_MAX_KERNEL_SIZE)
		return -EFAULT;
	if (copy_to_user(u64_to_user_ptr(dst), src, len))
		return -EFAULT;
	return 0;
}

u32 knem_shim_random_u32(void)
{
	return get_random_u32();
}

void knem_shim_rcu_read_lock(void)
{
	rcu_read_lock();
}

void knem_shim_rcu_read_unlock(void)
{
	rcu_read_unlock();
}

static void knem_rcu_callback(struct rcu_head *head)
{
	knem_core_rcu_free(head);
}

/*
 * The core embeds KNEM_CORE_RCU_HEAD_SIZE bytes in each object it frees
 * this way; knem_abi.c checks that a struct rcu_head fits.  The module's
 * exit path runs rcu_barrier() so no callback outlives the module text.
 */
void knem_shim_call_rcu(void *rcu_head)
{
	call_rcu(rcu_head, knem_rcu_callback);
}

static DEFINE_MUTEX(knem_table_mutex);

void knem_shim_table_lock(void)
{
	knem_might_sleep();
	mutex_lock(&knem_table_mutex);
}

void knem_shim_table_unlock(void)
{
	mutex_unlock(&knem_table_mutex);
}
