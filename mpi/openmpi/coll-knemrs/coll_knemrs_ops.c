/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * The five operations.  Each works out n, the bytes per block (the same on
 * every rank by MPI's type matching rules), asks knemrs_agree whether the
 * team carries it, and otherwise calls the module that was there before.
 * MPI_IN_PLACE forms go through a scratch buffer: knem-rs's collectives
 * take separate send and receive buffers.
 */
#include "coll_knemrs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "opal/util/output.h"
#include "ompi/datatype/ompi_datatype.h"

/* Where count elements of dtype start in buf, if they form one contiguous
 * run of bytes; NULL otherwise. */
static char *knemrs_contig(const void *buf, size_t count, struct ompi_datatype_t *dtype)
{
	ptrdiff_t true_lb, true_extent;

	if (count == 0)
		return (char *)buf;
	if (!ompi_datatype_is_contiguous_memory_layout(dtype, count))
		return NULL;
	if (ompi_datatype_get_true_extent(dtype, &true_lb, &true_extent) != OMPI_SUCCESS)
		return NULL;
	return (char *)buf + true_lb;
}

static size_t knemrs_bytes(size_t count, struct ompi_datatype_t *dtype)
{
	size_t s = 0;

	ompi_datatype_type_size(dtype, &s);
	return count * s;
}

/* A scratch buffer of at least len bytes, kept for the next calls; NULL
 * when memory is short (the caller then votes for the fallback). */
static void *knemrs_scratch(mca_coll_knemrs_module_t *m, size_t len)
{
	if (len > m->scratch_len) {
		void *p = realloc(m->scratch, len);

		if (p == NULL)
			return NULL;
		m->scratch = p;
		m->scratch_len = len;
	}
	return m->scratch;
}

static int knemrs_done(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm, int op,
		       const char *what, size_t n, int rc)
{
	if (rc != 0 && mca_coll_knemrs_component.force >= 0) {
		/* knemrs-tune's algorithm cannot carry the call: the tuner
		 * drops it (every rank fails alike: see knemrs_declined). */
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: %s: %s of %zu bytes per block by the forced algorithm "
			"failed: %s", comm->c_name, what, n, knem_rs_last_error());
		return OMPI_ERR_NOT_AVAILABLE;
	}
	if (rc != 0) {
		opal_output(0, "coll:knemrs: %s: %s of %zu bytes per block failed: %s",
			    comm->c_name, what, n, knem_rs_last_error());
		return rc == -ENOMEM ? OMPI_ERR_OUT_OF_RESOURCE : OMPI_ERROR;
	}
	m->carried[op]++;
	opal_output_verbose(20, mca_coll_knemrs_component.output,
		"coll:knemrs: %s: %s of %zu bytes per block by knem-rs", comm->c_name, what, n);
	return OMPI_SUCCESS;
}

/* 1 when knem-rs declined the call: a rank could not declare its region
 * (RLIMIT_MEMLOCK, ENOMEM).  knem-rs returns -ECANCELED on every rank of
 * the call alike and before any byte moved (the failure rides in the
 * descriptor exchange every call makes, see knem_rs.h), so every rank
 * takes the saved module together and its result is the whole result. */
static int knemrs_declined(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm, int op,
			   const char *what, size_t n, int rc)
{
	/* Forced by knemrs-tune: a declined call fails (knemrs_done). */
	if (rc != -ECANCELED || mca_coll_knemrs_component.force >= 0)
		return 0;
	m->declined[op]++;
	opal_output_verbose(m->declined[op] == 1 ? 10 : 20, mca_coll_knemrs_component.output,
		"coll:knemrs: %s: %s of %zu bytes per block declined by knem-rs (%s); the saved "
		"module carries it", comm->c_name, what, n, knem_rs_last_error());
	return 1;
}

int mca_coll_knemrs_bcast(void *buf, knemrs_count_t count, struct ompi_datatype_t *dtype, int root,
			  struct ompi_communicator_t *comm, mca_coll_base_module_t *module)
{
	mca_coll_knemrs_module_t *m = (mca_coll_knemrs_module_t *)module;
	size_t n = knemrs_bytes(count, dtype);
	char *p = knemrs_contig(buf, count, dtype);
	int alg, k, go = knemrs_agree(m, comm, KNEM_RS_OP_BCAST, n, p != NULL, &alg, &k), rc;

