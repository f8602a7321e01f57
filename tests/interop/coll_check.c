/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * coll_check: MPI_Bcast, Scatter, Gather, Allgather and Alltoall as an
 * application calls them, for the interop stage's coll/knemrs checks.
 *
 *   coll_check verify [MAXSIZE [RULES [LIBKNEM_RS]]]
 *                                 every operation x sizes 0, 1, 4K+1, 64K,
 *                                 1M+3 (and 16M if MAXSIZE allows) x every
 *                                 root x MPI_IN_PLACE or not, every byte
 *                                 and the guard bytes after each buffer
 *                                 checked; then a 64K bcast on each of
 *                                 three duplicates of MPI_COMM_WORLD.
 *                                 Reports the bytes knem must have moved
 *                                 if coll/knemrs carried every call from
 *                                 coll_knemrs_threshold (read through
 *                                 MPI_T) on; or, with the threshold at -1
 *                                 and RULES (a rules file of knemrs-tune,
 *                                 the one in force), every call its rules
 *                                 give knem-rs (asked of
 *                                 knem_rs_rules_decide in libknem_rs,
 *                                 dlopen'd from LIBKNEM_RS, default
 *                                 libknem_rs.so.0).
 *   coll_check bcast [MAXSIZE]    verify's MPI_Bcast calls only, for a
 *                                 collective component other than
 *                                 coll/knemrs (coll/xhc over smsc/knem):
 *                                 reports the bytes a single copy per
 *                                 receiving rank moves from the threshold
 *                                 on.
 *   coll_check fallback           the cases coll/knemrs must leave to the
 *                                 module it replaced: a vector datatype on
 *                                 every rank, contiguous at the root only,
 *                                 and MPI_Reduce; knem must move nothing.
 *   coll_check cache [CALLS]      the region cache, on a duplicate of
 *                                 MPI_COMM_WORLD: every operation CALLS
 *                                 times (default 20) on the same buffers,
 *                                 64 KiB blocks, new content each call;
 *                                 then buffers that are replaced at the
 *                                 same address between calls (munmap and
 *                                 mmap, mmap MAP_FIXED over them, madvise
 *                                 MADV_DONTNEED, malloc heap buffers
 *                                 freed, trimmed and allocated again),
 *                                 which a region kept from before would
 *                                 serve with the old pages; every byte
 *                                 checked.  Rank 0
 *                                 reads knem's regions_created around the
 *                                 repeats and prints
 *                                   coll_check: cache: repeats C, regions created R
 *                                 (and the heap calls' count: see
 *                                 heap_reuse), and fails unless knem's regions gauge is
 *                                 back where it was once the duplicate is
 *                                 freed.
 *   coll_check bench [ITERS [MAXSIZE]]
 *                                 OSU-style timings (avg/min/max us over
 *                                 ranks), 4K to MAXSIZE (default 4M), of
 *                                 each operation with coll/knemrs and with
 *                                 what it replaced, in one run: the
 *                                 threshold is switched through MPI_T.
 *                                 Reports the knem bytes of the first half.
 *   coll_check time [ITERS [MAXSIZE [RULES [LIBKNEM_RS]]]]
 *                                 one column of bench's timings, whatever
 *                                 component the run selected (coll/xhc,
 *                                 tuned over smsc cma or knem), for a table
 *                                 that joins several runs (make
 *                                 interop-smsc-bench); reports the knem
 *                                 bytes coll/knemrs would move for these
 *                                 calls from coll_knemrs_threshold on, or
 *                                 by the RULES in force (as verify).
 *
 * The last line on rank 0 is
 *   coll_check: <mode>: ranks P, calls C, bad bytes B, knem bytes expected K
 */
#include <dlfcn.h>
#include <limits.h>
#include <malloc.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define GUARD 64
#define GUARD_BYTE 0xA5
#define FILL_BYTE 0xEE

enum op { BCAST, SCATTER, GATHER, ALLGATHER, ALLTOALL, NOPS };
static const char *op_name[NOPS] = { "bcast", "scatter", "gather", "allgather", "alltoall" };

