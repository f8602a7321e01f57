/* knem-rs C API example: run under `knem-run -n N -- ./example`.
 * Exercises transport copies (expose, descriptor exchange, read, readv,
 * write) and every collective; checks the data on every rank. */
#include <knem_rs.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                            \
	do {                                                                   \
		long rc_ = (long)(call);                                       \
		if (rc_ < 0) {                                                 \
			fprintf(stderr, "rank %d: %s failed: %ld (%s)\n", rank, \
				#call, rc_, knem_rs_last_error());             \
			return 1;                                              \
		}                                                              \
	} while (0)

#define EXPECT(cond)                                                           \
	do {                                                                   \
		if (!(cond)) {                                                 \
			fprintf(stderr, "rank %d: check failed: %s\n", rank,    \
				#cond);                                        \
			return 1;                                              \
		}                                                              \
	} while (0)

static unsigned char byte(int src, int dst, size_t i)
{
	return (unsigned char)(i * 31u + (unsigned)src * 7u + (unsigned)dst * 13u);
}

int main(void)
{
	int rank = -1;
	knem_rs_team *team;
	CHECK(knem_rs_team_attach_env(&team));
	rank = knem_rs_team_rank(team);
	int p = knem_rs_team_size(team);
	const size_t n = 10007; /* not a multiple of anything nice */

	/* Point to point: everyone reads rank 0's exposed buffer. */
	knem_rs_transport *t;
	CHECK(knem_rs_transport_open(knem_rs_team_transport_name(team), &t));
	unsigned char *src = malloc(n);
	for (size_t i = 0; i < n; i++)
		src[i] = byte(0, 0, i);
	knem_rs_exposure *e = NULL;
	knem_rs_desc d;
	memset(&d, 0, sizeof(d));
	if (rank == 0) {
		CHECK(knem_rs_expose(t, src, n, 1, &e));
		CHECK(knem_rs_exposure_descriptor(e, &d));
	}
	uint64_t words[4], all[64 * 8];
	memcpy(words, &d, sizeof(d));
	CHECK(knem_rs_team_allgather_words(team, words, 4, all));
	memcpy(&d, all, sizeof(d));
	if (rank != 0) {
		unsigned char a[100], b[200];
		CHECK(knem_rs_read(t, &d, 5000, a, sizeof(a)));
		EXPECT(memcmp(a, src + 5000, sizeof(a)) == 0);
		struct iovec iov[2] = {{a, 50}, {b, 200}};
		EXPECT(knem_rs_readv(t, &d, n - 100, iov, 2) == 100); /* clamped */
		EXPECT(memcmp(a, src + n - 100, 50) == 0 && memcmp(b, src + n - 50, 50) == 0);
	}
	{
		/* Region to region: from rank 0's exposure into one of ours. */
		unsigned char *dst = calloc(n, 1);
		knem_rs_exposure *de;
		knem_rs_desc dd;
		CHECK(knem_rs_expose(t, dst, n, 0, &de));
		CHECK(knem_rs_exposure_descriptor(de, &dd));
		EXPECT(knem_rs_copy(t, &d, 1000, &dd, 10, n) == (ssize_t)(n - 1000));
		CHECK(knem_rs_exposure_collect(de, 0, n));
		EXPECT(memcmp(dst + 10, src + 1000, n - 1000) == 0 && dst[0] == 0);
		knem_rs_exposure_close(de);
		free(dst);
	}
	CHECK(knem_rs_team_barrier(team));
	knem_rs_exposure_close(e);
	knem_rs_transport_close(t);

	/* Collectives, planner's choice and an explicit algorithm. */
	unsigned char *buf = malloc(n * p), *recv = malloc(n * p), *send = malloc(n * p);
	for (int alg = 0; alg < 2; alg++) {
		int a = alg ? KNEM_RS_ALG_THROTTLED : KNEM_RS_ALG_AUTO;
		for (size_t i = 0; i < n; i++)
			buf[i] = rank == 0 ? byte(0, 0, i) : 0;
		CHECK(knem_rs_bcast(team, buf, n, 0, alg ? KNEM_RS_ALG_KNOMIAL : 0, 2));
		for (size_t i = 0; i < n; i++)
			EXPECT(buf[i] == byte(0, 0, i));

		for (int r = 0; r < p; r++)
			for (size_t i = 0; i < n; i++)
				send[r * n + i] = byte(rank, r, i);
		CHECK(knem_rs_scatter(team, send, recv, n, 0, a, 2));
		for (size_t i = 0; i < n; i++)
			EXPECT(recv[i] == byte(0, rank, i));

		CHECK(knem_rs_gather(team, send + (size_t)rank * n, recv, n, p - 1, a, 2));
		if (rank == p - 1)
			for (int r = 0; r < p; r++)
				for (size_t i = 0; i < n; i++)
					EXPECT(recv[r * n + i] == byte(r, r, i));

		CHECK(knem_rs_allgather(team, send, recv, n, alg ? KNEM_RS_ALG_RING_NEIGHBOR : 0, 0));
		for (int r = 0; r < p; r++)
			for (size_t i = 0; i < n; i++)
				EXPECT(recv[r * n + i] == byte(r, 0, i));

		CHECK(knem_rs_alltoall(team, send, recv, n, alg ? KNEM_RS_ALG_RING : 0, 0));
		for (int r = 0; r < p; r++)
			for (size_t i = 0; i < n; i++)
				EXPECT(recv[r * n + i] == byte(r, rank, i));
	}

	/* scatterv/gatherv with uneven counts, rank 1 gets nothing. */
	size_t counts[64], displs[64], total = 0;
	for (int r = 0; r < p; r++) {
		counts[r] = r == 1 ? 0 : 100 + 3 * (size_t)r;
		displs[r] = total;
		total += counts[r];
	}
	for (size_t i = 0; i < total; i++)
		send[i] = (unsigned char)(i * 5);
	CHECK(knem_rs_scatterv(team, send, rank == 0 ? total : 0, counts, displs, recv, n, 0, 0, 0));
	for (size_t i = 0; i < counts[rank]; i++)
		EXPECT(recv[i] == (unsigned char)((displs[rank] + i) * 5));
	CHECK(knem_rs_gatherv(team, recv, counts[rank], buf, rank == 0 ? total : 0, counts, displs, 0,
			      KNEM_RS_ALG_SEQUENTIAL, 0));
	if (rank == 0)
		for (size_t i = 0; i < total; i++)
			EXPECT(buf[i] == (unsigned char)(i * 5));

	int alg = -1, k = -1;
	double cost = -1;
	CHECK(knem_rs_team_plan(team, KNEM_RS_OP_SCATTER, 1 << 20, &alg, &k, &cost));
	EXPECT(alg > 0 && cost >= 0);
	if (rank == 0)
		printf("example: %d ranks over %s ok\n", p, knem_rs_team_transport_name(team));
	knem_rs_team_close(team);
	free(src);
	free(buf);
	free(recv);
	free(send);
	return 0;
}
