/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * The knem-rs team of a communicator: made once, from the communicator
 * itself, on the first operation that could use it, and closed with the
 * module when the communicator is freed.  Rank 0 creates the control
 * block under a fresh random name (knem_rs_team_create: O_EXCL, mode
 * 0600, never a file or link someone put there) and broadcasts the name
 * with the saved bcast; every rank then attaches, which checks the block
 * is its own user's, as made.  Every decision that could differ between
 * ranks is agreed on, so that all ranks take knem-rs or all take the
 * fallback.
 */
#include "coll_knemrs.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "opal/util/output.h"

/* The smallest of this rank's and every other rank's flag, with the
 * module that was there before us (no knem-rs team needed). */
static int knemrs_all(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm, int mine)
{
	mca_coll_base_module_allreduce_fn_t allreduce =
		(mca_coll_base_module_allreduce_fn_t)m->allreduce.fn;
	int all = 0;

	if (allreduce(&mine, &all, 1, MPI_INT, MPI_MIN, comm, m->allreduce.module) != OMPI_SUCCESS)
		return 0;
	return all;
}

/* Data time passes fixed time: from there a single copy beats a
 * copy-in/copy-out through shared memory, which pays the data time twice.
 * The model is T(n) = fixed + data(n); T(1) stands for the fixed part. */
static size_t knemrs_model_threshold(knem_rs_team *team, int op)
{
	double t1, t;
	size_t n;

	if (knem_rs_team_plan(team, op, 1, NULL, NULL, &t1) != 0)
		return SIZE_MAX;
	for (n = 2; n <= ((size_t)1 << 30); n *= 2) {
		if (knem_rs_team_plan(team, op, n, NULL, NULL, &t) != 0)
			return SIZE_MAX;
		if (t - t1 >= t1)
			return n;
	}
	return SIZE_MAX;
}

/* Load the rules on every rank and keep them only if every rank read the
 * same (one word exchange): decisions must be the same everywhere.  Rank
 * 0 says what happened, in one line; a file that cannot be used leaves
 * the model in charge. */
static void knemrs_team_rules(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm)
{
	const char *path = mca_coll_knemrs_component.rules;
	int rank = ompi_comm_rank(comm), size = ompi_comm_size(comm), r;
	uint64_t digest, words[64 * 8];
	int rc = knem_rs_team_load_rules(m->team, path);

	if (rc < 0 && rank == 0)
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: %s: %s; the model decides", comm->c_name, knem_rs_last_error());
	digest = knem_rs_team_rules_digest(m->team);
	if (knem_rs_team_allgather_words(m->team, &digest, 1, words) != 0) {
		knem_rs_team_drop_rules(m->team);
		return;
	}
	for (r = 0; r < size; r++)
		if (words[r * 8] != words[0]) {
			knem_rs_team_drop_rules(m->team);
			if (rank == 0)
				opal_output_verbose(10, mca_coll_knemrs_component.output,
					"coll:knemrs: %s: the ranks read different rules (rank %d's "
					"differ from rank 0's); the model decides", comm->c_name, r);
			return;
		}
	m->rules = digest != 0;
	if (m->rules && rank == 0)
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: %s: rules %s in force on %d ranks", comm->c_name,
			path != NULL && path[0] != '\0' ? path : "(the default file)", size);
}

static void knemrs_team_fail(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm,
			     const char *what)
{
	m->team_state = KNEMRS_TEAM_OFF;
	opal_output_verbose(10, mca_coll_knemrs_component.output,
		"coll:knemrs: %s: %s; the saved modules carry every operation", comm->c_name, what);
}

