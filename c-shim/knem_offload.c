// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_offload.c - the per-fd offload thread, its CPU binding, and the
 * NOTIFY_FD notifications read() from the fd.
 *
 * The core owns the queue of asynchronous requests (in submission order)
 * and the queue of completed NOTIFY_FD indices; this file only runs the
 * thread that drains the first and the wait queue readers of the second
 * sleep on.  The thread starts at the status-array mmap (no async request
 * can be accepted before) and stops at release: the request it is running
 * finishes, the core then drops the ones that never started.
 */
#include <linux/cpumask.h>
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/kthread.h>
#include <linux/minmax.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "knem_io.h"
#include "knem_core.h"
#include "knem_shim.h"

/*
 * KNEM's parameter: where the offload thread of a fd runs unless
 * BIND_OFFLOAD chose.  0: anywhere; 1: on the CPUs the mmap() caller may
 * run on; -1: on the other online CPUs (all of them if none is left).
 */
static int binding;
module_param(binding, int, 0644);
MODULE_PARM_DESC(binding,
		 "offload thread binding: 0 none, 1 caller's CPUs, -1 the other CPUs");

/* Notifications moved per batch of read() (on the stack). */
#define KNEM_NOTIFY_BATCH 32

int knem_offload_init(struct knem_file *kf)
{
	mutex_init(&kf->queue_lock);
	init_waitqueue_head(&kf->notify_wq);
	if (!zalloc_cpumask_var(&kf->bind_mask, GFP_KERNEL))
		return -ENOMEM;
	return 0;
}

void knem_offload_free(struct knem_file *kf)
{
	free_cpumask_var(kf->bind_mask);
}

/* The CPUs of CURRENT (reversed = false) or CURRENT_REVERSED, online ones. */
static void knem_current_cpus(struct cpumask *m, bool reversed)
{
	if (!reversed) {
		cpumask_and(m, current->cpus_ptr, cpu_online_mask);
		return;
	}
	cpumask_andnot(m, cpu_online_mask, current->cpus_ptr);
	if (cpumask_empty(m))
		cpumask_copy(m, cpu_online_mask);
}

static int knem_offload_thread(void *data)
{
	struct knem_file *kf = data;

	while (!kthread_should_stop()) {
		/* Set the state first: a kick after the test wakes us up. */
		set_current_state(TASK_INTERRUPTIBLE);
		if (!knem_core_ctx_async_queued(kf->ctx) && !kthread_should_stop())
			schedule();
		__set_current_state(TASK_RUNNING);
		/* One request at a time, so a stop waits for one at most. */
		while (!kthread_should_stop() &&
		       knem_core_ctx_run_async(kf->ctx))
			cond_resched();
	}
	return 0;
}

/*
 * Creates the thread, bound but not running yet; status_lock held.  The
 * caller either starts it or stops it.
 */
int knem_offload_prepare(struct knem_file *kf)
{
	struct task_struct *t;
	cpumask_var_t m;
	int err = 0;

	if (!zalloc_cpumask_var(&m, GFP_KERNEL))
		return -ENOMEM;
	if (kf->bind_set)
		cpumask_copy(m, kf->bind_mask);
	else if (binding == 1 || binding == -1)
		knem_current_cpus(m, binding == -1);

	t = kthread_create(knem_offload_thread, kf, "knem/%d",
			   task_tgid_nr(current));
	if (IS_ERR(t)) {
		err = PTR_ERR(t);
		goto free_mask;
	}
	if (!cpumask_empty(m))
		/* A failure leaves it unbound, which is still correct. */
		set_cpus_allowed_ptr(t, m);
	kf->thread = t;

free_mask:
	free_cpumask_var(m);
	return err;
}

void knem_offload_start(struct knem_file *kf)
{
	wake_up_process(kf->thread);
}

/* Waits for the running request, if any; status_lock held or release. */
void knem_offload_stop(struct knem_file *kf)
{
	if (!kf->thread)
		return;
	kthread_stop(kf->thread);
	kf->thread = NULL;
}

