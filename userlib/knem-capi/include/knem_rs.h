/*
 * knem_rs.h - C API of knem-rs userspace: transports (knem module, CMA,
 * shared-memory double copy), teams of local processes and
 * contention-aware collectives.  Link with -lknem_rs (pkg-config knem_rs).
 *
 * Conventions: functions returning int give 0 on success and a negative
 * errno on failure; ssize_t functions give a byte count or a negative
 * errno.  knem_rs_last_error() describes the last failure of the calling
 * thread in one line (the string stays valid until the thread's next
 * failure).  Objects are opaque and freed by their _close.
 *
 * Errors every function may return besides those of the system calls:
 *   -EINVAL     a NULL object or out pointer, a negative root, rank or k,
 *               an unknown operation or algorithm, an algorithm that does
 *               not implement the operation, a root >= the team size.
 *   -EFAULT     a NULL buffer with a non-zero length, or a buffer whose
 *               end wraps around the address space.
 *   -EOVERFLOW  a length the API computes does not fit: n * team size for
 *               scatter, gather, allgather and alltoall, the sum of an
 *               iovec array's lengths, or any length above SSIZE_MAX
 *               (PTRDIFF_MAX).  Collectives check this on every rank
 *               before contacting a peer, so with the same arguments every
 *               rank fails alike and no one waits.  Nothing was copied.
 *   -ETIMEDOUT  a peer did not arrive within $KNEM_RS_TIMEOUT seconds
 *               (default 120).
 *   -ECANCELED  (collectives) a rank could not expose its buffer, for
 *               example -ENOMEM under RLIMIT_MEMLOCK: every rank of the
 *               call returns -ECANCELED, after the descriptor exchange the
 *               call makes anyway and one more barrier, and no byte was
 *               moved on any rank, so all can take another path together.
 *               knem_rs_last_error() names the ranks and, on those, why.
 *   -ENOMEM     also when the knem transport could not pin a buffer under
 *               the process's RLIMIT_MEMLOCK: knem_rs_last_error() then
 *               names the bytes and the limit and says what to raise
 *               (memlock in /etc/security/limits.d/, or CAP_IPC_LOCK).
 *   -ENOTRECOVERABLE  an internal error (a bug in knem-rs) was caught at
 *               the API edge; the team or transport involved may be left
 *               mid-operation and should be closed.  A Rust panic never
 *               unwinds into C: libraries built with panic=abort (the
 *               release profile) abort the process instead.
 */
#ifndef KNEM_RS_H
#define KNEM_RS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>

