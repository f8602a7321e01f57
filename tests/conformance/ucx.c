// SPDX-License-Identifier: GPL-2.0-only
/*
 * ucx.c - the call sequences of a UCX-like transport (uct knem).
 *
 * UCX probes the device (open, GET_INFO, compare abi, close), registers a
 * one-byte stack buffer to see that registration works, registers user
 * buffers read-write with flags 0, and moves large messages as 512 KiB
 * synchronous inline copies at increasing offsets into one region, leaving
 * `pad` and `async_status_index` uninitialised.
 */
#include "conf.h"

static int ucx_probe(void)
{
	struct knem_cmd_info info;
	int fd;

	TRY(k_open(&fd));
	memset(&info, 0xa5, sizeof(info));
	CHECK(ioctl(fd, KNEM_CMD_GET_INFO, &info) == 0, "GET_INFO: %s",
	      ename(errno));
	CHECK(info.abi == KNEM_ABI_VERSION, "abi 0x%x, want 0x%x", info.abi,
	      KNEM_ABI_VERSION);
	CHECK(close(fd) == 0, "close: %s", strerror(errno));
	return 0;
}

static int ucx_register_1byte_stack(void)
{
	volatile char byte = 'x';
	knem_cookie_t cookie = 0;
	int fd, e;

	TRY(k_open(&fd));
	e = k_create(fd, (const void *)&byte, 1, 0, PROT_READ | PROT_WRITE,
		     &cookie);
	CHECK(e == 0, "CREATE_REGION of 1 stack byte: %s", ename(e));
	CHECK(cookie != 0, "cookie is 0");
	e = k_destroy(fd, cookie);
	CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
	e = k_destroy(fd, cookie);
	CHECK(e == EINVAL, "second DESTROY_REGION: %s, want EINVAL", ename(e));
	close(fd);
	return 0;
}

#define UCX_REGION (4 * MIB)
#define UCX_PIECE (512 * KIB)
#define SEED_OWNER 0x11
#define SEED_PEER 0x22

/* The remote side: gets then puts the whole region in 512 KiB pieces. */
static int ucx_peer(int rx, int tx, void *arg)
{
	unsigned char *local = xalloc(UCX_PIECE);
	knem_cookie_t cookie;
	uint64_t off;
	uint32_t st;
	int fd, e;

	(void)arg;
	(void)tx;
	TRY(k_open(&fd));
	TRY(recv_u64(rx, &cookie));
	for (off = 0; off < UCX_REGION; off += UCX_PIECE) {
		memset(local, 0, UCX_PIECE);
		e = k_inline(fd, local, UCX_PIECE, 0, cookie, off, 0,
			     GARBAGE32, &st);
		CHECK(e == 0, "get at offset %llu: %s",
		      (unsigned long long)off, ename(e));
		CHECK(st == KNEM_STATUS_SUCCESS,
		      "get at offset %llu: current_status 0x%x, want SUCCESS",
		      (unsigned long long)off, st);
		TRY(verify(local, UCX_PIECE, SEED_OWNER, off, "get data"));
	}
	for (off = 0; off < UCX_REGION; off += UCX_PIECE) {
		fill(local, UCX_PIECE, SEED_PEER, off);
		e = k_inline(fd, local, UCX_PIECE, 1, cookie, off, 0,
			     GARBAGE32, &st);
		CHECK(e == 0, "put at offset %llu: %s",
		      (unsigned long long)off, ename(e));
		CHECK(st == KNEM_STATUS_SUCCESS,
		      "put at offset %llu: current_status 0x%x, want SUCCESS",
		      (unsigned long long)off, st);
	}
	close(fd);
	return 0;
}

static int ucx_4mib_get_put_512k(void)
{
	/* A malloc()ed buffer, like a user's send buffer: not page aligned. */
	unsigned char *buf = xalloc(UCX_REGION);
	knem_cookie_t cookie;
	struct child peer;
	int fd, e;

	TRY(child_start(&peer, ucx_peer, NULL));
	TRY(k_open(&fd));
	fill(buf, UCX_REGION, SEED_OWNER, 0);
	e = k_create(fd, buf, UCX_REGION, 0, PROT_READ | PROT_WRITE, &cookie);
	CHECK(e == 0, "CREATE_REGION 4 MiB: %s", ename(e));
	CHECK(cookie != 0, "cookie is 0");
	TRY(send_u64(peer.tx, cookie));
	/* The peer exits when all its copies are done. */
	TRY(child_join(&peer, "peer: "));
	TRY(verify(buf, UCX_REGION, SEED_PEER, 0, "region after the puts"));
	e = k_destroy(fd, cookie);
	CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
	close(fd);
	return 0;
}

static const struct conf_case cases[] = {
	{ "ucx_probe", ucx_probe },
	{ "ucx_register_1byte_stack", ucx_register_1byte_stack },
	{ "ucx_4mib_get_put_512k", ucx_4mib_get_put_512k },
	{ NULL, NULL }
};

int main(int argc, char **argv)
{
	return conf_main(cases, argc, argv);
}
