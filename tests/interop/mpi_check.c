// SPDX-License-Identifier: GPL-2.0-only
/*
 * mpi_check - moves data with MPI point-to-point and collectives, verifies
 * every byte, and reports how many payload bytes crossed between ranks as
 * large messages.
 *
 * Ping-pong between rank 0 and the last rank at 1 MiB .. 16 MiB+3, a
 * broadcast from every root, one all-to-all.  Every message is large
 * (512 KiB or more), so that over UCX each goes by rendezvous; the run is
 * meant for the linear broadcast and all-to-all algorithms (coll/tuned
 * dynamic rules 1 and 1), under which the payload bytes that cross
 * between ranks are: 2 * size per ping-pong, (N - 1) * size per broadcast
 * and N * (N - 1) * block for the all-to-all (a rank's block to itself is
 * a local copy).  Rank 0 prints that total, the bytes verified and the
 * number of bad bytes; the exit status is 0 only if none was bad.
 *
 *   mpi_check [THRESHOLD [PINGPONG_MAX]]
 *
 * With THRESHOLD, the total counts only the messages larger than it: a
 * transport's single-copy path takes the messages above its eager limit
 * whole and none below, so the total is what it must move.  Rank 0 also
 * prints the smallest message, which says whether the threshold mattered.
 * With PINGPONG_MAX, the ping-pong stops at that size: across two nodes
 * its messages cross the network, which the knem checks do not need in
 * full.
 *
 * Across nodes, the lowest rank of each node (MPI_COMM_TYPE_SHARED) also
 * prints the part of that total that stayed inside its node, the bytes its
 * ranks received from ranks of the same node:
 *   mpi_check: node NAME, ranks R, intra-node bytes N
 */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MIB (1024UL * 1024UL)

static const size_t pingpong_sizes[] = {
	1 * MIB, 2 * MIB + 1, 4 * MIB, 8 * MIB + 2, 16 * MIB + 3,
};
static const size_t bcast_size = 2 * MIB + 1;
static const size_t alltoall_block = 512 * 1024 + 5;

static uint8_t pattern(uint64_t seed, size_t i)
{
	uint64_t x = (seed + 1) * 0x9e3779b97f4a7c15ULL + i;

	x ^= x >> 29;
	x *= 0xbf58476d1ce4e5b9ULL;
	return (uint8_t)(x >> 32);
}

static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
	for (size_t i = 0; i < len; i++)
		buf[i] = pattern(seed, i);
}

/* The number of bytes of buf that differ from the pattern. */
static uint64_t check(const uint8_t *buf, size_t len, uint64_t seed)
{
	uint64_t bad = 0;

	for (size_t i = 0; i < len; i++)
		bad += buf[i] != pattern(seed, i);
	return bad;
}

static void *xmalloc(size_t len)
{
	void *p = malloc(len);

	if (!p) {
		fprintf(stderr, "mpi_check: out of memory (%zu bytes)\n", len);
		MPI_Abort(MPI_COMM_WORLD, 2);
	}
	return p;
}

