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
 * libknem_rs never keeps a region in the malloc heap (brk): with Debian's
 * Open MPI 5.0.7 and 6.0 (glibc 2.41, 2.43) the hooks do not see the heap
 * being trimmed, and kept heap regions gave wrong bytes.
 *
 * coll_knemrs_region_cache: 1 on, 0 off, -1 (the default) on where this
 * rank's pins are not limited (knemrs_pins_unlimited): kept regions stay
 * pinned, and under a memlock limit they would take the pins that the
 * next call, or another component, needs.
 *
 * The hooks are those Open MPI's own registration caches use: opening the
 * memory framework installs the patcher (munmap, mmap MAP_FIXED, mremap,
 * madvise, brk, shmdt), which calls the release callbacks before the
 * memory goes.  Opened once per process when the component is queried in
 * MPI_Init (knemrs_cache_init), not at the first team: the patcher
 * rewrites those functions in place, which is safe only while no other
 * thread may be inside them, and by the first collective application
 * threads may be running.  Then one munmap of a page of our own must
 * reach our callback (the self-test) before any team keeps a region.
 * Closed with the component.
 */
#include "coll_knemrs.h"

#include <pthread.h>
#include <stdio.h>
#include <sys/mman.h>
#include <unistd.h>

#include "opal/mca/base/mca_base_framework.h"
#include "opal/mca/memory/base/base.h"
#include "opal/memoryhooks/memory.h"
#include "opal/util/output.h"

/* 1: our release callback is registered and the self-test saw a munmap;
 * -1: no cache in this process (the hooks cannot report releases here,
 * the self-test failed, or the cache is off); 0: not tried since the
 * component opened.  Set in MPI_Init, read by every team after. */
static int knemrs_hooks;
static int knemrs_framework_opened;
static pthread_mutex_t knemrs_hooks_lock = PTHREAD_MUTEX_INITIALIZER;

/* The self-test's page, and whether a release covering it was reported
 * (the callback runs synchronously inside the munmap). */
static void *volatile knemrs_probe;
static volatile int knemrs_probe_seen;

/* Runs inside munmap and friends: knem_rs_note_release only appends to a
 * lock-free log (no allocation, no lock). */
static void knemrs_mem_release(void *buf, size_t length, void *cbdata, bool from_alloc)
{
	char *probe = knemrs_probe;

	(void)cbdata;
	(void)from_alloc;
	if (probe != NULL && (char *)buf <= probe && probe < (char *)buf + length)
		knemrs_probe_seen = 1;
	knem_rs_note_release(buf, length);
}

/* One munmap of a page of our own must reach knemrs_mem_release. */
static int knemrs_hooks_self_test(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	void *p = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int seen;

	if (p == MAP_FAILED)
		return 0;
	knemrs_probe_seen = 0;
	knemrs_probe = p;
	(void)munmap(p, page);
	seen = knemrs_probe_seen;
	knemrs_probe = NULL;
	return seen;
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
	if (!knemrs_hooks_self_test()) {
		(void)opal_mem_hooks_unregister_release(knemrs_mem_release);
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: memory hooks self-test: the munmap of a page was not reported: "
			"no region cache");
		return;
	}
	knemrs_hooks = 1;
	opal_output_verbose(10, mca_coll_knemrs_component.output,
		"coll:knemrs: memory hooks installed in MPI_Init; self-test: the munmap of a page "
		"was reported");
}

/* Whether knem lets this rank pin without limit (libknem_rs's test, the
 * one knemrs-tune makes too): RLIMIT_MEMLOCK unlimited, CAP_IPC_LOCK in
 * the initial user namespace, or the module told not to count
 * (account_pinned=N).  Otherwise *limit_kib is the limit. */
static int knemrs_pins_unlimited(unsigned long long *limit_kib)
{
	uint64_t kib = 0;
	int unlimited = knem_rs_pins_unlimited(&kib);

	*limit_kib = kib;
	return unlimited;
}

void knemrs_cache_init(void)
{
	unsigned long long limit_kib = 0;

	pthread_mutex_lock(&knemrs_hooks_lock);
	if (knemrs_hooks == 0) {
		if (mca_coll_knemrs_component.region_cache == 0 ||
		    mca_coll_knemrs_component.cache_entries <= 0 ||
		    mca_coll_knemrs_component.cache_bytes == 0)
			knemrs_hooks = -1;
		else if (mca_coll_knemrs_component.region_cache < 0 &&
			 !knemrs_pins_unlimited(&limit_kib))
			/* No team will keep regions (knemrs_cache_enable says
			 * why): leave the memory functions alone. */
			knemrs_hooks = -1;
		else
			knemrs_hooks_init();
	}
	pthread_mutex_unlock(&knemrs_hooks_lock);
}

void knemrs_cache_enable(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm)
{
	int entries = mca_coll_knemrs_component.cache_entries;
	size_t bytes = mca_coll_knemrs_component.cache_bytes;
	unsigned long long limit_kib = 0;
	int hooks;

	if (mca_coll_knemrs_component.region_cache == 0 || entries <= 0 || bytes == 0)
		return;
	if (mca_coll_knemrs_component.region_cache < 0 && !knemrs_pins_unlimited(&limit_kib)) {
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: %s: no region cache: this rank's pins are limited "
			"(RLIMIT_MEMLOCK %llu KiB); coll_knemrs_region_cache 1 keeps regions anyway",
			comm->c_name, limit_kib);
		return;
	}
	/* Decided in MPI_Init (knemrs_cache_init), never here. */
	pthread_mutex_lock(&knemrs_hooks_lock);
	hooks = knemrs_hooks;
	pthread_mutex_unlock(&knemrs_hooks_lock);
	if (hooks != 1) {
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: %s: no region cache: the memory hooks were not installed in "
			"MPI_Init or failed their self-test", comm->c_name);
		return;
	}
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
