// SPDX-License-Identifier: GPL-2.0-only
/*
 * mpich.c - the call sequences of an MPICH nemesis-like LMT.
 *
 * Every process maps 4096 status bytes at start-up, whether or not it ever
 * goes asynchronous, and treats a failed mmap as fatal.  The sender
 * declares each message as a SINGLEUSE read-only region and never destroys
 * it; the receiver reads it with a synchronous inline copy that still
 * carries a status index, and afterwards polls that slot, counting on a
 * synchronous completion leaving it PENDING (0).  Older MPICH releases use
 * the legacy INIT_SEND / SYNC_RECV / INIT_ASYNC_RECV commands instead.
 */
#include "conf.h"

#define NSLOTS 4096
#define SEED_SEND 0x64

static int mpich_status_mmap_4096(void)
{
	volatile knem_status_t *s;
	long w;
	int fd, e;

	TRY(k_open(&fd));
	e = k_map_status(fd, NSLOTS, &s);
	CHECK(e == 0, "mmap of %d status bytes: %s", NSLOTS, ename(e));
	w = first_written(s, NSLOTS);
	CHECK(w < 0, "fresh status slot %ld is %u, want PENDING", w, s[w]);
	close(fd);              /* a client may close before munmap */
	w = first_written(s, NSLOTS);
	CHECK(w < 0, "after close, slot %ld is %u", w, s[w]);
	munmap((void *)s, NSLOTS);
	return 0;
}

/* ---- SINGLEUSE regions read synchronously with an index set ---------- */

#define MSGS 24
#define MSG_LEN(m) (32 * KIB + (size_t)(m) * 4099)

/* Slot indices the receiver passes: a counter, and the last slot too. */
static uint32_t msg_slot(int m)
{
	return m == MSGS - 1 ? NSLOTS - 1 : (uint32_t)m * 3;
}

static int singleuse_recv(int rx, int tx, void *arg)
{
	volatile knem_status_t *s;
	unsigned char *local;
	knem_cookie_t cookie;
	uint32_t st, k;
	int fd, e, m;
	long w;

	(void)tx;
	(void)arg;
	TRY(k_open(&fd));
	e = k_map_status(fd, NSLOTS, &s);
	CHECK(e == 0, "status mmap: %s", ename(e));
	for (m = 0; m < MSGS; m++) {
		TRY(recv_u64(rx, &cookie));
		local = xalloc(MSG_LEN(m));
		memset(local, 0, MSG_LEN(m));
		k = msg_slot(m);
		e = k_inline(fd, local, MSG_LEN(m), 0, cookie, 0, 0, k, &st);
		CHECK(e == 0, "message %d: INLINE_COPY: %s", m, ename(e));
		CHECK(st == KNEM_STATUS_SUCCESS,
		      "message %d: current_status 0x%x, want SUCCESS", m, st);
		/* MPICH now polls slot k: it must still read PENDING. */
		CHECK(s[k] == KNEM_STATUS_PENDING,
		      "message %d: synchronous copy wrote %u into slot %u", m,
		      s[k], k);
		TRY(verify(local, MSG_LEN(m), SEED_SEND + m, 0, "message"));
		/* The cookie was single-use. */
		e = k_inline(fd, local, MSG_LEN(m), 0, cookie, 0, 0, k, &st);
		CHECK(e == EINVAL, "message %d: second use of the cookie: %s, "
		      "want EINVAL", m, ename(e));
		free(local);
	}
	w = first_written(s, NSLOTS);
	CHECK(w < 0, "status slot %ld is %u after synchronous copies only", w,
	      s[w]);
	close(fd);
	return 0;
}

