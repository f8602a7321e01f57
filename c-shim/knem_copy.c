// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_copy.c - moving bytes in and out of pinned pages.
 *
 * kmap_local_page() (or kmap()) mappings may be held across a page fault, so the copy
 * to or from the caller's memory can fault its own pages in while the
 * region's page stays mapped; the region's pages are pinned and cannot go
 * away underneath.
 */
#include <linux/bug.h>
#include <linux/highmem.h>
#include <linux/kthread.h>
#include <linux/mm.h>
#include <linux/sched.h>
#include <linux/sched/signal.h>
#include <linux/string.h>
#include <linux/uaccess.h>

#include "knem_compat.h"
#include "knem_core.h"
#include "knem_shim.h"

/*
 * Asked between pieces of a copy: a dying process (SIGKILL, OOM kill) must
 * not stay in the kernel for the rest of a long copy, nor a release wait
 * for the offload thread to finish one.
 */
int knem_shim_copy_should_stop(void)
{
	if (fatal_signal_pending(current))
		return 1;
	return (current->flags & PF_KTHREAD) && kthread_should_stop();
}

/* The core promises chunks that stay within one page; hold it to that. */
static bool knem_range_in_page(u32 off, u64 len)
{
	return !WARN_ON_ONCE(off > PAGE_SIZE || len > PAGE_SIZE - off);
}

int knem_shim_copy_page_user(void *page, u32 off, u64 uaddr, u32 len,
			     int to_user)
{
	void __user *ubuf = u64_to_user_ptr(uaddr);
	unsigned long left;
	char *kaddr;

	knem_might_sleep();
	cond_resched();
	if (!knem_range_in_page(off, len))
		return -EFAULT;

	kaddr = knem_kmap_local(page);
	if (to_user)
		left = copy_to_user(ubuf, kaddr + off, len);
	else
		left = copy_from_user(kaddr + off, ubuf, len);
	knem_kunmap_local(page, kaddr);

	return left ? -EFAULT : 0;
}

void knem_shim_copy_page_page(void *dst_page, u32 dst_off, void *src_page,
			      u32 src_off, u32 len)
{
	char *dst, *src;

	/*
	 * Long copies (region to region, and everything the offload thread
	 * does) go page by page through here: let others run in between.
	 */
	knem_might_sleep();
	cond_resched();
	if (!knem_range_in_page(dst_off, len) ||
	    !knem_range_in_page(src_off, len))
		return;

	dst = knem_kmap_local(dst_page);
	src = knem_kmap_local(src_page);
	/* A region copied onto itself may overlap within one page. */
	if (dst_page == src_page)
		memmove(dst + dst_off, src + src_off, len);
	else
		memcpy(dst + dst_off, src + src_off, len);
	/* kmap_local mappings nest: release in reverse order. */
	knem_kunmap_local(src_page, src);
	knem_kunmap_local(dst_page, dst);
}
