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

#include <linux/mm.h>
#include <linux/types.h>

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

#endif /* KNEM_COMPAT_H */
