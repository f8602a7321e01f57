// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_pin.c - long-term pinning of a region's user pages.
 *
 * Regions keep their pages pinned for as long as they live, so the pins are
 * FOLL_LONGTERM: the kernel first migrates pages out of CMA and ZONE_MOVABLE,
 * and refuses memory that can never stay put (fsdax).
 * Copies from a pinned region then never touch the owner's mm.
 */
#include <linux/backing-dev.h>
#include <linux/delay.h>
#include <linux/error-injection.h>
#include <linux/fs.h>
#include <linux/kernel.h>
#include <linux/minmax.h>
#include <linux/mm.h>
#include <linux/mmap_lock.h>
#include <linux/moduleparam.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/wait.h>

#include "knem_compat.h"
#include "knem_core.h"
#include "knem_shim.h"

/*
 * Pin at most this many pages (256 MiB) per call: the count must fit
 * pin_user_pages_fast()'s int, and one call's pins of a single page (a
 * page repeated in the range cannot be, but see below) stay far below the
 * headroom KNEM_PIN_REFS_MAX leaves.  The contract allows a short count;
 * the core calls again for the rest.
 */
#define KNEM_PIN_BATCH (1UL << 16)

/*
 * Each FOLL_PIN of a small page adds GUP_PIN_COUNTING_BIAS (1024) to its
 * int refcount, so 2^21 pins of one page - many iovecs over the same page,
 * in one region or many, by any number of users: a shared library's page
 * cache page can be pinned read-only by anyone - would overflow it, and
 * GUP warns (a crash under panic_on_warn) before it refuses.  A page whose
 * count is past 2^29 after our pin (2^19 pins of a small page) is refused
 * with ENOMEM.  That check runs after pinning, so it must be impossible
 * for pins not checked yet to take a page from 2^29 past 2^31: all
 * callers together may hold at most KNEM_PINS_UNCHECKED (2^20 pins, 2^30
 * references) between pinning and the check, reserved before pinning.
 * That leaves 2^29 references for the page's other users.
 *
 * The pool is the node's, and a GUP can sleep for as long as userspace
 * wants: a userfaultfd range whose handler never answers, a FUSE file whose
 * daemon does not.  So a call reserves at most KNEM_PIN_CHUNK pins at a
 * time, right before pinning a chunk, and gives them back once the chunk
 * is checked: a stalled caller keeps one chunk of the pool, and it takes
 * KNEM_PINS_UNCHECKED / KNEM_PIN_CHUNK (2048) of them stalled at once to
 * empty it.  A caller finding the pool empty does not wait for it behind
 * them: with pages pinned already it returns those (a short count, which
 * the contract allows), otherwise it waits at most KNEM_PINS_WAIT for a
 * chunk to come back and fails with ENOMEM after.
 */
#define KNEM_PIN_REFS_MAX (1 << 29)
#define KNEM_PINS_UNCHECKED (1L << 20)
#define KNEM_PIN_CHUNK 512L
#define KNEM_PINS_WAIT HZ

static atomic_long_t knem_pins_unchecked = ATOMIC_LONG_INIT(0);
static DECLARE_WAIT_QUEUE_HEAD(knem_pins_wq);

#ifdef KNEM_FAULT_INJECT
/*
 * Test builds: lower both bounds so a test can pin a page past them, sleep
 * between the pin and the check to let concurrent pins pile up, and keep
 * the highest page refcount a check saw (write anything to reset it).
 */
static int fault_pin_refs_max;
module_param(fault_pin_refs_max, int, 0644);
MODULE_PARM_DESC(fault_pin_refs_max, "test builds: refuse a page past this many references (0: 2^29)");

static long fault_pins_unchecked;
module_param(fault_pins_unchecked, long, 0644);
MODULE_PARM_DESC(fault_pins_unchecked, "test builds: pins all callers may hold between pinning and the check (0: 2^20)");

static uint fault_pin_check_delay_us;
module_param(fault_pin_check_delay_us, uint, 0644);
MODULE_PARM_DESC(fault_pin_check_delay_us, "test builds: sleep this long between pinning and the refcount check (us)");

static atomic64_t knem_pin_refs_peak = ATOMIC64_INIT(0);
module_param_cb(fault_pin_refs_peak, &knem_fault_max_ops, &knem_pin_refs_peak, 0644);
MODULE_PARM_DESC(fault_pin_refs_peak, "test builds: highest page refcount the check after a pin saw (write to reset)");

