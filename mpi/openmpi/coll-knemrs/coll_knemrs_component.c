/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * coll/knemrs component: its MCA parameters and the structure Open MPI
 * finds by name (mca_coll_knemrs_component) when it loads the DSO.
 */
#include "coll_knemrs.h"

#include "opal/util/output.h"
#include "ompi/mca/coll/base/base.h"

static int knemrs_register(void);
static int knemrs_open(void);
static int knemrs_close(void);
static int knemrs_init_query(bool enable_progress_threads, bool enable_mpi_threads);

struct knemrs_component_state mca_coll_knemrs_component = {
	.super = {
		.collm_version = {
			KNEMRS_COLL_VERSION,
			.mca_component_name = "knemrs",
			MCA_BASE_MAKE_VERSION(component, OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
					      OMPI_RELEASE_VERSION),
			.mca_open_component = knemrs_open,
			.mca_close_component = knemrs_close,
			.mca_register_component_params = knemrs_register,
		},
		.collm_data = {
			MCA_BASE_METADATA_PARAM_CHECKPOINT
		},
		.collm_init_query = knemrs_init_query,
		.collm_comm_query = mca_coll_knemrs_comm_query,
	},
	/* Above coll/tuned (30): tuned stays the fallback we save. */
	.priority = 40,
	.threshold = -1,
	.force = KNEMRS_FORCE_NONE,
	.transport = NULL,
	.region_cache = -1,
	.cache_entries = 64,
	.cache_bytes = (size_t)256 << 20,
	.cache_process_bytes = (size_t)512 << 20,
	.team_name = NULL,
	.rules = NULL,
};

static char *transport_default = "knem";

static int knemrs_register(void)
{
	mca_base_component_t *c = &mca_coll_knemrs_component.super.collm_version;

	(void)mca_base_component_var_register(c, "priority",
		"Priority of coll/knemrs on single-node intracommunicators (0 disables it)",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_knemrs_component.priority);
	/* Settable and ALL_EQ: a program may change it at run time through
	 * MPI_T (the same value on every rank, between collectives). */
	(void)mca_base_component_var_register(c, "threshold",
		"Bytes per block from which knem-rs carries bcast, scatter, gather, allgather "
		"and alltoall; -1: from knem-coll's cost model (the size where the model's data "
		"time passes its fixed time)",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_6,
		MCA_BASE_VAR_SCOPE_ALL_EQ, &mca_coll_knemrs_component.threshold);
	/* knemrs-tune times each candidate through this component: settable
	 * and ALL_EQ like the threshold. */
	(void)mca_base_component_var_register(c, "force",
		"For knemrs-tune: -1, the default, decides as usual (rules, model, threshold); "
		"-2 hands every call to the saved module; ALG*256+K has knem-rs's algorithm ALG "
		"(knem_rs.h's KNEM_RS_ALG_*) with parameter K carry every call, whatever its "
		"size, and a call it cannot carry fails instead of being handed over",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, MCA_BASE_VAR_FLAG_SETTABLE, OPAL_INFO_LVL_9,
		MCA_BASE_VAR_SCOPE_ALL_EQ, &mca_coll_knemrs_component.force);
	mca_coll_knemrs_component.transport = transport_default;
	(void)mca_base_component_var_register(c, "transport",
		"knem-rs transport of the teams: knem (the default), cma or shm",
		MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_9,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_knemrs_component.transport);
	(void)mca_base_component_var_register(c, "region_cache",
		"Keep each rank's knem regions declared while its buffers repeat, dropping those "
		"Open MPI's memory hooks report freed (buffers in the malloc heap are never kept). "
		"-1, the default: where this rank's pins are not limited (RLIMIT_MEMLOCK unlimited, "
		"CAP_IPC_LOCK in the initial user namespace, or knem's account_pinned=N); 1: always; "
		"0: never, declare and destroy them in every call",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_6,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_knemrs_component.region_cache);
	(void)mca_base_component_var_register(c, "region_cache_entries",
		"Regions a rank keeps per communicator (least recently used go first)",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_knemrs_component.cache_entries);
	(void)mca_base_component_var_register(c, "region_cache_bytes",
		"Bytes the regions a rank keeps per communicator may cover (they stay pinned "
		"and count against RLIMIT_MEMLOCK)",
		MCA_BASE_VAR_TYPE_SIZE_T, NULL, 0, 0, OPAL_INFO_LVL_9,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_knemrs_component.cache_bytes);
	(void)mca_base_component_var_register(c, "region_cache_process_bytes",
		"Bytes the regions a rank keeps may cover in all its communicators together "
		"(each communicator also stays within region_cache_bytes)",
		MCA_BASE_VAR_TYPE_SIZE_T, NULL, 0, 0, OPAL_INFO_LVL_9,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_knemrs_component.cache_process_bytes);
	(void)mca_base_component_var_register(c, "team_name",
		"For tests: the name of every team's control block in /dev/shm instead of a "
		"fresh random one (rank 0 still creates it exclusively, and falls back when "
		"anything is already there)",
		MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_9,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_knemrs_component.team_name);
	(void)mca_base_component_var_register(c, "rules",
		"The rules file of knemrs-tune: per operation, team size and range of bytes per "
		"block, a knem-rs algorithm or the saved module, as measured on this node; "
		"empty: $KNEM_RS_RULES, else /etc/knem-rs/coll-rules.json when there.  Used "
		"when coll_knemrs_threshold is -1; a file of another machine or version is "
		"refused (coll_base_verbose 10 says why) and the model decides",
		MCA_BASE_VAR_TYPE_STRING, NULL, 0, 0, OPAL_INFO_LVL_6,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_coll_knemrs_component.rules);
	return OMPI_SUCCESS;
}

static int knemrs_open(void)
{
	/* coll_base_verbose drives our messages too. */
	mca_coll_knemrs_component.output = ompi_coll_base_framework.framework_output;
	return OMPI_SUCCESS;
}

static int knemrs_close(void)
{
	knemrs_cache_close();
	return OMPI_SUCCESS;
}

/* Once per process, in MPI_Init: the bound on kept bytes, and the memory
 * hooks the region cache needs, installed now rather than at the first
 * communicator's first collective, when application threads may be
 * running through the functions the patcher rewrites. */
static int knemrs_init_query(bool enable_progress_threads, bool enable_mpi_threads)
{
	(void)enable_progress_threads;
	(void)enable_mpi_threads;
	if (mca_coll_knemrs_component.priority > 0) {
		knem_rs_region_cache_process_limit(mca_coll_knemrs_component.cache_process_bytes);
		knemrs_cache_init();
	}
	return OMPI_SUCCESS;
}
