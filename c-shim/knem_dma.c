// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_dma.c - copies offloaded to a dmaengine DMA_MEMCPY channel.
 *
 * The core decides what goes to the engine (KNEM_FLAG_DMA, the piece size
 * against dma_min) and cuts copies into pieces within one page on each
 * side; this file maps each piece for the channel's device, submits one
 * descriptor per piece and waits for them.
 *
 * The channel is looked up lazily, at the first request that wants one
 * (GET_INFO included), so a provider registered after knem loads is found.
 * A held channel holds its provider module; it is let go once idle for
 * KNEM_DMA_IDLE_MS, so the provider can be unloaded while nothing runs,
 * and the next request looks again (and finds none: the CPU copies).
 *
 * The channel is shared by every fd, so one fd's trouble must not stop
 * the others' work: a wait that gives up (dma_timeout_ms, or the caller
 * is dying) abandons that batch only.  Its copy is FAILED and its caller
 * goes on, but its mappings, its page references and the batch itself
 * stay until the engine calls its descriptors back (they are reaped on a
 * work item then).  Only module unload terminates the channel, for
 * batches the engine never returned.  Every piece holds a reference on
 * both its pages, so a page stays allocated while the engine may touch
 * it even after the request's pins are given up.
 */
#include <linux/atomic.h>
#include <linux/completion.h>
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/dmaengine.h>
#include <linux/err.h>
#include <linux/jiffies.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/workqueue.h>

#include "knem_io.h"
#include "knem_compat.h"
#include "knem_core.h"
#include "knem_shim.h"

static bool dma = true;
module_param(dma, bool, 0644);
MODULE_PARM_DESC(dma, "offload KNEM_FLAG_DMA copies to a dmaengine channel (1) or not (0)");

static uint dma_min = 1024;
module_param(dma_min, uint, 0644);
MODULE_PARM_DESC(dma_min, "pieces shorter than this (bytes) are copied by the CPU");

static uint dma_timeout_ms = 10000;
module_param(dma_timeout_ms, uint, 0644);
MODULE_PARM_DESC(dma_timeout_ms, "a copy whose engine completes none of its pieces for this long is FAILED and its batch abandoned (ms)");

#ifdef KNEM_FAULT_INJECT
static uint fault_dma_finish_delay_ms;
module_param(fault_dma_finish_delay_ms, uint, 0644);
MODULE_PARM_DESC(fault_dma_finish_delay_ms, "test builds: sleep this long after an ASYNCDMACOMPLETE submission drops its file's DMA lock (ms)");

void knem_dma_test_delay(void)
{
	uint ms = READ_ONCE(fault_dma_finish_delay_ms);

	if (ms)
		msleep(ms);
}
#endif

/* Batches abandoned and not yet called back by the engine. */
static atomic_t knem_dma_abandoned_nr = ATOMIC_INIT(0);

/*
 * An abandoned batch keeps its piece array (up to 640 KiB) and its page
 * references until the engine calls it back.  An engine that stalls while
 * submitters time out or die would pile them up without end, outside any
 * fd's bounds, so past this many the channel counts as unusable and
 * copies go to the CPU until the engine catches up.
 */
static uint dma_abandoned_max = 64;
module_param(dma_abandoned_max, uint, 0644);
MODULE_PARM_DESC(dma_abandoned_max, "abandoned batches the engine has not called back yet past which copies go to the CPU");

static int knem_dma_abandoned_get(char *buf, const struct kernel_param *kp)
{
	return sprintf(buf, "%d\n", atomic_read(&knem_dma_abandoned_nr));
}

static const struct kernel_param_ops knem_dma_abandoned_ops = {
	.get = knem_dma_abandoned_get,
};
module_param_cb(dma_abandoned, &knem_dma_abandoned_ops, NULL, 0444);
MODULE_PARM_DESC(dma_abandoned, "batches given up on whose descriptors the engine has not called back yet");

/* How long an unused channel is kept before its provider is let go. */
#define KNEM_DMA_IDLE_MS 200
/* Pieces in flight per batch before the submitter waits for them. */
#define KNEM_DMA_BATCH 64
/* An asynchronous batch grows its piece array up to this (64 MiB). */
#define KNEM_DMA_MAX_PIECES 16384
/*
 * Pieces one fd's ASYNCDMACOMPLETE batches may keep mapped (256 MiB); past
 * it, a batch being submitted waits for its own pieces before adding more.
 */
