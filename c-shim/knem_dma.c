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
 */
#include <linux/atomic.h>
#include <linux/completion.h>
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

/* How long an unused channel is kept before its provider is let go. */
#define KNEM_DMA_IDLE_MS 200
/* Pieces in flight per batch before the submitter waits for them. */
#define KNEM_DMA_BATCH 64
/* An asynchronous batch grows its piece array up to this (64 MiB). */
#define KNEM_DMA_MAX_PIECES 16384
/* A piece that takes longer than this is taken back (terminate_sync). */
#define KNEM_DMA_TIMEOUT (10 * HZ)

static DEFINE_MUTEX(knem_dma_lock);     /* the channel, its users, the wq */
/* Releases of ASYNCDMACOMPLETE requests; drained at module unload. */
static struct workqueue_struct *knem_dma_wq;
static struct dma_chan *knem_dma_chan;
static unsigned int knem_dma_users;

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

/* The channel, with a use counted; NULL when dma=0 or none exists. */
static struct dma_chan *knem_dma_get(void)
{
	struct dma_chan *chan;
	dma_cap_mask_t mask;

	if (!READ_ONCE(dma))
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

/* Module unload: no context is left, so no batch is. */
void knem_dma_exit(void)
{
	if (knem_dma_wq)
		destroy_workqueue(knem_dma_wq);
	cancel_delayed_work_sync(&knem_dma_idle);
	knem_dma_idle_fn(NULL);
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
	dma_addr_t src, dst;
	u32 len;
};

struct knem_dma_batch {
	struct dma_chan *chan;
	struct device *dev;
	/* Submitted pieces not called back yet, plus one for the submitter. */
	atomic_t pending;
	bool failed;
	unsigned int nr, cap;
	struct knem_dma_piece *pieces;
	/* Synchronous: the submitter waits for this. */
	struct completion done;
	/* ASYNCDMACOMPLETE: what the last callback reports to, and where. */
	bool async;
	bool complete;          /* every piece done; under kf->dma_lock */
	bool reported;          /* slot written, release queued; same lock */
	struct knem_file *kf;
	u8 *slot;
	void *token;
	struct list_head node;  /* in kf->dma_batches, submission order */
	struct work_struct work;
};

static void knem_dma_unmap_all(struct knem_dma_batch *b)
{
	struct knem_dma_piece *p;
	unsigned int i;

	for (i = 0; i < b->nr; i++) {
		p = &b->pieces[i];
		dma_unmap_page(b->dev, p->src, p->len, DMA_TO_DEVICE);
		dma_unmap_page(b->dev, p->dst, p->len, DMA_FROM_DEVICE);
	}
	b->nr = 0;
}

static void knem_dma_free(struct knem_dma_batch *b)
{
	kfree(b->pieces);
	kfree(b);
	knem_dma_put();
}

/*
 * Process context, after the slot of an ASYNCDMACOMPLETE batch was
 * written: the core gives up the request's references and pins.  Leaving
 * kf's list is the last thing done with kf: the release may free it as
 * soon as the list is empty.
 */
static void knem_dma_release_fn(struct work_struct *work)
{
	struct knem_dma_batch *b = container_of(work, struct knem_dma_batch, work);
	struct knem_file *kf = b->kf;
	unsigned long flags;

	knem_core_dma_release(b->token, !b->failed);
	spin_lock_irqsave(&kf->dma_lock, flags);
	list_del(&b->node);
	wake_up(&kf->dma_wq);
	spin_unlock_irqrestore(&kf->dma_lock, flags);
	knem_dma_free(b);
}

/*
 * An asynchronous batch is complete: report it and every complete one
 * behind it, oldest first, so slots are written in submission order.
 * Unmapping here, before the slot says done, is what makes the data
 * visible to the CPU (bounce buffers are copied back at unmap).  Any
 * context; kf->dma_lock held.
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
		knem_dma_unmap_all(b);
		smp_store_release(b->slot, b->failed ? KNEM_STATUS_FAILED
						     : KNEM_STATUS_SUCCESS);
		queue_work(knem_dma_wq, &b->work);
	}
}

/* The last piece of a batch is done (or was taken back). */
static void knem_dma_batch_done(struct knem_dma_batch *b)
{
	struct knem_file *kf = b->kf;
	unsigned long flags;

	if (!b->async) {
		complete(&b->done);
		return;
	}
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
 * batch at its end, or any batch whose piece array is full.  A channel
 * that does not finish in time is stopped: after terminate_sync no
 * callback runs any more and no descriptor touches the pages, so
 * unmapping is safe.
 */
static void knem_dma_flush(struct knem_dma_batch *b)
{
	bool async = b->async;

	b->async = false;
	dma_async_issue_pending(b->chan);
	if (!atomic_dec_and_test(&b->pending) &&
	    !wait_for_completion_timeout(&b->done, KNEM_DMA_TIMEOUT)) {
		dmaengine_terminate_sync(b->chan);
		b->failed = true;
	}
	knem_dma_unmap_all(b);
	atomic_set(&b->pending, 1);
	reinit_completion(&b->done);
	b->async = async;
}

void *knem_shim_dma_begin(void)
{
	struct knem_dma_batch *b;
	struct dma_chan *chan;

	knem_might_sleep();
	chan = knem_dma_get();
	if (!chan)
		return NULL;
	b = kzalloc(sizeof(*b), GFP_KERNEL);
	if (!b)
		goto put;
	b->pieces = kmalloc_array(KNEM_DMA_BATCH, sizeof(*b->pieces), GFP_KERNEL);
	if (!b->pieces)
		goto free_batch;
	b->cap = KNEM_DMA_BATCH;
	b->chan = chan;
	b->dev = chan->device->dev;
	init_completion(&b->done);
	atomic_set(&b->pending, 1);
	INIT_LIST_HEAD(&b->node);
	INIT_WORK(&b->work, knem_dma_release_fn);
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
static void knem_dma_make_room(struct knem_dma_batch *b)
{
	struct knem_dma_piece *p;

	if (b->nr < b->cap)
		return;
	if (b->cap < KNEM_DMA_MAX_PIECES) {
		p = knem_krealloc_array(b->pieces, b->cap * 2, sizeof(*p),
					GFP_KERNEL);
		if (p) {
			b->pieces = p;
			b->cap *= 2;
			return;
		}
	}
	knem_dma_flush(b);
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
	knem_dma_make_room(b);

	p = &b->pieces[b->nr];
	p->len = len;
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
	atomic_inc(&b->pending);
	cookie = dmaengine_submit(tx);
	if (dma_submit_error(cookie)) {
		atomic_dec(&b->pending);
		goto unmap_dst;
	}
	b->nr++;
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
	knem_dma_flush(b);
	failed = b->failed;
	knem_dma_free(b);
	return failed ? -EIO : 0;
}

void knem_shim_dma_finish_async(void *batch, void *shim, u8 *slot,
				void *token, int failed)
{
	struct knem_dma_batch *b = batch;
	struct knem_file *kf = shim;
	unsigned long flags;

	b->kf = kf;
	b->slot = slot;
	b->token = token;
	if (failed)
		b->failed = true;
	spin_lock_irqsave(&kf->dma_lock, flags);
	list_add_tail(&b->node, &kf->dma_batches);
	b->async = true;
	spin_unlock_irqrestore(&kf->dma_lock, flags);
	dma_async_issue_pending(b->chan);
	/* Drop the submitter's count: the last piece (maybe now) reports. */
	if (atomic_dec_and_test(&b->pending))
		knem_dma_batch_done(b);
}

void knem_dma_file_init(struct knem_file *kf)
{
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
 * here).  An engine that does not finish them in time is stopped; the
 * batches it never completed are then completed here, FAILED.
 */
void knem_dma_file_quiesce(struct knem_file *kf)
{
	struct knem_dma_batch *b;
	struct dma_chan *chan = NULL;
	unsigned long flags;

	if (wait_event_timeout(kf->dma_wq, knem_dma_file_idle(kf),
			       KNEM_DMA_TIMEOUT))
		return;
	spin_lock_irqsave(&kf->dma_lock, flags);
	if (!list_empty(&kf->dma_batches))
		chan = list_first_entry(&kf->dma_batches, struct knem_dma_batch,
					node)->chan;
	spin_unlock_irqrestore(&kf->dma_lock, flags);
	if (chan)
		dmaengine_terminate_sync(chan);
	spin_lock_irqsave(&kf->dma_lock, flags);
	list_for_each_entry(b, &kf->dma_batches, node) {
		if (!b->complete) {
			b->failed = true;
			b->complete = true;
		}
	}
	knem_dma_report(kf);
	spin_unlock_irqrestore(&kf->dma_lock, flags);
	wait_event(kf->dma_wq, knem_dma_file_idle(kf));
}