static int me, np;
/* The communicator run() uses: MPI_COMM_WORLD or a duplicate of it. */
static MPI_Comm comm;
static long long bad, calls;

static void __attribute__((noreturn)) die(const char *what)
{
	fprintf(stderr, "coll_check: rank %d: %s\n", me, what);
	MPI_Abort(MPI_COMM_WORLD, 2);
	exit(2);	/* MPI_Abort does not return; the compiler cannot know */
}

/* The byte a rank puts at offset i of block b; i >> 8 keeps offsets 256
 * apart distinct, salt changes it from call to call. */
static unsigned char pat(int rank, int block, size_t i, int salt)
{
	return (unsigned char)(rank * 37 + block * 101 + i * 13 + (i >> 8) + salt * 7);
}

/* len bytes of fill followed by GUARD guard bytes. */
static void buf_init(unsigned char *b, size_t len)
{
	memset(b, FILL_BYTE, len);
	memset(b + len, GUARD_BYTE, GUARD);
}

/* A buffer of len bytes followed by GUARD guard bytes. */
static unsigned char *buf_new(size_t len)
{
	unsigned char *b = malloc(len + GUARD);

	if (b == NULL)
		die("out of memory");
	buf_init(b, len);
	return b;
}

static void fill(unsigned char *b, int rank, int block, size_t n, int salt)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(rank, block, i, salt);
}

/* Count the bytes of block (rank, block) at b that are wrong. */
static void expect(const unsigned char *b, int rank, int block, size_t n, int salt)
{
	for (size_t i = 0; i < n; i++)
		bad += b[i] != pat(rank, block, i, salt);
}

static void expect_guard(const unsigned char *b, size_t len)
{
	for (size_t i = 0; i < GUARD; i++)
		bad += b[len + i] != GUARD_BYTE;
}

static void expect_fill(const unsigned char *b, size_t n)
{
	for (size_t i = 0; i < n; i++)
		bad += b[i] != FILL_BYTE;
}

/* One call of op with n bytes per block in s and r, each with room for
 * n * ranks + GUARD bytes (set here); returns the bytes between ranks
 * (what knem moves when the team carries it). */
static long long run_in(enum op op, size_t n, int root, int in_place, int salt,
			unsigned char *s, unsigned char *r)
{
	size_t p = (size_t)np, total = n * p;
	int cnt = (int)n;
	long long between = 0;

	calls++;
	switch (op) {
	case BCAST:
		buf_init(r, n);
		if (me == root)
			fill(r, root, 0, n, salt);
		MPI_Bcast(r, cnt, MPI_BYTE, root, comm);
		expect(r, root, 0, n, salt);
		expect_guard(r, n);
		between = (long long)(p - 1) * n;
		break;
	case SCATTER:
		buf_init(s, total);
		buf_init(r, n);
		if (me == root)
			for (int b = 0; b < np; b++)
				fill(s + b * n, root, b, n, salt);
		MPI_Scatter(s, cnt, MPI_BYTE, me == root && in_place ? MPI_IN_PLACE : r, cnt,
			    MPI_BYTE, root, comm);
		if (me == root) {
			/* The root's send buffer is untouched, in place or not. */
			for (int b = 0; b < np; b++)
				expect(s + b * n, root, b, n, salt);
			if (in_place)
				expect_fill(r, n);
			else
				expect(r, root, me, n, salt);
		} else {
			expect(r, root, me, n, salt);
		}
		expect_guard(s, total);
		expect_guard(r, n);
		between = (long long)(p - 1) * n;
		break;
	case GATHER:
		buf_init(s, n);
		buf_init(r, total);
		fill(s, me, 0, n, salt);
		if (me == root && in_place)
			fill(r + root * n, root, 0, n, salt);
		MPI_Gather(me == root && in_place ? MPI_IN_PLACE : s, cnt, MPI_BYTE, r, cnt, MPI_BYTE,
			   root, comm);
		if (me == root)
			for (int b = 0; b < np; b++)
				expect(r + b * n, b, 0, n, salt);
		else
			expect_fill(r, total);
		expect_guard(s, n);
		expect_guard(r, total);
		between = (long long)(p - 1) * n;
		break;
	case ALLGATHER:
		buf_init(s, n);
		buf_init(r, total);
		if (in_place)
			fill(r + me * n, me, 0, n, salt);
		else
			fill(s, me, 0, n, salt);
		MPI_Allgather(in_place ? MPI_IN_PLACE : s, cnt, MPI_BYTE, r, cnt, MPI_BYTE,
			      comm);
		for (int b = 0; b < np; b++)
			expect(r + b * n, b, 0, n, salt);
		expect_guard(s, n);
		expect_guard(r, total);
		between = (long long)(p * (p - 1)) * n;
		break;
	case ALLTOALL:
		buf_init(s, total);
		buf_init(r, total);
		for (int b = 0; b < np; b++)
			fill((in_place ? r : s) + b * n, me, b, n, salt);
		MPI_Alltoall(in_place ? MPI_IN_PLACE : s, cnt, MPI_BYTE, r, cnt, MPI_BYTE,
			     comm);
		for (int b = 0; b < np; b++)
			expect(r + b * n, b, me, n, salt);
		expect_guard(s, total);
		expect_guard(r, total);
		between = (long long)(p * (p - 1)) * n;
		break;
	default:
		die("unknown operation");
	}
	return between;
}

