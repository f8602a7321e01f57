/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * knem_compat.h - differences between the kernels the shim builds for.
 *
 * Every difference is decided by a probe in Kbuild that looks at what the
 * kernel provides, never at its version number, and arrives here as a
 * KNEM_* define; the C files test the helpers below, not the defines.  (The
 * one other probe, for the speculation thunks, feeds knem_thunks.S.)
 */
#ifndef KNEM_COMPAT_H
#define KNEM_COMPAT_H

#include <linux/dmaengine.h>
#include <linux/highmem.h>
#include <linux/mm.h>
#include <linux/overflow.h>
#include <linux/pagemap.h>
#include <linux/slab.h>
#include <linux/types.h>
#include <linux/workqueue.h>

/*
 * KNEM_RO_PIN_COW_BREAK: a read-only FOLL_LONGTERM pin in a COW mapping may
 * hold the shared zero page or a page cache page that the owner's next
 * write replaces with a private copy, so the region would stop seeing the
 * owner's data.  The shim then breaks COW itself at pin time (knem_pin.c),
 * which is what newer kernels do inside GUP.
 */
static inline bool knem_ro_pin_needs_cow_break(void)
{
#ifdef KNEM_RO_PIN_COW_BREAK
	return true;
#else
	return false;
#endif
}

/*
 * KNEM_GUP_PIN_VMAS: pin_user_pages() still has its vmas argument, which
 * it lost in 6.5, the release whose GUP started refusing long-term write
 * pins of shared file mappings that track writes (knem_pin.c).  The two
 * came together, and the signature is what a probe can read: with it, GUP
 * pins whatever it finds mapped, and the shim checks the pages it pinned
 * (or checks and pins under one hold of mmap_lock).  pin_user_pages() is
 * the variant whose caller holds mmap_lock; it never drops it.
 */
static inline bool knem_gup_refuses_file_write_pins(void)
{
#ifdef KNEM_GUP_PIN_VMAS
	return false;
#else
	return true;
#endif
}

static inline long knem_pin_user_pages_locked(unsigned long start,
					      unsigned long nr,
					      unsigned int gup_flags,
					      struct page **pages)
{
#ifdef KNEM_GUP_PIN_VMAS
	return pin_user_pages(start, nr, gup_flags, pages, NULL);
#else
	return pin_user_pages(start, nr, gup_flags, pages);
#endif
}

/* The file a pinned page belongs to; needed only where GUP lacks the rule. */
static inline struct address_space *knem_page_mapping(struct page *page)
{
#ifdef KNEM_GUP_PIN_VMAS
	return page_mapping(page);
#else
	return NULL;
#endif
}

/*
 * KNEM_KMEMCG_PAGE_TYPE: before 5.11 a page charged to a memcg as kernel
 * memory carries the Kmemcg page type, kept in the word the mapcount uses,
 * so vm_insert_page() refuses it (EINVAL) and no process can map it.  The
 * pages the shim maps into a process (the status array) are then not
 * charged to the memcg but to RLIMIT_MEMLOCK (knem_status.c); since, they
 * are charged to the memcg.
 */
static inline gfp_t knem_gfp_user_mapped(void)
{
#ifdef KNEM_KMEMCG_PAGE_TYPE
	return GFP_KERNEL;
#else
	return GFP_KERNEL_ACCOUNT;
#endif
}

/* Where they are not charged, the status array charges RLIMIT_MEMLOCK. */
static inline bool knem_status_charges_memlock(void)
{
#ifdef KNEM_KMEMCG_PAGE_TYPE
	return true;
#else
	return false;
#endif
}

/*
 * KNEM_NO_VM_FLAGS_SET: before 6.3 a driver's mmap handler sets VMA flags
 * by writing vm_flags; since, only through vm_flags_set().  Either way the
 * caller holds mmap_lock for writing.
 */
