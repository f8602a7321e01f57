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
 *                            [--seconds S] [--transport NAME] [--quiet]
 *
 * Teams of the sizes in --ranks (default: N, N/2, N/4, down to 2) are the
 * first ranks of MPI_COMM_WORLD.  Every candidate is timed through the MPI
 * call itself, as the jobs will make it: a knem-rs algorithm through
 * coll/knemrs with that algorithm forced (its MPI_T variable
 * coll_knemrs_force), "Open MPI's own module" through coll/knemrs handing
 * every call to the module it saved.  So coll/knemrs's per-call
 * agreement, its region cache and the malloc heap's buffers (which it
 * never keeps) are in every number, as they will be in the jobs.  The
 * measuring and deciding happen in libknem_rs (knem_rs_tuner_run); this
 * file is the MPI side.  Rank 0 writes FILE (default coll-rules.json);
 * install it as /etc/knem-rs/coll-rules.json for every job on the node.
 */
#include <errno.h>
#include <limits.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>
#include <knem_rs.h>

struct opts {
	const char *out, *ranks, *ops, *sizes, *transport;
	unsigned min_reps, max_reps;
	double ci, seconds;
	int quiet;
};

static int world_rank;
static const char *const op_names[] = { "MPI_Bcast", "MPI_Scatter", "MPI_Gather",
					"MPI_Allgather", "MPI_Alltoall" };

static const char help[] =
	"usage: mpirun -np N knemrs-tune [OPTION...]\n"
	"Measure which of knem-rs's collective algorithms, or Open MPI's own module,\n"
	"carries each operation fastest on this node, and write coll/knemrs's rules.\n"
	"\n"
	"Options:\n"
	"  --out FILE            the rules file rank 0 writes (default coll-rules.json)\n"
	"  --ranks LIST          team sizes, such as 8,4,2 (default N, N/2, N/4, to 2)\n"
	"  --ops LIST            operations (default bcast,scatter,gather,allgather,alltoall)\n"
	"  --sizes LIST          bytes per block, such as 4K,1M (default 256 to 64M, x4)\n"
	"  --reps MIN,MAX        repetitions of each candidate (default 10,200)\n"
	"  --ci FRACTION         stop when each median's 95% interval is within it (0.05)\n"
	"  --seconds S           at most S seconds per size (default 20)\n"
	"  --transport NAME      knem-rs's transport: knem, cma or shm (default:\n"
	"                        coll_knemrs_transport's, knem unless set)\n"
	"  --quiet               no line per measured size\n"
	"  -h, --help            this text\n"
	"\n"
	"Install the file as /etc/knem-rs/coll-rules.json; see knemrs-tune(1).\n";

