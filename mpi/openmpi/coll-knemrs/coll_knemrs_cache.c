/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * The region cache's side in Open MPI: a team keeps its knem regions
 * between calls (knem_rs_team_cache_regions) only when Open MPI's memory
 * hooks report every release of memory to libknem_rs
 * (knem_rs_note_release).  A region pins its pages when it is declared;
 * without the reports, a buffer freed and mapped again at the same
 * address would be served by the old pages.
 *
 * Off unless coll_knemrs_region_cache is 1, and never with Open MPI 5 or
 * later (see knemrs_cache_enable).
 *
 * The hooks are those Open MPI's own registration caches use: opening the
 * memory framework installs the patcher (munmap, mmap MAP_FIXED, mremap,
 * madvise, brk, shmdt), which calls the release callbacks before the
 * memory goes.  Opened on the first team that wants a cache, once per
 * process; closed with the component.
 */
#include "coll_knemrs.h"

#include <pthread.h>

#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/memory/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/util/output.h"

/* 1: our release callback is registered; -1: the hooks cannot report
 * releases here (no cache); 0: not tried since the component opened.
 * Under the lock: two threads may make the first teams of two
 * communicators at once. */
static int knemrs_hooks;
static int knemrs_framework_opened;
static pthread_mutex_t knemrs_hooks_lock = PTHREAD_MUTEX_INITIALIZER;

/* Runs inside munmap and friends: knem_rs_note_release only appends to a
 * lock-free log (no allocation, no lock). */
static void knemrs_mem_release(void *buf, size_t length, void *cbdata, bool from_alloc)
{
	(void)cbdata;
	(void)from_alloc;
	knem_rs_note_release(buf, length);
}

static void knemrs_hooks_init(void)
{
	const int need = OPAL_MEMORY_FREE_SUPPORT | OPAL_MEMORY_MUNMAP_SUPPORT;
	int rc;

	knemrs_hooks = -1;
	if (mca_base_framework_open(&opal_memory_base_framework, 0) != OPAL_SUCCESS) {
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: the memory framework does not open: no region cache");
		return;
	}
	knemrs_framework_opened = 1;
	if ((opal_mem_hooks_support_level() & need) != need) {
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: memory hooks support level %d cannot report every release: "
			"no region cache", opal_mem_hooks_support_level());
		return;
	}
	rc = opal_mem_hooks_register_release(knemrs_mem_release, NULL);
	if (rc != OPAL_SUCCESS) {
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: registering the release callback failed (%d): no region cache",
			rc);
		return;
	}
	knemrs_hooks = 1;
}

void knemrs_cache_enable(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm)
{
	int entries = mca_coll_knemrs_component.cache_entries;
	size_t bytes = mca_coll_knemrs_component.cache_bytes;

	if (!mca_coll_knemrs_component.region_cache || entries <= 0 || bytes == 0)
		return;
#if OMPI_MAJOR_VERSION >= 5
	/* With Debian's 5.0.7 and 6.0 (and their glibc) a kept region served
	 * a buffer whose pages had changed: the hooks did not report every
	 * release there (coll_check verify got wrong bytes), so no cache. */
	opal_output_verbose(10, mca_coll_knemrs_component.output,
		"coll:knemrs: %s: no region cache on Open MPI 5 and later: their memory "
		"hooks did not report every release in our checks", comm->c_name);
	return;
#endif
	pthread_mutex_lock(&knemrs_hooks_lock);
	if (knemrs_hooks == 0)
		knemrs_hooks_init();
	pthread_mutex_unlock(&knemrs_hooks_lock);
	if (knemrs_hooks != 1)
		return;
	if (knem_rs_team_cache_regions(m->team, (size_t)entries, bytes) != 0) {
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: %s: no region cache: %s", comm->c_name, knem_rs_last_error());
		return;
	}
	m->caching = 1;
	opal_output_verbose(10, mca_coll_knemrs_component.output,
		"coll:knemrs: %s: region cache of %d regions, %zu bytes; memory hooks report "
		"releases", comm->c_name, entries, bytes);
}

void knemrs_cache_report(mca_coll_knemrs_module_t *m)
{
	knem_rs_cache_stats s;

	if (!m->caching || knem_rs_team_region_cache_stats(m->team, &s) != 0)
		return;
	opal_output_verbose(10, mca_coll_knemrs_component.output,
		"coll:knemrs: region cache: hits %llu, misses %llu, invalidated %llu, "
		"evicted %llu, kept %llu regions of %llu bytes until now",
		(unsigned long long)s.hits, (unsigned long long)s.misses,
		(unsigned long long)s.invalidated, (unsigned long long)s.evicted,
		(unsigned long long)s.entries, (unsigned long long)s.bytes);
}

void knemrs_cache_close(void)
{
	/* Every communicator, and so every team and its regions, is gone by
	 * the time the component closes (MPI_Finalize). */
	pthread_mutex_lock(&knemrs_hooks_lock);
	if (knemrs_hooks == 1)
		(void)opal_mem_hooks_unregister_release(knemrs_mem_release);
	if (knemrs_framework_opened)
		(void)mca_base_framework_close(&opal_memory_base_framework);
	knemrs_hooks = 0;
	knemrs_framework_opened = 0;
	pthread_mutex_unlock(&knemrs_hooks_lock);
}
