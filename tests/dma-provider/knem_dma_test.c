// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_dma_test.c - a software dmaengine provider, for tests only.
 *
 * Registers one DMA_MEMCPY channel on a platform device whose DMA mask is
 * set, so dma_map_page() on it goes through direct mapping: a dma_addr_t
 * is a physical address, which a kthread turns back into a kernel address
 * to copy.  This lets knem.ko's real dmaengine path run in a VM that has
 * no DMA hardware.  Never packaged.
 *
 *   delay_us=N     sleep N microseconds before each descriptor
 *   fail_every=N   every Nth descriptor is not copied and completes with
 *                  DMA_TRANS_ABORTED (0: never)
 *   stall=N        the next N descriptors are parked, uncompleted, while
 *                  the others keep running (an engine with one hung
 *                  queue); writing 0 runs the parked ones
 *   lifo=1         run the most recently issued descriptor first (an
 *                  engine whose order is not submission order)
 *
 * /sys/module/knem_dma_test/parameters/{done,failed} count descriptors,
 * stalled is how many are parked now.
 */
#include <linux/delay.h>
#include <linux/dma-mapping.h>
#include <linux/dmaengine.h>
#include <linux/io.h>
#include <linux/kthread.h>
#include <linux/list.h>
#include <linux/module.h>
#include <linux/platform_device.h>
#include <linux/slab.h>
#include <linux/spinlock.h>
#include <linux/wait.h>

#define KDP_NAME "knem-dma-test"

static uint delay_us;
module_param(delay_us, uint, 0644);
MODULE_PARM_DESC(delay_us, "latency added to each descriptor (us)");
static uint fail_every;
module_param(fail_every, uint, 0644);
MODULE_PARM_DESC(fail_every, "abort every Nth descriptor (0: never)");
static bool lifo;
module_param(lifo, bool, 0644);
MODULE_PARM_DESC(lifo, "run the last issued descriptor first");
static ulong stalled;
module_param(stalled, ulong, 0444);
MODULE_PARM_DESC(stalled, "descriptors parked by stall now");
static ulong done;
module_param(done, ulong, 0444);
MODULE_PARM_DESC(done, "descriptors completed");
static ulong failed;
module_param(failed, ulong, 0444);
MODULE_PARM_DESC(failed, "descriptors aborted by fail_every");

struct kdp_desc {
	struct dma_async_tx_descriptor tx;
	struct list_head node;
	dma_addr_t dst, src;
	size_t len;
};

struct kdp {
	struct dma_device dd;
	struct dma_chan chan;
	spinlock_t lock;                /* lists, cookies, busy */
	struct list_head submitted;     /* tx_submit()ed, not issued */
	struct list_head issued;        /* waiting for the thread */
	struct list_head parked;        /* taken by stall */
	unsigned int stall_left;        /* descriptors still to park */
	bool holding;                   /* parked ones stay parked */
	bool busy;                      /* the thread holds a descriptor */
	dma_cookie_t error_cookie;      /* last descriptor that failed */
	unsigned long seq;
	wait_queue_head_t wq;           /* thread: work; synchronize: idle */
	struct task_struct *thread;
	struct platform_device *pdev;
};

static struct kdp *kdp;

static int kdp_stall_set(const char *val, const struct kernel_param *kp)
{
	unsigned long flags;
	unsigned int n;
	int err;

	err = kstrtouint(val, 0, &n);
	if (err)
		return err;
	if (!kdp)
		return -ENODEV;
	spin_lock_irqsave(&kdp->lock, flags);
	kdp->stall_left = n;
	kdp->holding = n > 0;
	spin_unlock_irqrestore(&kdp->lock, flags);
	wake_up(&kdp->wq);
	return 0;
}

static int kdp_stall_get(char *buf, const struct kernel_param *kp)
{
	return sprintf(buf, "%u\n", kdp ? READ_ONCE(kdp->stall_left) : 0);
}

static const struct kernel_param_ops kdp_stall_ops = {
	.set = kdp_stall_set,
	.get = kdp_stall_get,
};
module_param_cb(stall, &kdp_stall_ops, NULL, 0644);
MODULE_PARM_DESC(stall, "park the next N descriptors; 0 runs the parked ones");

static struct kdp_desc *to_desc(struct dma_async_tx_descriptor *tx)
{
	return container_of(tx, struct kdp_desc, tx);
}

static dma_cookie_t kdp_tx_submit(struct dma_async_tx_descriptor *tx)
{
	struct kdp *k = kdp;
	struct dma_chan *c = tx->chan;
	unsigned long flags;
	dma_cookie_t cookie;

	spin_lock_irqsave(&k->lock, flags);
	cookie = c->cookie + 1;
	if (cookie < DMA_MIN_COOKIE)
		cookie = DMA_MIN_COOKIE;
	c->cookie = tx->cookie = cookie;
	list_add_tail(&to_desc(tx)->node, &k->submitted);
	spin_unlock_irqrestore(&k->lock, flags);
	return cookie;
}

