/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * knem_core.h - the contract between the C shim and the Rust core.
 *
 * The Rust core (rust-core/, linked in as knem_core.o) holds every decision:
 * ioctl decoding and validation, the region table, cookies, access checks,
 * segment iteration and copy planning, statistics.  The shim holds every
 * kernel API call: device and file operations, allocation, user memory
 * access, page pinning, kmap, RCU, locks.
 *
 * The core never sees a kernel header; it sees only this file.  That is
 * what makes knem_core.o independent of the kernel version.
 *
 * Conventions: errors are negative errno values; user addresses travel as
 * u64; struct page pointers travel as opaque void pointers.  Every knem_shim_
 * function may sleep unless stated otherwise.
 */
#ifndef KNEM_CORE_H
#define KNEM_CORE_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
#include <stddef.h>
typedef uint8_t u8;
typedef uint32_t u32;
typedef uint64_t u64;
#endif

/* The core assumes 4 KiB pages; the shim checks this at build time. */
#define KNEM_CORE_PAGE_SHIFT 12

/* Space the core reserves in each region for the shim's struct rcu_head. */
#define KNEM_CORE_RCU_HEAD_SIZE 16

struct knem_core_ctx;

/*
 * Counters: X(field, what it counts) for each field of struct
 * knem_core_stats, in order.  The one list: the shim's sysfs files, the
 * core's counters (through bindgen) and knem-abi's STATS, which knem-stat,
 * the suite and the fuzzer use, all come from it.  A new counter is one
 * line here and its knem_shim_stat_add() calls in the core.
 */
#define KNEM_CORE_STATS(X)                                                \
	X(contexts, "live O_RDWR opens")                                  \
	X(regions, "live regions")                                        \
	X(pinned_pages, "pages pinned by live regions")                   \
	X(regions_created, "regions created since load")                  \
	X(bytes_inline_read, "bytes region -> caller, synchronous")       \
	X(bytes_inline_write, "bytes caller -> region, synchronous")      \
	X(bytes_region_copy, "bytes region -> region")                    \
	X(bytes_async, "bytes copied by asynchronous requests")           \
	X(copies_failed, "copies that ended FAILED")                      \
	X(err_einval, "ioctls failed with EINVAL")                        \
	X(err_eperm, "ioctls failed with EPERM")                          \
	X(err_eacces, "ioctls failed with EACCES")                        \
	X(err_efault, "ioctls failed with EFAULT")                        \
	X(err_enomem, "ioctls failed with ENOMEM")                        \
	X(err_ebusy, "ioctls failed with EBUSY")                          \
	X(err_enotty, "ioctls failed with ENOTTY")                        \
	X(err_other, "ioctls failed with another errno")                  \
	X(pins_refused_memlock, "pins refused by RLIMIT_MEMLOCK")         \
	X(offload_threads, "live offload threads")                        \
	X(offload_fallbacks, "async copies run by the caller: thread bound")

struct knem_core_stats {
#define KNEM_CORE_STATS_FIELD(field, what) u64 field;
	KNEM_CORE_STATS(KNEM_CORE_STATS_FIELD)
#undef KNEM_CORE_STATS_FIELD
};

/* The index of each counter: its field's place in struct knem_core_stats. */
enum knem_core_stat {
#define KNEM_CORE_STATS_INDEX(field, what) KNEM_CORE_STAT_##field,
	KNEM_CORE_STATS(KNEM_CORE_STATS_INDEX)
#undef KNEM_CORE_STATS_INDEX
	KNEM_CORE_NR_STATS
};

/* ------------------------------------------------------------------ */
/* Exported by the Rust core, called by the shim.                      */
/* ------------------------------------------------------------------ */

/*
 * "knem_core.h sha256 <hex>": the SHA-256 of the copy of this file the core
 * object was built from.  Kbuild refuses to link an object whose hash is
 * not this file's (c-shim/Kbuild); nothing reads it at run time.
 */
extern const char knem_core_abi[];

/* Module load/unload: the global region table.  0 or -ENOMEM. */
int knem_core_init(void);
void knem_core_exit(void);

/*
 * One context per O_RDWR open.  uid is the opener's real uid at open, in
 * the initial user namespace: the owner of every region the context
 * creates.  account[0..levels) are the keys its regions and offload thread
 * are counted under against the per-user bounds, one per user namespace
 * level from the opener's own up to the initial namespace (1 to
 * KNEM_CORE_ACCOUNT_LEVELS; the bounds hold at every level).  shim is the
 * shim's handle of the file, passed back to the knem_shim_ctx_* functions
 * below.  NULL on allocation failure or a chain out of range.
 */
#define KNEM_CORE_ACCOUNT_LEVELS 33
struct knem_core_ctx *knem_core_ctx_new(u32 uid, const u64 *account,
					u32 levels, void *shim);