#define KNEM_DMA_FD_PIECES 65536

static DEFINE_MUTEX(knem_dma_lock);     /* the channel, its users, the wq */
/* Releases of ASYNCDMACOMPLETE requests and reaps; drained at unload. */
static struct workqueue_struct *knem_dma_wq;
static struct dma_chan *knem_dma_chan;
static unsigned int knem_dma_users;
/* Abandoned batches, for unload to reap those never called back. */
static DEFINE_SPINLOCK(knem_dma_orphans_lock);
static LIST_HEAD(knem_dma_orphans);

static unsigned long knem_dma_timeout(void)
{
	return max(msecs_to_jiffies(READ_ONCE(dma_timeout_ms)), 1UL);
}

static void knem_dma_idle_fn(struct work_struct *work)
{
	mutex_lock(&knem_dma_lock);
	if (knem_dma_chan && !knem_dma_users) {
		dma_release_channel(knem_dma_chan);
		knem_dma_chan = NULL;
	}
	mutex_unlock(&knem_dma_lock);
}

static DECLARE_DELAYED_WORK(knem_dma_idle, knem_dma_idle_fn);

/*
 * When the last lookup found no channel (jiffies, never 0), or 0.  Without
 * an engine every DMA request and GET_INFO would take the global mutex and
 * walk the dmaengine's devices; for KNEM_DMA_MISS_TTL after a miss they
 * are told "none" at once, so a provider loaded later is found within it.
 */
static unsigned long knem_dma_missed_at;
#define KNEM_DMA_MISS_TTL HZ

/* The channel, with a use counted; NULL when dma=0 or none exists. */
static struct dma_chan *knem_dma_get(void)
{
	unsigned long missed = READ_ONCE(knem_dma_missed_at);
	struct dma_chan *chan;
	dma_cap_mask_t mask;

	if (!READ_ONCE(dma))
		return NULL;
	if (missed && time_before(jiffies, missed + KNEM_DMA_MISS_TTL))
		return NULL;
	mutex_lock(&knem_dma_lock);
	if (!knem_dma_wq)
		knem_dma_wq = alloc_workqueue("knem_dma", WQ_UNBOUND, 0);
	if (!knem_dma_chan && knem_dma_wq) {
		dma_cap_zero(mask);
		dma_cap_set(DMA_MEMCPY, mask);
		chan = dma_request_chan_by_mask(&mask);
		if (!IS_ERR(chan))
			knem_dma_chan = chan;
	}
	chan = knem_dma_chan;
	WRITE_ONCE(knem_dma_missed_at, chan ? 0 : jiffies | 1);
	if (chan)
		knem_dma_users++;
	mutex_unlock(&knem_dma_lock);
	return chan;
}

static void knem_dma_put(void)
{
	mutex_lock(&knem_dma_lock);
	if (!--knem_dma_users)
		mod_delayed_work(knem_system_dfl_wq(), &knem_dma_idle,
				 msecs_to_jiffies(KNEM_DMA_IDLE_MS));
	mutex_unlock(&knem_dma_lock);
}

int knem_shim_dma_usable(void)
{
	if (!knem_dma_get())
		return 0;
	knem_dma_put();
	return 1;
}

u64 knem_shim_dma_min(void)
{
	return READ_ONCE(dma_min);
}

struct knem_dma_piece {
	struct page *src_page, *dst_page;       /* referenced while mapped */
	dma_addr_t src, dst;
	u32 len;
};

/* knem_dma_batch.state: which of the two ends came first. */
#define KNEM_DMA_ENGINE_DONE 1  /* every piece called back */
#define KNEM_DMA_ABANDONED 2    /* the submitter gave up waiting */

