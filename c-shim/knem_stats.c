// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_stats.c - the core's counters, for administrators.
 *
 * The core adds to its counters on every copy, from every CPU at once, so
 * each CPU has its own slots and nothing is shared until someone reads:
 * each field of struct knem_core_stats is a read-only file in
 * /sys/class/misc/knem/, and the whole set is the text that read() returns
 * on an O_RDONLY open, so `cat /dev/knem` shows it; both sum the slots.
 */
#include <linux/build_bug.h>
#include <linux/cpumask.h>
#include <linux/device.h>
#include <linux/kernel.h>
#include <linux/percpu.h>
#include <linux/slab.h>
#include <linux/stddef.h>
#include <linux/sysfs.h>

#include "knem_io.h"
#include "knem_core.h"
#include "knem_shim.h"

/*
 * One CPU's slots.  A gauge released on another CPU than it was taken on
 * leaves a negative delta in that CPU's slot: the slots are signed, and
 * only their sum means something.
 */
struct knem_stat_cpu {
	s64 v[KNEM_CORE_NR_STATS];
};

static struct knem_stat_cpu __percpu *knem_stat_cpus;

void knem_shim_stat_add(u32 idx, u64 delta)
{
	if (likely(idx < KNEM_CORE_NR_STATS))
		this_cpu_add(knem_stat_cpus->v[idx], (s64)delta);
}

/*
 * The sum of every CPU's slot.  Adds racing with the walk may make a gauge
 * look transiently negative (its release seen, its creation not yet): 0.
 */
static u64 knem_stat_sum(u32 idx)
{
	s64 sum = 0;
	int cpu;

	for_each_possible_cpu(cpu)
		sum += READ_ONCE(per_cpu_ptr(knem_stat_cpus, cpu)->v[idx]);
	return sum < 0 ? 0 : sum;
}

int knem_stats_init(void)
{
	knem_stat_cpus = alloc_percpu(struct knem_stat_cpu);
	return knem_stat_cpus ? 0 : -ENOMEM;
}

void knem_stats_exit(void)
{
	free_percpu(knem_stat_cpus);
	knem_stat_cpus = NULL;
}

/* Every field of struct knem_core_stats, in order. */
struct knem_stat_attribute {
	struct device_attribute dev_attr;
	u32 idx;                /* enum knem_core_stat */
};

static ssize_t knem_stat_show(struct device *dev,
			      struct device_attribute *attr, char *buf)
{
	const struct knem_stat_attribute *sattr =
		container_of(attr, struct knem_stat_attribute, dev_attr);

	return sysfs_emit(buf, "%llu\n", knem_stat_sum(sattr->idx));
}

#define KNEM_STAT_ATTR(field, what)                                          \
	static struct knem_stat_attribute knem_stat_##field = {          \
		.dev_attr = __ATTR(field, 0444, knem_stat_show, NULL),   \
		.idx = KNEM_CORE_STAT_##field,                           \
	};
KNEM_CORE_STATS(KNEM_STAT_ATTR)

#define KNEM_STAT_ENTRY(field, what) &knem_stat_##field,
static const struct knem_stat_attribute *const knem_stat_list[] = {
	KNEM_CORE_STATS(KNEM_STAT_ENTRY)
};

#define KNEM_STAT_SYSFS(field, what) &knem_stat_##field.dev_attr.attr,
static struct attribute *knem_stats_attrs[] = {
	KNEM_CORE_STATS(KNEM_STAT_SYSFS)
	NULL
};

/* The index list and the struct the core sees have the same fields. */
static_assert(ARRAY_SIZE(knem_stat_list) == KNEM_CORE_NR_STATS);
static_assert(KNEM_CORE_NR_STATS * sizeof(u64) ==
	      sizeof(struct knem_core_stats));

/* The counters' mode: 0444, or 0440 in group mode (knem_main.c). */
static umode_t knem_stats_visible(struct kobject *kobj, struct attribute *attr,
				  int n)
{
	return knem_device_group ? 0440 : 0444;
}

static const struct attribute_group knem_stats_group = {
	.attrs = knem_stats_attrs,
	.is_visible = knem_stats_visible,
};

const struct attribute_group *knem_stats_groups[] = {
	&knem_stats_group,
	NULL,
};

/* Room for the header line and one "name value" line per counter. */
#define KNEM_STATS_TEXT_SIZE 2048

/*
 * The counters as text, kmalloc()ed; *len is its length.
 * NULL on allocation failure.
 */
char *knem_stats_text(size_t *len)
{
	size_t n, i;
	char *text;

	text = kmalloc(KNEM_STATS_TEXT_SIZE, GFP_KERNEL_ACCOUNT);
	if (!text)
		return NULL;

	n = scnprintf(text, KNEM_STATS_TEXT_SIZE, "knem-rs %s, ABI 0x%x\n",
		      KNEM_VERSION, KNEM_ABI_VERSION);
	for (i = 0; i < ARRAY_SIZE(knem_stat_list); i++) {
		const struct knem_stat_attribute *sattr = knem_stat_list[i];

		n += scnprintf(text + n, KNEM_STATS_TEXT_SIZE - n,
			       "%-20s %llu\n", sattr->dev_attr.attr.name,
			       knem_stat_sum(sattr->idx));
	}
	*len = n;
	return text;
}