ssize_t knem_notify_read(struct knem_file *kf, struct file *file,
			 char __user *buf, size_t count)
{
	u32 batch[KNEM_NOTIFY_BATCH];
	size_t want = count / sizeof(u32);
	size_t done = 0;
	u32 n;

	/* Whole indices only, as KNEM. */
	if (count % sizeof(u32))
		return -EINVAL;
	/*
	 * A blocking read returns when the whole count was delivered, as
	 * KNEM's does, or when a signal comes (what was read so far, else
	 * -ERESTARTSYS); a non-blocking one returns what is queued.  Indices
	 * popped but not delivered because the buffer faults are lost: the
	 * caller passed a bad buffer, as with any read().
	 */
	while (done < want) {
		n = knem_core_ctx_read_notify(kf->ctx, batch,
					      min_t(size_t, want - done,
						    KNEM_NOTIFY_BATCH));
		if (n) {
			if (copy_to_user(buf + done * sizeof(u32), batch,
					 n * sizeof(u32)))
				return done ? done * sizeof(u32) : -EFAULT;
			done += n;
			continue;
		}
		if (file->f_flags & O_NONBLOCK)
			return done ? done * sizeof(u32) : -EAGAIN;
		if (wait_event_interruptible(kf->notify_wq,
					     knem_core_ctx_notify_ready(kf->ctx)))
			return done ? done * sizeof(u32) : -ERESTARTSYS;
	}
	return done * sizeof(u32);
}

/* ---- The core's knem_shim_ctx_* calls; shim is the struct knem_file. ---- */

void knem_shim_ctx_lock(void *shim)
{
	struct knem_file *kf = shim;

	knem_might_sleep();
	mutex_lock(&kf->queue_lock);
}

void knem_shim_ctx_unlock(void *shim)
{
	struct knem_file *kf = shim;

	mutex_unlock(&kf->queue_lock);
}

void knem_shim_ctx_kick(void *shim)
{
	struct knem_file *kf = shim;

	/* Set before the status array, which every async request needs. */
	if (!WARN_ON_ONCE(!kf->thread))
		wake_up_process(kf->thread);
}

void knem_shim_ctx_notify(void *shim)
{
	struct knem_file *kf = shim;

	wake_up_interruptible_poll(&kf->notify_wq, EPOLLIN | EPOLLRDNORM);
}

int knem_shim_ctx_bind(void *shim, u32 flags, const void *mask, u32 len)
{
	struct knem_file *kf = shim;
	const u8 *bytes = mask;
	cpumask_var_t m;
	unsigned int cpu;
	int err = 0;

	if (!zalloc_cpumask_var(&m, GFP_KERNEL))
		return -ENOMEM;
	switch (flags) {
	case KNEM_BIND_FLAG_CUSTOM:
		/* cpu_set_t layout: bit cpu % 8 of byte cpu / 8. */
		for (cpu = 0; cpu < nr_cpu_ids && cpu / 8 < len; cpu++)
			if (bytes[cpu / 8] & (1U << (cpu % 8)))
				cpumask_set_cpu(cpu, m);
		cpumask_and(m, m, cpu_online_mask);
		break;
	case KNEM_BIND_FLAG_CURRENT:
		knem_current_cpus(m, false);
		break;
	case KNEM_BIND_FLAG_CURRENT_REVERSED:
		knem_current_cpus(m, true);
		break;
	}
	/* The core passes one known flag; the mask may still name no CPU. */
	if (cpumask_empty(m)) {
		err = -EINVAL;
		goto free_mask;
	}

	mutex_lock(&kf->status_lock);
	if (kf->thread) {
		err = -EBUSY;
	} else {
		cpumask_copy(kf->bind_mask, m);
		kf->bind_set = true;
	}
	mutex_unlock(&kf->status_lock);

free_mask:
	free_cpumask_var(m);
	return err;
}