static void usage(const char *why)
{
	if (world_rank == 0)
		fprintf(stderr, "knemrs-tune: %s (knemrs-tune --help lists the options)\n", why);
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

/* The MPI side of one team's tuning: its communicator, coll/knemrs's
 * MPI_T variable, and the buffers of the size being timed, allocated as
 * an application does (malloc, from the heap up to 32 MiB: see main;
 * freed when the size changes). */
struct bench {
	MPI_Comm comm;
	int p;
	MPI_T_cvar_handle force;
	size_t n;
	unsigned char *send, *recv;
};

/* coll_knemrs_force (coll_knemrs.h): -2 hands calls over, ALG*256+K
 * forces an algorithm, -1 decides as usual. */
static int force_set(struct bench *b, int v)
{
	/* Every rank, between collectives: the variable is ALL_EQ. */
	return MPI_T_cvar_write(b->force, &v) == MPI_SUCCESS ? 0 : -1;
}

static int buffers(struct bench *b, size_t n)
{
	size_t total = n * (size_t)b->p;

	if (b->n == n && b->send != NULL)
		return 0;
	free(b->send);
	free(b->recv);
	b->send = malloc(total);
	b->recv = malloc(total);
	b->n = n;
	if (b->send == NULL || b->recv == NULL)
		return -ENOMEM;
	memset(b->send, 0x5a, total);
	memset(b->recv, 0, total);
	return 0;
}

static int call(struct bench *b, int op, int c)
{
	switch (op) {
	case KNEM_RS_OP_BCAST:
		return MPI_Bcast(b->recv, c, MPI_BYTE, 0, b->comm);
	case KNEM_RS_OP_SCATTER:
		return MPI_Scatter(b->send, c, MPI_BYTE, b->recv, c, MPI_BYTE, 0, b->comm);
	case KNEM_RS_OP_GATHER:
		return MPI_Gather(b->send, c, MPI_BYTE, b->recv, c, MPI_BYTE, 0, b->comm);
	case KNEM_RS_OP_ALLGATHER:
		return MPI_Allgather(b->send, c, MPI_BYTE, b->recv, c, MPI_BYTE, b->comm);
	case KNEM_RS_OP_ALLTOALL:
		return MPI_Alltoall(b->send, c, MPI_BYTE, b->recv, c, MPI_BYTE, b->comm);
	}
	return MPI_ERR_OP;
}

/* knem_rs_tune_mpi's time: calls of op by alg (or, for -1, Open MPI's
 * own module) through coll/knemrs, after a barrier; 1 on every rank when
 * the forced algorithm failed on any (coll/knemrs fails a call it cannot
 * carry instead of handing it over). */
static int time_calls(void *ctx, int op, int alg, int k, size_t n, unsigned calls,
		      double *seconds)
{
	struct bench *b = ctx;
	int bad = 0, any;
	unsigned i;
	double t0;

	if (n > INT_MAX || alg > 255 || k < 0 || k > 255)
		return -EOVERFLOW;
	bad = buffers(b, n) != 0;
	MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, b->comm);
	if (bad)
		return -ENOMEM;
	if (force_set(b, alg < 0 ? -2 : alg * 256 + k) != 0)
		return -EINVAL;
	MPI_Barrier(b->comm);
	t0 = MPI_Wtime();
	for (i = 0; i < calls && !bad; i++)
		bad = call(b, op, (int)n) != MPI_SUCCESS;
	*seconds = (MPI_Wtime() - t0) / calls;
	(void)force_set(b, -1);
	MPI_Allreduce(&bad, &any, 1, MPI_INT, MPI_MAX, b->comm);
	return any ? 1 : 0;
}

static int max_all(void *ctx, double *values, size_t len)
{
	struct bench *b = ctx;

	if (len > INT_MAX)
		return -EOVERFLOW;
	return MPI_Allreduce(MPI_IN_PLACE, values, (int)len, MPI_DOUBLE, MPI_MAX, b->comm);
}

/* coll/knemrs's MPI_T variable coll_knemrs_force, through which every
 * candidate is timed; 0, or -1 after saying why not. */
static int force_open(MPI_T_cvar_handle *force)
{
	int provided, idx, count;

	if (MPI_T_init_thread(MPI_THREAD_SINGLE, &provided) != MPI_SUCCESS ||
	    MPI_T_cvar_get_index("coll_knemrs_force", &idx) != MPI_SUCCESS ||
	    MPI_T_cvar_handle_alloc(idx, NULL, force, &count) != MPI_SUCCESS) {
		if (world_rank == 0)
			fprintf(stderr, "knemrs-tune: coll/knemrs is not loaded (no MPI_T variable "
				"coll_knemrs_force): knemrs-tune times its candidates through it; "
				"install knem-rs-openmpi, or check --mca coll and "
				"mca_base_component_path\n");
		return -1;
	}
	return 0;
}

/* Whether coll/knemrs carries op on comm: an algorithm that does not exist,
 * forced, must make the call fail on every rank.  A call that succeeds went
 * elsewhere (coll/knemrs disabled, or another component selected for op). */
static int carried_by_knemrs(struct bench *b, int op)
{
	int ok, all;

	if (buffers(b, 256) != 0 || force_set(b, 255 * 256) != 0)
		return 0;
	ok = call(b, op, 256) != MPI_SUCCESS;
	(void)force_set(b, -1);
	MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, b->comm);
	return all;
}

