/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * knem_shim.h - what the files of the C shim share with each other.
 *
 * Nothing here is seen by the Rust core; its whole interface is
 * knem_core.h.
 */
#ifndef KNEM_SHIM_H
#define KNEM_SHIM_H

#include <linux/atomic.h>
#include <linux/bug.h>
#include <linux/cpumask.h>
#include <linux/kernel.h>
#include <linux/mutex.h>
#include <linux/rcupdate.h>
#include <linux/spinlock.h>
#include <linux/list.h>
#include <linux/types.h>
#include <linux/wait.h>

/* The package version, passed by Kbuild from the workspace Cargo.toml. */
#ifndef KNEM_VERSION
#define KNEM_VERSION "unknown"
#endif

struct attribute_group;
struct file;
struct task_struct;
struct vm_area_struct;
struct knem_core_ctx;
struct knem_status_array;
struct pid;

/*
 * Entry of a knem_shim_* function that may sleep.  The core must not call
 * one inside its RCU read sections; Debian kernels build without the
 * debug options that would catch that, so check the nesting count that
 * preemptible RCU keeps anyway (always 0 on other kernels).
 */
static inline void knem_might_sleep(void)
{
	might_sleep();
	WARN_ON_ONCE(rcu_preempt_depth() != 0);
}

/*
 * The state of one open file; the core's knem_shim_ctx_* calls get it back
 * as their opaque handle.
 */
struct knem_file {
	struct knem_core_ctx *ctx;         /* NULL for O_RDONLY opens */
	struct mutex status_lock;          /* status array, thread, binding */
	struct knem_status_array *status;  /* the context's reference */
	struct pid *opener;                /* the only process served */
	char *stats_text;                  /* O_RDONLY opens only */
	size_t stats_len;
	/* knem_offload.c */
	struct mutex queue_lock;           /* the core's queues of ctx */
	wait_queue_head_t notify_wq;       /* read() and poll() of NOTIFY_FD */
	struct task_struct *thread;        /* from the first async copy on */
	cpumask_var_t thread_mask;         /* its CPUs, set before it starts */
	cpumask_var_t bind_mask;           /* BIND_OFFLOAD's choice */
	bool bind_set;
	bool thread_outside_cgroup;        /* not in the submitter's v2 group */
	/* knem_dma.c: ASYNCDMACOMPLETE batches in flight, oldest first */
	spinlock_t dma_lock;
	struct list_head dma_batches;
	wait_queue_head_t dma_wq;
	atomic_t dma_pieces;               /* pieces those batches have mapped */
};

/* knem_main.c: device_access=group (0660 and 0440 instead of 0666, 0444). */
extern bool knem_device_group;

/* knem_offload.c: the per-fd offload thread and NOTIFY_FD reads. */
int knem_offload_init(struct knem_file *kf);
void knem_offload_stop(struct knem_file *kf);
void knem_offload_free(struct knem_file *kf);
ssize_t knem_notify_read(struct knem_file *kf, struct file *file,
			 char __user *buf, size_t count);

/*
 * Fault injection, in test builds only (make module KNEM_FAULT_INJECT=1):
 * knem_dma_test_delay() sleeps for the fault_dma_finish_delay_ms module
 * parameter right after knem_shim_dma_finish_async() drops the file's
 * DMA lock, which widens the window in which an abandoned batch may be
 * freed under the submitter.  Release builds have neither.
 */
#ifdef KNEM_FAULT_INJECT
void knem_dma_test_delay(void);

/*
 * A recorded maximum a test reads as a module parameter and resets by
 * writing it: module_param_cb(name, &knem_fault_max_ops, &an_atomic64, 0644).
 */
struct kernel_param_ops;
extern const struct kernel_param_ops knem_fault_max_ops;
void knem_fault_max_note(atomic64_t *max, s64 v);
#else
static inline void knem_dma_test_delay(void)
{
}
#endif

/* knem_dma.c: the DMA channel and the file's ASYNCDMACOMPLETE batches. */
void knem_dma_file_init(struct knem_file *kf);
void knem_dma_file_quiesce(struct knem_file *kf);
void knem_dma_exit(void);

/* knem_status.c: the mmap()ed status array of one context. */
int knem_status_mmap(struct knem_core_ctx *ctx,
		     struct knem_status_array **slot,
		     struct vm_area_struct *vma);
void knem_status_put(struct knem_status_array *array);

/*
 * knem_stats.c: the per-CPU counters (allocated first at load, freed last
 * at unload), in sysfs and as text for read() on O_RDONLY fds.
 */
int knem_stats_init(void);
void knem_stats_exit(void);
extern const struct attribute_group *knem_stats_groups[];
char *knem_stats_text(size_t *len);

#endif /* KNEM_SHIM_H */
