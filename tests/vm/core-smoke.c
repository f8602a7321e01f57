/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * core-smoke.c - the Rust core's behaviour in a real kernel, through
 * /dev/knem: GET_INFO, regions, inline and region copies, faults, the
 * errno table, the status array, single-use regions, a second process,
 * and close() releasing everything.  Runs in the VM (tests/vm/check-shim);
 * prints "N passed, N failed" last.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include "knem_io.h"

static int passed, failed;
#define CHECK(name, cond) do { if (cond) { passed++; printf("ok   %s\n", name); } else { failed++; printf("FAIL %s (errno %d)\n", name, errno); } } while (0)

static int create(int fd, void *p, size_t len, int prot, int flags, knem_cookie_t *c) {
	struct knem_cmd_param_iovec iov = { (uintptr_t)p, len };
	struct knem_cmd_create_region cr = { (uintptr_t)&iov, 1, flags, prot, 0xdeadbeef, 0 };
	int r = ioctl(fd, KNEM_CMD_CREATE_REGION, &cr);
	*c = cr.cookie;
	return r;
}

static int icopy(int fd, void *p, size_t len, int write, knem_cookie_t c, uint64_t off, int flags, uint32_t idx, uint32_t *st) {
	struct knem_cmd_param_iovec iov = { (uintptr_t)p, len };
	struct knem_cmd_inline_copy ic = { (uintptr_t)&iov, 1, write, c, off, flags, 0x55, idx, 0x77 };
	int r = ioctl(fd, KNEM_CMD_INLINE_COPY, &ic);
	*st = ic.current_status;
	return r;
}