/* run_in on buffers of their own, freed after the call. */
static long long run(enum op op, size_t n, int root, int in_place, int salt)
{
	size_t room = n * (size_t)np + GUARD;
	unsigned char *s = malloc(room), *r = malloc(room);
	long long between;

	if (s == NULL || r == NULL)
		die("out of memory");
	between = run_in(op, n, root, in_place, salt, s, r);
	free(s);
	free(r);
	return between;
}

static int rooted(enum op op)
{
	return op == BCAST || op == SCATTER || op == GATHER;
}

/* coll_knemrs_threshold through MPI_T: the component must be loaded. */
static MPI_T_cvar_handle threshold_handle;

static void threshold_open(void)
{
	int idx, count;

	if (MPI_T_cvar_get_index("coll_knemrs_threshold", &idx) != MPI_SUCCESS)
		die("no MPI_T variable coll_knemrs_threshold: is coll/knemrs loaded?");
	if (MPI_T_cvar_handle_alloc(idx, NULL, &threshold_handle, &count) != MPI_SUCCESS)
		die("MPI_T_cvar_handle_alloc(coll_knemrs_threshold) failed");
}

static int threshold_get(void)
{
	int v;

	if (MPI_T_cvar_read(threshold_handle, &v) != MPI_SUCCESS)
		die("MPI_T_cvar_read(coll_knemrs_threshold) failed");
	return v;
}

static void threshold_set(int v)
{
	/* Every rank, between collectives: the parameter is ALL_EQ. */
	if (MPI_T_cvar_write(threshold_handle, &v) != MPI_SUCCESS)
		die("MPI_T_cvar_write(coll_knemrs_threshold) failed");
}

/* The rules in force (verify's RULES) and libknem_rs's reader of them. */
typedef int (*rules_decide_fn)(const char *path, int op, int ranks, const char *transport,
			       size_t n, int *alg, int *k);
static rules_decide_fn rules_decide;
static const char *(*rules_error)(void);
static const char *rules_path;
/* The teams' transport, coll_knemrs_transport: the rules are per transport. */
static char rules_transport[4096] = "knem";

static void rules_open(const char *path, const char *lib)
{
	MPI_T_cvar_handle handle;
	int idx, count;
	void *h;

	rules_path = path;
	if (rules_path == NULL || rules_path[0] == '\0')
		return;
	h = dlopen(lib != NULL ? lib : "libknem_rs.so.0", RTLD_NOW);
	if (h == NULL)
		die("rules named but libknem_rs cannot be loaded (LIBKNEM_RS)");
	rules_decide = (rules_decide_fn)(uintptr_t)dlsym(h, "knem_rs_rules_decide");
	rules_error = (const char *(*)(void))(uintptr_t)dlsym(h, "knem_rs_last_error");
	if (rules_decide == NULL || rules_error == NULL)
		die("libknem_rs has no knem_rs_rules_decide");
	if (MPI_T_cvar_get_index("coll_knemrs_transport", &idx) == MPI_SUCCESS &&
	    MPI_T_cvar_handle_alloc(idx, NULL, &handle, &count) == MPI_SUCCESS) {
		if (count <= (int)sizeof(rules_transport) &&
		    MPI_T_cvar_read(handle, rules_transport) != MPI_SUCCESS)
			die("MPI_T_cvar_read(coll_knemrs_transport) failed");
		MPI_T_cvar_handle_free(&handle);
	}
}

