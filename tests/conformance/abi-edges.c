// SPDX-License-Identifier: GPL-2.0-only
/*
 * abi-edges.c - corners of the ABI any client may hit: the statistics fd,
 * the one-status-array rule, unknown commands, flag bits outside a
 * command's mask (dropped), destroying from the wrong context, unreadable
 * iovec arrays, single-use regions and failed checks, flags the module
 * cannot honour, short copies.
 */
#include <sched.h>

#include "conf.h"

/* An O_RDONLY open has no context: ioctl gives EBADF, mmap fails. */
static int abi_rdonly_ioctl_mmap_ebadf(void)
{
	struct knem_cmd_info info;
	void *p;
	int fd, e;

	fd = open(KNEM_DEVICE_FILENAME, O_RDONLY);
	CHECK(fd >= 0, "O_RDONLY open: %s", strerror(errno));
	memset(&info, 0, sizeof(info));
	e = err_of(ioctl(fd, KNEM_CMD_GET_INFO, &info));
	CHECK(e == EBADF, "GET_INFO on O_RDONLY fd: %s, want EBADF", ename(e));
	/* What clients do (shared, read-write): refused by the VFS. */
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		 KNEM_STATUS_ARRAY_FILE_OFFSET);
	CHECK(p == MAP_FAILED, "read-write status mmap of O_RDONLY fd worked");
	CHECK(errno == EACCES, "read-write mmap of O_RDONLY fd: %s, want "
	      "EACCES", ename(errno));
	/* A read-only mapping gets past the VFS: the module refuses it. */
	p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd,
		 KNEM_STATUS_ARRAY_FILE_OFFSET);
	CHECK(p == MAP_FAILED, "read-only status mmap of O_RDONLY fd worked");
	CHECK(errno == EBADF, "read-only mmap of O_RDONLY fd: %s, want EBADF",
	      ename(errno));
	close(fd);
	return 0;
}

/* `cat /dev/knem`: an O_RDONLY fd reads as non-empty text. */
static int abi_rdonly_read_text(void)
{
	char buf[16384];
	ssize_t n, got = 0, i;
	int fd;

	fd = open(KNEM_DEVICE_FILENAME, O_RDONLY);
	CHECK(fd >= 0, "O_RDONLY open: %s", strerror(errno));
	while ((n = read(fd, buf + got, sizeof(buf) - got)) > 0)
		got += n;
	CHECK(n == 0, "read: %s", strerror(errno));
	CHECK(got > 0, "read() of an O_RDONLY fd gave no text");
	for (i = 0; i < got; i++)
		CHECK(buf[i] == '\n' || buf[i] == '\t' ||
		      (buf[i] >= 0x20 && buf[i] < 0x7f),
		      "byte %zd of the statistics is 0x%02x, not text", i,
		      (unsigned char)buf[i]);
	close(fd);
	return 0;
}

/* At most one status array per fd; the first stays usable. */
static int abi_second_status_mmap_fails(void)
{
	volatile knem_status_t *s1, *s2;
	int fd, e;

	TRY(k_open(&fd));
	e = k_map_status(fd, 4096, &s1);
	CHECK(e == 0, "first status mmap: %s", ename(e));
	e = k_map_status(fd, 4096, &s2);
	CHECK(e != 0, "second status mmap on the same fd worked");
	CHECK(e == EBUSY, "second status mmap: %s, want EBUSY", ename(e));
	s1[10] = 7;
	CHECK(s1[10] == 7, "first mapping lost");
	close(fd);
	return 0;
}

/*
 * The status array lives at KNEM_STATUS_ARRAY_FILE_OFFSET only, and a
 * refused mapping leaves the fd free to map it there.
 */
static int abi_status_mmap_other_offset_einval(void)
{
	volatile knem_status_t *s;
	void *p;
	int fd, e;

	TRY(k_open(&fd));
	p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		 KNEM_STATUS_ARRAY_FILE_OFFSET + 4096);
	CHECK(p == MAP_FAILED, "status mmap at page 1 worked");
	CHECK(errno == EINVAL, "status mmap at page 1: %s, want EINVAL",
	      ename(errno));
	e = k_map_status(fd, 4096, &s);
	CHECK(e == 0, "status mmap after a refused one: %s", ename(e));
	close(fd);
	return 0;
}

