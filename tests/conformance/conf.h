/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * conf.h - the small harness shared by the conformance programs.
 *
 * Every case runs in its own child process (so a crash, a hang or a leaked
 * fd in one case cannot disturb the next) under an alarm; the parent prints
 * "ok <name>" or "FAIL <name>: <reason>" and, last, "N passed, N failed".
 * Two-party cases fork a peer that opens its own /dev/knem context; the
 * two sides exchange cookies and go-aheads through pipes.
 *
 * Only libc and include/knem_io.h: the programs see the ABI exactly as an
 * MPI library compiled --with-knem does.
 */
#ifndef KNEM_CONF_H
#define KNEM_CONF_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "knem_io.h"

/* Every case, and every peer, is killed after this many seconds. */
#define CONF_TIMEOUT 120
/* How long to wait for an asynchronous completion before giving up. */
#define ASYNC_WAIT_SECS 30

/* Garbage clients leave in fields the module must ignore. */
#define GARBAGE32 0xdeadbeefU

/* Not every program uses every helper. */
#define CONF_API static __attribute__((unused))

#define KIB 1024UL
#define MIB (1024UL * 1024UL)

static char conf_reason[1024];

/* Record why the running case (or peer) failed; returns -1. */
__attribute__((format(printf, 1, 2)))
CONF_API int conf_fail(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(conf_reason, sizeof(conf_reason), fmt, ap);
	va_end(ap);
	return -1;
}

#define CHECK(cond, ...)                              \
	do {                                          \
		if (!(cond))                          \
			return conf_fail(__VA_ARGS__); \
	} while (0)

/* Propagate a helper's failure (its reason is already recorded). */
#define TRY(expr)                  \
	do {                       \
		if ((expr) < 0)    \
			return -1; \
	} while (0)

CONF_API const char *ename(int e)
{
	static char buf[32];

	switch (e) {
	case 0: return "success";
	case EPERM: return "EPERM";
	case ENOENT: return "ENOENT";
	case EBADF: return "EBADF";
	case EAGAIN: return "EAGAIN";
	case ENOMEM: return "ENOMEM";
	case EACCES: return "EACCES";
	case EFAULT: return "EFAULT";
	case EBUSY: return "EBUSY";
	case ENODEV: return "ENODEV";
	case EINVAL: return "EINVAL";
	case ENOTTY: return "ENOTTY";
	case ENOSYS: return "ENOSYS";
	case EOPNOTSUPP: return "EOPNOTSUPP";
	case ENXIO: return "ENXIO";
	case EIO: return "EIO";
	}
	snprintf(buf, sizeof(buf), "errno %d", e);
	return buf;
}

/* errno of a failed call, 0 if it succeeded. */
CONF_API int err_of(long ret)
{
	return ret < 0 ? errno : 0;
}

/* ---- child processes ------------------------------------------------- */

struct child {
	pid_t pid;
	int res;        /* read end: the child's failure reason, if any */
	int tx;         /* parent -> child (the child reads its rx) */
	int rx;         /* child -> parent */
};

/* In the child: rx reads what the parent sends, tx writes to it. */
typedef int (*child_fn)(int rx, int tx, void *arg);

CONF_API int child_start(struct child *c, child_fn fn, void *arg)
{
	int res[2], down[2], up[2];

	if (pipe(res) || pipe(down) || pipe(up))
		return conf_fail("pipe: %s", strerror(errno));
	fflush(stdout);
	fflush(stderr);
	c->pid = fork();
	if (c->pid < 0)
		return conf_fail("fork: %s", strerror(errno));
	if (c->pid == 0) {
		int r;

		close(res[0]);
		close(down[1]);
		close(up[0]);
		signal(SIGPIPE, SIG_IGN);
		alarm(CONF_TIMEOUT);
		conf_reason[0] = 0;
		r = fn(down[0], up[1], arg);
		if (r < 0) {
			if (!conf_reason[0])
				strcpy(conf_reason, "failed without a reason");
			if (write(res[1], conf_reason, strlen(conf_reason)) < 0)
				_exit(3);
		}
		_exit(r < 0 ? 1 : 0);
	}
	close(res[1]);
	close(down[0]);
	close(up[1]);
	c->res = res[0];
	c->tx = down[1];
	c->rx = up[0];
	return 0;
}

/* Wait for a child; on failure its reason, prefixed, becomes ours. */
CONF_API int child_join(struct child *c, const char *prefix)
{
	char why[sizeof(conf_reason)];
	ssize_t n, got = 0;
	int st;

	close(c->tx);
	while ((n = read(c->res, why + got, sizeof(why) - 1 - got)) > 0)
		got += n;
	why[got] = 0;
	close(c->res);
	close(c->rx);
	while (waitpid(c->pid, &st, 0) < 0) {
		if (errno != EINTR)
			return conf_fail("%swaitpid: %s", prefix, strerror(errno));
	}
	if (WIFSIGNALED(st)) {
		if (WTERMSIG(st) == SIGALRM)
			return conf_fail("%stimed out after %d s", prefix,
					 CONF_TIMEOUT);
		return conf_fail("%skilled by signal %d (%s)", prefix,
				 WTERMSIG(st), strsignal(WTERMSIG(st)));
	}
	if (WEXITSTATUS(st) != 0)
		return conf_fail("%s%s", prefix,
				 got ? why : "exited nonzero without a reason");
	return 0;
}