static struct dma_async_tx_descriptor *
kdp_prep_memcpy(struct dma_chan *c, dma_addr_t dst, dma_addr_t src,
		size_t len, unsigned long flags)
{
	struct kdp_desc *d = kzalloc(sizeof(*d), GFP_NOWAIT);

	if (!d)
		return NULL;
	dma_async_tx_descriptor_init(&d->tx, c);
	d->tx.tx_submit = kdp_tx_submit;
	d->tx.flags = flags;
	d->dst = dst;
	d->src = src;
	d->len = len;
	return &d->tx;
}

static void kdp_issue_pending(struct dma_chan *c)
{
	struct kdp *k = kdp;
	unsigned long flags;

	spin_lock_irqsave(&k->lock, flags);
	list_splice_tail_init(&k->submitted, &k->issued);
	spin_unlock_irqrestore(&k->lock, flags);
	wake_up(&k->wq);
}

static enum dma_status kdp_tx_status(struct dma_chan *c, dma_cookie_t cookie,
				     struct dma_tx_state *state)
{
	struct kdp *k = kdp;
	dma_cookie_t last, used;
	unsigned long flags;
	enum dma_status st;

	spin_lock_irqsave(&k->lock, flags);
	last = c->completed_cookie;
	used = c->cookie;
	st = dma_async_is_complete(cookie, last, used);
	if (st == DMA_COMPLETE && cookie == k->error_cookie)
		st = DMA_ERROR;
	spin_unlock_irqrestore(&k->lock, flags);
	dma_set_tx_state(state, last, used, 0);
	return st;
}

/* Drops every descriptor not yet taken by the thread, without callbacks. */
static int kdp_terminate_all(struct dma_chan *c)
{
	struct kdp *k = kdp;
	struct kdp_desc *d, *n;
	unsigned long flags;
	LIST_HEAD(dead);

	spin_lock_irqsave(&k->lock, flags);
	list_splice_tail_init(&k->submitted, &dead);
	list_splice_tail_init(&k->issued, &dead);
	list_splice_tail_init(&k->parked, &dead);
	stalled = 0;
	spin_unlock_irqrestore(&k->lock, flags);
	list_for_each_entry_safe(d, n, &dead, node)
		kfree(d);
	return 0;
}

static bool kdp_idle(struct kdp *k)
{
	unsigned long flags;
	bool idle;

	spin_lock_irqsave(&k->lock, flags);
	idle = !k->busy;
	spin_unlock_irqrestore(&k->lock, flags);
	return idle;
}

/* After terminate_all: wait for the descriptor the thread may be running. */
static void kdp_synchronize(struct dma_chan *c)
{
	wait_event(kdp->wq, kdp_idle(kdp));
}

static int kdp_alloc_chan_resources(struct dma_chan *c)
{
	c->cookie = DMA_MIN_COOKIE;
	c->completed_cookie = DMA_MIN_COOKIE;
	return 1;
}

static void kdp_free_chan_resources(struct dma_chan *c)
{
	kdp_terminate_all(c);
	kdp_synchronize(c);
}

static struct kdp_desc *kdp_next(struct kdp *k)
{
	struct kdp_desc *d = NULL;
	unsigned long flags;

	spin_lock_irqsave(&k->lock, flags);
	if (!k->holding && !list_empty(&k->parked)) {
		list_splice_init(&k->parked, &k->issued);
		stalled = 0;
	}
	while (!list_empty(&k->issued)) {
		if (lifo)
			d = list_last_entry(&k->issued, struct kdp_desc, node);
		else
			d = list_first_entry(&k->issued, struct kdp_desc, node);
		list_del(&d->node);
		if (!k->stall_left) {
			k->busy = true;
			break;
		}
		k->stall_left--;
		list_add_tail(&d->node, &k->parked);
		stalled++;
		d = NULL;
	}
	spin_unlock_irqrestore(&k->lock, flags);
	return d;
}