struct knem_dma_batch {
	struct dma_chan *chan;
	struct device *dev;
	/* Submitted pieces not called back yet, plus one for the submitter. */
	atomic_t pending;
	atomic_t state;
	/* The submitter's, and the reaper's once abandoned. */
	atomic_t refs;
	bool failed;
	bool dead;              /* abandoned: nothing more is queued */
	unsigned int nr, cap;
	unsigned int counted;   /* pieces counted in kf->dma_pieces */
	struct knem_dma_piece *pieces;
	/* Synchronous: the submitter waits for this. */
	struct completion done;
	/* ASYNCDMACOMPLETE: what the last callback reports to, and where. */
	bool async;
	bool complete;          /* every piece done; under kf->dma_lock */
	bool reported;          /* slot written, release queued; same lock */
	struct knem_file *kf;   /* ASYNCDMACOMPLETE only */
	u8 *slot;
	void *token;
	struct list_head node;  /* in kf->dma_batches, submission order */
	struct work_struct work;
	/* Abandoned: in knem_dma_orphans until the engine is done with it. */
	struct list_head orphan;
	struct work_struct reap;
};

/* Process or callback context, never under a spinlock. */
static void knem_dma_unmap_all(struct knem_dma_batch *b)
{
	struct knem_dma_piece *p;
	unsigned int i;

	for (i = 0; i < b->nr; i++) {
		p = &b->pieces[i];
		dma_unmap_page(b->dev, p->src, p->len, DMA_TO_DEVICE);
		dma_unmap_page(b->dev, p->dst, p->len, DMA_FROM_DEVICE);
		put_page(p->src_page);
		put_page(p->dst_page);
	}
	b->nr = 0;
}

/* Process context (the channel's user count takes a mutex). */
static void knem_dma_batch_put(struct knem_dma_batch *b)
{
	if (!atomic_dec_and_test(&b->refs))
		return;
	kfree(b->pieces);
	kfree(b);
	knem_dma_put();
}

/* An abandoned batch the engine is done with (or unload took back). */
static void knem_dma_reap(struct knem_dma_batch *b)
{
	spin_lock_irq(&knem_dma_orphans_lock);
	list_del(&b->orphan);
	spin_unlock_irq(&knem_dma_orphans_lock);
	knem_dma_unmap_all(b);
	atomic_dec(&knem_dma_abandoned_nr);
	knem_dma_batch_put(b);
}

static void knem_dma_reap_fn(struct work_struct *work)
{
	knem_dma_reap(container_of(work, struct knem_dma_batch, reap));
}

/*
 * The submitter gives up on b's pieces in flight: true when b is now
 * abandoned (the reaper frees what the pieces hold once the engine calls
 * them back), false when the engine had already finished them all.  Any
 * context; the piece array is not touched.
 */
static bool knem_dma_abandon(struct knem_dma_batch *b)
{
	unsigned long flags;

	atomic_inc(&b->refs);
	atomic_inc(&knem_dma_abandoned_nr);
	spin_lock_irqsave(&knem_dma_orphans_lock, flags);
	list_add_tail(&b->orphan, &knem_dma_orphans);
	spin_unlock_irqrestore(&knem_dma_orphans_lock, flags);
	if (!(atomic_fetch_or(KNEM_DMA_ABANDONED, &b->state) &
	      KNEM_DMA_ENGINE_DONE)) {
		b->dead = true;
		b->failed = true;
		return true;
	}
	spin_lock_irqsave(&knem_dma_orphans_lock, flags);
	list_del(&b->orphan);
	spin_unlock_irqrestore(&knem_dma_orphans_lock, flags);
	atomic_dec(&knem_dma_abandoned_nr);
	atomic_dec(&b->refs);   /* the submitter's is still held */
	return false;
}

/* b's pieces leave its fd's count (kf is alive: b is not reported yet). */
static void knem_dma_uncount(struct knem_dma_batch *b)
{
	if (b->kf && b->counted) {
		atomic_sub(b->counted, &b->kf->dma_pieces);
		b->counted = 0;
	}
}

/*
 * Process context, after the slot of an ASYNCDMACOMPLETE batch was
 * written: the core gives up the request's references and pins (an
 * abandoned batch's pages stay referenced by its pieces).  Leaving kf's
 * list is the last thing done with kf: the release may free it as soon as
 * the list is empty.
 */