/* Tune the team of the first p ranks of MPI_COMM_WORLD; every rank calls
 * it (the others wait).  0, or 1 after printing why not. */
static int tune_team(knem_rs_tuner *tuner, int p, const struct opts *o,
		     MPI_T_cvar_handle force)
{
	char name[128] = "";
	knem_rs_team *team = NULL;
	MPI_Comm comm;
	int rank, rc = 0, ok, op;

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
		struct bench b = { .comm = comm, .p = p, .force = force };
		knem_rs_tune_mpi mpi = { .ctx = &b, .time = time_calls, .max_all = max_all };

		/* A candidate coll/knemrs cannot carry fails its calls. */
		MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
		for (op = 0; op < 5; op++) {
			if (carried_by_knemrs(&b, op))
				continue;
			if (rank == 0)
				fprintf(stderr, "knemrs-tune: coll/knemrs does not carry %s on %d "
					"ranks (disabled, or another component selected for it): "
					"its candidates cannot be timed\n", op_names[op], p);
			ok = 0;
		}
		if (ok)
			rc = knem_rs_tuner_run(tuner, team, &mpi, o->ops, o->sizes,
					       o->min_reps, o->max_reps, o->seconds, !o->quiet);
		free(b.send);
		free(b.recv);
		if (rc != 0)
			fprintf(stderr, "knemrs-tune: rank %d: tuning %d ranks failed: %s\n",
				world_rank, p, knem_rs_last_error());
		ok = ok && rc == 0;
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
	MPI_T_cvar_handle force;
	double t0;
	char *tok, *save;

	/* Help needs no MPI: it works outside mpirun too. */
	for (p = 1; p < argc; p++) {
		if (strcmp(argv[p], "--help") == 0 || strcmp(argv[p], "-h") == 0) {
			fputs(help, stdout);
			return 0;
		}
	}
	/* The rules are per transport: coll/knemrs's teams must use the one
	 * being tuned.  --transport sets coll_knemrs_transport; without it,
	 * the tuner takes coll/knemrs's (mpirun's --mca), knem by default. */
	if (getenv("OMPI_MCA_coll_knemrs_transport") != NULL)
		o.transport = getenv("OMPI_MCA_coll_knemrs_transport");
	for (p = 1; p + 1 < argc; p++)
		if (strcmp(argv[p], "--transport") == 0)
			o.transport = argv[p + 1];
	setenv("OMPI_MCA_coll_knemrs_transport", o.transport, 1);
	/* Buffers from the heap, as most programs get them once they have
	 * freed a large one (glibc then raises its mmap threshold towards
	 * 32 MiB): coll/knemrs never keeps regions of the heap, so knem-rs
	 * is timed declaring them on every call, its common case and its
	 * slower one.  A rule for knem-rs then holds without the cache. */
	(void)mallopt(M_MMAP_THRESHOLD, 32 << 20);
	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
	MPI_Comm_size(MPI_COMM_WORLD, &size);
	rc = parse(argc, argv, &o);
	if (rc != 0) {
		MPI_Finalize();
		return rc < 0 ? 2 : 0;
	}
	if (force_open(&force) != 0) {
		MPI_Finalize();
		return 2;
	}
	if (o.ranks == NULL) {
		for (p = size; p >= 2 && n < 3; p /= 2)
			sizes[n++] = p;
	} else {
		snprintf(list, sizeof(list), "%s", o.ranks);
		for (tok = strtok_r(list, ",", &save); tok != NULL && n < 32;
		     tok = strtok_r(NULL, ",", &save)) {
			p = atoi(tok);
			if (p < 2 || p > size) {
				usage("--ranks: every team size must be 2 to the number of ranks");
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
		rc = tune_team(tuner, sizes[p], &o, force);
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
	MPI_T_cvar_handle_free(&force);
	MPI_T_finalize();
	MPI_Finalize();
	return rc;
}