	if (go < 0)
		return OMPI_ERROR;
	if (go) {
		rc = knem_rs_bcast(m->team, p, n, root, alg, k);
		if (!knemrs_declined(m, comm, KNEM_RS_OP_BCAST, "bcast", n, rc))
			return knemrs_done(m, comm, KNEM_RS_OP_BCAST, "bcast", n, rc);
	}
	return ((mca_coll_base_module_bcast_fn_t)m->bcast.fn)(buf, count, dtype, root, comm,
							      m->bcast.module);
}

int mca_coll_knemrs_scatter(const void *sbuf, knemrs_count_t scount, struct ompi_datatype_t *sdtype,
			    void *rbuf, knemrs_count_t rcount, struct ompi_datatype_t *rdtype,
			    int root, struct ompi_communicator_t *comm,
			    mca_coll_base_module_t *module)
{
	mca_coll_knemrs_module_t *m = (mca_coll_knemrs_module_t *)module;
	size_t p = (size_t)ompi_comm_size(comm);
	int me = ompi_comm_rank(comm), in_place = me == root && rbuf == MPI_IN_PLACE;
	size_t n = me == root ? knemrs_bytes(scount, sdtype) : knemrs_bytes(rcount, rdtype);
	const char *s = NULL;
	char *r;
	int go, ok, alg, k;

	if (me == root) {
		s = knemrs_contig(sbuf, scount * p, sdtype);
		/* In place, the root's block stays where it is: the team
		 * delivers it to scratch memory we ignore. */
		r = in_place ? knemrs_scratch(m, n) : knemrs_contig(rbuf, rcount, rdtype);
		ok = s != NULL && (r != NULL || n == 0);
	} else {
		r = knemrs_contig(rbuf, rcount, rdtype);
		ok = r != NULL;
	}
	go = knemrs_agree(m, comm, KNEM_RS_OP_SCATTER, n, ok, &alg, &k);
	if (go < 0)
		return OMPI_ERROR;
	if (go) {
		int rc = knem_rs_scatter(m->team, s, r, n, root, alg, k);

		if (!knemrs_declined(m, comm, KNEM_RS_OP_SCATTER, "scatter", n, rc))
			return knemrs_done(m, comm, KNEM_RS_OP_SCATTER, "scatter", n, rc);
	}
	return ((mca_coll_base_module_scatter_fn_t)m->scatter.fn)(sbuf, scount, sdtype, rbuf,
		rcount, rdtype, root, comm, m->scatter.module);
}

int mca_coll_knemrs_gather(const void *sbuf, knemrs_count_t scount, struct ompi_datatype_t *sdtype,
			   void *rbuf, knemrs_count_t rcount, struct ompi_datatype_t *rdtype,
			   int root, struct ompi_communicator_t *comm,
			   mca_coll_base_module_t *module)
{
	mca_coll_knemrs_module_t *m = (mca_coll_knemrs_module_t *)module;
	size_t p = (size_t)ompi_comm_size(comm);
	int me = ompi_comm_rank(comm), in_place = me == root && sbuf == MPI_IN_PLACE;
	size_t n = me == root ? knemrs_bytes(rcount, rdtype) : knemrs_bytes(scount, sdtype);
	const char *s;
	char *r = NULL;
	int go, ok, alg, k;

	if (me == root) {
		r = knemrs_contig(rbuf, rcount * p, rdtype);
		s = in_place ? knemrs_scratch(m, n) : knemrs_contig(sbuf, scount, sdtype);
		ok = r != NULL && (s != NULL || n == 0);
	} else {
		s = knemrs_contig(sbuf, scount, sdtype);
		ok = s != NULL;
	}
	go = knemrs_agree(m, comm, KNEM_RS_OP_GATHER, n, ok, &alg, &k);
	if (go < 0)
		return OMPI_ERROR;
	if (go) {
		int rc;

		/* In place, the root's block is already at its place in rbuf;
		 * the team copies its send block there, so hand it a copy of
		 * itself (scratch memory: a declined call leaves rbuf as is). */
		if (in_place)
			memcpy((char *)s, r + (size_t)root * n, n);
		rc = knem_rs_gather(m->team, s, r, n, root, alg, k);
		if (!knemrs_declined(m, comm, KNEM_RS_OP_GATHER, "gather", n, rc))
			return knemrs_done(m, comm, KNEM_RS_OP_GATHER, "gather", n, rc);
	}
	return ((mca_coll_base_module_gather_fn_t)m->gather.fn)(sbuf, scount, sdtype, rbuf,
		rcount, rdtype, root, comm, m->gather.module);
}

