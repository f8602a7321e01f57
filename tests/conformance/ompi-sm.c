// SPDX-License-Identifier: GPL-2.0-only
/*
 * ompi-sm.c - the call sequences of the old Open MPI sm BTL knem support,
 * which used the asynchronous side of the ABI.
 *
 * The receiver maps a status array of N = 256 slots and hands out slot
 * indices from a ring.  Without a DMA engine it posts inline reads with
 * ASYNCDMACOMPLETE ("copy now, report in current_status and in the slot");
 * with a kernel copy thread it posts MEMCPYTHREAD reads, which return
 * PENDING, and later walks the ring in submission order, retiring slots
 * until the first one still PENDING.  That walk is only correct if the
 * requests of one fd complete in submission order.
 *
 * Everything past the status mmap exercises the asynchronous copies.
 */
#include <sched.h>

#include "conf.h"

#define NSLOTS 256
#define SEED_OWNER 0x53

static int ompi_sm_status_mmap_256(void)
{
	volatile knem_status_t *s;
	long w;
	int fd, e;

	TRY(k_open(&fd));
	e = k_map_status(fd, NSLOTS, &s);
	CHECK(e == 0, "mmap of %d status bytes: %s", NSLOTS, ename(e));
	w = first_written(s, NSLOTS);
	CHECK(w < 0, "fresh status slot %ld is %u, want PENDING", w, s[w]);
	s[NSLOTS - 1] = KNEM_STATUS_SUCCESS;   /* the client may write it */
	s[NSLOTS - 1] = KNEM_STATUS_PENDING;
	munmap((void *)s, NSLOTS);
	close(fd);
	return 0;
}

/*
 * Owner side shared by the cases below: a PROT_READ region of len bytes of
 * pattern SEED_OWNER, kept alive until the peer is done.
 */
static int own_region(size_t len, child_fn peer_fn)
{
	unsigned char *buf = xalloc(len);
	knem_cookie_t cookie;
	struct child peer;
	int fd, e;

	TRY(child_start(&peer, peer_fn, NULL));
	TRY(k_open(&fd));
	fill(buf, len, SEED_OWNER, 0);
	e = k_create(fd, buf, len, 0, PROT_READ, &cookie);
	CHECK(e == 0, "CREATE_REGION: %s", ename(e));
	TRY(send_u64(peer.tx, cookie));
	TRY(child_join(&peer, "peer: "));
	e = k_destroy(fd, cookie);
	CHECK(e == 0, "DESTROY_REGION: %s", ename(e));
	TRY(verify(buf, len, SEED_OWNER, 0, "region after the reads"));
	close(fd);
	return 0;
}

/* ---- ASYNCDMACOMPLETE without DMA: copy now, report twice ------------ */

#define ADC_PIECE (4 * KIB)
#define ADC_REGION (NSLOTS * ADC_PIECE)
#define ADC_COPIES 300          /* more than the ring: indices wrap */

static int adc_peer(int rx, int tx, void *arg)
{
	unsigned char *local = xalloc(ADC_PIECE);
	volatile knem_status_t *s;
	knem_cookie_t cookie;
	uint32_t st, i;
	uint64_t off;
	int fd, e, k;

	(void)tx;
	(void)arg;
	TRY(k_open(&fd));
	e = k_map_status(fd, NSLOTS, &s);
	CHECK(e == 0, "status mmap: %s", ename(e));
	TRY(recv_u64(rx, &cookie));
	for (k = 0; k < ADC_COPIES; k++) {
		i = (uint32_t)(k + 250) % NSLOTS;
		off = (uint64_t)(k * 7 % NSLOTS) * ADC_PIECE;
		s[i] = KNEM_STATUS_PENDING;     /* the ring reuses slots */
		memset(local, 0, ADC_PIECE);
		e = k_inline(fd, local, ADC_PIECE, 0, cookie, off,
			     KNEM_FLAG_ASYNCDMACOMPLETE, i, &st);
		CHECK(e == 0, "copy %d (ASYNCDMACOMPLETE, slot %u): %s", k, i,
		      ename(e));
		CHECK(st == KNEM_STATUS_SUCCESS,
		      "copy %d: current_status 0x%x, want SUCCESS", k, st);
		CHECK(s[i] == KNEM_STATUS_SUCCESS,
		      "copy %d: slot %u is %u, want SUCCESS", k, i, s[i]);
		TRY(verify(local, ADC_PIECE, SEED_OWNER, off, "data"));
	}
	close(fd);
	return 0;
}