static void knem_dma_release_fn(struct work_struct *work)
{
	struct knem_dma_batch *b = container_of(work, struct knem_dma_batch, work);
	struct knem_file *kf = b->kf;
	unsigned long flags;

	knem_core_dma_release(b->token, !b->failed);
	knem_dma_uncount(b);    /* abandoned: the reaper leaves kf alone */
	spin_lock_irqsave(&kf->dma_lock, flags);
	list_del(&b->node);
	wake_up(&kf->dma_wq);
	spin_unlock_irqrestore(&kf->dma_lock, flags);
	knem_dma_batch_put(b);
}

/*
 * Asynchronous batches are complete: report each complete one from the
 * oldest on, so slots are written in submission order.  A batch was
 * unmapped before it was marked complete (bounce buffers are copied back
 * at unmap, so the data is visible before the slot says done), or it was
 * abandoned.  Any context; kf->dma_lock held.
 */
static void knem_dma_report(struct knem_file *kf)
{
	struct knem_dma_batch *b;

	list_for_each_entry(b, &kf->dma_batches, node) {
		if (!b->complete)
			break;
		if (b->reported)
			continue;
		b->reported = true;
		smp_store_release(b->slot, b->failed ? KNEM_STATUS_FAILED
						     : KNEM_STATUS_SUCCESS);
		queue_work(knem_dma_wq, &b->work);
	}
}

/* The last piece of a batch was called back. */
static void knem_dma_batch_done(struct knem_dma_batch *b)
{
	struct knem_file *kf = b->kf;
	unsigned long flags;

	if (atomic_fetch_or(KNEM_DMA_ENGINE_DONE, &b->state) &
	    KNEM_DMA_ABANDONED) {
		queue_work(knem_dma_wq, &b->reap);
		return;
	}
	if (!b->async) {
		complete(&b->done);
		return;
	}
	knem_dma_unmap_all(b);
	knem_dma_uncount(b);
	/* Once reported, b may be freed as soon as the lock is dropped. */
	spin_lock_irqsave(&kf->dma_lock, flags);
	b->complete = true;
	knem_dma_report(kf);
	spin_unlock_irqrestore(&kf->dma_lock, flags);
}

/* Descriptor completion; tasklet or thread context. */
static void knem_dma_callback(void *param, const struct dmaengine_result *res)
{
	struct knem_dma_batch *b = param;

	if (res && res->result != DMA_TRANS_NOERROR)
		WRITE_ONCE(b->failed, true);
	if (atomic_dec_and_test(&b->pending))
		knem_dma_batch_done(b);
}

/*
 * Issues what was submitted, waits for all of it, unmaps: a synchronous
 * batch at its end, or any batch whose piece array is full.  A wait cut by
 * a fatal signal, or during which no piece completed for dma_timeout_ms
 * (a batch may hold 16384 pieces: its length alone is no reason), abandons
 * the batch instead: -EIO, the copy is FAILED, and its pieces stay as they
 * are for the reaper.
 */
static int knem_dma_flush(struct knem_dma_batch *b)
{
	int seen, now;
	long left;

	dma_async_issue_pending(b->chan);
	if (atomic_dec_and_test(&b->pending))
		goto done;
	seen = atomic_read(&b->pending);
	for (;;) {
		left = wait_for_completion_killable_timeout(&b->done,
							    knem_dma_timeout());
		if (left > 0)
			break;
		now = atomic_read(&b->pending);
		if (!left && now && now != seen) {
			seen = now;     /* slow but moving */
			continue;
		}
		if (knem_dma_abandon(b))
			return -EIO;
		/* The last callback is completing us right now. */
		wait_for_completion(&b->done);
		break;
	}
done:
	knem_dma_unmap_all(b);
	knem_dma_uncount(b);
	atomic_set(&b->state, 0);
	atomic_set(&b->pending, 1);
	reinit_completion(&b->done);
	return 0;
}