static int knem_pin_refs_max(void)
{
	int max = READ_ONCE(fault_pin_refs_max);

	return max > 0 ? max : KNEM_PIN_REFS_MAX;
}

static long knem_pins_unchecked_max(void)
{
	long max = READ_ONCE(fault_pins_unchecked);

	return max > 0 ? max : KNEM_PINS_UNCHECKED;
}

static void knem_pin_test_delay(void)
{
	uint us = READ_ONCE(fault_pin_check_delay_us);

	if (us)
		fsleep(us);
}

static void knem_pin_refs_seen(int refs)
{
	knem_fault_max_note(&knem_pin_refs_peak, refs);
}
#else
static inline int knem_pin_refs_max(void)
{
	return KNEM_PIN_REFS_MAX;
}

static inline long knem_pins_unchecked_max(void)
{
	return KNEM_PINS_UNCHECKED;
}

static inline void knem_pin_test_delay(void)
{
}

static inline void knem_pin_refs_seen(int refs)
{
}
#endif

/*
 * Up to nr (at most KNEM_PIN_CHUNK) of the unchecked pins, at least one;
 * 0 when the pool is empty and wait is false; -ENOMEM when it stayed
 * empty for KNEM_PINS_WAIT; -EINTR on a fatal signal.
 */
static long knem_pins_reserve(long nr, bool wait)
{
	long cur = atomic_long_read(&knem_pins_unchecked);
	long take, left;

	nr = min(nr, KNEM_PIN_CHUNK);
	for (;;) {
		take = min(nr, knem_pins_unchecked_max() - cur);
		if (take <= 0) {
			if (!wait)
				return 0;
			left = wait_event_killable_timeout(knem_pins_wq,
							   atomic_long_read(&knem_pins_unchecked) <
							   knem_pins_unchecked_max(),
							   KNEM_PINS_WAIT);
			if (left < 0)
				return -EINTR;
			if (!left)
				return -ENOMEM;
			cur = atomic_long_read(&knem_pins_unchecked);
			continue;
		}
		if (atomic_long_try_cmpxchg(&knem_pins_unchecked, &cur,
					    cur + take))
			return take;
	}
}

static void knem_pins_unreserve(long nr)
{
	atomic_long_sub(nr, &knem_pins_unchecked);
	wake_up(&knem_pins_wq);
}

static bool knem_pins_overflow(struct page **pages, long nr)
{
	int max = knem_pin_refs_max();
	int refs;
	long i;

	for (i = 0; i < nr; i++) {
		refs = page_ref_count(compound_head(pages[i]));
		knem_pin_refs_seen(refs);
		if (refs > max)
			return true;
	}
	return false;
}

/*
 * A read-only region must keep seeing what its owner writes later.  Where
 * GUP does not guarantee that for COW mappings (knem_compat.h), pin with
 * write intent instead, forced as ptrace does so it also works where the
 * mapping is not writable yet: GUP then breaks COW now, and the page pinned
 * is the private page later writes go to.  The data does not change.  One
 * VMA at a time, so the count may come back smaller; the caller's pin is a
 * short one then, which the contract allows.  Caller holds mmap_lock.
 */
static long knem_ro_pin_flags(struct mm_struct *mm, u64 start, u64 nr,
			      unsigned int *gup_flags)
{
	struct vm_area_struct *vma = knem_vma_lookup(mm, start);

	if (vma) {
		/* Forcing must not make unreadable memory pinnable. */
		if (knem_vma_is_cow(vma) && (vma->vm_flags & VM_READ))
			*gup_flags |= FOLL_WRITE | FOLL_FORCE;
		nr = min_t(u64, nr, (vma->vm_end - start) >> PAGE_SHIFT);
	}
	/* No VMA: leave it to the pin to fail with EFAULT. */
	return nr;
}

/* The first of pages[0..nr) that is not anonymous; nr when all are. */
static long knem_first_file_page(struct page **pages, long nr)
{
	long i;

	for (i = 0; i < nr && PageAnon(pages[i]); i++)
		;
	return i;
}

/*
 * A read-only pin where the COW break above is needed.  The decision is
 * taken under mmap_lock and the fast pin runs after it, so another thread
 * of the caller may have mapped something else there in between: a shared
 * file mapping would then get a forced long-term write pin.  A forced
 * write to a COW mapping leaves only anonymous pages (the private copies),
 * which costs one pass over them to check; any other page means the
 * mapping changed, and the pin is taken again with the decision and
 * pin_user_pages() under one hold of mmap_lock, which a racing mmap()
 * needs for writing.
 */
