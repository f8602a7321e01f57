// SPDX-License-Identifier: GPL-2.0-only
/*
 * compat32-check.c - a 32-bit (i386) client of /dev/knem, to check the
 * compat_ioctl and mmap paths: the ABI structs have the same layout for
 * 32-bit callers, so the same ioctl numbers and bytes must work.
 *
 * No 32-bit libc is needed: the program is freestanding and makes its
 * system calls with int $0x80.  knem_io.h is taken in its kernel flavour
 * (<linux/types.h>), which the host's UAPI headers provide.
 *
 *   tests/vm/check-shim (builds it and runs it with the other shim checks), or
 *   gcc -m32 -static -nostdlib -ffreestanding -fno-pic -fno-builtin -O2 \
 *       -D__KERNEL__ -Iinclude -idirafter /usr/include/x86_64-linux-gnu \
 *       -o build/compat32-check tests/vm/compat32-check.c
 *   tests/vm/run --add build/compat32-check -- compat32-check
 *
 * Prints one line per check and "N passed, N failed" last.
 */
#include "knem_io.h"

#define NR_EXIT 1
#define NR_WRITE 4
#define NR_OPEN 5
#define NR_CLOSE 6
#define NR_IOCTL 54
#define NR_MMAP2 192

#define O_RDONLY 0
#define O_RDWR 2
#define PROT_RW 3
#define MAP_SHARED 1
#define EBADF 9
#define PAGE 4096

static long sys3(long nr, long a, long b, long c)
{
	long ret;

	asm volatile("int $0x80"
		     : "=a"(ret)
		     : "a"(nr), "b"(a), "c"(b), "d"(c)
		     : "memory");
	return ret;
}

/* mmap2 with a page offset of 0, the only one the status array takes. */
static long sys_mmap2_at0(long len, long prot, long flags, long fd)
{
	long ret;

	/* The sixth argument goes in ebp, the frame pointer: zero it briefly. */
	asm volatile("push %%ebp\n\txor %%ebp, %%ebp\n\tint $0x80\n\tpop %%ebp"
		     : "=a"(ret)
		     : "a"(NR_MMAP2), "b"(0), "c"(len), "d"(prot), "S"(flags),
		       "D"(fd)
		     : "memory");
	return ret;
}

/* gcc may emit calls to these even in freestanding code. */
void *memset(void *s, int c, unsigned long n)
{
	unsigned char *p = s;

	while (n--)
		*p++ = (unsigned char)c;
	return s;
}

void *memcpy(void *d, const void *s, unsigned long n)
{
	unsigned char *dp = d;
	const unsigned char *sp = s;

	while (n--)
		*dp++ = *sp++;
	return d;
}

static void put(const char *s)
{
	unsigned long n = 0;

	while (s[n])
		n++;
	sys3(NR_WRITE, 1, (long)s, (long)n);
}

static void put_num(unsigned n)
{
	char buf[12];
	int i = sizeof(buf) - 1;

	buf[i] = 0;
	do {
		buf[--i] = (char)('0' + n % 10);
		n /= 10;
	} while (n);
	put(buf + i);
}

static unsigned passed, failed;

static void check(int ok, const char *what)
{
	put(ok ? "ok   " : "FAIL ");
	put(what);
	put("\n");
	if (ok)
		passed++;
	else
		failed++;
}

static unsigned char region[3 * PAGE] __attribute__((aligned(PAGE)));
static unsigned char local[2 * PAGE];

static int same(const unsigned char *a, const unsigned char *b, unsigned n)
{
	while (n--)
		if (*a++ != *b++)
			return 0;
	return 1;
}

static void run(void)
{
	struct knem_cmd_param_iovec iov;
	struct knem_cmd_create_region cr;
	struct knem_cmd_inline_copy ic;
	struct knem_cmd_info info;
	volatile unsigned char *slots;
	long fd, ro, ret;
	unsigned i;

	ro = sys3(NR_OPEN, (long)KNEM_DEVICE_FILENAME, O_RDONLY, 0);
	check(ro >= 0 && sys3(NR_IOCTL, ro, (long)KNEM_CMD_GET_INFO,
			      (long)&info) == -EBADF,
	      "32-bit: O_RDONLY ioctl fails with EBADF");
	sys3(NR_CLOSE, ro, 0, 0);

	fd = sys3(NR_OPEN, (long)KNEM_DEVICE_FILENAME, O_RDWR, 0);
	check(fd >= 0, "32-bit: O_RDWR open");
	if (fd < 0)
		return;

	memset(&info, 0, sizeof(info));
	ret = sys3(NR_IOCTL, fd, (long)KNEM_CMD_GET_INFO, (long)&info);
	check(ret == 0 && info.abi == KNEM_ABI_VERSION, "32-bit: GET_INFO");

	ret = sys_mmap2_at0(PAGE, PROT_RW, MAP_SHARED, fd);
	check(ret > 0 || ret < -4095, "32-bit: status array mmap");
	slots = (volatile unsigned char *)ret;

	iov.base = (unsigned long)(region + 10);
	iov.len = sizeof(region) - 20;
	memset(&cr, 0xa5, sizeof(cr));  /* pad must be ignored */
	cr.iovec_array = (unsigned long)&iov;
	cr.iovec_nr = 1;
	cr.flags = 0;
	cr.protection = 3;  /* PROT_READ | PROT_WRITE */
	ret = sys3(NR_IOCTL, fd, (long)KNEM_CMD_CREATE_REGION, (long)&cr);
	check(ret == 0 && cr.cookie != 0, "32-bit: CREATE_REGION");

	for (i = 0; i < sizeof(local); i++)
		local[i] = (unsigned char)(i * 7 + 1);
	iov.base = (unsigned long)local;
	iov.len = sizeof(local);
	memset(&ic, 0, sizeof(ic));
	ic.local_iovec_array = (unsigned long)&iov;
	ic.local_iovec_nr = 1;
	ic.write = 1;
	ic.remote_cookie = cr.cookie;
	ic.remote_offset = 100;
	ic.flags = KNEM_FLAG_ASYNCDMACOMPLETE;
	ic.async_status_index = 3;
	ret = sys3(NR_IOCTL, fd, (long)KNEM_CMD_INLINE_COPY, (long)&ic);
	check(ret == 0 && ic.current_status == KNEM_STATUS_SUCCESS &&
	      same(region + 110, local, sizeof(local)),
	      "32-bit: INLINE_COPY write lands in the region");
	check(slots[3] == KNEM_STATUS_SUCCESS && slots[2] == KNEM_STATUS_PENDING,
	      "32-bit: status slot 3 written through the mapping");

	ret = sys3(NR_IOCTL, fd, (long)KNEM_CMD_DESTROY_REGION, (long)&cr.cookie);
	check(ret == 0, "32-bit: DESTROY_REGION");
	sys3(NR_CLOSE, fd, 0, 0);
}

__attribute__((force_align_arg_pointer, noreturn)) void _start(void)
{
	run();
	put_num(passed);
	put(" passed, ");
	put_num(failed);
	put(" failed\n");
	sys3(NR_EXIT, failed != 0, 0, 0);
	for (;;)
		;
}