void *knem_shim_dma_begin(void *shim)
{
	struct knem_dma_batch *b;
	struct dma_chan *chan;

	knem_might_sleep();
	if ((uint)atomic_read(&knem_dma_abandoned_nr) >= READ_ONCE(dma_abandoned_max))
		return NULL;
	chan = knem_dma_get();
	if (!chan)
		return NULL;
	b = kzalloc(sizeof(*b), GFP_KERNEL_ACCOUNT);
	if (!b)
		goto put;
	b->pieces = kmalloc_array(KNEM_DMA_BATCH, sizeof(*b->pieces),
				  GFP_KERNEL_ACCOUNT);
	if (!b->pieces)
		goto free_batch;
	b->cap = KNEM_DMA_BATCH;
	b->chan = chan;
	b->dev = knem_dma_chan_dev(chan);
	b->kf = shim;
	init_completion(&b->done);
	atomic_set(&b->pending, 1);
	atomic_set(&b->refs, 1);
	INIT_LIST_HEAD(&b->node);
	INIT_LIST_HEAD(&b->orphan);
	INIT_WORK(&b->work, knem_dma_release_fn);
	INIT_WORK(&b->reap, knem_dma_reap_fn);
	return b;

free_batch:
	kfree(b);
put:
	knem_dma_put();
	return NULL;
}

/*
 * Room for one more piece: grow the array (pieces in flight never read
 * it, only the last completion does, which cannot run while the
 * submitter's count is held), or past the cap wait for what is queued.
 */
static int knem_dma_make_room(struct knem_dma_batch *b)
{
	struct knem_dma_piece *p;

	if (b->nr < b->cap)
		return 0;
	if (b->cap < KNEM_DMA_MAX_PIECES) {
		p = knem_krealloc_array(b->pieces, b->cap * 2, sizeof(*p),
					GFP_KERNEL_ACCOUNT);
		if (p) {
			b->pieces = p;
			b->cap *= 2;
			return 0;
		}
	}
	return knem_dma_flush(b);
}

int knem_shim_dma_copy(void *batch, void *dst_page, u32 dst_off,
		       void *src_page, u32 src_off, u32 len)
{
	struct knem_dma_batch *b = batch;
	struct dma_async_tx_descriptor *tx;
	struct knem_dma_piece *p;
	dma_cookie_t cookie;

	knem_might_sleep();
	if (WARN_ON_ONCE(!len || src_off > PAGE_SIZE || len > PAGE_SIZE - src_off ||
			 dst_off > PAGE_SIZE || len > PAGE_SIZE - dst_off))
		return -EINVAL;
	if (b->dead)
		return -EIO;
	/* Over the fd's bound: what this batch queued goes first. */
	if (b->kf && b->nr &&
	    atomic_read(&b->kf->dma_pieces) >= KNEM_DMA_FD_PIECES &&
	    knem_dma_flush(b))
		return -EIO;
	if (knem_dma_make_room(b))
		return -EIO;

	p = &b->pieces[b->nr];
	p->len = len;
	p->src_page = src_page;
	p->dst_page = dst_page;
	p->src = dma_map_page(b->dev, src_page, src_off, len, DMA_TO_DEVICE);
	if (dma_mapping_error(b->dev, p->src))
		return -ENOMEM;
	p->dst = dma_map_page(b->dev, dst_page, dst_off, len, DMA_FROM_DEVICE);
	if (dma_mapping_error(b->dev, p->dst))
		goto unmap_src;
	tx = dmaengine_prep_dma_memcpy(b->chan, p->dst, p->src, len,
				       DMA_PREP_INTERRUPT | DMA_CTRL_ACK);
	if (!tx)
		goto unmap_dst;
	tx->callback_result = knem_dma_callback;
	tx->callback_param = b;
	/* Taken before the engine may run it: its callback may put them. */
	get_page(src_page);
	get_page(dst_page);
	atomic_inc(&b->pending);
	cookie = dmaengine_submit(tx);
	if (dma_submit_error(cookie)) {
		atomic_dec(&b->pending);
		put_page(dst_page);
		put_page(src_page);
		goto unmap_dst;
	}
	b->nr++;
	if (b->kf) {
		b->counted++;
		atomic_inc(&b->kf->dma_pieces);
	}
	return 0;

unmap_dst:
	dma_unmap_page(b->dev, p->dst, len, DMA_FROM_DEVICE);
unmap_src:
	dma_unmap_page(b->dev, p->src, len, DMA_TO_DEVICE);
	/* Not queued: the core copies this piece with the CPU. */
	return -ENOMEM;
}

int knem_shim_dma_end(void *batch)
{
	struct knem_dma_batch *b = batch;
	bool failed;

	knem_might_sleep();
	if (!b->dead)
		knem_dma_flush(b);
	failed = b->failed;
	knem_dma_batch_put(b);
	return failed ? -EIO : 0;
}

