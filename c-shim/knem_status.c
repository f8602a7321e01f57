// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_status.c - the status array a context shares with userspace.
 *
 * mmap(fd, offset 0, N) gives N one-byte slots in which asynchronous
 * requests report completion.  The memory is vmalloc()ed, zeroed (so
 * every slot starts PENDING), and inserted into the VMA page by page.
 *
 * Two users hold the array: the context, which the core may write through
 * until knem_core_ctx_release() returns, and every VMA mapping it (fork and
 * VMA splits add more).  The VMA pins the file, so today the file's release
 * comes last, but the array does not rely on that ordering: it is counted
 * and freed by whichever of the two lets go last.
 */
#include <linux/error-injection.h>
#include <linux/mm.h>
#include <linux/refcount.h>
#include <linux/slab.h>
#include <linux/vmalloc.h>

#include "knem_compat.h"
#include "knem_io.h"
#include "knem_core.h"
#include "knem_shim.h"

struct knem_status_array {
	refcount_t refs;        /* the context, plus one per mapping VMA */
	void *slots;
	void *owner;            /* its RLIMIT_MEMLOCK charge, or NULL */
};

void knem_status_put(struct knem_status_array *array)
{
	if (!array || !refcount_dec_and_test(&array->refs))
		return;
	vfree(array->slots);
	if (array->owner)
		knem_shim_owner_put(array->owner);
	kfree(array);
}

static void knem_status_vm_open(struct vm_area_struct *vma)
{
	struct knem_status_array *array = vma->vm_private_data;

	refcount_inc(&array->refs);
}

static void knem_status_vm_close(struct vm_area_struct *vma)
{
	knem_status_put(vma->vm_private_data);
}

static const struct vm_operations_struct knem_status_vm_ops = {
	.open = knem_status_vm_open,
	.close = knem_status_vm_close,
};

/*
 * Insert the array's pages into the caller's mapping one by one: each
 * inserted page takes its own reference, so the mapping stays valid for
 * as long as it lives whatever happens to the array afterwards.
 */
static int knem_status_insert_pages(struct vm_area_struct *vma, void *slots,
				    unsigned long len)
{
	unsigned long off;
	int err;

	for (off = 0; off < len; off += PAGE_SIZE) {
		err = vm_insert_page(vma, vma->vm_start + off,
				     vmalloc_to_page(slots + off));
		if (err)
			return err;
		cond_resched();
	}
	return 0;
}

/*
 * Map a new status array into vma and hand it to the core, which accepted
 * its offset and length (knem_core_ctx_status_mmap_check).  *slot is the
 * context's reference; the caller serialises calls for one context.
 */
int knem_status_mmap(struct knem_core_ctx *ctx,
		     struct knem_status_array **slot,
		     struct vm_area_struct *vma)
{
	unsigned long len = vma->vm_end - vma->vm_start;
	struct knem_status_array *array;
	int err;

	/*
	 * More than RAM can never succeed; refusing early spares the log the
	 * allocation-failure splat (and stack dump) vmalloc would print.
	 */
	if (len >> PAGE_SHIFT > totalram_pages())
		return -ENOMEM;

	array = kzalloc(sizeof(*array), GFP_KERNEL_ACCOUNT);
	if (!array)
		return -ENOMEM;
	/*
	 * Where the memcg cannot take the pages (below), they are charged as
	 * pinned pages are instead, to the caller's user against its
	 * RLIMIT_MEMLOCK (knem_owner.c; CAP_IPC_LOCK and account_pinned=0
	 * exempt it in the same way), and given back with the array: the
	 * memory is the kernel's, mapped into the process and never swapped,
	 * as io_uring's rings were charged before memcg could take them.  So
	 * one user's arrays are bounded in all, not per fd only.
	 */
	if (knem_status_charges_memlock()) {
		err = knem_shim_owner_new(len >> PAGE_SHIFT, &array->owner);
		if (err) {
			err = -ENOMEM;
			goto free_array;
		}
	}
	/*
	 * The size is the caller's choice: charge it to the caller's memcg
	 * (where the kernel can map charged pages, knem_compat.h), and fail
	 * with ENOMEM rather than wake the OOM killer or print an
	 * allocation-failure splat.  vmalloc_user() would do neither.
	 */
	array->slots = __vmalloc(len, knem_gfp_user_mapped() | __GFP_ZERO |
				      __GFP_NOWARN | __GFP_RETRY_MAYFAIL);
	if (!array->slots) {
		err = -ENOMEM;
		goto free_array;
	}

	/*
	 * The array belongs to this open file, whose context a forked child
	 * cannot use (EBADF): the child gets no copy of the mapping either,
	 * or it could overwrite the parent's status bytes.  VM_IO keeps it
	 * that way: madvise(MADV_DOFORK) refuses to clear VM_DONTCOPY on it
	 * (EINVAL), and GUP refuses it too, so no region can pin the slots.
	 * mremap() may not grow it past the pages inserted here.
	 */
	knem_vm_flags_set(vma, VM_DONTCOPY | VM_DONTEXPAND | VM_IO);
	err = knem_status_insert_pages(vma, array->slots, len);
	if (err)
		goto free_slots;

	/*
	 * If the core refuses, mmap() fails and the kernel zaps the VMA; each
	 * page inserted above keeps its own reference until then, so freeing
	 * the vmalloc area first is safe, and no user has seen the memory.
	 */
	err = knem_core_ctx_set_status_array(ctx, array->slots, len);
	if (err)
		goto free_slots;

	refcount_set(&array->refs, 2);  /* the context and this VMA */
	vma->vm_private_data = array;
	vma->vm_ops = &knem_status_vm_ops;
	*slot = array;
	return 0;

free_slots:
	vfree(array->slots);
free_array:
	if (array->owner)
		knem_shim_owner_put(array->owner);
	kfree(array);
	return err;
}
/* fail_function may refuse a status array whole (tests/faults). */
ALLOW_ERROR_INJECTION(knem_status_mmap, ERRNO);