#ifdef __cplusplus
extern "C" {
#endif

#define KNEM_RS_API_VERSION 2

/* Transport kinds (knem_rs_desc.kind). */
#define KNEM_RS_TRANSPORT_KNEM 1
#define KNEM_RS_TRANSPORT_CMA 2
#define KNEM_RS_TRANSPORT_SHM 3

/* Collective algorithms; AUTO lets the calibrated planner choose.  k is the
 * throttle factor (THROTTLED) or the tree radix (KNOMIAL), else ignored. */
#define KNEM_RS_ALG_AUTO 0
#define KNEM_RS_ALG_DIRECT_READ 1
#define KNEM_RS_ALG_DIRECT_WRITE 2
#define KNEM_RS_ALG_THROTTLED 3
#define KNEM_RS_ALG_SEQUENTIAL 4
#define KNEM_RS_ALG_KNOMIAL 5
#define KNEM_RS_ALG_SCATTER_ALLGATHER 6
#define KNEM_RS_ALG_HIERARCHICAL 7
#define KNEM_RS_ALG_RING_SOURCE 8
#define KNEM_RS_ALG_RING_NEIGHBOR 9
#define KNEM_RS_ALG_PAIRWISE 10
#define KNEM_RS_ALG_RING 11
#define KNEM_RS_ALG_RECURSIVE_DOUBLING 12
#define KNEM_RS_ALG_BRUCK 13

/* Operations, for knem_rs_team_plan. */
#define KNEM_RS_OP_BCAST 0
#define KNEM_RS_OP_SCATTER 1
#define KNEM_RS_OP_GATHER 2
#define KNEM_RS_OP_ALLGATHER 3
#define KNEM_RS_OP_ALLTOALL 4

/* What a peer needs to reach an exposed buffer: plain data, send it. */
typedef struct knem_rs_desc {
	uint32_t kind;
	uint32_t pid;
	uint64_t addr; /* CMA: address in the owner */
	uint64_t len;
	uint64_t id;   /* knem: cookie; shm: segment number */
} knem_rs_desc;

typedef struct knem_rs_transport knem_rs_transport;
typedef struct knem_rs_exposure knem_rs_exposure;
typedef struct knem_rs_team knem_rs_team;

const char *knem_rs_last_error(void);

/* Transports.  name: "knem", "cma", "shm", or NULL/"" for
 * $KNEM_RS_TRANSPORT or the first that works here. */
int knem_rs_transport_open(const char *name, knem_rs_transport **out);
const char *knem_rs_transport_name(const knem_rs_transport *t);
void knem_rs_transport_close(knem_rs_transport *t);

/* Expose buf..buf+len to peers until knem_rs_exposure_close (knem: a
 * region; CMA: an address; shm: a segment).  With publish, the current
 * content is readable at once.  After changing exposed bytes locally call
 * _publish; before reading bytes peers wrote call _collect (both no-ops
 * except on shm).  The exposure must be closed before its transport. */
int knem_rs_expose(knem_rs_transport *t, void *buf, size_t len, int publish,
		   knem_rs_exposure **out);
int knem_rs_exposure_descriptor(const knem_rs_exposure *e, knem_rs_desc *out);
int knem_rs_exposure_publish(knem_rs_exposure *e, size_t offset, size_t len);
int knem_rs_exposure_collect(knem_rs_exposure *e, size_t offset, size_t len);
void knem_rs_exposure_close(knem_rs_exposure *e);

/* Copies from/to a peer's exposure at offset; clamped at either end. */
ssize_t knem_rs_read(knem_rs_transport *t, const knem_rs_desc *remote,
		     uint64_t offset, void *buf, size_t len);
ssize_t knem_rs_write(knem_rs_transport *t, const knem_rs_desc *remote,
		      uint64_t offset, const void *buf, size_t len);
ssize_t knem_rs_readv(knem_rs_transport *t, const knem_rs_desc *remote,
		      uint64_t offset, const struct iovec *iov, int iovcnt);
ssize_t knem_rs_writev(knem_rs_transport *t, const knem_rs_desc *remote,
		       uint64_t offset, const struct iovec *iov, int iovcnt);
/* Region-to-region copy: from exposure src at src_offset to exposure dst
 * at dst_offset (either may belong to any process, this one included), at
 * most len bytes, clamped at the end of either; returns the bytes copied.
 * knem: one copy in the kernel (KNEM_CMD_COPY between the two cookies);
 * CMA and shm: read then write through a 1 MiB bounce buffer here. */
ssize_t knem_rs_copy(knem_rs_transport *t, const knem_rs_desc *src,
		     uint64_t src_offset, const knem_rs_desc *dst,
		     uint64_t dst_offset, size_t len);

/* Teams.  _attach_env: as started by knem-run (KNEM_RS_TEAM, _RANK, _SIZE).
 * _attach: from another launcher, by control-block name; transport as in
 * knem_rs_transport_open.  Both return once every rank attached.
 * The control block (a file in /dev/shm, or at name if it starts with /)
 * is made beforehand by one process, the launcher or rank 0, with
 * knem_rs_team_create, which then hands the name to the others and
 * removes it with knem_rs_team_unlink once every rank attached.  _attach
 * never creates it, and refuses one that is not as _create makes it: a
 * symbolic link (-ELOOP), or another user's file, another mode than
 * 0600, another size or a second link (-EPERM), which could be someone
 * else's file put at the name to read or rewrite the team's descriptors.
 *
 * _create: a fresh name, "<prefix>-<pid>-<n>-<128 random bits in hex>"
 * (prefix NULL: "knem-rs-team"; n counts this process's teams), written
 * to name (cap bytes with the NUL; -ERANGE if short); nobody can guess it
 * ahead.  _create_named: exactly name (for tests and launchers that pick
 * names).  Both create the file O_CREAT|O_EXCL|O_NOFOLLOW, mode 0600:
 * -EEXIST when anything, a file or a symbolic link, is already there. */
int knem_rs_team_create(const char *prefix, char *name, size_t cap);
int knem_rs_team_create_named(const char *name);
int knem_rs_team_unlink(const char *name);
int knem_rs_team_attach_env(knem_rs_team **out);
int knem_rs_team_attach(const char *name, int rank, int size,
			const char *transport, knem_rs_team **out);
int knem_rs_team_rank(const knem_rs_team *team);
int knem_rs_team_size(const knem_rs_team *team);
const char *knem_rs_team_transport_name(const knem_rs_team *team);
int knem_rs_team_barrier(knem_rs_team *team);
/* Small-message allgather: n <= 8 words in, size*8 words out. */
int knem_rs_team_allgather_words(knem_rs_team *team, const uint64_t *words,
				 size_t n, uint64_t *out);
/* The planner's choice for op on n bytes per block. */
int knem_rs_team_plan(const knem_rs_team *team, int op, size_t n, int *alg,
		      int *k, double *predicted_seconds);
void knem_rs_team_close(knem_rs_team *team);
/* Lines about the model files passed over when the team was made (there
 * but not model files), "; "-separated; "" when none.  Lives as long as
 * the team. */
const char *knem_rs_team_model_notes(const knem_rs_team *team);

/* Rules: what knemrs-tune measured on this node (knem-coll's rules
 * module).  _load_rules reads path (NULL or "": $KNEM_RS_RULES, else
 * /etc/knem-rs/coll-rules.json) into the team: 1 loaded; 0 no file at
 * the default path (a node never tuned: nothing to say); a negative errno
 * when the file cannot be used (missing when named, not a rules file,
 * another version, another machine), knem_rs_last_error() saying why in
 * one line, and the team then has no rules.  Ranks must agree on the
 * rules before they decide with them: compare _rules_digest (0 without
 * rules) on every rank and _drop_rules where they differ.  _decide: 1
 * when knem-rs carries op on n bytes per block, with *alg and *k (NULL
 * for either is fine); 0 when the call goes to the MPI's own module;
 * -ENOENT when the rules have no case for op on this team size and
 * transport (or there are none): then the model decides. */
int knem_rs_team_load_rules(knem_rs_team *team, const char *path);
uint64_t knem_rs_team_rules_digest(const knem_rs_team *team);
void knem_rs_team_drop_rules(knem_rs_team *team);
int knem_rs_team_decide(const knem_rs_team *team, int op, size_t n, int *alg,
			int *k);
/* The same decision from the rules file at path for a team of ranks over
 * transport, with no team (tests that predict what coll/knemrs does):
 * the file is read and checked on each call. */
int knem_rs_rules_decide(const char *path, int op, int ranks,
			 const char *transport, size_t n, int *alg, int *k);

/* Tuning (knemrs-tune).  The MPI's side.  time makes `calls` calls of op
 * (KNEM_RS_OP_*) on n bytes per block, root 0, back to back as an
 * application does, started together by a barrier: carried by knem-rs's
 * algorithm alg (KNEM_RS_ALG_*, with its parameter k) through coll/knemrs,
 * or, for alg -1, by the MPI's own module (what coll/knemrs hands calls
 * to).  It stores this rank's seconds per call in *seconds and returns 0,
 * 1 when that algorithm cannot carry the call here (on every rank alike),
 * or another value on failure.  max_all replaces each of len doubles with
 * its maximum over the team's ranks and returns 0 or non-zero on failure. */
typedef struct knem_rs_tune_mpi {
	void *ctx;
	int (*time)(void *ctx, int op, int alg, int k, size_t n, unsigned calls,
		    double *seconds);
	int (*max_all)(void *ctx, double *values, size_t len);
} knem_rs_tune_mpi;
typedef struct knem_rs_tuner knem_rs_tuner;
/* open_mpi: the MPI's version for the file; ci_target: the relative
 * half-width of the medians' 95% confidence interval to reach (0.05).
 * NULL on bad arguments. */
knem_rs_tuner *knem_rs_tuner_new(const char *open_mpi, double ci_target);
/* Tune ops ("bcast,allgather"; NULL: all five) at sizes ("4K,1M"; NULL:
 * 256 B to 64 MiB, x4) for the ranks of team (whose model and topology
 * make the shortlist): every rank of the team calls it alike.  Each size
 * times, through mpi->time, the model's shortlist and hand-over, min_reps
 * to max_reps repetitions or max_seconds.  verbose: rank 0 prints each
 * decision and every candidate's median with its interval. */
int knem_rs_tuner_run(knem_rs_tuner *tuner, knem_rs_team *team,
		      const knem_rs_tune_mpi *mpi, const char *ops,
		      const char *sizes, unsigned min_reps, unsigned max_reps,
		      double max_seconds, int verbose);
/* 1 when knem lets this process pin without limit: RLIMIT_MEMLOCK
 * unlimited, CAP_IPC_LOCK in the initial user namespace, or knem loaded
 * with account_pinned=N (coll/knemrs keeps regions by default only
 * then); else 0, with the limit in *limit_kib (NULL is fine). */
int knem_rs_pins_unlimited(uint64_t *limit_kib);
/* Write the rules of every team tuned so far (replaced atomically). */
int knem_rs_tuner_write(knem_rs_tuner *tuner, const char *path);
void knem_rs_tuner_free(knem_rs_tuner *tuner);

/* Region cache.  Keep the regions this rank declares for collectives while
 * their buffers repeat (a later call whose buffer starts at the same
 * address and is no longer reuses the region): at most max_entries
 * regions covering max_bytes, least recently used dropped first; 0 for
 * either drops them all and stops keeping them, as does _team_close.  Kept
 * regions stay pinned and count against RLIMIT_MEMLOCK (a declaration
 * refused for memory drops them and tries once more).  knem and CMA teams
 * only (-EINVAL on shm).
 * A region keeps the pages it pinned when it was declared.  Enabling the
 * cache is a promise: from then on, every range of this process about to
 * be unmapped, remapped or lose its pages (munmap, mmap MAP_FIXED,
 * mremap, madvise DONTNEED) is reported with knem_rs_note_release before
 * it happens, as Open MPI's memory release hooks do.  Without that
 * promise a buffer freed and reallocated at the same address would be
 * served by the stale region: do not enable it.  Buffers in the brk heap
 * are never kept (their trims often go unreported: Open MPI 5's and 6's
 * hooks miss them), so the promise does not cover brk. */
int knem_rs_team_cache_regions(knem_rs_team *team, size_t max_entries,
			       size_t max_bytes);
/* Bound the bytes all the teams of this process keep in their region
 * caches together (kept regions stay pinned; each team's own bound,
 * max_bytes above, holds per team only).  Until called:
 * KNEM_RS_CACHE_PROCESS_BYTES from the environment, else 512 MiB.  0
 * keeps nothing.  A team over the bound keeps what it has until it drops
 * it; from then on a region is kept only if it fits. */
void knem_rs_region_cache_process_limit(size_t bytes);
/* Report that addr..addr+len is about to lose its pages.  Lock-free and
 * allocation-free: safe inside memory hooks, from any thread.  The kept
 * regions it overlaps are dropped at their team's next collective. */
void knem_rs_note_release(const void *addr, size_t len);

typedef struct knem_rs_cache_stats {
	uint64_t hits;        /* calls served by a kept region */
	uint64_t misses;      /* calls that declared a region */
	uint64_t invalidated; /* kept regions a release overlapped */
	uint64_t evicted;     /* kept regions dropped for the bounds or memory,
			       * or because the call that used them failed
			       * (a late peer could still reach them) */
	uint64_t entries;     /* regions kept now */
	uint64_t bytes;       /* the bytes they cover */
} knem_rs_cache_stats;
/* -ENOENT when the team keeps no regions. */
int knem_rs_team_region_cache_stats(const knem_rs_team *team,
				    knem_rs_cache_stats *out);

/* Collectives (every rank calls them with the same root/alg/k). */
int knem_rs_bcast(knem_rs_team *team, void *buf, size_t len, int root,
		  int alg, int k);
int knem_rs_scatter(knem_rs_team *team, const void *send, void *recv,
		    size_t n, int root, int alg, int k);
int knem_rs_scatterv(knem_rs_team *team, const void *send, size_t send_len,
		     const size_t *counts, const size_t *displs, void *recv,
		     size_t recv_len, int root, int alg, int k);
int knem_rs_gather(knem_rs_team *team, const void *send, void *recv,
		   size_t n, int root, int alg, int k);
int knem_rs_gatherv(knem_rs_team *team, const void *send, size_t send_len,
		    void *recv, size_t recv_len, const size_t *counts,
		    const size_t *displs, int root, int alg, int k);
int knem_rs_allgather(knem_rs_team *team, const void *send, void *recv,
		      size_t n, int alg, int k);
int knem_rs_alltoall(knem_rs_team *team, const void *send, void *recv,
		     size_t n, int alg, int k);

#ifdef __cplusplus
}
#endif

#endif /* KNEM_RS_H */
