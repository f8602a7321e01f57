// SPDX-License-Identifier: GPL-2.0-only
/*
 * shim-check.c - in-VM checks of what the C shim owns: the O_RDONLY
 * statistics fd, the status array's mmap rules and lifetime (close before
 * munmap, fork, split VMAs), pinned pages that really are the caller's
 * memory, and counters back at zero afterwards.  The full ABI suite is
 * tests/suite; this program needs only libc and include/knem_io.h.
 *
 *   tests/vm/check-shim (builds it and runs it with the other shim checks), or
 *   gcc -static -O2 -Wall -Wextra -Iinclude -o build/shim-check \
 *       tests/vm/shim-check.c
 *   tests/vm/run --add build/shim-check -- shim-check
 *
 * Prints one line per check and "N passed, N failed" last.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "knem_io.h"

#define PAGE 4096UL

static int passed, failed;

static void check(int ok, const char *fmt, ...)
{
	va_list ap;

	printf(ok ? "ok   " : "FAIL ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (ok)
		passed++;
	else
		failed++;
}

static int open_rdwr(void)
{
	int fd = open(KNEM_DEVICE_FILENAME, O_RDWR);

	if (fd < 0) {
		perror(KNEM_DEVICE_FILENAME);
		exit(1);
	}
	return fd;
}

/* errno of a failed call, 0 if it succeeded. */
static int err_of(long ret)
{
	return ret < 0 ? errno : 0;
}

static unsigned long long counter(const char *name)
{
	char path[128];
	unsigned long long v = ~0ULL;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/misc/knem/%s", name);
	f = fopen(path, "r");
	if (!f)
		return ~0ULL;
	if (fscanf(f, "%llu", &v) != 1)
		v = ~0ULL;
	fclose(f);
	return v;
}

static void check_rdonly(void)
{
	struct knem_cmd_info info;
	char text[4096];
	ssize_t n;
	void *p;
	int fd;

	fd = open(KNEM_DEVICE_FILENAME, O_RDONLY);
	check(fd >= 0, "O_RDONLY open");
	if (fd < 0)
		return;
	check(err_of(ioctl(fd, KNEM_CMD_GET_INFO, &info)) == EBADF,
	      "O_RDONLY: ioctl fails with EBADF");
	p = mmap(NULL, PAGE, PROT_READ, MAP_SHARED, fd, 0);
	check(p == MAP_FAILED && errno == EBADF, "O_RDONLY: mmap fails with EBADF");
	n = read(fd, text, sizeof(text) - 1);
	text[n > 0 ? n : 0] = 0;
	check(n > 0 && strncmp(text, "knem-rs ", 8) == 0 &&
	      strstr(text, "\ncontexts ") != NULL,
	      "O_RDONLY: read() gives the statistics");
	check(read(fd, text, sizeof(text)) == 0, "O_RDONLY: then end of file");
	close(fd);
}

static void check_info(void)
{
	struct knem_cmd_info info;
	int fd = open_rdwr();
	long ret;

	memset(&info, 0xff, sizeof(info));
	ret = ioctl(fd, KNEM_CMD_GET_INFO, &info);
	check(ret == 0 && info.abi == KNEM_ABI_VERSION,
	      "GET_INFO reports ABI 0x%x", info.abi);
	check(counter("contexts") == 1, "one live context counted");
	check(err_of(ioctl(fd, _IO('K', 0x7f))) == ENOTTY,
	      "unknown command fails with ENOTTY");
	close(fd);
}