static int ompi_sm_asyncdmacomplete_ring(void)
{
	return own_region(ADC_REGION, adc_peer);
}

/* ---- MEMCPYTHREAD: PENDING now, ring retired in order later ----------- */

#define MT_PIECE (64 * KIB)
#define MT_COPIES 64
#define MT_REGION (MT_COPIES * MT_PIECE)
#define MT_FIRST_SLOT 200       /* the ring wraps past slot 255 */

static uint32_t mt_slot(int k)
{
	return (uint32_t)(MT_FIRST_SLOT + k) % NSLOTS;
}

static int mt_peer(int rx, int tx, void *arg)
{
	unsigned char *local = xalloc(MT_REGION);
	volatile knem_status_t *s;
	knem_cookie_t cookie;
	int fd, e, k, head = 0;
	double deadline;
	uint32_t st;

	(void)tx;
	(void)arg;
	TRY(k_open(&fd));
	e = k_map_status(fd, NSLOTS, &s);
	CHECK(e == 0, "status mmap: %s", ename(e));
	TRY(recv_u64(rx, &cookie));
	memset(local, 0, MT_REGION);
	for (k = 0; k < MT_COPIES; k++) {
		s[mt_slot(k)] = KNEM_STATUS_PENDING;
		e = k_inline(fd, local + (size_t)k * MT_PIECE, MT_PIECE, 0,
			     cookie, (uint64_t)k * MT_PIECE,
			     KNEM_FLAG_MEMCPYTHREAD, mt_slot(k), &st);
		CHECK(e == 0, "copy %d (MEMCPYTHREAD, slot %u): %s", k,
		      mt_slot(k), ename(e));
		CHECK(st == KNEM_STATUS_PENDING,
		      "copy %d: current_status 0x%x, want PENDING", k, st);
	}

	deadline = now_secs() + ASYNC_WAIT_SECS;
	while (head < MT_COPIES) {
		int later_done = 0, j;

		/*
		 * Completion order: read the ring backwards, so a slot seen
		 * done was read before every earlier slot; in-order
		 * completion then means no earlier slot can still be PENDING.
		 */
		for (j = MT_COPIES - 1; j >= head; j--) {
			knem_status_t v = s[mt_slot(j)];

			if (v != KNEM_STATUS_PENDING)
				later_done = j + 1;
			else if (later_done)
				return conf_fail("out of order: copy %d done "
						 "while copy %d is PENDING",
						 later_done - 1, j);
		}
		/* The BTL's walk: retire until the first PENDING slot. */
		while (head < MT_COPIES &&
		       s[mt_slot(head)] != KNEM_STATUS_PENDING) {
			CHECK(s[mt_slot(head)] == KNEM_STATUS_SUCCESS,
			      "copy %d: slot %u is %u, want SUCCESS", head,
			      mt_slot(head), s[mt_slot(head)]);
			head++;
		}
		CHECK(now_secs() < deadline,
		      "%d of %d copies still PENDING after %d s",
		      MT_COPIES - head, MT_COPIES, ASYNC_WAIT_SECS);
		sched_yield();
	}
	TRY(verify(local, MT_REGION, SEED_OWNER, 0, "data"));
	close(fd);
	return 0;
}

static int ompi_sm_memcpythread_ring(void)
{
	return own_region(MT_REGION, mt_peer);
}

static const struct conf_case cases[] = {
	{ "ompi_sm_status_mmap_256", ompi_sm_status_mmap_256 },
	{ "ompi_sm_asyncdmacomplete_ring", ompi_sm_asyncdmacomplete_ring },
	{ "ompi_sm_memcpythread_ring", ompi_sm_memcpythread_ring },
	{ NULL, NULL }
};

int main(int argc, char **argv)
{
	return conf_main(cases, argc, argv);
}