static void kdp_run(struct kdp *k, struct kdp_desc *d)
{
	struct dmaengine_result res = { .result = DMA_TRANS_NOERROR };
	struct dma_async_tx_descriptor *tx = &d->tx;
	unsigned long flags;

	if (delay_us)
		fsleep(delay_us);
	if (fail_every && ++k->seq % fail_every == 0) {
		res.result = DMA_TRANS_ABORTED;
		res.residue = d->len;
		failed++;
	} else {
		/* Direct mapping: the bus address is the physical one. */
		memcpy(phys_to_virt(d->dst), phys_to_virt(d->src), d->len);
		done++;
	}
	spin_lock_irqsave(&k->lock, flags);
	tx->chan->completed_cookie = tx->cookie;
	if (res.result != DMA_TRANS_NOERROR)
		k->error_cookie = tx->cookie;
	spin_unlock_irqrestore(&k->lock, flags);

	if (tx->callback_result)
		tx->callback_result(tx->callback_param, &res);
	else if (tx->callback)
		tx->callback(tx->callback_param);
	kfree(d);

	spin_lock_irqsave(&k->lock, flags);
	k->busy = false;
	spin_unlock_irqrestore(&k->lock, flags);
	wake_up(&k->wq);
}

static bool kdp_has_work(struct kdp *k)
{
	unsigned long flags;
	bool any;

	spin_lock_irqsave(&k->lock, flags);
	any = !list_empty(&k->issued) ||
	      (!k->holding && !list_empty(&k->parked));
	spin_unlock_irqrestore(&k->lock, flags);
	return any;
}

static int kdp_thread(void *data)
{
	struct kdp *k = data;
	struct kdp_desc *d;

	while (!kthread_should_stop()) {
		wait_event_interruptible(k->wq, kdp_has_work(k) ||
					 kthread_should_stop());
		while ((d = kdp_next(k))) {
			kdp_run(k, d);
			cond_resched();
		}
	}
	return 0;
}

static void kdp_device_release(struct dma_device *dd)
{
}

static int kdp_probe(struct platform_device *pdev)
{
	struct dma_device *dd;
	int err;

	err = dma_coerce_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (err)
		return err;
	kdp->pdev = pdev;
	dd = &kdp->dd;
	dma_cap_zero(dd->cap_mask);
	dma_cap_set(DMA_MEMCPY, dd->cap_mask);
	/* Only for clients that ask for a channel, never the async_tx pool. */
	dma_cap_set(DMA_PRIVATE, dd->cap_mask);
	dd->dev = &pdev->dev;
	dd->device_alloc_chan_resources = kdp_alloc_chan_resources;
	dd->device_free_chan_resources = kdp_free_chan_resources;
	dd->device_prep_dma_memcpy = kdp_prep_memcpy;
	dd->device_issue_pending = kdp_issue_pending;
	dd->device_tx_status = kdp_tx_status;
	dd->device_terminate_all = kdp_terminate_all;
	dd->device_synchronize = kdp_synchronize;
	dd->device_release = kdp_device_release;
	INIT_LIST_HEAD(&dd->channels);
	kdp->chan.device = dd;
	list_add_tail(&kdp->chan.device_node, &dd->channels);
	return dma_async_device_register(dd);
}

static struct platform_driver kdp_driver = {
	.probe = kdp_probe,
	.driver = { .name = KDP_NAME },
};

static int __init kdp_init(void)
{
	struct platform_device *pdev;
	int err;

	kdp = kzalloc(sizeof(*kdp), GFP_KERNEL);
	if (!kdp)
		return -ENOMEM;
	spin_lock_init(&kdp->lock);
	INIT_LIST_HEAD(&kdp->submitted);
	INIT_LIST_HEAD(&kdp->issued);
	INIT_LIST_HEAD(&kdp->parked);
	init_waitqueue_head(&kdp->wq);
	kdp->thread = kthread_run(kdp_thread, kdp, "knem-dma-test");
	if (IS_ERR(kdp->thread)) {
		err = PTR_ERR(kdp->thread);
		goto free_kdp;
	}
	err = platform_driver_register(&kdp_driver);
	if (err)
		goto stop_thread;
	pdev = platform_device_register_simple(KDP_NAME, -1, NULL, 0);
	if (IS_ERR(pdev)) {
		err = PTR_ERR(pdev);
		goto unregister_driver;
	}
	if (!kdp->pdev) {       /* probe failed */
		platform_device_unregister(pdev);
		err = -ENODEV;
		goto unregister_driver;
	}
	pr_info(KDP_NAME ": software DMA_MEMCPY channel %s registered\n",
		dma_chan_name(&kdp->chan));
	return 0;

unregister_driver:
	platform_driver_unregister(&kdp_driver);
stop_thread:
	kthread_stop(kdp->thread);
free_kdp:
	kfree(kdp);
	return err;
}

static void __exit kdp_exit(void)
{
	/* A client holding the channel holds this module: none is left. */
	dma_async_device_unregister(&kdp->dd);
	platform_device_unregister(kdp->pdev);
	platform_driver_unregister(&kdp_driver);
	kthread_stop(kdp->thread);
	kfree(kdp);
}

module_init(kdp_init);
module_exit(kdp_exit);
MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("knem-rs test-only software DMA_MEMCPY provider");
