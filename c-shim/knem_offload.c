// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_offload.c - the per-fd offload thread, its CPU binding and
 * cgroups, and the NOTIFY_FD notifications read() from the fd.
 *
 * The core owns the queue of asynchronous requests (in submission order),
 * the queue of completed NOTIFY_FD indices, and the decision to give a fd
 * a thread (its first asynchronous submission, within the per-user bound);
 * this file only creates and runs the thread that drains the first queue
 * and the wait queue readers of the second sleep on.  The thread is made
 * by the submitting task and counts where it does: it joins the
 * submitter's cgroups (pids, cpu, memory, cpuset see it) and runs only on
 * CPUs of its cpuset.  It stops at release: the request it is running
 * finishes, the core then drops the ones that never started.
 */
#include <linux/cgroup.h>
#include <linux/cpumask.h>
#include <linux/err.h>
#include <linux/fs.h>
#include <linux/kthread.h>
#include <linux/minmax.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/stringify.h>
#include <linux/uaccess.h>
#include <linux/wait.h>

#include "knem_io.h"
#include "knem_core.h"
#include "knem_shim.h"

/*
 * KNEM's parameter: where the offload thread of a fd runs unless
 * BIND_OFFLOAD chose, always within the cpuset of the task that submitted
 * the fd's first asynchronous copy.  0 and 1: on the CPUs that task may
 * run on; -1: on the other CPUs of its cpuset (all of them if none is
 * left).
 */
static int binding;
module_param(binding, int, 0644);
MODULE_PARM_DESC(binding,
		 "offload thread binding: 0 or 1 the submitter's CPUs, -1 the other CPUs of its cpuset");

static ulong knem_threads_per_user = KNEM_CORE_OFFLOAD_THREADS_PER_USER_DEFAULT;
module_param_named(max_offload_threads_per_user, knem_threads_per_user,
		   ulong, 0644);
MODULE_PARM_DESC(max_offload_threads_per_user,
		 "live offload threads per user; async copies of other fds run in the caller");

u64 knem_shim_offload_threads_per_user(void)
{
	return READ_ONCE(knem_threads_per_user);
}

static ulong knem_threads_max = KNEM_CORE_OFFLOAD_THREADS_MAX_DEFAULT;
module_param_named(max_offload_threads, knem_threads_max, ulong, 0644);
MODULE_PARM_DESC(max_offload_threads,
		 "live offload threads on the node, all users together (default "
		 __stringify(KNEM_CORE_OFFLOAD_THREADS_MAX_DEFAULT) ")");

u64 knem_shim_offload_threads_max(void)
{
	return READ_ONCE(knem_threads_max);
}

/* Notifications moved per batch of read() (on the stack). */
#define KNEM_NOTIFY_BATCH 32

int knem_offload_init(struct knem_file *kf)
{
	mutex_init(&kf->queue_lock);
	init_waitqueue_head(&kf->notify_wq);
	if (!zalloc_cpumask_var(&kf->bind_mask, GFP_KERNEL_ACCOUNT))
		return -ENOMEM;
	if (!zalloc_cpumask_var(&kf->thread_mask, GFP_KERNEL_ACCOUNT)) {
		free_cpumask_var(kf->bind_mask);
		return -ENOMEM;
	}
	return 0;
}