static int mpich_singleuse_sync_slot_stays_pending(void)
{
	volatile knem_status_t *s;
	struct child peer;
	knem_cookie_t cookie;
	unsigned char *buf;
	int fd, e, m;

	TRY(child_start(&peer, singleuse_recv, NULL));
	TRY(k_open(&fd));
	e = k_map_status(fd, NSLOTS, &s);
	CHECK(e == 0, "status mmap: %s", ename(e));
	for (m = 0; m < MSGS; m++) {
		buf = xalloc(MSG_LEN(m));       /* freed at exit, like MPI */
		fill(buf, MSG_LEN(m), SEED_SEND + m, 0);
		e = k_create(fd, buf, MSG_LEN(m), KNEM_FLAG_SINGLEUSE,
			     PROT_READ, &cookie);
		CHECK(e == 0, "message %d: CREATE_REGION SINGLEUSE: %s", m,
		      ename(e));
		CHECK(cookie != 0, "message %d: cookie is 0", m);
		TRY(send_u64(peer.tx, cookie));
	}
	TRY(child_join(&peer, "receiver: "));
	/* Never destroyed: close() must clean up whatever is left. */
	close(fd);
	return 0;
}

/* ---- legacy INIT_SEND / SYNC_RECV -------------------------------------- */

#define LEG_LEN (100 * KIB + 17)

/* Receive LEG_LEN bytes into three pieces of uneven size. */
static void three_iovecs(unsigned char *buf, struct knem_cmd_param_iovec *iov)
{
	iov[0].base = (uintptr_t)buf;
	iov[0].len = 1000;
	iov[1].base = (uintptr_t)(buf + 1000);
	iov[1].len = 64 * KIB;
	iov[2].base = (uintptr_t)(buf + 1000 + 64 * KIB);
	iov[2].len = LEG_LEN - 1000 - 64 * KIB;
}

/* Send side: INIT_SEND of buf as two segments; returns 0 or the errno. */
static int init_send(int fd, unsigned char *buf, knem_cookie_t *cookie)
{
	struct knem_cmd_param_iovec iov[2];
	struct knem_cmd_init_send_param p;

	iov[0].base = (uintptr_t)buf;
	iov[0].len = 5000;
	iov[1].base = (uintptr_t)(buf + 5000);
	iov[1].len = LEG_LEN - 5000;
	memset(&p, 0, sizeof(p));
	p.send_iovec_array = (uintptr_t)iov;
	p.send_iovec_nr = 2;
	p.flags = 0;
	p.send_cookie = 0;
	if (ioctl(fd, KNEM_CMD_INIT_SEND, &p) < 0)
		return errno;
	*cookie = p.send_cookie;
	return 0;
}

static int sync_recv_peer(int rx, int tx, void *arg)
{
	unsigned char *local = xalloc(LEG_LEN);
	struct knem_cmd_param_iovec iov[3];
	struct knem_cmd_sync_recv_param p;
	volatile knem_status_t *s;
	knem_cookie_t cookie;
	int fd, e;
	long w;

	(void)tx;
	(void)arg;
	TRY(k_open(&fd));
	e = k_map_status(fd, NSLOTS, &s);
	CHECK(e == 0, "status mmap: %s", ename(e));
	TRY(recv_u64(rx, &cookie));
	memset(local, 0, LEG_LEN);
	three_iovecs(local, iov);
	p.recv_iovec_array = (uintptr_t)iov;
	p.recv_iovec_nr = 3;
	p.status = GARBAGE32;
	p.send_cookie = cookie;
	p.flags = 0;
	p.pad = GARBAGE32;
	e = err_of(ioctl(fd, KNEM_CMD_SYNC_RECV, &p));
	CHECK(e == 0, "SYNC_RECV: %s", ename(e));
	CHECK(p.status == KNEM_STATUS_SUCCESS, "SYNC_RECV status 0x%x, want "
	      "SUCCESS", p.status);
	TRY(verify(local, LEG_LEN, SEED_SEND, 0, "received data"));
	w = first_written(s, NSLOTS);
	CHECK(w < 0, "SYNC_RECV wrote %u into status slot %ld", s[w], w);
	e = err_of(ioctl(fd, KNEM_CMD_SYNC_RECV, &p));
	CHECK(e == EINVAL, "second SYNC_RECV of the INIT_SEND cookie: %s, "
	      "want EINVAL", ename(e));
	close(fd);
	return 0;
}

