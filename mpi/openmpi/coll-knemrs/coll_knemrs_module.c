/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * coll/knemrs module: which communicators it takes, what it installs, and
 * what it keeps of the modules it replaces so that every other case goes
 * to them.
 */
#include "coll_knemrs.h"

#include <stdlib.h>

#include "opal/util/output.h"
#include "ompi/group/group.h"
#include "ompi/mca/coll/base/base.h"

static void knemrs_module_construct(mca_coll_knemrs_module_t *m)
{
	memset(&m->bcast, 0, (char *)&m->declined[KNEMRS_NOPS] - (char *)&m->bcast);
	m->team_state = KNEMRS_TEAM_NONE;
}

static void knemrs_prev_release(struct knemrs_prev *p)
{
#if OMPI_MAJOR_VERSION < 6
	/* 4.1 and 5.0 count a reference per installed function; we took one
	 * for each module we saved. */
	if (p->module != NULL) {
		OBJ_RELEASE(p->module);
	}
#endif
	p->module = NULL;
	p->fn = NULL;
}

/* One count per operation, as the team's end reports them. */
static void knemrs_log_calls(const char *what, const unsigned long n[KNEMRS_NOPS])
{
	opal_output_verbose(10, mca_coll_knemrs_component.output,
		"coll:knemrs: %s bcast %lu, scatter %lu, gather %lu, allgather %lu, alltoall %lu calls",
		what, n[KNEM_RS_OP_BCAST], n[KNEM_RS_OP_SCATTER], n[KNEM_RS_OP_GATHER],
		n[KNEM_RS_OP_ALLGATHER], n[KNEM_RS_OP_ALLTOALL]);
}

static void knemrs_module_destruct(mca_coll_knemrs_module_t *m)
{
	if (m->team != NULL) {
		unsigned long declined = 0;

		knemrs_log_calls("team freed after", m->carried);
		for (int op = 0; op < KNEMRS_NOPS; op++)
			declined += m->declined[op];
		if (declined > 0)
			knemrs_log_calls("declined by knem-rs and carried by the saved module:",
					 m->declined);
		knemrs_cache_report(m);
		/* Closing the team destroys the regions it kept. */
		knem_rs_team_close(m->team);
		m->team = NULL;
	}
	free(m->scratch);
	m->scratch = NULL;
	knemrs_prev_release(&m->bcast);
	knemrs_prev_release(&m->scatter);
	knemrs_prev_release(&m->gather);
	knemrs_prev_release(&m->allgather);
	knemrs_prev_release(&m->alltoall);
	knemrs_prev_release(&m->allreduce);
}

OBJ_CLASS_INSTANCE(mca_coll_knemrs_module_t, mca_coll_base_module_t,
		   knemrs_module_construct, knemrs_module_destruct);

/* Save what the communicator has for one operation before we take it. */
#if OMPI_MAJOR_VERSION >= 6
#define KNEMRS_SAVE(m, comm, api)                                                  \
	do {                                                                       \
		(m)->api.fn = (void *)(comm)->c_coll->coll_##api;                  \
		(m)->api.module = (comm)->c_coll->coll_##api##_module;             \
	} while (0)
#else
#define KNEMRS_SAVE(m, comm, api)                                                  \
	do {                                                                       \
		(m)->api.fn = (void *)(comm)->c_coll->coll_##api;                  \
		(m)->api.module = (comm)->c_coll->coll_##api##_module;             \
		if ((m)->api.module != NULL)                                       \
			OBJ_RETAIN((m)->api.module);                               \
	} while (0)
#endif

static int knemrs_module_enable(mca_coll_base_module_t *module, struct ompi_communicator_t *comm)
{
	mca_coll_knemrs_module_t *m = (mca_coll_knemrs_module_t *)module;

	KNEMRS_SAVE(m, comm, bcast);
	KNEMRS_SAVE(m, comm, scatter);
	KNEMRS_SAVE(m, comm, gather);
	KNEMRS_SAVE(m, comm, allgather);
	KNEMRS_SAVE(m, comm, alltoall);
	KNEMRS_SAVE(m, comm, allreduce);
	if (m->bcast.fn == NULL || m->scatter.fn == NULL || m->gather.fn == NULL ||
	    m->allgather.fn == NULL || m->alltoall.fn == NULL || m->allreduce.fn == NULL) {
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: %s has no fallback for every operation: not enabled",
			comm->c_name);
		return OMPI_ERROR;
	}