int main(int argc, char **argv)
{
	uint64_t moved = 0, verified = 0, bad = 0, total_bad, total_verified;
	uint64_t intra = 0, node_intra;
	size_t max = 16 * MIB + 3;
	size_t above = 0, smallest = alltoall_block, pingpong_max = max;
	int rank, n, node_rank, node_size, name_len;
	int *node_of; /* each world rank's node, as the node's lowest world rank */
	char name[MPI_MAX_PROCESSOR_NAME];
	MPI_Comm node;
	uint8_t *buf, *sbuf, *rbuf;

	MPI_Init(&argc, &argv);
	for (int i = 1; i < argc && i < 4; i++) {
		char *end;
		size_t v = strtoul(argv[i], &end, 0);

		if (argc > 3 || !*argv[i] || *end) {
			fprintf(stderr, "usage: mpi_check [THRESHOLD [PINGPONG_MAX]]\n");
			MPI_Abort(MPI_COMM_WORLD, 2);
		}
		if (i == 1)
			above = v;
		else
			pingpong_max = v;
	}
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &n);
	buf = xmalloc(max);
	MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
	MPI_Comm_rank(node, &node_rank);
	MPI_Comm_size(node, &node_size);
	node_of = xmalloc(sizeof(*node_of) * (size_t)n);
	{
		int leader = rank;

		MPI_Bcast(&leader, 1, MPI_INT, 0, node);
		MPI_Allgather(&leader, 1, MPI_INT, node_of, 1, MPI_INT, MPI_COMM_WORLD);
	}

	for (size_t k = 0; n > 1 && k < sizeof(pingpong_sizes) / sizeof(pingpong_sizes[0]); k++) {
		size_t len = pingpong_sizes[k];
		int peer = n - 1;

		if (len > pingpong_max)
			break;

		if (rank == 0) {
			fill(buf, len, 2 * k);
			MPI_Send(buf, (int)len, MPI_BYTE, peer, 1, MPI_COMM_WORLD);
			memset(buf, 0, len);
			MPI_Recv(buf, (int)len, MPI_BYTE, peer, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			bad += check(buf, len, 2 * k + 1);
			verified += len;
		} else if (rank == peer) {
			memset(buf, 0, len);
			MPI_Recv(buf, (int)len, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
			bad += check(buf, len, 2 * k);
			verified += len;
			fill(buf, len, 2 * k + 1);
			MPI_Send(buf, (int)len, MPI_BYTE, 0, 2, MPI_COMM_WORLD);
		}
		if (len > above) {
			moved += 2 * len;
			if ((rank == 0 || rank == peer) && node_of[0] == node_of[peer])
				intra += len;
		}
		if (len < smallest)
			smallest = len;
	}

	for (int root = 0; root < n; root++) {
		uint64_t seed = 100 + (uint64_t)root;

		if (rank == root)
			fill(buf, bcast_size, seed);
		else
			memset(buf, 0, bcast_size);
		MPI_Bcast(buf, (int)bcast_size, MPI_BYTE, root, MPI_COMM_WORLD);
		if (rank != root) {
			bad += check(buf, bcast_size, seed);
			verified += bcast_size;
		}
		if (bcast_size > above) {
			moved += (uint64_t)(n - 1) * bcast_size;
			if (rank != root && node_of[root] == node_of[rank])
				intra += bcast_size;
		}
	}
	if (n > 1 && bcast_size < smallest)
		smallest = bcast_size;

	sbuf = xmalloc(alltoall_block * (size_t)n);
	rbuf = xmalloc(alltoall_block * (size_t)n);
	for (int to = 0; to < n; to++)
		fill(sbuf + (size_t)to * alltoall_block, alltoall_block,
		     1000 + (uint64_t)rank * 64 + (uint64_t)to);
	memset(rbuf, 0, alltoall_block * (size_t)n);
	MPI_Alltoall(sbuf, (int)alltoall_block, MPI_BYTE, rbuf, (int)alltoall_block, MPI_BYTE,
		     MPI_COMM_WORLD);
	for (int from = 0; from < n; from++) {
		bad += check(rbuf + (size_t)from * alltoall_block, alltoall_block,
			     1000 + (uint64_t)from * 64 + (uint64_t)rank);
		verified += alltoall_block;
	}
	if (alltoall_block > above) {
		moved += (uint64_t)n * (uint64_t)(n - 1) * alltoall_block;
		for (int from = 0; from < n; from++)
			if (from != rank && node_of[from] == node_of[rank])
				intra += alltoall_block;
	}

	MPI_Reduce(&bad, &total_bad, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&verified, &total_verified, 1, MPI_UINT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
	MPI_Reduce(&intra, &node_intra, 1, MPI_UINT64_T, MPI_SUM, 0, node);
	MPI_Get_processor_name(name, &name_len);
	if (node_rank == 0)
		printf("mpi_check: node %s, ranks %d, intra-node bytes %llu\n", name,
		       node_size, (unsigned long long)node_intra);
	if (rank == 0) {
		printf("mpi_check: smallest message %zu bytes, counted above %zu\n", smallest, above);
		printf("mpi_check: ranks %d, bytes verified %llu, bad bytes %llu, large-message bytes %llu\n",
		       n, (unsigned long long)total_verified, (unsigned long long)total_bad,
		       (unsigned long long)moved);
	}
	/* Written before MPI_Finalize, not at exit(): a rank that fails in
	 * MPI_Finalize still leaves its lines. */
	fflush(stdout);
	free(rbuf);
	free(sbuf);
	free(buf);
	free(node_of);
	MPI_Comm_free(&node);
	MPI_Finalize();
	return rank == 0 && total_bad ? 1 : 0;
}