/*
 * The file is being released, and its offload thread (if any) has stopped:
 * drop the asynchronous requests that never started (their slots stay as
 * they are; references and pins are released), destroy every region the
 * context owns (copies running against them finish on their own
 * reference) and free the context.
 */
void knem_core_ctx_release(struct knem_core_ctx *ctx);

/*
 * Asynchronous requests.  The core queues them in submission order; the
 * shim's offload thread of the context (started by knem_shim_ctx_spawn()
 * at the first asynchronous submission the core gives a thread) calls
 * knem_core_ctx_run_async() to run the oldest one: the copy, then its
 * slot (and its notification).  Returns 1 if a request ran, 0 if the
 * queue was empty.  Only that thread calls it, which keeps completions in
 * submission order.
 *
 * knem_core_ctx_async_queued() and knem_core_ctx_notify_ready() do not
 * sleep or lock: the thread's sleep test and poll()'s readiness.
 */
int knem_core_ctx_run_async(struct knem_core_ctx *ctx);
int knem_core_ctx_async_queued(struct knem_core_ctx *ctx);
int knem_core_ctx_notify_ready(struct knem_core_ctx *ctx);

/*
 * NOTIFY_FD: pop up to max completed status indices, oldest first, into
 * out; returns how many (0 when none is queued).
 */
u32 knem_core_ctx_read_notify(struct knem_core_ctx *ctx, u32 *out, u32 max);

/*
 * mmap() of the status array: whether a mapping of len bytes at file page
 * offset pgoff, MAP_SHARED if shared != 0, may become the context's array.
 * 0, -EBUSY when the context already has one, -EINVAL for another offset,
 * more than 2^32 slots (a slot index is a u32) or a private mapping.  The
 * shim asks before allocating anything.
 */
int knem_core_ctx_status_mmap_check(struct knem_core_ctx *ctx, u64 pgoff,
				    u64 len, int shared);

/*
 * Record the status array of a context: len one-byte slots at kaddr, zeroed,
 * mapped to userspace by the shim.  -EBUSY if the context already has one.
 * The memory must stay valid until knem_core_ctx_release() returns.
 */
int knem_core_ctx_set_status_array(struct knem_core_ctx *ctx, void *kaddr,
				   u64 len);

/*
 * Handle one ioctl.  cmd is the full command number, arg the user pointer,
 * caller_uid the calling task's real uid now, in the initial user
 * namespace (it may differ from the uid the context was opened under:
 * the access checks compare region owners with it).  Returns 0 or a
 * negative errno; unknown commands give -ENOTTY.
 */
long knem_core_ioctl(struct knem_core_ctx *ctx, unsigned int cmd, u64 arg,
		     u32 caller_uid);

/* Called by the shim after the grace period started by knem_shim_call_rcu. */
void knem_core_rcu_free(void *rcu_head);

/*
 * The most work one hold of the region table's mutex did since load or the
 * last reset: slots looked at plus count entries moved.  reset non-zero
 * starts the record again (and returns the old one).  Any context.
 */
u64 knem_core_table_hold_work(int reset);

/* ------------------------------------------------------------------ */
/* Exported by the shim, called by the Rust core.                      */
/* ------------------------------------------------------------------ */

/*
 * Memory for the core's own objects.  The result is aligned to at least
 * 8 bytes; NULL on failure (the core never assumes success).
 */
void *knem_shim_alloc(u64 size);
void knem_shim_free(void *ptr);

/* copy_{from,to}_user of the current task: 0 or -EFAULT. */
int knem_shim_copy_from_user(void *dst, u64 src, u64 len);
int knem_shim_copy_to_user(u64 dst, const void *src, u64 len);

/*
 * Pin nr pages of the current task's memory from the page-aligned user
 * address start, FOLL_LONGTERM, with write intent when write != 0.  Fills
 * pages[0..ret) and returns how many were pinned (possibly fewer than nr),
 * or a negative errno when none were.
 */
long knem_shim_pin_pages(u64 start, u64 nr, int write, void **pages);

/* Unpin pages[0..nr), marking them dirty first when dirty != 0. */
void knem_shim_unpin_pages(void **pages, u64 nr, int dirty);

/*
 * Copy len bytes between a pinned page (at offset off) and the current
 * task's memory at uaddr; to_user selects the direction.  off + len never
 * exceeds the page.  0 or -EFAULT.
 */
int knem_shim_copy_page_user(void *page, u32 off, u64 uaddr, u32 len,
			     int to_user);

/*
 * Copy len bytes between two pinned pages.  Ranges stay within the pages;
 * overlapping ranges of one page are moved as memmove does.  May sleep
 * (reschedules: long copies come here page by page).
 */