#if OMPI_MAJOR_VERSION >= 6
	MCA_COLL_INSTALL_API(comm, bcast, mca_coll_knemrs_bcast, module, "knemrs");
	MCA_COLL_INSTALL_API(comm, scatter, mca_coll_knemrs_scatter, module, "knemrs");
	MCA_COLL_INSTALL_API(comm, gather, mca_coll_knemrs_gather, module, "knemrs");
	MCA_COLL_INSTALL_API(comm, allgather, mca_coll_knemrs_allgather, module, "knemrs");
	MCA_COLL_INSTALL_API(comm, alltoall, mca_coll_knemrs_alltoall, module, "knemrs");
#endif
	opal_output_verbose(10, mca_coll_knemrs_component.output,
		"coll:knemrs: enabled on %s (%d ranks on this node): bcast, scatter, "
		"gather, allgather, alltoall", comm->c_name, ompi_comm_size(comm));
	return OMPI_SUCCESS;
}

#if OMPI_MAJOR_VERSION >= 6
/* 6.0 asks each module to put back what it replaced, in reverse order. */
#define KNEMRS_RESTORE(m, comm, api, type)                                            \
	MCA_COLL_INSTALL_API(comm, api, (type)(m)->api.fn, (m)->api.module, "knemrs")

static int knemrs_module_disable(mca_coll_base_module_t *module, struct ompi_communicator_t *comm)
{
	mca_coll_knemrs_module_t *m = (mca_coll_knemrs_module_t *)module;

	KNEMRS_RESTORE(m, comm, bcast, mca_coll_base_module_bcast_fn_t);
	KNEMRS_RESTORE(m, comm, scatter, mca_coll_base_module_scatter_fn_t);
	KNEMRS_RESTORE(m, comm, gather, mca_coll_base_module_gather_fn_t);
	KNEMRS_RESTORE(m, comm, allgather, mca_coll_base_module_allgather_fn_t);
	KNEMRS_RESTORE(m, comm, alltoall, mca_coll_base_module_alltoall_fn_t);
	return OMPI_SUCCESS;
}
#endif

mca_coll_base_module_t *mca_coll_knemrs_comm_query(struct ompi_communicator_t *comm, int *priority)
{
	mca_coll_knemrs_module_t *m;
	const char *why = NULL;

	if (mca_coll_knemrs_component.priority <= 0)
		why = "priority 0";
	else if (OMPI_COMM_IS_INTER(comm))
		why = "an intercommunicator";
	else if (ompi_comm_size(comm) < 2)
		why = "a single rank";
	else if (ompi_comm_size(comm) > 64)
		why = "more ranks than a knem-rs team holds (64)";
	else if (ompi_group_have_remote_peers(comm->c_local_group))
		why = "ranks on other nodes";
	if (why != NULL) {
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: not for %s: %s", comm->c_name, why);
		return NULL;
	}
	m = OBJ_NEW(mca_coll_knemrs_module_t);
	if (m == NULL)
		return NULL;
	*priority = mca_coll_knemrs_component.priority;
	m->super.coll_module_enable = knemrs_module_enable;
#if OMPI_MAJOR_VERSION >= 6
	m->super.coll_module_disable = knemrs_module_disable;
#else
	/* 4.1 and 5.0 install what the module structure points at. */
	m->super.coll_bcast = mca_coll_knemrs_bcast;
	m->super.coll_scatter = mca_coll_knemrs_scatter;
	m->super.coll_gather = mca_coll_knemrs_gather;
	m->super.coll_allgather = mca_coll_knemrs_allgather;
	m->super.coll_alltoall = mca_coll_knemrs_alltoall;
#endif
	return &m->super;
}