static inline void knem_vm_flags_set(struct vm_area_struct *vma,
				     unsigned long flags)
{
#ifdef KNEM_NO_VM_FLAGS_SET
	vma->vm_flags |= flags;
#else
	vm_flags_set(vma, flags);
#endif
}

/*
 * KNEM_NO_VMA_LOOKUP: vma_lookup() (the VMA that contains addr, not merely
 * the next one) came in 5.14; find_vma() plus the start check is the same.
 * Caller holds mmap_lock.
 */
static inline struct vm_area_struct *knem_vma_lookup(struct mm_struct *mm,
						     unsigned long addr)
{
#ifdef KNEM_NO_VMA_LOOKUP
	struct vm_area_struct *vma = find_vma(mm, addr);

	return vma && vma->vm_start <= addr ? vma : NULL;
#else
	return vma_lookup(mm, addr);
#endif
}

/*
 * Whether writes to vma copy its pages (private and may become writable).
 * The kernel's test is vma_is_cow_mapping(vma) where it has one
 * (KNEM_HAVE_VMA_IS_COW_MAPPING), is_cow_mapping(flags) where it has that
 * (KNEM_HAVE_IS_COW_MAPPING), and before both (5.10) the same test on
 * vm_flags written out.
 */
static inline bool knem_vma_is_cow(struct vm_area_struct *vma)
{
#if defined(KNEM_HAVE_VMA_IS_COW_MAPPING)
	return vma_is_cow_mapping(vma);
#elif defined(KNEM_HAVE_IS_COW_MAPPING)
	return is_cow_mapping(vma->vm_flags);
#else
	return (vma->vm_flags & (VM_SHARED | VM_MAYWRITE)) == VM_MAYWRITE;
#endif
}

/*
 * KNEM_NO_KMAP_LOCAL: kmap_local_page() came in 5.11 (RT kernels of 5.10
 * carry it).  Before, kmap() is the mapping that may be held across a page
 * fault; unmapping it takes the page, not the address, so both helpers
 * take both.
 */
static inline void *knem_kmap_local(struct page *page)
{
#ifdef KNEM_NO_KMAP_LOCAL
	return kmap(page);
#else
	return kmap_local_page(page);
#endif
}

static inline void knem_kunmap_local(struct page *page, void *addr)
{
#ifdef KNEM_NO_KMAP_LOCAL
	kunmap(page);
#else
	kunmap_local(addr);
#endif
}

/* KNEM_NO_KREALLOC_ARRAY: krealloc_array() came in 5.12. */
static inline void *knem_krealloc_array(void *p, size_t n, size_t size,
					gfp_t flags)
{
#ifdef KNEM_NO_KREALLOC_ARRAY
	size_t bytes;

	if (unlikely(check_mul_overflow(n, size, &bytes)))
		return NULL;
	return krealloc(p, bytes, flags);
#else
	return krealloc_array(p, n, size, flags);
#endif
}

/*
 * The shared workqueue for work that may run on any CPU.  Kernels that
 * have system_dfl_wq (KNEM_HAVE_SYSTEM_DFL_WQ) warn about work queued on
 * the old names; before, system_unbound_wq is the same queue.
 */
static inline struct workqueue_struct *knem_system_dfl_wq(void)
{
#ifdef KNEM_HAVE_SYSTEM_DFL_WQ
	return system_dfl_wq;
#else
	return system_unbound_wq;
#endif
}

/*
 * The device to map a channel's buffers for.  Kernels with
 * dmaengine_get_dma_device() (KNEM_HAVE_DMAENGINE_GET_DMA_DEVICE) let a
 * channel map for a device of its own; before, it is the engine's.
 */
static inline struct device *knem_dma_chan_dev(struct dma_chan *chan)
{
#ifdef KNEM_HAVE_DMAENGINE_GET_DMA_DEVICE
	return dmaengine_get_dma_device(chan);
#else
	return chan->device->dev;
#endif
}

#endif /* KNEM_COMPAT_H */
