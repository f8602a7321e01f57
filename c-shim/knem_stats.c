// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_stats.c - the core's counters, for administrators.
 *
 * Each field of struct knem_core_stats is a read-only file in
 * /sys/class/misc/knem/, and the whole set is the text that read() returns
 * on an O_RDONLY open, so `cat /dev/knem` shows it.
 */
#include <linux/build_bug.h>
#include <linux/device.h>
#include <linux/kernel.h>
#include <linux/slab.h>
#include <linux/stddef.h>
#include <linux/sysfs.h>

#include "knem_io.h"
#include "knem_core.h"
#include "knem_shim.h"

/* Every field of struct knem_core_stats, in order. */
struct knem_stat_attribute {
	struct device_attribute dev_attr;
	size_t offset;          /* of the field in struct knem_core_stats */
};

static u64 knem_stat_value(const struct knem_core_stats *stats,
			   const struct knem_stat_attribute *sattr)
{
	return *(const u64 *)((const char *)stats + sattr->offset);
}

static ssize_t knem_stat_show(struct device *dev,
			      struct device_attribute *attr, char *buf)
{
	const struct knem_stat_attribute *sattr =
		container_of(attr, struct knem_stat_attribute, dev_attr);
	struct knem_core_stats stats;

	knem_core_get_stats(&stats);
	return sysfs_emit(buf, "%llu\n", knem_stat_value(&stats, sattr));
}

#define KNEM_STAT_ATTR(field, what)                                          \
	static struct knem_stat_attribute knem_stat_##field = {          \
		.dev_attr = __ATTR(field, 0444, knem_stat_show, NULL),   \
		.offset = offsetof(struct knem_core_stats, field),       \
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

/* A field added to knem_core.h without a line above fails the build. */
static_assert(ARRAY_SIZE(knem_stat_list) * sizeof(u64) ==
	      sizeof(struct knem_core_stats));

static const struct attribute_group knem_stats_group = {
	.attrs = knem_stats_attrs,
};

const struct attribute_group *knem_stats_groups[] = {
	&knem_stats_group,
	NULL,
};

/* Room for the header line and one "name value" line per counter. */
#define KNEM_STATS_TEXT_SIZE 2048

/*
 * One snapshot of the counters as text, kmalloc()ed; *len is its length.
 * NULL on allocation failure.
 */
char *knem_stats_text(size_t *len)
{
	struct knem_core_stats stats;
	size_t n, i;
	char *text;

	text = kmalloc(KNEM_STATS_TEXT_SIZE, GFP_KERNEL);
	if (!text)
		return NULL;

	knem_core_get_stats(&stats);
	n = scnprintf(text, KNEM_STATS_TEXT_SIZE, "knem-rs %s, ABI 0x%x\n",
		      KNEM_VERSION, KNEM_ABI_VERSION);
	for (i = 0; i < ARRAY_SIZE(knem_stat_list); i++) {
		const struct knem_stat_attribute *sattr = knem_stat_list[i];

		n += scnprintf(text + n, KNEM_STATS_TEXT_SIZE - n,
			       "%-20s %llu\n", sattr->dev_attr.attr.name,
			       knem_stat_value(&stats, sattr));
	}
	*len = n;
	return text;
}