static int abi_unknown_command_enotty(void)
{
	unsigned char arg[64];
	int fd, e;

	TRY(k_open(&fd));
	memset(arg, 0, sizeof(arg));
	e = err_of(ioctl(fd, _IO('K', 0x7f)));
	CHECK(e == ENOTTY, "_IO('K', 0x7f): %s, want ENOTTY", ename(e));
	/* Direction and size are part of the number: a wrong one is unknown. */
	e = err_of(ioctl(fd, _IOR('K', 0x10, struct knem_cmd_info), arg));
	CHECK(e == ENOTTY, "GET_INFO as _IOR: %s, want ENOTTY", ename(e));
	e = err_of(ioctl(fd, _IOWR('K', 0x21, struct knem_cmd_copy), arg));
	CHECK(e == ENOTTY, "CREATE_REGION with a 48-byte size: %s, want "
	      "ENOTTY", ename(e));
	close(fd);
	return 0;
}

/*
 * Flag bits outside a command's mask are dropped, not refused, as KNEM
 * does: a copy with SINGLEUSE, ANY_USER_ACCESS or bits no version of the
 * ABI defines proceeds as if they were clear; CREATE_REGION keeps only
 * SINGLEUSE and ANY_USER_ACCESS.
 */
static int abi_flags_outside_mask_ignored(void)
{
	static unsigned char buf[8192], local[100];
	const uint32_t extra[] = { 1U << 8, 1U << 15, 1U << 31, 0xffffff00U,
				   KNEM_FLAG_SINGLEUSE,
				   KNEM_FLAG_ANY_USER_ACCESS };
	knem_cookie_t cookie, good;
	unsigned int i, k;
	uint32_t st;
	int fd, e;

	for (i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 7 + 1);
	TRY(k_open(&fd));
	for (i = 0; i < 4; i++) {
		e = k_create(fd, buf, sizeof(buf), extra[i],
			     PROT_READ | PROT_WRITE, &cookie);
		CHECK(e == 0, "CREATE_REGION flags 0x%x: %s, want success",
		      extra[i], ename(e));
		/* Not single-use: the bits were dropped. */
		for (k = 0; k < 2; k++) {
			e = k_inline(fd, local, sizeof(local), 0, cookie, 0, 0,
				     0, &st);
			CHECK(e == 0 && st == KNEM_STATUS_SUCCESS,
			      "read %u of a region created with flags 0x%x: "
			      "%s, status %u", k, extra[i], ename(e), st);
		}
		e = k_destroy(fd, cookie);
		CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
	}
	e = k_create(fd, buf, sizeof(buf), 0, PROT_READ | PROT_WRITE, &good);
	CHECK(e == 0, "CREATE_REGION: %s", ename(e));
	for (i = 0; i < sizeof(extra) / sizeof(extra[0]); i++) {
		memset(local, 0, sizeof(local));
		e = k_inline(fd, local, sizeof(local), 0, good, i, extra[i], 0,
			     &st);
		CHECK(e == 0 && st == KNEM_STATUS_SUCCESS,
		      "INLINE_COPY flags 0x%x: %s, status %u, want success",
		      extra[i], ename(e), st);
		CHECK(memcmp(local, buf + i, sizeof(local)) == 0,
		      "INLINE_COPY flags 0x%x: wrong data", extra[i]);
	}
	e = k_destroy(fd, good);
	CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
	close(fd);
	return 0;
}

/* Only the creating context may destroy a region. */
static int abi_destroy_from_other_fd_einval(void)
{
	static unsigned char buf[4096];
	knem_cookie_t cookie;
	int a, b, e;

	TRY(k_open(&a));
	TRY(k_open(&b));
	e = k_create(a, buf, sizeof(buf), 0, PROT_READ, &cookie);
	CHECK(e == 0, "CREATE_REGION: %s", ename(e));
	e = k_destroy(b, cookie);
	CHECK(e == EINVAL, "DESTROY_REGION from another fd: %s, want EINVAL",
	      ename(e));
	e = k_destroy(a, cookie);
	CHECK(e == 0, "DESTROY_REGION from the creator after that: %s",
	      ename(e));
	close(a);
	close(b);
	return 0;
}