void knem_offload_free(struct knem_file *kf)
{
	free_cpumask_var(kf->thread_mask);
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

	/*
	 * Bound here, not before the first wake-up: kernels that place new
	 * kthreads on housekeeping CPUs do so as the thread starts, after
	 * anything its creator set.
	 */
	set_cpus_allowed_ptr(current, kf->thread_mask);
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
 * Whether the attach moved t into the submitter's cgroup v2 group.  On some
 * kernels (5.10 among them) cgroup_attach_task_all() covers the v1
 * hierarchies only, and t then stays in the root group, outside any cpuset
 * of v2.
 */
static bool knem_joined_dfl_cgroup(struct task_struct *t)
{
	bool same;

	rcu_read_lock();
	same = task_dfl_cgroup(t) == task_dfl_cgroup(current);
	rcu_read_unlock();
	return same;
}

/*
 * The CPUs of thread t, which just joined the submitter's cgroups: the
 * attach left it on the CPUs of the submitter's cpuset (a module cannot
 * ask for a task's cpuset otherwise), so that is the set every choice is
 * taken within; where the attach did not reach the submitter's group, the
 * submitter's own CPUs, which its cpuset always holds.  A choice that names
 * none of them gives the submitter's own CPUs.
 */
static void knem_thread_cpus(struct knem_file *kf, struct task_struct *t)
{
	bool joined = knem_joined_dfl_cgroup(t);
	const struct cpumask *within = joined ? t->cpus_ptr : current->cpus_ptr;
	struct cpumask *m = kf->thread_mask;

	kf->thread_outside_cgroup = !joined;
	if (kf->bind_set) {
		cpumask_and(m, kf->bind_mask, within);
	} else if (READ_ONCE(binding) == -1) {
		cpumask_andnot(m, within, current->cpus_ptr);
		if (cpumask_empty(m))
			cpumask_copy(m, within);
	} else {
		cpumask_copy(m, current->cpus_ptr);
	}
	cpumask_and(m, m, cpu_online_mask);
	if (cpumask_empty(m))
		cpumask_and(m, current->cpus_ptr, cpu_online_mask);
}

int knem_shim_ctx_spawn(void *shim)
{
	struct knem_file *kf = shim;
	struct task_struct *t;
	int err;

	knem_might_sleep();
	/*
	 * Created and attached without status_lock: mmap() takes it under
	 * mmap_lock, and a cgroup attach may take mmap_lock (cpuset memory
	 * migration).  The core makes one call at a time per context.
	 */
	t = kthread_create(knem_offload_thread, kf, "knem/%d",
			   task_tgid_nr(current));
	if (IS_ERR(t))
		return PTR_ERR(t);
	/* Its pids, CPU time and memory count where the submitter's do. */
	err = cgroup_attach_task_all(current, t);
	if (err)
		goto stop_thread;

	mutex_lock(&kf->status_lock);
	if (WARN_ON_ONCE(kf->thread)) {
		mutex_unlock(&kf->status_lock);
		err = -EBUSY;
		goto stop_thread;
	}
	knem_thread_cpus(kf, t);
	kf->thread = t;
	mutex_unlock(&kf->status_lock);
	wake_up_process(t);
	return 0;

stop_thread:
	/* Never woken: it exits without running knem_offload_thread(). */
	kthread_stop(t);
	return err;
}

/* File release: waits for the running request, if any. */
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

/*
 * A thread that could not join the submitter's cgroup v2 group (see
 * knem_joined_dfl_cgroup()) is not moved when the submitter's cpuset
 * changes, so before each wake-up it is brought back within the CPUs the
 * submitting task may use now: the fd's choice among them, else (none of
 * those online, or no memory for the mask) all of them.  It may sit idle
 * elsewhere meanwhile, but never runs a request there.  One subset test
 * when nothing changed; thread_mask is fixed once the thread exists.
 */
static void knem_thread_follow(struct knem_file *kf, struct task_struct *t)
{
	cpumask_var_t m;

	if (!kf->thread_outside_cgroup ||
	    cpumask_subset(t->cpus_ptr, current->cpus_ptr))
		return;
	if (!alloc_cpumask_var(&m, GFP_KERNEL)) {
		set_cpus_allowed_ptr(t, current->cpus_ptr);
		return;
	}
	cpumask_and(m, kf->thread_mask, current->cpus_ptr);
	if (!cpumask_intersects(m, cpu_online_mask))
		cpumask_copy(m, current->cpus_ptr);
	set_cpus_allowed_ptr(t, m);
	free_cpumask_var(m);
}

void knem_shim_ctx_kick(void *shim)
{
	struct knem_file *kf = shim;

	/* The core kicks only once knem_shim_ctx_spawn() succeeded. */
	if (WARN_ON_ONCE(!kf->thread))
		return;
	knem_thread_follow(kf, kf->thread);
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