static long knem_pin_read_cow_break(u64 start, u64 nr, struct page **pages)
{
	struct mm_struct *mm = current->mm;
	unsigned int gup_flags = FOLL_LONGTERM;
	long todo, pinned;

	if (mmap_read_lock_killable(mm))
		return -EINTR;
	todo = knem_ro_pin_flags(mm, start, nr, &gup_flags);
	mmap_read_unlock(mm);
	pinned = pin_user_pages_fast(start, todo, gup_flags, pages);
	if (pinned <= 0 || !(gup_flags & FOLL_WRITE) ||
	    knem_first_file_page(pages, pinned) == pinned)
		return pinned;

	unpin_user_pages(pages, pinned);
	if (mmap_read_lock_killable(mm))
		return -EINTR;
	gup_flags = FOLL_LONGTERM;
	todo = knem_ro_pin_flags(mm, start, nr, &gup_flags);
	pinned = knem_pin_user_pages_locked(start, todo, gup_flags, pages);
	mmap_read_unlock(mm);
	return pinned;
}

/*
 * A filesystem that writes its pages back, or wants to hear of writes to
 * them (page_mkwrite), does not expect a device to write a page it maps
 * shared while the page is pinned long-term: writeback can run meanwhile
 * and the write then lands in a page the filesystem believes clean.  GUP
 * refuses such pins itself since 6.5, with EFAULT; this is its rule, for
 * every kernel.  Shmem and hugetlbfs do neither, and a write pin of a
 * private mapping gets anonymous copies, so those stay pinnable.
 */
static bool knem_vma_refuses_write_pin(struct vm_area_struct *vma)
{
	const struct vm_operations_struct *ops = vma->vm_ops;

	if (!(vma->vm_flags & VM_SHARED) || !vma->vm_file)
		return false;
	if (ops && (ops->page_mkwrite || ops->pfn_mkwrite))
		return true;
	return mapping_can_writeback(vma->vm_file->f_mapping);
}

/*
 * How many of the nr pages from start a long-term write pin may take: up
 * to the first VMA that refuses one (the caller's pin is a short one then,
 * which the contract allows), EFAULT when that is the first.  A hole is
 * left to the pin, which fails there with EFAULT itself.  Caller holds
 * mmap_lock.
 */
static long knem_write_pin_span(struct mm_struct *mm, u64 start, u64 nr)
{
	struct vm_area_struct *vma;
	u64 addr = start, ok = 0;

	while (ok < nr) {
		vma = knem_vma_lookup(mm, addr);
		if (!vma) {
			if (!ok)
				ok = nr;
			break;
		}
		if (knem_vma_refuses_write_pin(vma))
			break;
		ok += (vma->vm_end - addr) >> PAGE_SHIFT;
		addr = vma->vm_end;
	}
	if (!ok)
		return -EFAULT;
	return min(ok, nr);
}

/*
 * Before 6.5 GUP pins whatever it finds mapped as it walks, so another
 * thread of the caller may have mapped a file over the range between the
 * check above and the pin.  Anonymous pages are always fine.  Any other
 * page must belong to the file of the shared VMA that maps its address
 * now, one the rule lets take write pins: that file's filesystem tracks no
 * writes, whatever happened in between.  Pages before the first one not
 * anonymous (first) were looked at already.  Caller holds mmap_lock.
 */
static bool knem_write_pins_allowed(struct mm_struct *mm, u64 start,
				    struct page **pages, long first, long nr)
{
	struct vm_area_struct *vma = NULL;
	u64 addr;
	long i;

	for (i = first; i < nr; i++) {
		if (PageAnon(pages[i]))
			continue;
		addr = start + ((u64)i << PAGE_SHIFT);
		if (!vma || addr >= vma->vm_end)
			vma = knem_vma_lookup(mm, addr);
		if (!vma || !(vma->vm_flags & VM_SHARED) || !vma->vm_file ||
		    knem_vma_refuses_write_pin(vma) ||
		    knem_page_mapping(pages[i]) != vma->vm_file->f_mapping)
			return false;
	}
	return true;
}