void knem_shim_copy_page_page(void *dst_page, u32 dst_off, void *src_page,
			      u32 src_off, u32 len);

/*
 * Add delta to counter idx (an enum knem_core_stat) in this CPU's slot,
 * wrapping: a gauge that goes down on another CPU than it went up on
 * leaves a negative delta there.  The shim sums the slots only when the
 * counters are read (sysfs, read() of an O_RDONLY open).  Any context;
 * does not sleep, lock or write memory another CPU writes.
 */
void knem_shim_stat_add(u32 idx, u64 delta);

/* A random value (get_random_u32). Does not sleep. */
u32 knem_shim_random_u32(void);

/*
 * RCU: readers of the region table run between these two calls and do
 * not sleep there.  knem_shim_call_rcu() gets KNEM_CORE_RCU_HEAD_SIZE bytes,
 * 8-aligned, and calls knem_core_rcu_free() with the same pointer once
 * every reader that could see the object has finished.
 */
void knem_shim_rcu_read_lock(void);
void knem_shim_rcu_read_unlock(void);
void knem_shim_call_rcu(void *rcu_head);

/* A global mutex that serialises writers of the region table. */
void knem_shim_table_lock(void);
void knem_shim_table_unlock(void);

/*
 * Per context, shim being the handle given to knem_core_ctx_new():
 * a mutex around the core's queues (never nested, may sleep); wake the
 * offload thread after queueing a request (called without that mutex, may
 * sleep; only once knem_shim_ctx_spawn() succeeded); wake read() and
 * poll() after queueing a notification (does not sleep).
 */
void knem_shim_ctx_lock(void *shim);
void knem_shim_ctx_unlock(void *shim);
void knem_shim_ctx_kick(void *shim);
void knem_shim_ctx_notify(void *shim);

/*
 * The offload thread of a context, created when the core decides one is
 * due (the first asynchronous submission, within the per-user bound), in
 * the submitting task: the thread joins the submitter's cgroups and runs
 * only on CPUs of its cpuset (the BIND_OFFLOAD or binding choice there,
 * else the submitter's CPUs), then starts.  0, or a negative errno and no
 * thread.  The core calls it at most once at a time per context and never
 * again after a success; the thread lives until the file's release.
 */
int knem_shim_ctx_spawn(void *shim);

/*
 * The max_offload_threads_per_user module parameter, read at each thread
 * start: at most this many live offload threads per user, at each level of
 * its account (see knem_core_ctx_new()); the core
 * runs the asynchronous copies of a context beyond it in the caller.
 * Does not sleep.
 */
#define KNEM_CORE_OFFLOAD_THREADS_PER_USER_DEFAULT 256
u64 knem_shim_offload_threads_per_user(void);

/*
 * The max_offload_threads module parameter: live offload threads on the
 * node, all users together.  Does not sleep.
 */
#define KNEM_CORE_OFFLOAD_THREADS_MAX_DEFAULT 4096
u64 knem_shim_offload_threads_max(void);

/*
 * BIND_OFFLOAD, validated by the core: flags is exactly one
 * KNEM_BIND_FLAG_*; for CUSTOM, mask holds len bytes of a cpu_set_t-style
 * mask (bit n % 8 of byte n / 8 is CPU n).  Records the online CPUs it
 * names for the thread.  -EINVAL when none is left, -EBUSY once the thread
 * exists, -ENOMEM.
 */
int knem_shim_ctx_bind(void *shim, u32 flags, const void *mask, u32 len);

/*
 * Pinned pages per account level (the core's state/pins.rs), knem_owner.c:
 * knem_shim_account() writes the current task's keys (as knem_core_ctx_new()
 * gets them, KNEM_CORE_ACCOUNT_LEVELS at most) and returns how many;
 * knem_shim_memlock_limit() is its RLIMIT_MEMLOCK in pages, U64_MAX for
 * none or when the account_pinned parameter is off; when a pin of pages
 * would take a level from pinned over limit, knem_shim_memlock_over()
 * returns 1 if the task is exempt (CAP_IPC_LOCK), else 0 after one
 * rate-limited log line.  None of them sleeps.  The counts are kept under
 * a global mutex of their own (knem_env.c).
 */
u32 knem_shim_account(u64 *keys);
u64 knem_shim_memlock_limit(void);
int knem_shim_memlock_over(u64 pages, u64 limit, u64 pinned);
void knem_shim_pins_lock(void);
void knem_shim_pins_unlock(void);

/*
 * The owner record of pinned pages (knem_owner.c).  Before pinning pages
 * pages of the current task, the core asks for a record: it charges them
 * to the task's user (locked_vm, shared by all the user's processes)
 * against the task's RLIMIT_MEMLOCK unless CAP_IPC_LOCK or the
 * account_pinned=0 parameter exempts it (-EDQUOT over the limit, with one
 * rate-limited log line; the core counts it and returns -ENOMEM, as KNEM
 * does), counts them in the task's mm->pinned_vm (VmPin), and remembers
 * the process.  knem_shim_owner_put() uncharges the same user and mm,
 * from any task, and frees the record.
 */