/* Whether coll/knemrs carries op on n bytes per block (ops enumerated as
 * knem_rs.h's KNEM_RS_OP_): from the threshold, else from the rules. */
static int carried(enum op op, size_t n, int threshold)
{
	int r;

	if (n == 0)
		return 0;
	if (threshold >= 0)
		return n >= (size_t)threshold;
	if (rules_decide == NULL)
		die("coll_knemrs_threshold is -1 (from the model): set it, or name the rules "
		    "in force (verify MAXSIZE RULES), so that the expected bytes are known");
	r = rules_decide(rules_path, (int)op, np, rules_transport, n, NULL, NULL);
	if (r < 0) {
		fprintf(stderr, "coll_check: rank %d: %s\n", me, rules_error());
		die("the rules named do not decide every call");
	}
	return r;
}

/* Every operation, or MPI_Bcast only (nops 1: BCAST is the first), then
 * the duplicates. */
static long long verify(size_t maxsize, int nops)
{
	static const size_t sizes[] = { 0, 1, 4097, 65536, (1 << 20) + 3, 16 << 20 };
	int threshold = threshold_get(), salt = 0;
	long long knem = 0;

	/* Fails here, before any call, when the bytes cannot be known. */
	(void)carried(BCAST, 1, threshold);
	for (int op = 0; op < nops; op++)
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			size_t n = sizes[k];

			if (n > maxsize)
				continue;
			for (int root = 0; root < (rooted(op) ? np : 1); root++)
				for (int in_place = 0; in_place < (op == BCAST ? 1 : 2); in_place++) {
					long long between = run(op, n, root, in_place, ++salt);

					if (carried(op, n, threshold))
						knem += between;
				}
		}
	/* Duplicates of MPI_COMM_WORLD: each gets a team of its own on its
	 * first call, freed with it. */
	for (int i = 0; i < 3; i++) {
		MPI_Comm_dup(MPI_COMM_WORLD, &comm);
		long long between = run(BCAST, 65536, i % np, 0, ++salt);

		if (carried(BCAST, 65536, threshold))
			knem += between;
		MPI_Comm_free(&comm);
	}
	comm = MPI_COMM_WORLD;
	return knem;
}

/* A counter of the knem module (rank 0 only, between barriers). */
static long long knem_counter(const char *name)
{
	char path[128];
	long long v;
	FILE *f;

	snprintf(path, sizeof(path), "/sys/class/misc/knem/%s", name);
	f = fopen(path, "r");
	if (f == NULL || fscanf(f, "%lld", &v) != 1)
		die("cannot read a knem counter in /sys/class/misc/knem");
	fclose(f);
	return v;
}

/* Give the len bytes at b new pages at the same address, the way a
 * program that frees and allocates again might: how % 3 picks munmap then
 * mmap, mmap MAP_FIXED over the old mapping, or madvise MADV_DONTNEED
 * (the next touch maps zero pages).  A region declared over the old pages
 * would still hold them. */