int mca_coll_knemrs_allgather(const void *sbuf, knemrs_count_t scount,
			      struct ompi_datatype_t *sdtype, void *rbuf, knemrs_count_t rcount,
			      struct ompi_datatype_t *rdtype, struct ompi_communicator_t *comm,
			      mca_coll_base_module_t *module)
{
	mca_coll_knemrs_module_t *m = (mca_coll_knemrs_module_t *)module;
	size_t p = (size_t)ompi_comm_size(comm);
	int me = ompi_comm_rank(comm), in_place = sbuf == MPI_IN_PLACE;
	size_t n = knemrs_bytes(rcount, rdtype);
	char *r = knemrs_contig(rbuf, rcount * p, rdtype);
	const char *s = in_place ? knemrs_scratch(m, n) : knemrs_contig(sbuf, scount, sdtype);
	int alg, k, go = knemrs_agree(m, comm, KNEM_RS_OP_ALLGATHER, n, r != NULL && s != NULL,
				      &alg, &k);

	if (go < 0)
		return OMPI_ERROR;
	if (go) {
		int rc;

		/* knem-rs copies the send block into rbuf before it may decline:
		 * in place that is the same bytes, otherwise bytes the saved
		 * module writes again. */
		if (in_place)
			memcpy((char *)s, r + (size_t)me * n, n);
		rc = knem_rs_allgather(m->team, s, r, n, alg, k);
		if (!knemrs_declined(m, comm, KNEM_RS_OP_ALLGATHER, "allgather", n, rc))
			return knemrs_done(m, comm, KNEM_RS_OP_ALLGATHER, "allgather", n, rc);
	}
	return ((mca_coll_base_module_allgather_fn_t)m->allgather.fn)(sbuf, scount, sdtype, rbuf,
		rcount, rdtype, comm, m->allgather.module);
}

int mca_coll_knemrs_alltoall(const void *sbuf, knemrs_count_t scount,
			     struct ompi_datatype_t *sdtype, void *rbuf, knemrs_count_t rcount,
			     struct ompi_datatype_t *rdtype, struct ompi_communicator_t *comm,
			     mca_coll_base_module_t *module)
{
	mca_coll_knemrs_module_t *m = (mca_coll_knemrs_module_t *)module;
	size_t p = (size_t)ompi_comm_size(comm);
	int in_place = sbuf == MPI_IN_PLACE;
	size_t n = knemrs_bytes(rcount, rdtype);
	char *r = knemrs_contig(rbuf, rcount * p, rdtype);
	const char *s = in_place ? knemrs_scratch(m, n * p) : knemrs_contig(sbuf, scount * p, sdtype);
	int alg, k, go = knemrs_agree(m, comm, KNEM_RS_OP_ALLTOALL, n, r != NULL && s != NULL,
				      &alg, &k);

	if (go < 0)
		return OMPI_ERROR;
	if (go) {
		int rc;

		/* In place, every block of rbuf is sent and replaced: send a
		 * copy. */
		if (in_place)
			memcpy((char *)s, r, n * p);
		rc = knem_rs_alltoall(m->team, s, r, n, alg, k);
		if (!knemrs_declined(m, comm, KNEM_RS_OP_ALLTOALL, "alltoall", n, rc))
			return knemrs_done(m, comm, KNEM_RS_OP_ALLTOALL, "alltoall", n, rc);
	}
	return ((mca_coll_base_module_alltoall_fn_t)m->alltoall.fn)(sbuf, scount, sdtype, rbuf,
		rcount, rdtype, comm, m->alltoall.module);
}