int knem_shim_owner_new(u64 pages, void **owner);
void knem_shim_owner_put(void *owner);

/*
 * The access_policy module parameter, read at each check: whether another
 * context's region is usable by its owner's uid (KNEM) or by whoever may
 * ptrace-attach its owner process (CMA).  The core keeps the order of the
 * checks and the exceptions (ANY_USER_ACCESS, the creating context).
 */
#define KNEM_CORE_ACCESS_UID 0
#define KNEM_CORE_ACCESS_PTRACE 1
int knem_shim_access_policy(void);

/*
 * 1 if the current task may ptrace-attach the owner process of a record
 * (PTRACE_MODE_ATTACH_REALCREDS, as process_vm_readv), 0 if not or if the
 * process is gone.  Called outside RCU read sections.
 */
int knem_shim_may_access(void *owner);

/*
 * The max_regions_per_user module parameter, read at each region's
 * creation: at most this many live regions per user, at each level of its
 * account (see knem_core_ctx_new()).  Does not sleep.
 */
#define KNEM_CORE_REGIONS_PER_USER_DEFAULT 131072
u64 knem_shim_regions_per_user(void);

/*
 * The max_regions module parameter: live regions on the node, all users
 * together (the table holds 2^20 at most).  Does not sleep.
 */
#define KNEM_CORE_REGIONS_MAX_DEFAULT 1048576
u64 knem_shim_regions_max(void);

/*
 * 1 when a copy running in the current task should stop between two
 * pieces: the task has a fatal signal pending (its process is dying), or
 * it is an offload thread asked to stop (the file is being released).
 * Does not sleep.
 */
int knem_shim_copy_should_stop(void);

/*
 * DMA engine offload (knem_dma.c).  The core decides which copies and
 * which pieces go to the engine; the shim owns the channel.
 *
 * knem_shim_dma_usable(): 1 when the dma parameter allows it and a
 * DMA_MEMCPY channel can be had now (looked up lazily: a provider loaded
 * after knem is found; one unloaded while idle is gone), else 0.
 * knem_shim_dma_min(): pieces shorter than this go to the CPU.
 *
 * A batch is one copy's use of the channel: knem_shim_dma_begin(shim)
 * returns one, or NULL when no channel is usable (the core then copies with
 * the CPU); shim is the context (as given to knem_core_ctx_new) of an
 * ASYNCDMACOMPLETE batch, whose pieces count against that fd's bound on
 * mapped pieces, or NULL for a batch the caller waits for.  knem_shim_dma_copy() maps both pages of one piece for the
 * channel's device and submits one descriptor; the piece stays within
 * each page, the pages stay pinned until knem_shim_dma_end().  It returns
 * 0 when queued; -EIO when the batch failed for good (a wait for the
 * engine timed out or the caller is dying: the core stops, FAILED); any
 * other negative errno when the piece was not queued (the core copies it
 * with the CPU).  Queued pieces may already run, so the core never submits
 * overlapping ones.  knem_shim_dma_end() waits for every queued piece,
 * unmaps them, frees the batch: 0, or -EIO when any piece failed or the
 * wait gave up (dma_timeout_ms, fatal signal; the shim then keeps what
 * the engine may still touch until it is done).  All may sleep.
 */
int knem_shim_dma_usable(void);
u64 knem_shim_dma_min(void);
void *knem_shim_dma_begin(void *shim);
int knem_shim_dma_copy(void *batch, void *dst_page, u32 dst_off,
		       void *src_page, u32 src_off, u32 len);
int knem_shim_dma_end(void *batch);

/*
 * ASYNCDMACOMPLETE: ends a batch without waiting.  Once every queued piece
 * is done (at once if none is), from the completion callback (any
 * context), the shim unmaps the pieces and writes KNEM_STATUS_SUCCESS, or
 * KNEM_STATUS_FAILED when a piece or failed says so, into *slot; slots of
 * one context (shim, as given to knem_core_ctx_new) are written in the
 * order of these calls.  Then, from process context, it calls
 * knem_core_dma_release(token, ok).  The context's release waits for all
 * of them (up to dma_timeout_ms: those left are abandoned, their slots say
 * FAILED and they are released, while the shim keeps the pages referenced
 * until the engine is done with them).
 */
void knem_shim_dma_finish_async(void *batch, void *shim, u8 *slot,
				void *token, int failed);

/* The core's side: give up what the request held; ok = slot is SUCCESS. */
void knem_core_dma_release(void *token, int ok);

#endif /* KNEM_CORE_H */
