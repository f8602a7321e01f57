/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * knemrs-tune: measure, on this node, which of knem-rs's collective
 * algorithms (the model's shortlist) or Open MPI's own module carries each
 * operation fastest, per team size and size, and write coll/knemrs's
 * rules file.
 *
 *   mpirun -np N knemrs-tune [--out FILE] [--ranks LIST] [--ops LIST]
 *                            [--sizes LIST] [--reps MIN,MAX] [--ci FRACTION]
 *                            [--seconds S] [--transport NAME]
 *                            [--region-cache auto|on|off] [--quiet]
 *
 * Teams of the sizes in --ranks (default: N, N/2, N/4, down to 2) are the
 * first ranks of MPI_COMM_WORLD.  "Open MPI's own module" is what carries
 * the call with coll/knemrs out of the way: this program sets
 * coll_knemrs_priority to 0 before MPI_Init, so its MPI_Bcast and the
 * others are exactly what coll/knemrs hands calls to.  The measuring and
 * deciding happen in libknem_rs (knem_rs_tuner_run); this file is the MPI
 * side.  knem-rs is timed with its regions kept between calls where
 * coll/knemrs's region cache will be on (--region-cache auto: where the
 * rank's pins are not limited, coll/knemrs's own default), since that is
 * how coll/knemrs will run it.  Rank 0 writes FILE (default coll-rules.json); install it as
 * /etc/knem-rs/coll-rules.json for every job on the node.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <knem_rs.h>

struct opts {
	const char *out, *ranks, *ops, *sizes, *transport;
	unsigned min_reps, max_reps;
	int region_cache;
	double ci, seconds;
	int quiet;
};

static int world_rank;

static void usage(const char *why)
{
	if (world_rank == 0)
		fprintf(stderr,
			"knemrs-tune: %s\n"
			"usage: mpirun -np N knemrs-tune [--out FILE] [--ranks 8,4,2] "
			"[--ops bcast,scatter,gather,allgather,alltoall] [--sizes 256,1K,...,64M] "
			"[--reps MIN,MAX] [--ci 0.05] [--seconds 20] [--transport knem] "
			"[--region-cache auto|on|off] [--quiet]\n",
			why);
}

static int parse(int argc, char **argv, struct opts *o)
{
	int i;

	for (i = 1; i < argc; i++) {
		const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

		if (strcmp(a, "--quiet") == 0) {
			o->quiet = 1;
			continue;
		}
		if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
			usage("tune coll/knemrs on this node");
			return 1;
		}
		if (v == NULL) {
			usage(a[0] == '-' ? "an option lacks its value" : "unexpected argument");
			return -1;
		}
		i++;
		if (strcmp(a, "--out") == 0) {
			o->out = v;
		} else if (strcmp(a, "--ranks") == 0) {
			o->ranks = v;
		} else if (strcmp(a, "--ops") == 0) {
			o->ops = v;
		} else if (strcmp(a, "--sizes") == 0) {
			o->sizes = v;
		} else if (strcmp(a, "--transport") == 0) {
			o->transport = v;
		} else if (strcmp(a, "--reps") == 0) {
			if (sscanf(v, "%u,%u", &o->min_reps, &o->max_reps) != 2) {
				usage("--reps takes MIN,MAX");
				return -1;
			}
		} else if (strcmp(a, "--region-cache") == 0) {
			if (strcmp(v, "auto") == 0) {
				o->region_cache = knem_rs_pins_unlimited(NULL);
			} else if (strcmp(v, "on") == 0 || strcmp(v, "off") == 0) {
				o->region_cache = v[1] == 'n';
			} else {
				usage("--region-cache takes auto, on or off");
				return -1;
			}
		} else if (strcmp(a, "--ci") == 0) {
			o->ci = atof(v);
		} else if (strcmp(a, "--seconds") == 0) {
			o->seconds = atof(v);
		} else {
			usage("unknown option");
			return -1;
		}
	}
	return 0;
}

static int hand_over(void *ctx, int op, size_t n, const void *send, void *recv)
{
	MPI_Comm comm = *(MPI_Comm *)ctx;
	int c = (int)n;

	if (n > INT_MAX)
		return -EOVERFLOW;
	switch (op) {
	case KNEM_RS_OP_BCAST:
		return MPI_Bcast(recv, c, MPI_BYTE, 0, comm);
	case KNEM_RS_OP_SCATTER:
		return MPI_Scatter(send, c, MPI_BYTE, recv, c, MPI_BYTE, 0, comm);
	case KNEM_RS_OP_GATHER:
		return MPI_Gather(send, c, MPI_BYTE, recv, c, MPI_BYTE, 0, comm);
	case KNEM_RS_OP_ALLGATHER:
		return MPI_Allgather(send, c, MPI_BYTE, recv, c, MPI_BYTE, comm);
	case KNEM_RS_OP_ALLTOALL:
		return MPI_Alltoall(send, c, MPI_BYTE, recv, c, MPI_BYTE, comm);
	}
	return -EINVAL;
}

