/* SPDX-License-Identifier: GPL-2.0-only OR BSD-3-Clause */
/*
 * abi_check.c - include/knem_io.h as userspace clients see it, checked
 * against the facts of KNEM ABI 0x0d at compile time.
 *
 * check.sh builds this file as C89, C99, C++98 and C++17 with warnings as
 * errors.  Each fact becomes an array type whose size is negative when the
 * fact is false (the one compile-time assertion C89 has), so a wrong size,
 * offset, flag or ioctl number stops the build; the program itself does
 * nothing and prints nothing.
 */
#include <stddef.h>

#include "knem_io.h"

#define KNEM_ABI_FACT(name, expr) \
	typedef char knem_abi_fact_##name[(expr) ? 1 : -1];
#include "knem_abi_facts.h"
#undef KNEM_ABI_FACT

int main(void)
{
	return 0;
}
