// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_env.c - the small services the Rust core needs from the kernel:
 * memory for its objects, user copies of ioctl arguments, randomness,
 * RCU and the region table's writer lock.
 */
#include <linux/delay.h>
#include <linux/error-injection.h>
#include <linux/kernel.h>
#include <linux/ktime.h>
#include <linux/mm.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/random.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
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
/* Every object of the core: fail_function may fail one (tests/faults). */
ALLOW_ERROR_INJECTION(knem_shim_alloc, NULL);

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

#ifdef KNEM_FAULT_INJECT
/*
 * Test builds: how long the table mutex was held at most (ns, wall time,
 * preemption of the holder included) and the core's most work in one hold
 * (slots looked at plus count entries moved).  Writing either resets it.
 */
static ktime_t knem_table_locked_at;	/* under knem_table_mutex */
static atomic64_t knem_table_hold_ns_max = ATOMIC64_INIT(0);

void knem_fault_max_note(atomic64_t *max, s64 v)
{
	s64 old = atomic64_read(max);

	while (v > old && !atomic64_try_cmpxchg(max, &old, v))
		;
}

static int knem_fault_max_get(char *buf, const struct kernel_param *kp)
{
	return sprintf(buf, "%lld\n", atomic64_read((atomic64_t *)kp->arg));
}

static int knem_fault_max_reset(const char *val, const struct kernel_param *kp)
{
	atomic64_set((atomic64_t *)kp->arg, 0);
	return 0;
}

const struct kernel_param_ops knem_fault_max_ops = {
	.get = knem_fault_max_get,
	.set = knem_fault_max_reset,
};

static void knem_table_hold_begin(void)
{
	knem_table_locked_at = ktime_get();
}

static void knem_table_hold_end(void)
{
	knem_fault_max_note(&knem_table_hold_ns_max,
			    ktime_to_ns(ktime_sub(ktime_get(),
						  knem_table_locked_at)));
}

module_param_cb(fault_table_hold_ns, &knem_fault_max_ops, &knem_table_hold_ns_max, 0644);
MODULE_PARM_DESC(fault_table_hold_ns, "test builds: longest hold of the region table mutex (ns; write to reset)");

static int knem_table_hold_work_get(char *buf, const struct kernel_param *kp)
{
	return sprintf(buf, "%llu\n", knem_core_table_hold_work(0));
}

static int knem_table_hold_work_reset(const char *val,
				      const struct kernel_param *kp)
{
	knem_core_table_hold_work(1);
	return 0;
}

static const struct kernel_param_ops knem_table_hold_work_ops = {
	.get = knem_table_hold_work_get,
	.set = knem_table_hold_work_reset,
};
module_param_cb(fault_table_hold_work, &knem_table_hold_work_ops, NULL, 0644);
MODULE_PARM_DESC(fault_table_hold_work, "test builds: most slots looked at plus count entries moved in one hold of the region table mutex (write to reset)");

/*
 * Test builds: the process fault_table_lock_delay_pid (its thread group
 * id) sleeps fault_table_lock_delay_ms before each time it takes the
 * table mutex, so that a test can run another process's path (a file
 * release) between what a core function does before the lock and what
 * it does under it.
 */
static int fault_table_lock_delay_pid;
module_param(fault_table_lock_delay_pid, int, 0644);
MODULE_PARM_DESC(fault_table_lock_delay_pid, "test builds: the process that sleeps before taking the region table mutex (0: none)");
static uint fault_table_lock_delay_ms;
module_param(fault_table_lock_delay_ms, uint, 0644);
MODULE_PARM_DESC(fault_table_lock_delay_ms, "test builds: how long fault_table_lock_delay_pid sleeps before taking the region table mutex (ms)");

static void knem_table_lock_test_delay(void)
{
	int pid = READ_ONCE(fault_table_lock_delay_pid);
	uint ms = READ_ONCE(fault_table_lock_delay_ms);

	if (pid && ms && task_tgid_nr(current) == pid)
		msleep(ms);
}
#else
static inline void knem_table_lock_test_delay(void)
{
}

static inline void knem_table_hold_begin(void)
{
}

static inline void knem_table_hold_end(void)
{
}
#endif

void knem_shim_table_lock(void)
{
	knem_might_sleep();
	knem_table_lock_test_delay();
	mutex_lock(&knem_table_mutex);
	knem_table_hold_begin();
}

void knem_shim_table_unlock(void)
{
	knem_table_hold_end();
	mutex_unlock(&knem_table_mutex);
}

/* The pinned-page counts per account level (the core's state/pins.rs). */
static DEFINE_MUTEX(knem_pins_mutex);

void knem_shim_pins_lock(void)
{
	knem_might_sleep();
	mutex_lock(&knem_pins_mutex);
}

void knem_shim_pins_unlock(void)
{
	mutex_unlock(&knem_pins_mutex);
}
