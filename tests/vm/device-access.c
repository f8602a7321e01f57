// SPDX-License-Identifier: GPL-2.0-only
/*
 * device-access.c - what one user may do with /dev/knem and the module's
 * counters, for tests/vm/device-access.sh (the access modes of
 * /etc/knem-rs/device.conf).  Needs only libc and include/knem_io.h.
 *
 *   device-access copy         open /dev/knem read-write, declare a 1 MiB
 *                              region, copy it out with INLINE_COPY and
 *                              compare every byte
 *   device-access read FILE    FILE opens for reading and reads
 *   device-access denied FILE  opening FILE (read-write for /dev/knem,
 *                              read-only otherwise) fails with EACCES
 *
 * Prints one line saying what happened; exits 0 when it is what the
 * command expects, 1 otherwise.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "knem_io.h"

#define COPY_LEN (1UL << 20)

static int open_mode(const char *path)
{
	return strcmp(path, KNEM_DEVICE_FILENAME) == 0 ? O_RDWR : O_RDONLY;
}

static int do_copy(void)
{
	struct knem_cmd_param_iovec src_iov, dst_iov;
	struct knem_cmd_create_region region;
	struct knem_cmd_inline_copy copy;
	unsigned char *src, *dst;
	size_t i;
	int fd;

	fd = open(KNEM_DEVICE_FILENAME, O_RDWR);
	if (fd < 0) {
		printf("copy: open %s: errno %d (%s)\n", KNEM_DEVICE_FILENAME,
		       errno, strerror(errno));
		return 1;
	}
	src = malloc(COPY_LEN);
	dst = malloc(COPY_LEN);
	if (!src || !dst) {
		printf("copy: out of memory\n");
		return 1;
	}
	/* A pattern no page of zeroes or of one repeated byte would match. */
	for (i = 0; i < COPY_LEN; i++)
		src[i] = (unsigned char)(i * 7 + (i >> 12));
	memset(dst, 0, COPY_LEN);

	src_iov.base = (uintptr_t)src;
	src_iov.len = COPY_LEN;
	memset(&region, 0, sizeof(region));
	region.iovec_array = (uintptr_t)&src_iov;
	region.iovec_nr = 1;
	region.protection = PROT_READ;
	if (ioctl(fd, KNEM_CMD_CREATE_REGION, &region) < 0) {
		printf("copy: CREATE_REGION: errno %d (%s)\n", errno, strerror(errno));
		return 1;
	}
	dst_iov.base = (uintptr_t)dst;
	dst_iov.len = COPY_LEN;
	memset(&copy, 0, sizeof(copy));
	copy.local_iovec_array = (uintptr_t)&dst_iov;
	copy.local_iovec_nr = 1;
	copy.write = 0;
	copy.remote_cookie = region.cookie;
	if (ioctl(fd, KNEM_CMD_INLINE_COPY, &copy) < 0) {
		printf("copy: INLINE_COPY: errno %d (%s)\n", errno, strerror(errno));
		return 1;
	}
	if (copy.current_status != KNEM_STATUS_SUCCESS) {
		printf("copy: INLINE_COPY status %u\n", copy.current_status);
		return 1;
	}
	if (memcmp(src, dst, COPY_LEN) != 0) {
		for (i = 0; i < COPY_LEN && src[i] == dst[i]; i++)
			;
		printf("copy: byte %zu differs after the copy\n", i);
		return 1;
	}
	if (ioctl(fd, KNEM_CMD_DESTROY_REGION, &region.cookie) < 0) {
		printf("copy: DESTROY_REGION: errno %d (%s)\n", errno, strerror(errno));
		return 1;
	}
	close(fd);
	printf("copy: uid %u: %lu bytes copied through %s, every byte verified\n",
	       getuid(), COPY_LEN, KNEM_DEVICE_FILENAME);
	return 0;
}

static int do_read(const char *path)
{
	char buf[256];
	ssize_t n;
	int fd;

	fd = open(path, open_mode(path));
	if (fd < 0) {
		printf("read: uid %u: open %s: errno %d (%s)\n", getuid(), path,
		       errno, strerror(errno));
		return 1;
	}
	n = read(fd, buf, sizeof(buf) - 1);
	if (n <= 0) {
		printf("read: uid %u: read %s: %s\n", getuid(), path,
		       n < 0 ? strerror(errno) : "nothing");
		return 1;
	}
	buf[strcspn(buf, "\n")] = '\0';
	printf("read: uid %u: %s: %s\n", getuid(), path, buf);
	close(fd);
	return 0;
}

static int do_denied(const char *path)
{
	int fd = open(path, open_mode(path));

	if (fd >= 0) {
		printf("denied: uid %u: %s opened, EACCES expected\n", getuid(), path);
		return 1;
	}
	printf("denied: uid %u: open %s: errno %d (%s)\n", getuid(), path, errno,
	       strerror(errno));
	return errno == EACCES ? 0 : 1;
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "copy") == 0)
		return do_copy();
	if (argc == 3 && strcmp(argv[1], "read") == 0)
		return do_read(argv[2]);
	if (argc == 3 && strcmp(argv[1], "denied") == 0)
		return do_denied(argv[2]);
	fprintf(stderr, "usage: device-access copy | read FILE | denied FILE\n");
	return 2;
}