/*
 * A long-term write pin of up to nr pages from start, within the span the
 * rule above allows.  Where GUP applies the rule itself (6.5+), the check
 * only makes the answer a short count before the refused VMA.  Before,
 * the pages the fast pin took are checked afterwards: all anonymous (what
 * MPI buffers are) costs one pass over them; otherwise, under mmap_lock,
 * knem_write_pins_allowed(), and when that fails, the pin is taken again
 * with the check and pin_user_pages() under one hold of mmap_lock, which
 * a racing mmap() needs for writing (that variant never drops the lock).
 */
static long knem_pin_for_write(u64 start, u64 nr, unsigned int gup_flags,
			       struct page **pages)
{
	struct mm_struct *mm = current->mm;
	long todo, pinned, first;

	if (mmap_read_lock_killable(mm))
		return -EINTR;
	todo = knem_write_pin_span(mm, start, nr);
	mmap_read_unlock(mm);
	if (todo < 0)
		return todo;
	pinned = pin_user_pages_fast(start, todo, gup_flags, pages);
	if (pinned <= 0 || knem_gup_refuses_file_write_pins())
		return pinned;
	first = knem_first_file_page(pages, pinned);
	if (first == pinned)
		return pinned;

	if (mmap_read_lock_killable(mm)) {
		unpin_user_pages(pages, pinned);
		return -EINTR;
	}
	if (!knem_write_pins_allowed(mm, start, pages, first, pinned)) {
		unpin_user_pages(pages, pinned);
		pinned = knem_write_pin_span(mm, start, pinned);
		if (pinned > 0)
			pinned = knem_pin_user_pages_locked(start, pinned,
							    gup_flags, pages);
	}
	mmap_read_unlock(mm);
	return pinned;
}

/*
 * Pin one chunk of up to nr pages from start, its pins reserved first
 * (waiting for them only when wait is set); 0 when wait is not set and
 * the pool is empty.  *asked is how many the chunk tried.
 */
static noinline long knem_pin_chunk(u64 start, long nr, int write,
				    struct page **pages, bool wait, long *asked)
{
	unsigned int gup_flags = FOLL_LONGTERM;
	long reserved, pinned;

	reserved = knem_pins_reserve(nr, wait);
	if (reserved <= 0)
		return reserved;
	*asked = reserved;

	if (write)
		pinned = knem_pin_for_write(start, reserved,
					    gup_flags | FOLL_WRITE, pages);
	else if (knem_ro_pin_needs_cow_break())
		pinned = knem_pin_read_cow_break(start, reserved, pages);
	else
		pinned = pin_user_pages_fast(start, reserved, gup_flags, pages);
	if (pinned > 0)
		knem_pin_test_delay();
	if (pinned > 0 && knem_pins_overflow(pages, pinned)) {
		unpin_user_pages(pages, pinned);
		pr_info_ratelimited("knem: %s[%d]: a page is pinned too many times (over %u pins)\n",
				    current->comm, task_tgid_vnr(current),
				    knem_pin_refs_max() / GUP_PIN_COUNTING_BIAS);
		pinned = -ENOMEM;
	}
	knem_pins_unreserve(reserved);
	/*
	 * The contract promises an errno, never 0, when nothing was pinned
	 * (0 here says the pool was empty, see above).
	 */
	return pinned ? pinned : -EFAULT;
}
/* fail_function may make a chunk fail whole (tests/faults): never inlined. */
ALLOW_ERROR_INJECTION(knem_pin_chunk, ERRNO);

/*
 * Chunk by chunk (see KNEM_PIN_CHUNK), up to the first short or failed
 * chunk: what the chunks before pinned is a short count then.
 */
long knem_shim_pin_pages(u64 start, u64 nr, int write, void **pages)
{
	struct page **p = (struct page **)pages;
	long done = 0, asked, got;

	knem_might_sleep();
	if (!nr)
		return 0;
	if (!PAGE_ALIGNED(start))
		return -EINVAL;
	if (nr > KNEM_PIN_BATCH)
		nr = KNEM_PIN_BATCH;

	while (done < nr) {
		asked = 0;
		got = knem_pin_chunk(start + ((u64)done << PAGE_SHIFT),
				     nr - done, write, p + done, !done, &asked);
		if (got <= 0)
			return done ? done : got;
		done += got;
		if (got < asked || fatal_signal_pending(current))
			break;
	}
	return done;
}

void knem_shim_unpin_pages(void **pages, u64 nr, int dirty)
{
	knem_might_sleep();
	if (dirty)
		unpin_user_pages_dirty_lock((struct page **)pages, nr, true);
	else
		unpin_user_pages((struct page **)pages, nr);
}
