/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * knem_thunks.S - fallback speculation thunks for the Rust core.
 *
 * knem_core.o is built once for every kernel, with retpolines and the return
 * thunk, so it calls __x86_indirect_thunk_<reg> and jumps to
 * __x86_return_thunk.  Kernels built with those mitigations export them and
 * this file is then empty.  For a kernel built without them, Kbuild probes
 * Module.symvers and defines KNEM_NEED_* so the module still links: the
 * fallbacks are plain indirect jumps and returns, which is exactly what
 * such a kernel does itself.  They are weak so that a definition the kernel
 * provides in some other way always wins.
 */
#ifdef KNEM_NEED_RETURN_THUNK
	.text
	.weak __x86_return_thunk
	.type __x86_return_thunk, @function
__x86_return_thunk:
	ret
	int3
	.size __x86_return_thunk, . - __x86_return_thunk
#endif

#ifdef KNEM_NEED_INDIRECT_THUNKS
.macro knem_indirect_thunk reg
	.weak __x86_indirect_thunk_\reg
	.type __x86_indirect_thunk_\reg, @function
__x86_indirect_thunk_\reg:
	jmp *%\reg
	int3
	.size __x86_indirect_thunk_\reg, . - __x86_indirect_thunk_\reg
.endm

	.text
	knem_indirect_thunk rax
	knem_indirect_thunk rbx
	knem_indirect_thunk rcx
	knem_indirect_thunk rdx
	knem_indirect_thunk rsi
	knem_indirect_thunk rdi
	knem_indirect_thunk rbp
	knem_indirect_thunk r8
	knem_indirect_thunk r9
	knem_indirect_thunk r10
	knem_indirect_thunk r11
	knem_indirect_thunk r12
	knem_indirect_thunk r13
	knem_indirect_thunk r14
	knem_indirect_thunk r15
#endif