static int abi_create_unreadable_iovec_efault(void)
{
	struct knem_cmd_create_region cr;
	void *none;
	int fd, e;

	TRY(k_open(&fd));
	none = mmap(NULL, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	CHECK(none != MAP_FAILED, "mmap PROT_NONE: %s", strerror(errno));
	memset(&cr, 0, sizeof(cr));
	cr.iovec_array = (uintptr_t)none;
	cr.iovec_nr = 1;
	cr.protection = PROT_READ;
	e = err_of(ioctl(fd, KNEM_CMD_CREATE_REGION, &cr));
	CHECK(e == EFAULT, "CREATE_REGION with a PROT_NONE iovec array: %s, "
	      "want EFAULT", ename(e));
	/* The argument struct itself unreadable. */
	e = err_of(ioctl(fd, KNEM_CMD_CREATE_REGION, none));
	CHECK(e == EFAULT, "CREATE_REGION with a PROT_NONE argument: %s, "
	      "want EFAULT", ename(e));
	close(fd);
	return 0;
}

/* A refused access does not consume a single-use region; a use does. */
static int abi_singleuse_failed_check_not_consumed(void)
{
	static unsigned char buf[20000], local[20000];
	knem_cookie_t cookie;
	uint32_t st;
	int fd, e;

	TRY(k_open(&fd));
	fill(buf, sizeof(buf), 0x77, 0);
	e = k_create(fd, buf, sizeof(buf), KNEM_FLAG_SINGLEUSE, PROT_READ,
		     &cookie);
	CHECK(e == 0, "CREATE_REGION SINGLEUSE: %s", ename(e));
	e = k_inline(fd, local, sizeof(local), 1, cookie, 0, 0, 0, &st);
	CHECK(e == EACCES, "write to a read-only single-use region: %s, "
	      "want EACCES", ename(e));
	e = k_inline(fd, local, sizeof(local), 0, cookie, 0, 0, 0, &st);
	CHECK(e == 0, "read after the refused write: %s", ename(e));
	CHECK(st == KNEM_STATUS_SUCCESS, "current_status 0x%x", st);
	TRY(verify(local, sizeof(local), 0x77, 0, "data"));
	e = k_inline(fd, local, sizeof(local), 0, cookie, 0, 0, 0, &st);
	CHECK(e == EINVAL, "second read: %s, want EINVAL", ename(e));
	e = k_destroy(fd, cookie);
	CHECK(e == EINVAL, "DESTROY_REGION of a consumed region: %s, want "
	      "EINVAL", ename(e));
	close(fd);
	return 0;
}

/*
 * KNEM's own flags the module cannot honour are ignored, not refused, and
 * listed in ignored_flags: DMA without an engine is a plain copy.
 */
static int abi_dma_flag_without_engine(void)
{
	static unsigned char buf[65536], local[65536];
	struct knem_cmd_info info;
	knem_cookie_t cookie;
	uint32_t st;
	int fd, e;

	TRY(k_open(&fd));
	memset(&info, 0, sizeof(info));
	CHECK(ioctl(fd, KNEM_CMD_GET_INFO, &info) == 0, "GET_INFO: %s",
	      ename(errno));
	if (info.features & KNEM_FEATURE_DMA) {
		close(fd);
		return 0;       /* an engine is present: nothing to check */
	}
	CHECK(info.ignored_flags & KNEM_FLAG_DMA, "no DMA feature, yet "
	      "ignored_flags 0x%x lacks DMA", info.ignored_flags);
	fill(buf, sizeof(buf), 0x99, 0);
	e = k_create(fd, buf, sizeof(buf), 0, PROT_READ, &cookie);
	CHECK(e == 0, "CREATE_REGION: %s", ename(e));
	e = k_inline(fd, local, sizeof(local), 0, cookie, 0, KNEM_FLAG_DMA,
		     GARBAGE32, &st);
	CHECK(e == 0, "INLINE_COPY flags DMA: %s", ename(e));
	CHECK(st == KNEM_STATUS_SUCCESS, "current_status 0x%x, want SUCCESS",
	      st);
	TRY(verify(local, sizeof(local), 0x99, 0, "data"));
	close(fd);
	return 0;
}

/* Unbounded copies stop at the end of either side, still SUCCESS. */
static int abi_short_copy_success(void)
{
	static unsigned char buf[10000], local[8192];
	knem_cookie_t cookie;
	uint32_t st;
	int fd, e;

	TRY(k_open(&fd));
	fill(buf, sizeof(buf), 0x5a, 0);
	e = k_create(fd, buf, sizeof(buf), 0, PROT_READ, &cookie);
	CHECK(e == 0, "CREATE_REGION: %s", ename(e));
	memset(local, 0xee, sizeof(local));
	e = k_inline(fd, local, sizeof(local), 0, cookie, 9000, 0, 0, &st);
	CHECK(e == 0, "read of the last 1000 bytes: %s", ename(e));
	CHECK(st == KNEM_STATUS_SUCCESS, "current_status 0x%x", st);
	TRY(verify(local, 1000, 0x5a, 9000, "tail"));
	CHECK(local[1000] == 0xee, "copied past the end of the region");
	close(fd);
	return 0;
}

/*
 * A read-only region over two adjacent VMAs: what a malloc()ed buffer is
 * after a fork() split the heap (the old part keeps its anon_vma, brk
 * grows a new VMA), and what MPICH's and Open MPI's send buffers often
 * are.  The region must pin across the boundary and read back intact.
 */
static int abi_ro_region_spans_two_vmas(void)
{
	const size_t len = 16 * 4096;
	unsigned char *local = xalloc(len);
	knem_cookie_t cookie;
	unsigned char *a;
	int fd, e, prot;
	uint32_t st;

	TRY(k_open(&fd));
	for (prot = 0; prot < 2; prot++) {
		const char *how = prot ? "read-only" : "read-write";

		a = mmap(NULL, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		CHECK(a != MAP_FAILED, "mmap: %s", strerror(errno));
		fill(a, len, 0x3c + prot, 0);
		/* Split the mapping: same memory, two VMAs. */
		if (prot)
			CHECK(mprotect(a + len / 2, len / 2, PROT_READ) == 0,
			      "mprotect: %s", strerror(errno));
		else
			CHECK(madvise(a + len / 2, len / 2, MADV_DONTFORK) == 0,
			      "madvise: %s", strerror(errno));
		e = k_create(fd, a + 100, len - 200, 0, PROT_READ, &cookie);
		CHECK(e == 0, "PROT_READ region over a read-write VMA and a "
		      "%s one: %s", how, ename(e));
		memset(local, 0, len);
		e = k_inline(fd, local, len - 200, 0, cookie, 0, 0, 0, &st);
		CHECK(e == 0, "read: %s", ename(e));
		CHECK(st == KNEM_STATUS_SUCCESS, "current_status 0x%x", st);
		TRY(verify(local, len - 200, 0x3c + prot, 100, "data"));
		e = k_destroy(fd, cookie);
		CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
		munmap(a, len);
	}
	close(fd);
	return 0;
}

/* Async requests need a status array and an index inside it */
static int abi_async_status_array_rules(void)
{
	static unsigned char buf[8192], local[8192];
	volatile knem_status_t *s;
	knem_cookie_t cookie;
	uint32_t st;
	int fd, e;

	TRY(k_open(&fd));
	e = k_create(fd, buf, sizeof(buf), 0, PROT_READ, &cookie);
	CHECK(e == 0, "CREATE_REGION: %s", ename(e));
	e = k_inline(fd, local, sizeof(local), 0, cookie, 0,
		     KNEM_FLAG_MEMCPYTHREAD, 0, &st);
	CHECK(e == EINVAL, "MEMCPYTHREAD without a status array: %s, want "
	      "EINVAL", ename(e));
	/*
	 * mmap() hands the driver whole pages, so a mapping of 16 bytes is an
	 * array of one page: the slots are the mapping.
	 */
	e = k_map_status(fd, 16, &s);
	CHECK(e == 0, "status mmap: %s", ename(e));
	e = k_inline(fd, local, sizeof(local), 0, cookie, 0,
		     KNEM_FLAG_MEMCPYTHREAD, 4096, &st);
	CHECK(e == EINVAL, "MEMCPYTHREAD with index 4096 of a one-page "
	      "array: %s, want EINVAL", ename(e));
	/* The same request with the last valid index is accepted. */
	e = k_inline(fd, local, sizeof(local), 0, cookie, 0,
		     KNEM_FLAG_MEMCPYTHREAD, 4095, &st);
	CHECK(e == 0, "MEMCPYTHREAD with index 4095: %s", ename(e));
	while (s[4095] == KNEM_STATUS_PENDING)
		sched_yield();
	CHECK(s[4095] == KNEM_STATUS_SUCCESS, "slot 4095: %d", s[4095]);
	close(fd);
	return 0;
}

static const struct conf_case cases[] = {
	{ "abi_rdonly_ioctl_mmap_ebadf", abi_rdonly_ioctl_mmap_ebadf },
	{ "abi_rdonly_read_text", abi_rdonly_read_text },
	{ "abi_second_status_mmap_fails", abi_second_status_mmap_fails },
	{ "abi_status_mmap_other_offset_einval",
	  abi_status_mmap_other_offset_einval },
	{ "abi_unknown_command_enotty", abi_unknown_command_enotty },
	{ "abi_flags_outside_mask_ignored", abi_flags_outside_mask_ignored },
	{ "abi_destroy_from_other_fd_einval",
	  abi_destroy_from_other_fd_einval },
	{ "abi_create_unreadable_iovec_efault",
	  abi_create_unreadable_iovec_efault },
	{ "abi_singleuse_failed_check_not_consumed",
	  abi_singleuse_failed_check_not_consumed },
	{ "abi_dma_flag_without_engine", abi_dma_flag_without_engine },
	{ "abi_short_copy_success", abi_short_copy_success },
	{ "abi_ro_region_spans_two_vmas", abi_ro_region_spans_two_vmas },
	{ "abi_async_status_array_rules", abi_async_status_array_rules },
	{ NULL, NULL }
};

int main(int argc, char **argv)
{
	return conf_main(cases, argc, argv);
}