static void remap(unsigned char *b, size_t len, int how)
{
	void *p;

	switch (how % 3) {
	case 0:
		if (munmap(b, len) != 0)
			die("munmap failed");
		p = mmap(b, len, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
		break;
	case 1:
		p = mmap(b, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
			 -1, 0);
		break;
	default:
		p = madvise(b, len, MADV_DONTNEED) == 0 ? b : MAP_FAILED;
		break;
	}
	if (p != b)
		die("could not map new pages at the same address");
}

/* Every operation twice on s and r from the malloc heap, each time just
 * after freeing both and allocating them again: the free trims the heap
 * (the break goes down, its pages go back) and the malloc grows it again,
 * so the same addresses get new pages.  Open MPI 5's and 6's hooks do not
 * report such trims; a region kept from before would serve the old pages.
 * When the MPI has allocated above the buffers (its free lists growing,
 * more often when ranks drift apart under load), the free cannot shrink
 * the heap: the call that follows is still made and checked but does not
 * count, and the ranks (all told by the Allreduce) go again, the rank
 * whose heap did not shrink on buffers moved above that allocation (at
 * most 8 times in all: then it fails).  Rank 0 prints
 *   coll_check: heap: calls C, R of them after a free that left ...
 * for the interop check's call count. */
static long long heap_reuse(size_t n, size_t room, int *salt)
{
	long long knem = 0;
	int renewed, ncalls = 0, nballast = 0;
	/* Addresses, not pointers: they are compared after the free. */
	uintptr_t s, r, ballast[2 * 8];

	/* Heap, not mmap, for these sizes; give back all the top at once. */
	if (!mallopt(M_MMAP_THRESHOLD, 64 << 20) || !mallopt(M_TOP_PAD, 0) ||
	    !mallopt(M_TRIM_THRESHOLD, 0))
		die("mallopt failed");
	s = (uintptr_t)malloc(room);
	r = (uintptr_t)malloc(room);
	if (s == 0 || r == 0)
		die("malloc failed");
	for (int op = 0; op < NOPS; op++)
		for (int tested = 0, tries = 0; tested < 2; tries++) {
			uintptr_t brk, s2, r2;

			if (nballast == 2 * 8)
				die("8 frees of the heap buffers did not trim the heap and "
				    "give them back at the same addresses");
			/* New pages at the same addresses, if the free trims. */
			free((void *)r);
			free((void *)s);
			brk = (uintptr_t)sbrk(0);
			s2 = (uintptr_t)malloc(room);
			r2 = (uintptr_t)malloc(room);
			if (s2 == 0 || r2 == 0)
				die("malloc failed");
			renewed = brk <= s + 4096 && s2 == s && r2 == r;
			if (!renewed) {
				/* Something lies above the buffers: move them
				 * to the top, and keep their old place filled
				 * until the end, or every malloc would return it. */
				ballast[nballast++] = s2;
				ballast[nballast++] = r2;
				s2 = (uintptr_t)malloc(room);
				r2 = (uintptr_t)malloc(room);
				if (s2 == 0 || r2 == 0)
					die("malloc failed");
			}
			s = s2;
			r = r2;
			MPI_Allreduce(MPI_IN_PLACE, &renewed, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
			knem += run_in(op, n, tries % np, 0, (*salt)++, (unsigned char *)s,
				       (unsigned char *)r);
			ncalls++;
			tested += renewed;
		}
	if (me == 0)
		printf("coll_check: heap: calls %d, %d of them after a free that left the heap "
		       "untrimmed on some rank (an allocation above the buffers)\n", ncalls,
		       ncalls - 2 * NOPS);
	free((void *)r);
	free((void *)s);
	while (nballast > 0)
		free((void *)ballast[--nballast]);
	return knem;
}

/* See the header: repeats, then replaced buffers, on a duplicate. */
static long long cache(int ncalls)
{
	const size_t n = 65536;
	size_t room = ((n * (size_t)np + GUARD + 4095) / 4096) * 4096;
	int threshold = threshold_get(), salt = 1000;
	long long knem = 0, created = 0, regions0 = 0, repeats = 0;
	unsigned char *s, *r;

	if (threshold < 0 || (size_t)threshold > n)
		die("coll_knemrs_threshold must be set, to 64 KiB or less");
	s = mmap(NULL, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	r = mmap(NULL, room, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s == MAP_FAILED || r == MAP_FAILED)
		die("mmap failed");
	MPI_Barrier(MPI_COMM_WORLD);
	if (me == 0)
		regions0 = knem_counter("regions");
	MPI_Comm_dup(MPI_COMM_WORLD, &comm);
	/* The team is made on the first call: count from after it. */
	knem += run_in(BCAST, n, 0, 0, salt++, s, r);
	MPI_Barrier(MPI_COMM_WORLD);
	if (me == 0)
		created = knem_counter("regions_created");
	for (int op = 0; op < NOPS; op++)
		for (int i = 0; i < ncalls; i++, repeats++)
			knem += run_in(op, n, i % np, 0, salt++, s, r);
	MPI_Barrier(MPI_COMM_WORLD);
	if (me == 0)
		printf("coll_check: cache: repeats %lld, regions created %lld\n", repeats,
		       knem_counter("regions_created") - created);
	/* New pages under the same addresses before every call. */
	for (int op = 0; op < NOPS; op++)
		for (int i = 0; i < 3; i++) {
			remap(s, room, i);
			remap(r, room, i + 1);
			knem += run_in(op, n, i % np, 0, salt++, s, r);
		}
	knem += heap_reuse(n, room, &salt);
	MPI_Comm_free(&comm);
	comm = MPI_COMM_WORLD;
	MPI_Barrier(MPI_COMM_WORLD);
	if (me == 0 && knem_counter("regions") != regions0) {
		fprintf(stderr, "coll_check: regions %lld after MPI_Comm_free, %lld before the "
			"duplicate\n", knem_counter("regions"), regions0);
		die("the duplicate's regions outlived it");
	}
	munmap(s, room);
	munmap(r, room);
	return knem;
}

/* Vector datatypes, contiguous-at-the-root-only bcast, MPI_Reduce. */
static void fallback(void)
{
	const int blocks = 256, blen = 512, stride = 1024;
	size_t span = (size_t)blocks * stride, n = (size_t)blocks * blen;
	MPI_Datatype vec;
	unsigned char *v = buf_new(span * np), *c = buf_new(n * np);
	int *x, *sum;

	MPI_Type_vector(blocks, blen, stride, MPI_BYTE, &vec);
	MPI_Type_commit(&vec);

	/* Bcast, vector on every rank. */
	calls++;
	memset(v, FILL_BYTE, span);
	if (me == 0)
		for (int b = 0; b < blocks; b++)
			fill(v + (size_t)b * stride, 0, b, blen, 1);
	MPI_Bcast(v, 1, vec, 0, MPI_COMM_WORLD);
	for (int b = 0; b < blocks; b++) {
		expect(v + (size_t)b * stride, 0, b, blen, 1);
		expect_fill(v + (size_t)b * stride + blen, stride - blen);
	}

	/* Bcast, contiguous bytes at the root, the vector elsewhere: the same
	 * type signature, and the ranks must agree to fall back together. */
	calls++;
	memset(v, FILL_BYTE, span);
	if (me == 0) {
		for (int b = 0; b < blocks; b++)
			fill(c + (size_t)b * blen, 0, b, blen, 2);
		MPI_Bcast(c, (int)n, MPI_BYTE, 0, MPI_COMM_WORLD);
	} else {
		MPI_Bcast(v, 1, vec, 0, MPI_COMM_WORLD);
		for (int b = 0; b < blocks; b++)
			expect(v + (size_t)b * stride, 0, b, blen, 2);
	}

	/* Allgather and alltoall with the vector as the send type, bytes at
	 * the receiver. */
	calls++;
	for (int b = 0; b < blocks; b++)
		fill(v + (size_t)b * stride, me, b, blen, 3);
	MPI_Allgather(v, 1, vec, c, (int)n, MPI_BYTE, MPI_COMM_WORLD);
	for (int r = 0; r < np; r++)
		for (int b = 0; b < blocks; b++)
			expect(c + (size_t)r * n + (size_t)b * blen, r, b, blen, 3);

	/* Gather into the root with the vector as the receive type. */
	calls++;
	for (int b = 0; b < blocks; b++)
		fill(c + (size_t)b * blen, me, b, blen, 4);
	{
		MPI_Datatype rvec;

		/* Each rank's n bytes land as one vector at extent span. */
		MPI_Type_create_resized(vec, 0, (MPI_Aint)span, &rvec);
		MPI_Type_commit(&rvec);
		memset(v, FILL_BYTE, span * np);
		MPI_Gather(c, (int)n, MPI_BYTE, v, 1, rvec, 0, MPI_COMM_WORLD);
		if (me == 0)
			for (int r = 0; r < np; r++)
				for (int b = 0; b < blocks; b++)
					expect(v + (size_t)r * span + (size_t)b * stride, r, b, blen, 4);
		MPI_Type_free(&rvec);
	}

	/* MPI_Reduce (not an operation of coll/knemrs), 256 KiB of ints. */
	calls++;
	x = malloc(sizeof(int) << 18);
	sum = malloc(sizeof(int) << 18);
	if (x == NULL || sum == NULL)
		die("out of memory");
	for (int i = 0; i < 1 << 16; i++)
		x[i] = i * (me + 1);
	MPI_Reduce(x, sum, 1 << 16, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD);
	if (me == 0)
		for (int i = 0; i < 1 << 16; i++)
			bad += sum[i] != i * (np * (np + 1) / 2);
	free(x);
	free(sum);
	MPI_Type_free(&vec);
	free(v);
	free(c);
}

/* OSU style: each rank times ITERS calls after a warm-up, then avg, min
 * and max of the per-rank averages. */
static long long time_op(enum op op, size_t n, int iters, double out[3])
{
	size_t p = (size_t)np;
	long long between = (long long)(op == ALLGATHER || op == ALLTOALL ? p * (p - 1) : p - 1) * n;
	size_t total = n * (size_t)np;
	unsigned char *s = buf_new(total), *r = buf_new(total);
	int cnt = (int)n;
	double t0 = 0, t, sum, mn, mx;

	fill(s, me, 0, total, 5);
	for (int i = -1; i < iters; i++) {
		if (i == 0) {
			MPI_Barrier(MPI_COMM_WORLD);
			t0 = MPI_Wtime();
		}
		switch (op) {
		case BCAST: MPI_Bcast(s, cnt, MPI_BYTE, 0, MPI_COMM_WORLD); break;
		case SCATTER: MPI_Scatter(s, cnt, MPI_BYTE, r, cnt, MPI_BYTE, 0, MPI_COMM_WORLD); break;
		case GATHER: MPI_Gather(s, cnt, MPI_BYTE, r, cnt, MPI_BYTE, 0, MPI_COMM_WORLD); break;
		case ALLGATHER: MPI_Allgather(s, cnt, MPI_BYTE, r, cnt, MPI_BYTE, MPI_COMM_WORLD); break;
		case ALLTOALL: MPI_Alltoall(s, cnt, MPI_BYTE, r, cnt, MPI_BYTE, MPI_COMM_WORLD); break;
		default: die("unknown operation");
		}
		calls++;
	}
	t = (MPI_Wtime() - t0) * 1e6 / iters;
	MPI_Reduce(&t, &sum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&t, &mn, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
	MPI_Reduce(&t, &mx, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
	out[0] = sum / np;
	out[1] = mn;
	out[2] = mx;
	free(s);
	free(r);
	return between * (iters + 1);
}

/* Returns the bytes knem moved for the coll/knemrs half. */
static long long bench(int iters, size_t maxsize)
{
	static const size_t sizes[] = { 4096, 65536, 1 << 20, 4 << 20, 16 << 20 };
	int saved = threshold_get();
	long long knem = 0;

	if (me == 0)
		printf("# coll_check bench, %d ranks, %d iterations; times in us "
		       "(avg min max over ranks)\n"
		       "# %-10s %10s %10s %10s %10s %10s %10s %10s\n", np, iters, "op", "size",
		       "knemrs", "min", "max", "default", "min", "max");
	for (int op = 0; op < NOPS; op++)
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			double kn[3], def[3];

			if (sizes[k] > maxsize)
				continue;

			threshold_set(1);
			knem += time_op(op, sizes[k], iters, kn);
			threshold_set(INT_MAX);
			time_op(op, sizes[k], iters, def);
			if (me == 0)
				printf("  %-10s %10zu %10.1f %10.1f %10.1f %10.1f %10.1f %10.1f\n",
				       op_name[op], sizes[k], kn[0], kn[1], kn[2], def[0], def[1],
				       def[2]);
		}
	threshold_set(saved);
	return knem;
}

/* bench's sizes with the selected component only; returns the bytes
 * knem moves if coll/knemrs carries the calls from its threshold on. */
static long long time_selected(int iters, size_t maxsize)
{
	static const size_t sizes[] = { 4096, 65536, 1 << 20, 4 << 20, 16 << 20 };
	int threshold = threshold_get();
	long long knem = 0, moved;

	if (me == 0)
		printf("# coll_check time, %d ranks, %d iterations; times in us "
		       "(avg min max over ranks)\n"
		       "# %-10s %10s %10s %10s %10s\n", np, iters, "op", "size", "avg", "min", "max");
	for (int op = 0; op < NOPS; op++)
		for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
			double t[3];

			if (sizes[k] > maxsize)
				continue;
			moved = time_op(op, sizes[k], iters, t);
			if ((threshold >= 0 || rules_decide != NULL) &&
			    carried(op, sizes[k], threshold))
				knem += moved;
			if (me == 0)
				printf("  %-10s %10zu %10.1f %10.1f %10.1f\n", op_name[op], sizes[k],
				       t[0], t[1], t[2]);
		}
	return knem;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "verify";
	long long knem = 0, all_bad = 0, all_calls = 0;
	int provided;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &me);
	MPI_Comm_size(MPI_COMM_WORLD, &np);
	comm = MPI_COMM_WORLD;
	MPI_T_init_thread(MPI_THREAD_SINGLE, &provided);
	threshold_open();
	/* RULES and LIBKNEM_RS follow verify's MAXSIZE, time's ITERS and MAXSIZE. */
	if (strcmp(mode, "verify") == 0 && argc > 3)
		rules_open(argv[3], argc > 4 ? argv[4] : NULL);
	else if (strcmp(mode, "time") == 0 && argc > 4)
		rules_open(argv[4], argc > 5 ? argv[5] : NULL);

	if (strcmp(mode, "verify") == 0)
		knem = verify(argc > 2 ? strtoull(argv[2], NULL, 0) : (2u << 20), NOPS);
	else if (strcmp(mode, "bcast") == 0)
		knem = verify(argc > 2 ? strtoull(argv[2], NULL, 0) : (2u << 20), 1);
	else if (strcmp(mode, "fallback") == 0)
		fallback();
	else if (strcmp(mode, "cache") == 0)
		knem = cache(argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 20);
	else if (strcmp(mode, "bench") == 0)
		knem = bench(argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 20,
			     argc > 3 ? strtoull(argv[3], NULL, 0) : (4u << 20));
	else if (strcmp(mode, "time") == 0)
		knem = time_selected(argc > 2 && atoi(argv[2]) > 0 ? atoi(argv[2]) : 20,
				     argc > 3 ? strtoull(argv[3], NULL, 0) : (4u << 20));
	else
		die("usage: coll_check verify [MAXSIZE [RULES [LIB]]] | bcast [MAXSIZE] | fallback | "
		    "cache [CALLS] | bench [ITERS [MAXSIZE]] | time [ITERS [MAXSIZE [RULES [LIB]]]]");

	MPI_Allreduce(&bad, &all_bad, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
	MPI_Allreduce(&calls, &all_calls, 1, MPI_LONG_LONG, MPI_MAX, MPI_COMM_WORLD);
	/* Written now, before MPI_Finalize, not when exit() flushes the
	 * buffer: a rank that fails in MPI_Finalize still leaves its report. */
	if (me == 0) {
		printf("coll_check: %s: ranks %d, calls %lld, bad bytes %lld, "
		       "knem bytes expected %lld\n", mode, np, all_calls, all_bad, knem);
		fflush(stdout);
	}
	MPI_T_cvar_handle_free(&threshold_handle);
	MPI_T_finalize();
	MPI_Finalize();
	return all_bad == 0 ? 0 : 1;
}