static void check_mmap_rules(void)
{
	unsigned char *p, *q;
	int fd = open_rdwr();
	size_t i;
	int zero;

	q = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, PAGE);
	check(q == MAP_FAILED && errno == EINVAL, "mmap at offset 4096 fails with EINVAL");
	q = mmap(NULL, (1UL << 32) + PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(q == MAP_FAILED && errno == EINVAL, "mmap above 2^32 bytes fails with EINVAL");
	q = mmap(NULL, 1UL << 32, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(q == MAP_FAILED && errno == ENOMEM,
	      "mmap of 2^32 bytes in a 1 GiB VM fails with ENOMEM, quietly");

	p = mmap(NULL, 3 * PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(p != MAP_FAILED, "mmap of the status array");
	if (p == MAP_FAILED)
		goto out;
	for (zero = 1, i = 0; i < 3 * PAGE; i++)
		zero &= p[i] == KNEM_STATUS_PENDING;
	check(zero, "status array starts zeroed (PENDING)");
	q = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(q == MAP_FAILED && errno == EBUSY, "second mmap fails with EBUSY");

	/* Split the VMA, close the fd, then drop the pieces one by one. */
	check(munmap(p + PAGE, PAGE) == 0, "munmap of the middle page");
	close(fd);
	fd = -1;
	p[0] = 0x5a;
	p[2 * PAGE] = 0xa5;
	check(p[0] == 0x5a && p[2 * PAGE] == 0xa5,
	      "status array still usable after close()");
	check(munmap(p, PAGE) == 0 && munmap(p + 2 * PAGE, PAGE) == 0,
	      "munmap of the remaining pieces");
out:
	if (fd >= 0)
		close(fd);
}

static void check_mmap_fork(void)
{
	unsigned char *p;
	unsigned char in_core;
	int fd = open_rdwr();
	int status;
	pid_t pid;

	p = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	check(p != MAP_FAILED, "mmap before fork");
	if (p == MAP_FAILED) {
		close(fd);
		return;
	}
	errno = 0;
	check(mremap(p, PAGE, 2 * PAGE, MREMAP_MAYMOVE) == MAP_FAILED &&
	      errno == EFAULT, "mremap cannot grow the array (EFAULT)");
	p[7] = 2;
	pid = fork();
	if (pid == 0) {
		/* The parent's slots are not the child's to write. */
		_exit(mincore(p, PAGE, &in_core) == -1 && errno == ENOMEM ?
		      0 : 1);
	}
	check(pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
	      WEXITSTATUS(status) == 0,
	      "a forked child has no copy of the array");
	check(p[7] == 2, "the parent's array is intact after the child");
	munmap(p, PAGE);
	close(fd);
}

static void fill(unsigned char *p, size_t len, unsigned seed)
{
	size_t i;

	for (i = 0; i < len; i++)
		p[i] = (unsigned char)(i * 131 + seed);
}

static long create(int fd, void *base, size_t len, unsigned prot,
		   knem_cookie_t *cookie)
{
	struct knem_cmd_param_iovec iov = { (unsigned long)base, len };
	struct knem_cmd_create_region cr;

	memset(&cr, 0, sizeof(cr));
	cr.iovec_array = (unsigned long)&iov;
	cr.iovec_nr = 1;
	cr.protection = prot;
	if (ioctl(fd, KNEM_CMD_CREATE_REGION, &cr) < 0)
		return -1;
	*cookie = cr.cookie;
	return 0;
}

static long inline_copy(int fd, knem_cookie_t cookie, unsigned long long off,
			void *local, size_t len, int write, unsigned flags,
			unsigned slot, unsigned *status)
{
	struct knem_cmd_param_iovec iov = { (unsigned long)local, len };
	struct knem_cmd_inline_copy ic;
	long ret;

	memset(&ic, 0, sizeof(ic));
	ic.local_iovec_array = (unsigned long)&iov;
	ic.local_iovec_nr = 1;
	ic.write = write;
	ic.remote_cookie = cookie;
	ic.remote_offset = off;
	ic.flags = flags;
	ic.async_status_index = slot;
	ret = ioctl(fd, KNEM_CMD_INLINE_COPY, &ic);
	*status = ic.current_status;
	return ret;
}

static void check_data(void)
{
	enum { LEN = 3 * 4096 - 300, OFF = 100 };
	unsigned char *a, *b, *local, *slots;
	knem_cookie_t ca = 0, cb = 0;
	struct knem_cmd_copy cp;
	unsigned status = 0;
	int fd = open_rdwr();

	a = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	b = mmap(NULL, 4 * PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	local = malloc(LEN);
	slots = mmap(NULL, PAGE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (a == MAP_FAILED || b == MAP_FAILED || !local || slots == MAP_FAILED) {
		check(0, "test memory");
		goto out;
	}

	check(create(fd, a + OFF, LEN, PROT_READ | PROT_WRITE, &ca) == 0 && ca != 0,
	      "CREATE_REGION on untouched memory at a page offset");
	check(counter("regions") == 1 && counter("pinned_pages") == 3,
	      "counters: 1 region, 3 pinned pages (got %llu, %llu)",
	      counter("regions"), counter("pinned_pages"));

	fill(local, LEN, 1);
	check(inline_copy(fd, ca, 0, local, LEN, 1, 0, 0, &status) == 0 &&
	      status == KNEM_STATUS_SUCCESS && memcmp(a + OFF, local, LEN) == 0,
	      "INLINE_COPY write lands in the owner's pages");

	fill(a + OFF, LEN, 2);
	memset(local, 0, LEN);
	check(inline_copy(fd, ca, 1000, local, LEN - 1000, 0,
			  KNEM_FLAG_ASYNCDMACOMPLETE, 5, &status) == 0 &&
	      status == KNEM_STATUS_SUCCESS &&
	      memcmp(local, a + OFF + 1000, LEN - 1000) == 0,
	      "INLINE_COPY read at offset 1000 sees the owner's later writes");
	check(slots[5] == KNEM_STATUS_SUCCESS && slots[4] == KNEM_STATUS_PENDING,
	      "ASYNCDMACOMPLETE reported in status slot 5 only");

	check(create(fd, b + 7, LEN, PROT_READ | PROT_WRITE, &cb) == 0,
	      "second region at another page offset");
	memset(&cp, 0, sizeof(cp));
	cp.src_cookie = ca;
	cp.dst_cookie = cb;
	check(ioctl(fd, KNEM_CMD_COPY, &cp) == 0 &&
	      cp.current_status == KNEM_STATUS_SUCCESS &&
	      memcmp(a + OFF, b + 7, LEN) == 0,
	      "COPY region to region, pages straddled differently");

	check(ioctl(fd, KNEM_CMD_DESTROY_REGION, &ca) == 0 &&
	      ioctl(fd, KNEM_CMD_DESTROY_REGION, &cb) == 0,
	      "DESTROY_REGION of both");
	check(err_of(ioctl(fd, KNEM_CMD_DESTROY_REGION, &ca)) == EINVAL,
	      "destroying again fails with EINVAL");

	/*
	 * A read-only region over memory never written yet (the zero page is
	 * mapped after a read) must see what the owner writes afterwards.
	 */
	{
		unsigned char *c = mmap(NULL, 2 * PAGE, PROT_READ | PROT_WRITE,
					MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		knem_cookie_t cc = 0;

		if (c == MAP_FAILED) {
			check(0, "test memory");
			goto out;
		}
		(void)*(volatile unsigned char *)(c + PAGE);
		check(create(fd, c, 2 * PAGE, PROT_READ, &cc) == 0,
		      "read-only region over untouched memory");
		fill(c, 2 * PAGE, 3);
		memset(local, 0, 2 * PAGE);
		check(inline_copy(fd, cc, 0, local, 2 * PAGE, 0, 0, 0, &status) == 0 &&
		      status == KNEM_STATUS_SUCCESS && memcmp(local, c, 2 * PAGE) == 0,
		      "it sees the owner's writes made after CREATE_REGION");
		ioctl(fd, KNEM_CMD_DESTROY_REGION, &cc);
		munmap(c, 2 * PAGE);
	}

	/* A region left for close() to clean up. */
	check(create(fd, a, PAGE, PROT_READ, &ca) == 0, "region left open at close");
out:
	close(fd);
	if (slots != MAP_FAILED)
		munmap(slots, PAGE);
	free(local);
}

static void check_baseline(void)
{
	check(counter("contexts") == 0 && counter("regions") == 0 &&
	      counter("pinned_pages") == 0,
	      "counters back to zero (contexts %llu, regions %llu, pinned %llu)",
	      counter("contexts"), counter("regions"), counter("pinned_pages"));
}

int main(void)
{
	check_rdonly();
	check_info();
	check_mmap_rules();
	check_mmap_fork();
	check_data();
	check_baseline();
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
