/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * knem_shim.h - what the files of the C shim share with each other.
 *
 * Nothing here is seen by the Rust core; its whole interface is
 * knem_core.h.
 */
#ifndef KNEM_SHIM_H
#define KNEM_SHIM_H

#include <linux/bug.h>
#include <linux/kernel.h>
#include <linux/rcupdate.h>
#include <linux/types.h>

/* The package version, passed by Kbuild from the workspace Cargo.toml. */
#ifndef KNEM_VERSION
#define KNEM_VERSION "unknown"
#endif

struct attribute_group;
struct vm_area_struct;
struct knem_core_ctx;
struct knem_status_array;

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

/* knem_status.c: the mmap()ed status array of one context. */
int knem_status_mmap(struct knem_core_ctx *ctx,
		     struct knem_status_array **slot,
		     struct vm_area_struct *vma);
void knem_status_put(struct knem_status_array *array);

/* knem_stats.c: counters in sysfs and as text for read() on O_RDONLY fds. */
extern const struct attribute_group *knem_stats_groups[];
char *knem_stats_text(size_t *len);

#endif /* KNEM_SHIM_H */