static int mpich_legacy_init_send_sync_recv(void)
{
	unsigned char *buf = xalloc(LEG_LEN);
	knem_cookie_t cookie;
	struct child peer;
	int fd, e;

	TRY(child_start(&peer, sync_recv_peer, NULL));
	TRY(k_open(&fd));
	fill(buf, LEG_LEN, SEED_SEND, 0);
	e = init_send(fd, buf, &cookie);
	CHECK(e == 0, "INIT_SEND: %s", ename(e));
	CHECK(cookie != 0, "INIT_SEND cookie is 0");
	TRY(send_u64(peer.tx, cookie));
	TRY(child_join(&peer, "receiver: "));
	close(fd);
	return 0;
}

/* ---- legacy INIT_ASYNC_RECV: completion only through the slot --------- */

#define ASYNC_SLOT 77

static int async_recv_peer(int rx, int tx, void *arg)
{
	unsigned char *local = xalloc(LEG_LEN);
	struct knem_cmd_init_async_recv_param p;
	struct knem_cmd_param_iovec iov[3];
	volatile knem_status_t *s;
	knem_cookie_t cookie;
	double deadline;
	int fd, e;

	(void)tx;
	(void)arg;
	TRY(k_open(&fd));
	e = k_map_status(fd, NSLOTS, &s);
	CHECK(e == 0, "status mmap: %s", ename(e));
	TRY(recv_u64(rx, &cookie));
	memset(local, 0, LEG_LEN);
	three_iovecs(local, iov);
	p.recv_iovec_array = (uintptr_t)iov;
	p.recv_iovec_nr = 3;
	p.status_index = ASYNC_SLOT;
	p.send_cookie = cookie;
	p.flags = 0;
	p.pad = GARBAGE32;
	e = err_of(ioctl(fd, KNEM_CMD_INIT_ASYNC_RECV, &p));
	CHECK(e == 0, "INIT_ASYNC_RECV: %s", ename(e));
	deadline = now_secs() + ASYNC_WAIT_SECS;
	while (s[ASYNC_SLOT] == KNEM_STATUS_PENDING) {
		CHECK(now_secs() < deadline, "slot %d still PENDING after %d s",
		      ASYNC_SLOT, ASYNC_WAIT_SECS);
		usleep(1000);
	}
	CHECK(s[ASYNC_SLOT] == KNEM_STATUS_SUCCESS, "slot %d is %u, want "
	      "SUCCESS", ASYNC_SLOT, s[ASYNC_SLOT]);
	TRY(verify(local, LEG_LEN, SEED_SEND, 0, "received data"));
	close(fd);
	return 0;
}

static int mpich_legacy_init_async_recv(void)
{
	unsigned char *buf = xalloc(LEG_LEN);
	knem_cookie_t cookie;
	struct child peer;
	int fd, e;

	TRY(child_start(&peer, async_recv_peer, NULL));
	TRY(k_open(&fd));
	fill(buf, LEG_LEN, SEED_SEND, 0);
	e = init_send(fd, buf, &cookie);
	CHECK(e == 0, "INIT_SEND: %s", ename(e));
	TRY(send_u64(peer.tx, cookie));
	TRY(child_join(&peer, "receiver: "));
	close(fd);
	return 0;
}

static const struct conf_case cases[] = {
	{ "mpich_status_mmap_4096", mpich_status_mmap_4096 },
	{ "mpich_singleuse_sync_slot_stays_pending",
	  mpich_singleuse_sync_slot_stays_pending },
	{ "mpich_legacy_init_send_sync_recv",
	  mpich_legacy_init_send_sync_recv },
	{ "mpich_legacy_init_async_recv", mpich_legacy_init_async_recv },
	{ NULL, NULL }
};

int main(int argc, char **argv)
{
	return conf_main(cases, argc, argv);
}