static int max_all(void *ctx, double *values, size_t len)
{
	if (len > INT_MAX)
		return -EOVERFLOW;
	return MPI_Allreduce(MPI_IN_PLACE, values, (int)len, MPI_DOUBLE, MPI_MAX,
			     *(MPI_Comm *)ctx);
}

/* Tune the team of the first p ranks of MPI_COMM_WORLD; every rank calls
 * it (the others wait).  0, or 1 after printing why not. */
static int tune_team(knem_rs_tuner *tuner, int p, const struct opts *o)
{
	char name[128] = "";
	knem_rs_team *team = NULL;
	MPI_Comm comm;
	int rank, rc = 0, ok;

	MPI_Comm_split(MPI_COMM_WORLD, world_rank < p ? 0 : MPI_UNDEFINED, world_rank, &comm);
	if (comm == MPI_COMM_NULL)
		goto out;
	MPI_Comm_rank(comm, &rank);
	if (rank == 0 && knem_rs_team_create("knemrs-tune", name, sizeof(name)) != 0) {
		fprintf(stderr, "knemrs-tune: cannot create a team: %s\n", knem_rs_last_error());
		name[0] = '\0';
	}
	MPI_Bcast(name, sizeof(name), MPI_CHAR, 0, comm);
	ok = name[0] != '\0' && knem_rs_team_attach(name, rank, p, o->transport, &team) == 0;
	if (!ok && name[0] != '\0')
		fprintf(stderr, "knemrs-tune: rank %d cannot attach the team over %s: %s\n",
			world_rank, o->transport, knem_rs_last_error());
	if (rank == 0 && name[0] != '\0')
		(void)knem_rs_team_unlink(name);
	MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
	if (ok) {
		knem_rs_tune_mpi mpi = { .ctx = &comm, .hand_over = hand_over, .max_all = max_all };

		rc = knem_rs_tuner_run(tuner, team, &mpi, o->ops, o->sizes, o->min_reps,
				       o->max_reps, o->seconds, o->region_cache, !o->quiet);
		if (rc != 0)
			fprintf(stderr, "knemrs-tune: rank %d: tuning %d ranks failed: %s\n",
				world_rank, p, knem_rs_last_error());
		ok = rc == 0;
		MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
	}
	knem_rs_team_close(team);
	MPI_Comm_free(&comm);
	rc = !ok;
out:
	MPI_Allreduce(MPI_IN_PLACE, &rc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	return rc;
}

int main(int argc, char **argv)
{
	struct opts o = { .out = "coll-rules.json", .transport = "knem", .min_reps = 10,
			  .max_reps = 200, .ci = 0.05, .seconds = 20.0 };
	char version[64], list[256];
	int size, rc, p, n = 0, sizes[32];
	knem_rs_tuner *tuner;
	double t0;
	char *tok, *save;

	/* What coll/knemrs hands calls to is Open MPI without coll/knemrs. */
	setenv("OMPI_MCA_coll_knemrs_priority", "0", 1);
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	o.region_cache = knem_rs_pins_unlimited(NULL);
	rc = parse(argc, argv, &o);
	if (rc != 0) {
		MPI_Finalize();
		return rc < 0 ? 2 : 0;
	}
	if (o.ranks == NULL) {
		for (p = size; p >= 2 && n < 3; p /= 2)
			sizes[n++] = p;
	} else {
		snprintf(list, sizeof(list), "%s", o.ranks);
		for (tok = strtok_r(list, ",", &save); tok != NULL && n < 32;
		     tok = strtok_r(NULL, ",", &save)) {
			p = atoi(tok);
			if (p < 1 || p > size) {
				usage("--ranks: every team size must be 1 to the number of ranks");
				MPI_Finalize();
				return 2;
			}
			sizes[n++] = p;
		}
	}
	if (n == 0) {
		usage("nothing to tune: run at least 2 ranks, or name team sizes");
		MPI_Finalize();
		return 2;
	}
	snprintf(version, sizeof(version), "%d.%d.%d", OMPI_MAJOR_VERSION, OMPI_MINOR_VERSION,
		 OMPI_RELEASE_VERSION);
	tuner = knem_rs_tuner_new(version, o.ci);
	if (tuner == NULL) {
		if (world_rank == 0)
			fprintf(stderr, "knemrs-tune: %s\n", knem_rs_last_error());
		MPI_Finalize();
		return 2;
	}
	t0 = MPI_Wtime();
	rc = 0;
	for (p = 0; p < n && rc == 0; p++)
		rc = tune_team(tuner, sizes[p], &o);
	if (rc == 0 && world_rank == 0) {
		if (knem_rs_tuner_write(tuner, o.out) != 0) {
			fprintf(stderr, "knemrs-tune: %s\n", knem_rs_last_error());
			rc = 1;
		} else {
			printf("knemrs-tune: rules for %d team size(s) written to %s in %.1f s; "
			       "install them with: install -D -m 644 %s /etc/knem-rs/coll-rules.json\n",
			       n, o.out, MPI_Wtime() - t0, o.out);
		}
	}
	knem_rs_tuner_free(tuner);
	MPI_Bcast(&rc, 1, MPI_INT, 0, MPI_COMM_WORLD);
	MPI_Finalize();
	return rc;
}