int knemrs_team_ready(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm)
{
	mca_coll_base_module_bcast_fn_t bcast = (mca_coll_base_module_bcast_fn_t)m->bcast.fn;
	const char *tname = mca_coll_knemrs_component.transport;
	int rank = ompi_comm_rank(comm), size = ompi_comm_size(comm);
	const char *fixed = mca_coll_knemrs_component.team_name;
	knem_rs_transport *probe = NULL;
	char name[128] = "";
	int ok, op, created = 0;

	if (m->team_state != KNEMRS_TEAM_NONE)
		return m->team_state == KNEMRS_TEAM_READY;

	/* Attaching waits for every rank: first make sure every rank can open
	 * the transport (/dev/knem present and openable). */
	ok = knem_rs_transport_open(tname, &probe) == 0;
	if (!ok)
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: rank %d cannot open transport %s: %s", rank, tname,
			knem_rs_last_error());
	knem_rs_transport_close(probe);
	if (!knemrs_all(m, comm, ok)) {
		knemrs_team_fail(m, comm, "transport missing on some rank");
		return 0;
	}

	/* Rank 0 creates the block; an empty name tells the others it could
	 * not, and they fail to attach with it. */
	if (rank == 0) {
		if (fixed != NULL && fixed[0] != '\0') {
			created = strlen(fixed) < sizeof(name) &&
				  knem_rs_team_create_named(fixed) == 0;
			if (created)
				strcpy(name, fixed);
		} else {
			created = knem_rs_team_create("knemrs", name, sizeof(name)) == 0;
		}
		if (!created) {
			opal_output_verbose(10, mca_coll_knemrs_component.output,
				"coll:knemrs: %s: rank 0 could not create the team's control block: %s",
				comm->c_name, knem_rs_last_error());
			name[0] = '\0';
		}
	}
	if (bcast(name, sizeof(name), MPI_CHAR, 0, comm, m->bcast.module) != OMPI_SUCCESS) {
		if (created)
			(void)knem_rs_team_unlink(name);
		knemrs_team_fail(m, comm, "could not send the team's name");
		return 0;
	}
	name[sizeof(name) - 1] = '\0';
	ok = name[0] != '\0' && knem_rs_team_attach(name, rank, size, tname, &m->team) == 0;
	if (!ok && name[0] != '\0')
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: rank %d could not attach team %s: %s", rank, name,
			knem_rs_last_error());
	/* Attach returns once every rank mapped the control block (or failed
	 * for good): its file is no longer needed.  Only its creator removes
	 * it, never a file of someone else's at that name. */
	if (created)
		(void)knem_rs_team_unlink(name);
	if (!knemrs_all(m, comm, ok)) {
		knem_rs_team_close(m->team);
		m->team = NULL;
		knemrs_team_fail(m, comm, "a rank could not attach the team");
		return 0;
	}
	for (op = 0; op < KNEMRS_NOPS; op++)
		m->model_threshold[op] = knemrs_model_threshold(m->team, op);
	if (rank == 0 && knem_rs_team_model_notes(m->team)[0] != '\0')
		opal_output_verbose(10, mca_coll_knemrs_component.output,
			"coll:knemrs: %s: %s; the next model file or the defaults are used", comm->c_name,
			knem_rs_team_model_notes(m->team));
	knemrs_team_rules(m, comm);
	m->team_state = KNEMRS_TEAM_READY;
	/* A local choice: each rank keeps its own regions or not, and sends
	 * peers a descriptor per call either way. */
	knemrs_cache_enable(m, comm);
	opal_output_verbose(10, mca_coll_knemrs_component.output,
		"coll:knemrs: %s: team %s of %d ranks over %s; model thresholds bcast %zu, "
		"scatter %zu, gather %zu, allgather %zu, alltoall %zu bytes", comm->c_name, name,
		size, knem_rs_team_transport_name(m->team),
		m->model_threshold[KNEM_RS_OP_BCAST], m->model_threshold[KNEM_RS_OP_SCATTER],
		m->model_threshold[KNEM_RS_OP_GATHER], m->model_threshold[KNEM_RS_OP_ALLGATHER],
		m->model_threshold[KNEM_RS_OP_ALLTOALL]);
	return 1;
}

int knemrs_agree(mca_coll_knemrs_module_t *m, struct ompi_communicator_t *comm, int op, size_t n,
		 int local_ok, int *alg, int *k)
{
	int threshold = mca_coll_knemrs_component.threshold;
	int force = mca_coll_knemrs_component.force;
	uint64_t words[64 * 8], mine = (uint64_t)(local_ok != 0);
	int size, r;

	*alg = KNEM_RS_ALG_AUTO;
	*k = 0;

	/* knemrs-tune's choice (an ALL_EQ parameter, like the threshold). */
	if (force == KNEMRS_FORCE_HAND_OVER)
		return 0;
	/* n and the threshold are the same on every rank (MPI's matching
	 * rules; an ALL_EQ parameter): this test needs no agreement. */
	if (force < 0 && threshold >= 0 && n < (size_t)threshold)
		return 0;
	if (n == 0)
		return 0;
	if (!knemrs_team_ready(m, comm))
		return force >= 0 ? -1 : 0;
	if (force >= 0) {
		*alg = force / 256;
		*k = force % 256;
	} else {
		/* The rules, where they have a case, else the model's
		 * threshold: the same answer on every rank (same rules, n and
		 * team). */
		r = threshold < 0 && m->rules ? knem_rs_team_decide(m->team, op, n, alg, k) :
						-ENOENT;
		if (r == 0)
			return 0;
		if (r < 0) {
			*alg = KNEM_RS_ALG_AUTO;
			*k = 0;
			if (threshold < 0 && n < m->model_threshold[op])
				return 0;
		}
	}
	/* Datatype layouts may differ between ranks: agree through the
	 * team's control block (one barrier, no copy). */
	if (knem_rs_team_allgather_words(m->team, &mine, 1, words) != 0) {
		opal_output(0, "coll:knemrs: %s: word exchange failed: %s", comm->c_name,
			    knem_rs_last_error());
		return -1;
	}
	size = ompi_comm_size(comm);
	for (r = 0; r < size; r++)
		if (words[r * 8] == 0)
			return force >= 0 ? -1 : 0;
	return 1;
}
