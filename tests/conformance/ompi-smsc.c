// SPDX-License-Identifier: GPL-2.0-only
/*
 * ompi-smsc.c - the call sequences of an Open MPI smsc/knem-like component.
 *
 * It zeroes the info struct before GET_INFO, registers each buffer with
 * flags 0 and only the protection the transfer needs (PROT_READ for a
 * buffer peers read, PROT_WRITE for one they write), lets the peer move
 * the data with synchronous inline copies, and destroys the region when
 * the peer reports completion.
 */
#include "conf.h"

#define LEN (256 * KIB + 123)   /* not a multiple of the page size */
#define SEED_OWNER 0x31
#define SEED_PEER 0x42

static int ompi_smsc_get_info_zeroed(void)
{
	struct knem_cmd_info info;
	int fd;

	TRY(k_open(&fd));
	memset(&info, 0, sizeof(info));
	CHECK(ioctl(fd, KNEM_CMD_GET_INFO, &info) == 0, "GET_INFO: %s",
	      ename(errno));
	CHECK(info.abi == KNEM_ABI_VERSION, "abi 0x%x, want 0x%x", info.abi,
	      KNEM_ABI_VERSION);
	/* Old clients test only the DMA bit; nothing else may be undefined. */
	CHECK((info.ignored_flags & ~0xffU) == 0 &&
	      (info.forced_flags & ~0xffU) == 0,
	      "ignored_flags 0x%x / forced_flags 0x%x carry undefined bits",
	      info.ignored_flags, info.forced_flags);
	close(fd);
	return 0;
}

/* Peer of a PROT_READ region: read it, and fail to write it. */
static int read_peer(int rx, int tx, void *arg)
{
	unsigned char *local = xalloc(LEN);
	knem_cookie_t cookie;
	uint32_t st;
	int fd, e;

	(void)tx;
	(void)arg;
	TRY(k_open(&fd));
	TRY(recv_u64(rx, &cookie));
	memset(local, 0, LEN);
	e = k_inline(fd, local, LEN, 0, cookie, 0, 0, 0, &st);
	CHECK(e == 0, "reading the PROT_READ region: %s", ename(e));
	CHECK(st == KNEM_STATUS_SUCCESS, "current_status 0x%x, want SUCCESS",
	      st);
	TRY(verify(local, LEN, SEED_OWNER, 0, "data read"));
	fill(local, LEN, SEED_PEER, 0);
	e = k_inline(fd, local, LEN, 1, cookie, 0, 0, 0, &st);
	CHECK(e == EACCES, "writing the PROT_READ region: %s, want EACCES",
	      ename(e));
	close(fd);
	return 0;
}

static int ompi_smsc_read_region(void)
{
	unsigned char *buf = xalloc(LEN);
	knem_cookie_t cookie;
	struct child peer;
	int fd, e;

	TRY(child_start(&peer, read_peer, NULL));
	TRY(k_open(&fd));
	fill(buf, LEN, SEED_OWNER, 0);
	e = k_create(fd, buf, LEN, 0, PROT_READ, &cookie);
	CHECK(e == 0, "CREATE_REGION PROT_READ: %s", ename(e));
	CHECK(cookie != 0, "cookie is 0");
	TRY(send_u64(peer.tx, cookie));
	TRY(child_join(&peer, "peer: "));
	TRY(verify(buf, LEN, SEED_OWNER, 0, "region after the refused write"));
	e = k_destroy(fd, cookie);
	CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
	close(fd);
	return 0;
}

/* Peer of a PROT_WRITE region: write it, and fail to read it. */
static int write_peer(int rx, int tx, void *arg)
{
	unsigned char *local = xalloc(LEN);
	knem_cookie_t cookie;
	uint32_t st;
	int fd, e;

	(void)tx;
	(void)arg;
	TRY(k_open(&fd));
	TRY(recv_u64(rx, &cookie));
	fill(local, LEN, SEED_PEER, 0);
	e = k_inline(fd, local, LEN, 1, cookie, 0, 0, 0, &st);
	CHECK(e == 0, "writing the PROT_WRITE region: %s", ename(e));
	CHECK(st == KNEM_STATUS_SUCCESS, "current_status 0x%x, want SUCCESS",
	      st);
	memset(local, 0, LEN);
	e = k_inline(fd, local, LEN, 0, cookie, 0, 0, 0, &st);
	CHECK(e == EACCES, "reading the PROT_WRITE region: %s, want EACCES",
	      ename(e));
	close(fd);
	return 0;
}

static int ompi_smsc_write_region(void)
{
	unsigned char *buf = xalloc(LEN);
	knem_cookie_t cookie;
	struct child peer;
	int fd, e;

	TRY(child_start(&peer, write_peer, NULL));
	TRY(k_open(&fd));
	memset(buf, 0, LEN);
	e = k_create(fd, buf, LEN, 0, PROT_WRITE, &cookie);
	CHECK(e == 0, "CREATE_REGION PROT_WRITE: %s", ename(e));
	CHECK(cookie != 0, "cookie is 0");
	TRY(send_u64(peer.tx, cookie));
	TRY(child_join(&peer, "peer: "));
	TRY(verify(buf, LEN, SEED_PEER, 0, "region after the peer's write"));
	e = k_destroy(fd, cookie);
	CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
	close(fd);
	return 0;
}

/* Peer that copies, waits for the owner's destroy, and copies again. */
static int destroyed_peer(int rx, int tx, void *arg)
{
	unsigned char *local = xalloc(LEN);
	knem_cookie_t cookie;
	uint64_t go;
	uint32_t st;
	int fd, e;

	(void)arg;
	TRY(k_open(&fd));
	TRY(recv_u64(rx, &cookie));
	e = k_inline(fd, local, LEN, 0, cookie, 0, 0, 0, &st);
	CHECK(e == 0, "copy before the destroy: %s", ename(e));
	TRY(send_u64(tx, 1));
	TRY(recv_u64(rx, &go));
	e = k_inline(fd, local, LEN, 0, cookie, 0, 0, 0, &st);
	CHECK(e == EINVAL, "copy after the destroy: %s, want EINVAL",
	      ename(e));
	close(fd);
	return 0;
}

static int ompi_smsc_destroyed_cookie_einval(void)
{
	unsigned char *buf = xalloc(LEN);
	knem_cookie_t cookie;
	struct child peer;
	uint64_t done;
	int fd, e;

	TRY(child_start(&peer, destroyed_peer, NULL));
	TRY(k_open(&fd));
	fill(buf, LEN, SEED_OWNER, 0);
	e = k_create(fd, buf, LEN, 0, PROT_READ, &cookie);
	CHECK(e == 0, "CREATE_REGION: %s", ename(e));
	TRY(send_u64(peer.tx, cookie));
	if (recv_u64(peer.rx, &done) < 0) {
		TRY(child_join(&peer, "peer: "));
		return conf_fail("peer went away");
	}
	e = k_destroy(fd, cookie);
	CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
	TRY(send_u64(peer.tx, 1));
	TRY(child_join(&peer, "peer: "));
	close(fd);
	return 0;
}

static const struct conf_case cases[] = {
	{ "ompi_smsc_get_info_zeroed", ompi_smsc_get_info_zeroed },
	{ "ompi_smsc_read_region", ompi_smsc_read_region },
	{ "ompi_smsc_write_region", ompi_smsc_write_region },
	{ "ompi_smsc_destroyed_cookie_einval",
	  ompi_smsc_destroyed_cookie_einval },
	{ NULL, NULL }
};

int main(int argc, char **argv)
{
	return conf_main(cases, argc, argv);
}