CONF_API int send_u64(int fd, uint64_t v)
{
	if (write(fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
		return conf_fail("pipe write: %s", strerror(errno));
	return 0;
}

CONF_API int recv_u64(int fd, uint64_t *v)
{
	ssize_t n = read(fd, v, sizeof(*v));

	if (n != (ssize_t)sizeof(*v))
		return conf_fail("pipe read: %s",
				 n == 0 ? "other side went away" : strerror(errno));
	return 0;
}

/* ---- the case runner -------------------------------------------------- */

struct conf_case {
	const char *name;
	int (*fn)(void);
};

CONF_API int case_trampoline(int rx, int tx, void *arg)
{
	const struct conf_case *c = arg;

	(void)rx;
	(void)tx;
	return c->fn();
}

CONF_API int selected(const char *name, int argc, char **argv)
{
	int i;

	if (argc < 2)
		return 1;
	for (i = 1; i < argc; i++)
		if (strstr(name, argv[i]))
			return 1;
	return 0;
}

/* Run the cases (those whose name contains an argument, if any). */
CONF_API int conf_main(const struct conf_case *cases, int argc, char **argv)
{
	int passed = 0, failed = 0;
	const struct conf_case *c;

	setvbuf(stdout, NULL, _IOLBF, 0);
	for (c = cases; c->name; c++) {
		struct child ch;

		if (!selected(c->name, argc, argv))
			continue;
		conf_reason[0] = 0;
		if (child_start(&ch, case_trampoline, (void *)c) == 0 &&
		    child_join(&ch, "") == 0) {
			printf("ok %s\n", c->name);
			passed++;
		} else {
			printf("FAIL %s: %s\n", c->name, conf_reason);
			failed++;
		}
	}
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}

/* ---- /dev/knem ---------------------------------------------------------- */

CONF_API int k_open(int *fd)
{
	*fd = open(KNEM_DEVICE_FILENAME, O_RDWR);
	if (*fd < 0)
		return conf_fail("open %s: %s", KNEM_DEVICE_FILENAME,
				 strerror(errno));
	return 0;
}

/* CREATE_REGION of one segment; returns 0 or the errno. */
CONF_API int k_create(int fd, const void *buf, size_t len, uint32_t flags,
		    uint32_t prot, knem_cookie_t *cookie)
{
	struct knem_cmd_param_iovec iov;
	struct knem_cmd_create_region cr;

	*cookie = 0;
	iov.base = (uintptr_t)buf;
	iov.len = len;
	memset(&cr, 0, sizeof(cr));
	cr.iovec_array = (uintptr_t)&iov;
	cr.iovec_nr = 1;
	cr.flags = flags;
	cr.protection = prot;
	cr.pad = GARBAGE32;
	cr.cookie = 0;
	if (ioctl(fd, KNEM_CMD_CREATE_REGION, &cr) < 0)
		return errno;
	*cookie = cr.cookie;
	return 0;
}

CONF_API int k_destroy(int fd, knem_cookie_t cookie)
{
	return err_of(ioctl(fd, KNEM_CMD_DESTROY_REGION, &cookie));
}

/*
 * INLINE_COPY of one local segment; returns 0 or the errno and leaves
 * current_status in *status (preset to garbage, so an unwritten field
 * shows).
 */
CONF_API int k_inline(int fd, void *buf, size_t len, int write,
		    knem_cookie_t cookie, uint64_t off, uint32_t flags,
		    uint32_t index, uint32_t *status)
{
	struct knem_cmd_param_iovec iov;
	struct knem_cmd_inline_copy ic;

	*status = GARBAGE32;
	iov.base = (uintptr_t)buf;
	iov.len = len;
	ic.local_iovec_array = (uintptr_t)&iov;
	ic.local_iovec_nr = 1;
	ic.write = write;
	ic.remote_cookie = cookie;
	ic.remote_offset = off;
	ic.flags = flags;
	ic.current_status = GARBAGE32;
	ic.async_status_index = index;
	ic.pad = GARBAGE32;
	if (ioctl(fd, KNEM_CMD_INLINE_COPY, &ic) < 0)
		return errno;
	*status = ic.current_status;
	return 0;
}

/* mmap an n-byte status array; returns 0 or the errno. */
CONF_API int k_map_status(int fd, size_t n, volatile knem_status_t **slots)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd,
		       KNEM_STATUS_ARRAY_FILE_OFFSET);

	*slots = NULL;
	if (p == MAP_FAILED)
		return errno;
	*slots = p;
	return 0;
}

/* The first non-PENDING slot of [0, n), or -1. */
CONF_API long first_written(volatile const knem_status_t *s, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (s[i] != KNEM_STATUS_PENDING)
			return (long)i;
	return -1;
}

CONF_API double now_secs(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- data patterns ---------------------------------------------------- */

/* The byte of pattern `seed` at absolute position x: not 256-periodic. */
CONF_API unsigned char pat(uint32_t seed, uint64_t x)
{
	uint64_t h = (x + 1) * 0x9e3779b97f4a7c15ULL ^ seed * 0xff51afd7ULL;

	return (unsigned char)(h >> 29 ^ h >> 45 ^ x >> 8);
}

CONF_API void fill(void *buf, size_t n, uint32_t seed, uint64_t base)
{
	unsigned char *p = buf;
	size_t i;

	for (i = 0; i < n; i++)
		p[i] = pat(seed, base + i);
}

/* Byte-for-byte check of buf against pattern seed from position base. */
CONF_API int verify(const void *buf, size_t n, uint32_t seed, uint64_t base,
		  const char *what)
{
	const unsigned char *p = buf;
	size_t i;

	for (i = 0; i < n; i++)
		if (p[i] != pat(seed, base + i))
			return conf_fail("%s: byte %zu is 0x%02x, want 0x%02x",
					 what, i, p[i], pat(seed, base + i));
	return 0;
}

CONF_API void *xalloc(size_t n)
{
	void *p = malloc(n);

	if (!p) {
		perror("malloc");
		exit(2);
	}
	return p;
}

#endif /* KNEM_CONF_H */
