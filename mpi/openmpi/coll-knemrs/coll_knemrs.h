/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * coll/knemrs: MPI_Bcast, Scatter, Gather, Allgather and Alltoall on
 * single-node intracommunicators carried by knem-rs's collectives (the C
 * API of libknem_rs).  One source for Open MPI 4.1 (coll API 2.0.0), 5.0
 * (2.4.0) and 6.0 (3.0.0); the differences are the few macros below.
 */
#ifndef MCA_COLL_KNEMRS_H
#define MCA_COLL_KNEMRS_H

#include "ompi_config.h"
#include "mpi.h"
#include "ompi/mca/coll/coll.h"
#include "ompi/communicator/communicator.h"

#include <knem_rs.h>

#if OMPI_MAJOR_VERSION >= 6
#define KNEMRS_COLL_VERSION MCA_COLL_BASE_VERSION_3_0_0
typedef mca_coll_base_component_3_0_0_t knemrs_component_t;
#elif OMPI_MAJOR_VERSION == 5
#define KNEMRS_COLL_VERSION MCA_COLL_BASE_VERSION_2_4_0
typedef mca_coll_base_component_2_4_0_t knemrs_component_t;
#elif OMPI_MAJOR_VERSION == 4
#define KNEMRS_COLL_VERSION MCA_COLL_BASE_VERSION_2_0_0
typedef mca_coll_base_component_2_0_0_t knemrs_component_t;
#else
#error "coll/knemrs supports Open MPI 4.1, 5.0 and 6.0"
#endif

/* Open MPI 4.1 and 5.0 count in int, 6.0 in size_t (big count). */
#if OMPI_MAJOR_VERSION >= 6
typedef size_t knemrs_count_t;
#else
typedef int knemrs_count_t;
#endif

BEGIN_C_DECLS

/* coll_knemrs_force: decide as usual; hand every call to the saved
 * module.  Values from 0 on name a knem-rs algorithm that must carry
 * every call (a call it cannot carry fails). */
enum { KNEMRS_FORCE_NONE = -1, KNEMRS_FORCE_HAND_OVER = -2 };

/* The operations we take, in knem_rs.h's KNEM_RS_OP_ order. */
enum { KNEMRS_NOPS = 5 };

struct knemrs_component_state {
	knemrs_component_t super;
	int priority;
	/* Per-block bytes from which knem-rs carries an operation; -1: from
	 * the model, per operation and team (knemrs_threshold). */
	int threshold;
	/* knemrs-tune's choice for every call (KNEMRS_FORCE_*, or an
	 * algorithm: KNEM_RS_ALG_* * 256 + its parameter k), set through
	 * MPI_T between collectives. */
	int force;
	/* Transport name for the team ("knem" unless told otherwise). */
	char *transport;
	/* Keep regions declared while buffers repeat (only where Open MPI's
	 * memory hooks report releases), bounded per communicator: 1 yes,
	 * 0 no, -1 where pins are not limited (knemrs_cache_enable). */
	int region_cache;
	int cache_entries;
	size_t cache_bytes;
	/* Bytes all communicators of a process keep together. */
	size_t cache_process_bytes;
	/* Tests: the control block's name instead of a fresh random one. */
	char *team_name;
	/* knemrs-tune's rules file; NULL or "": $KNEM_RS_RULES, else
	 * /etc/knem-rs/coll-rules.json when there. */
	char *rules;
	int verbose;
	int output;
};
OMPI_DECLSPEC extern struct knemrs_component_state mca_coll_knemrs_component;

/* What was installed before us for one operation. */
struct knemrs_prev {
	void *fn;
	mca_coll_base_module_t *module;
};