int main(void) {
	int fd = open("/dev/knem", O_RDWR);
	CHECK("open", fd >= 0);
	struct knem_cmd_info info;
	memset(&info, 0, sizeof(info));
	CHECK("get_info", ioctl(fd, KNEM_CMD_GET_INFO, &info) == 0 && info.abi == 0xd && info.ignored_flags == KNEM_FLAG_DMA);

	size_t n = 3 * 4096 + 123;
	char *a = malloc(n), *b = malloc(n);
	for (size_t i = 0; i < n; i++) a[i] = (char)(i * 7 + 3);
	memset(b, 0, n);
	knem_cookie_t ca, cb, cs;
	CHECK("create rw", create(fd, a + 5, n - 5, PROT_READ | PROT_WRITE, 0, &ca) == 0 && ca != 0);
	uint32_t st;
	CHECK("inline read", icopy(fd, b, n, 0, ca, 0, 0, 0, &st) == 0 && st == KNEM_STATUS_SUCCESS && memcmp(a + 5, b, n - 5) == 0);
	memset(b, 0x5a, 100);
	CHECK("inline write", icopy(fd, b, 100, 1, ca, 4000, 0, 0, &st) == 0 && st == 1 && a[4005] == 0x5a && a[4104] == 0x5a);
	CHECK("data fault -> FAILED", icopy(fd, (void *)16, 100, 0, ca, 0, 0, 0, &st) == 0 && st == KNEM_STATUS_FAILED);
	errno = 0;
	CHECK("bad iovec array EFAULT", ({ struct knem_cmd_inline_copy ic = { 16, 1, 0, ca, 0, 0, 0, 0, 0 }; ioctl(fd, KNEM_CMD_INLINE_COPY, &ic) == -1 && errno == EFAULT; }));
	CHECK("bad cookie EINVAL", icopy(fd, b, 10, 0, ca ^ (1ULL << 40), 0, 0, 0, &st) == -1 && errno == EINVAL);
	CHECK("undefined flag dropped", icopy(fd, b, 10, 0, ca, 0, 1 << 8, 0, &st) == 0 && st == KNEM_STATUS_SUCCESS);
	CHECK("unknown cmd ENOTTY", ioctl(fd, _IO('K', 0x7f), 0) == -1 && errno == ENOTTY);
	CHECK("create bad prot EINVAL", create(fd, a, 10, 4, 0, &cs) == -1 && errno == EINVAL);
	CHECK("create unmapped EFAULT", create(fd, (void *)4096, 10, 1, 0, &cs) == -1 && errno == EFAULT);

	/* status array: sync copies leave it alone; ASYNCDMACOMPLETE reports in it */
	volatile uint8_t *slots = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	CHECK("mmap status", slots != MAP_FAILED);
	if (slots != MAP_FAILED) {
		CHECK("sync copy, slot stays 0", icopy(fd, b, 10, 0, ca, 0, 0, 3, &st) == 0 && slots[3] == 0);
		CHECK("asyncdmacomplete", icopy(fd, b, 10, 0, ca, 0, KNEM_FLAG_ASYNCDMACOMPLETE, 9, &st) == 0 && st == 1 && slots[9] == 1);
		CHECK("asyncdmacomplete idx out EINVAL", icopy(fd, b, 10, 0, ca, 0, KNEM_FLAG_ASYNCDMACOMPLETE, 4096, &st) == -1 && errno == EINVAL);
	}

	/* single use + region copy */
	CHECK("create single-use", create(fd, a, 64, PROT_READ, KNEM_FLAG_SINGLEUSE, &cs) == 0);
	CHECK("create dst", create(fd, b, 64, PROT_WRITE, 0, &cb) == 0);
	CHECK("write to ro EACCES (not consumed)", icopy(fd, b, 10, 1, cs, 0, 0, 0, &st) == -1 && errno == EACCES);
	struct knem_cmd_copy cp = { cs, 0, cb, 0, 0, 0, 0, 0 };
	CHECK("region copy", ioctl(fd, KNEM_CMD_COPY, &cp) == 0 && cp.current_status == 1 && memcmp(a, b, 64) == 0);
	CHECK("single-use gone", ioctl(fd, KNEM_CMD_COPY, &cp) == -1 && errno == EINVAL);
	CHECK("destroy", ioctl(fd, KNEM_CMD_DESTROY_REGION, &cb) == 0);
	CHECK("destroy again EINVAL", ioctl(fd, KNEM_CMD_DESTROY_REGION, &cb) == -1 && errno == EINVAL);

	/* cross process: child reads parent's region; other context cannot destroy */
	pid_t pid = fork();
	if (pid == 0) {
		int fd2 = open("/dev/knem", O_RDWR);
		char buf[256];
		uint32_t s2;
		int ok = icopy(fd2, buf, sizeof(buf), 0, ca, 0, 0, 0, &s2) == 0 && s2 == 1 && memcmp(buf, a + 5, 256) == 0;
		ok = ok && ioctl(fd2, KNEM_CMD_DESTROY_REGION, &ca) == -1 && errno == EINVAL;
		_exit(ok ? 0 : 1);
	}
	int ws;
	waitpid(pid, &ws, 0);
	CHECK("child reads parent's region", WIFEXITED(ws) && WEXITSTATUS(ws) == 0);


	/*
	 * single-use race: four processes, each with its own context (a
	 * forked child cannot use its parent's), one winner
	 */
	{
		knem_cookie_t once;
		int winners = 0;
		CHECK("create single-use for race", create(fd, a, 4096, PROT_READ, KNEM_FLAG_SINGLEUSE, &once) == 0);
		for (int i = 0; i < 4; i++) {
			if (fork() == 0) {
				char buf[4096];
				uint32_t s3;
				int fd3 = open("/dev/knem", O_RDWR);
				_exit(fd3 >= 0 && icopy(fd3, buf, sizeof(buf), 0, once, 0, 0, 0, &s3) == 0 && s3 == 1 ? 0 : 1);
			}
		}
		for (int i = 0; i < 4; i++) {
			wait(&ws);
			winners += WIFEXITED(ws) && WEXITSTATUS(ws) == 0;
		}
		CHECK("single-use race has one winner", winners == 1);
	}

	/* a reader keeps copying while the owner destroys its regions by exiting */
	{
		int pipefd[2];
		knem_cookie_t big;
		CHECK("pipe", pipe(pipefd) == 0);
		pid_t owner = fork();
		if (owner == 0) {
			int fd3 = open("/dev/knem", O_RDWR);
			size_t len = 1 << 20;
			char *mem = malloc(len);
			memset(mem, 0x11, len);
			knem_cookie_t c = 0;
			create(fd3, mem, len, PROT_READ, KNEM_FLAG_ANY_USER_ACCESS, &c);
			if (write(pipefd[1], &c, sizeof(c)) != sizeof(c))
				_exit(1);
			usleep(20000);
			_exit(0); /* exit closes fd3 mid-copies */
		}
		close(pipefd[1]);
		int got = read(pipefd[0], &big, sizeof(big)) == sizeof(big);
		char *buf = malloc(1 << 20);
		int copies = 0, last = 0;
		uint32_t s4;
		while (got && copies < 100000) {
			last = icopy(fd, buf, 1 << 20, 0, big, 0, 0, 0, &s4);
			if (last != 0)
				break;
			copies++;
		}
		waitpid(owner, &ws, 0);
		printf("     %d copies before the owner went away\n", copies);
		CHECK("copies end with EINVAL once the owner exits", got && last == -1 && errno == EINVAL);
	}

	/* many regions, left for close() to clean up */
	int okmany = 1;
	for (int i = 0; i < 2000; i++) {
		knem_cookie_t c;
		okmany &= create(fd, a + (i % 4000), 300, PROT_READ, 0, &c) == 0 && c != 0;
	}
	CHECK("2000 regions", okmany);
	if (slots != MAP_FAILED) munmap((void *)slots, 4096);
	close(fd);
	FILE *f = fopen("/dev/knem", "r");
	char line[256];
	int regions0 = 0, pinned0 = 0;
	while (f && fgets(line, sizeof(line), f)) {
		if (!strncmp(line, "regions ", 8) && strtoul(line + 8, 0, 10) == 0) regions0 = 1;
		if (!strncmp(line, "contexts ", 9) && strtoul(line + 9, 0, 10) != 0) regions0 = 0;
		if (!strncmp(line, "pinned_pages ", 13) && strtoul(line + 13, 0, 10) == 0) pinned0 = 1;
		fputs(line, stdout);
	}
	CHECK("close releases everything", regions0 && pinned0);
	printf("%d passed, %d failed\n", passed, failed);
	return failed != 0;
}