void knem_shim_dma_finish_async(void *batch, void *shim, u8 *slot,
				void *token, int failed)
{
	struct knem_dma_batch *b = batch;
	struct knem_file *kf = shim;
	unsigned long flags;
	bool dead;

	b->kf = kf;
	b->slot = slot;
	b->token = token;
	if (failed)
		b->failed = true;
	spin_lock_irqsave(&kf->dma_lock, flags);
	list_add_tail(&b->node, &kf->dma_batches);
	b->async = true;
	/*
	 * A full array's wait gave up: the reaper has the pieces.  Reporting
	 * queues the release of the submitter's reference, and the reaper may
	 * already hold the last one: b may be freed once the lock is dropped,
	 * so whether it was dead is read here, under the lock, not after it.
	 */
	dead = b->dead;
	if (dead) {
		b->complete = true;
		knem_dma_report(kf);
	}
	spin_unlock_irqrestore(&kf->dma_lock, flags);
	knem_dma_test_delay();
	if (dead)
		return;
	dma_async_issue_pending(b->chan);
	/* Drop the submitter's count: the last piece (maybe now) reports. */
	if (atomic_dec_and_test(&b->pending))
		knem_dma_batch_done(b);
}

void knem_dma_file_init(struct knem_file *kf)
{
	atomic_set(&kf->dma_pieces, 0);
	spin_lock_init(&kf->dma_lock);
	INIT_LIST_HEAD(&kf->dma_batches);
	init_waitqueue_head(&kf->dma_wq);
}

static bool knem_dma_file_idle(struct knem_file *kf)
{
	unsigned long flags;
	bool idle;

	spin_lock_irqsave(&kf->dma_lock, flags);
	idle = list_empty(&kf->dma_batches);
	spin_unlock_irqrestore(&kf->dma_lock, flags);
	return idle;
}

/*
 * File release, before the core context goes: wait for the file's
 * ASYNCDMACOMPLETE batches (a process killed with DMA in flight ends
 * here).  Those the engine does not finish in time are abandoned: their
 * slots say FAILED and their requests are released now, while the engine
 * may keep their pieces (and other fds' work on the channel goes on).
 */
void knem_dma_file_quiesce(struct knem_file *kf)
{
	struct knem_dma_batch *b;
	unsigned long flags;

	if (wait_event_timeout(kf->dma_wq, knem_dma_file_idle(kf),
			       knem_dma_timeout()))
		return;
	spin_lock_irqsave(&kf->dma_lock, flags);
	list_for_each_entry(b, &kf->dma_batches, node) {
		/* A lost race: the engine is reporting it. */
		if (!b->complete && !b->dead && knem_dma_abandon(b))
			b->complete = true;
	}
	knem_dma_report(kf);
	spin_unlock_irqrestore(&kf->dma_lock, flags);
	wait_event(kf->dma_wq, knem_dma_file_idle(kf));
}

/*
 * Module unload: no context is left, only abandoned batches may be.  Those
 * the engine still holds are taken back here, the one place the shared
 * channel is terminated: no callback runs after terminate_sync, and the
 * reaps already queued are drained with the workqueue.
 */
void knem_dma_exit(void)
{
	struct knem_dma_batch *b;
	bool orphans;

	spin_lock_irq(&knem_dma_orphans_lock);
	orphans = !list_empty(&knem_dma_orphans);
	spin_unlock_irq(&knem_dma_orphans_lock);
	mutex_lock(&knem_dma_lock);
	if (orphans && knem_dma_chan)
		dmaengine_terminate_sync(knem_dma_chan);
	mutex_unlock(&knem_dma_lock);
	if (knem_dma_wq)
		destroy_workqueue(knem_dma_wq);
	for (;;) {
		spin_lock_irq(&knem_dma_orphans_lock);
		b = list_first_entry_or_null(&knem_dma_orphans,
					     struct knem_dma_batch, orphan);
		spin_unlock_irq(&knem_dma_orphans_lock);
		if (!b)
			break;
		knem_dma_reap(b);
	}
	cancel_delayed_work_sync(&knem_dma_idle);
	knem_dma_idle_fn(NULL);
}