typedef struct mca_coll_knemrs_module_t {
	mca_coll_base_module_t super;
	struct knemrs_prev bcast, scatter, gather, allgather, alltoall, allreduce;
	/* Team state: NONE until the first call that wants one, then READY
	 * or OFF (somebody could not open the transport or attach: every
	 * later call falls back, on every rank alike). */
	enum { KNEMRS_TEAM_NONE, KNEMRS_TEAM_READY, KNEMRS_TEAM_OFF } team_state;
	knem_rs_team *team;
	/* The team keeps its regions between calls (knemrs_cache_enable). */
	int caching;
	/* Model thresholds per operation, computed once the team exists. */
	size_t model_threshold[KNEMRS_NOPS];
	/* Every rank holds the same rules (knemrs_team_rules): they decide
	 * before the model, where they have a case. */
	int rules;
	/* A scratch buffer for the MPI_IN_PLACE forms, kept between calls. */
	void *scratch;
	size_t scratch_len;
	/* Operations carried, and declined by knem-rs (a rank could not
	 * declare its region) then carried by the saved module, for the
	 * verbose summary at free. */
	unsigned long carried[KNEMRS_NOPS];
	unsigned long declined[KNEMRS_NOPS];
} mca_coll_knemrs_module_t;
OBJ_CLASS_DECLARATION(mca_coll_knemrs_module_t);

mca_coll_base_module_t *mca_coll_knemrs_comm_query(struct ompi_communicator_t *comm,
						   int *priority);

int mca_coll_knemrs_bcast(void *buf, knemrs_count_t count, struct ompi_datatype_t *dtype,
			  int root, struct ompi_communicator_t *comm,
			  mca_coll_base_module_t *module);
int mca_coll_knemrs_scatter(const void *sbuf, knemrs_count_t scount,
			    struct ompi_datatype_t *sdtype, void *rbuf, knemrs_count_t rcount,
			    struct ompi_datatype_t *rdtype, int root,
			    struct ompi_communicator_t *comm, mca_coll_base_module_t *module);
int mca_coll_knemrs_gather(const void *sbuf, knemrs_count_t scount,
			   struct ompi_datatype_t *sdtype, void *rbuf, knemrs_count_t rcount,
			   struct ompi_datatype_t *rdtype, int root,
			   struct ompi_communicator_t *comm, mca_coll_base_module_t *module);
int mca_coll_knemrs_allgather(const void *sbuf, knemrs_count_t scount,
			      struct ompi_datatype_t *sdtype, void *rbuf, knemrs_count_t rcount,
			      struct ompi_datatype_t *rdtype, struct ompi_communicator_t *comm,
			      mca_coll_base_module_t *module);
int mca_coll_knemrs_alltoall(const void *sbuf, knemrs_count_t scount,
			     struct ompi_datatype_t *sdtype, void *rbuf, knemrs_count_t rcount,
			     struct ompi_datatype_t *rdtype, struct ompi_communicator_t *comm,
			     mca_coll_base_module_t *module);

/* knemrs_team.c: make the team on first use; 1 when it is usable. */
int knemrs_team_ready(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm);
/* Agree on every rank whether op on n bytes per block goes to knem-rs:
 * local_ok is this rank's answer (contiguous buffers, scratch memory);
 * *alg and *k get the algorithm the rules chose (KNEM_RS_ALG_AUTO
 * without rules: the model's), or coll_knemrs_force's.  1: knem-rs, 0:
 * the saved module, -1: the call fails (the exchange failed, or the
 * forced algorithm cannot carry it). */
int knemrs_agree(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm, int op,
		 size_t n, int local_ok, int *alg, int *k);

/* knemrs_cache.c: the region cache where Open MPI's memory hooks report
 * releases.  _init when the component is queried (MPI_Init), _enable
 * after a team is made, _report before it closes, _close when the
 * component closes. */
void knemrs_cache_init(void);
void knemrs_cache_enable(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm);
void knemrs_cache_report(mca_coll_knemrs_module_t *m);
void knemrs_cache_close(void);

END_C_DECLS

#endif /* MCA_COLL_KNEMRS_H */
