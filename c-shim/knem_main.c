// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_main.c - the /dev/knem misc device and its file operations.
 *
 * An O_RDWR (or O_WRONLY) open gets a core context owned by the opener's
 * real uid; every ioctl goes to the core with the caller's real uid at
 * that moment (KNEM's access rule is evaluated at each call), and read()/poll() deliver
 * the NOTIFY_FD notifications of its asynchronous copies (knem_offload.c).
 * The context serves the process that opened it: a forked child (or a
 * process the fd was passed to) gets EBADF from ioctl(), mmap() and read(),
 * so it can neither destroy, nor copy into, nor drain the notifications of
 * the opener's regions; its close does nothing while the opener keeps the
 * file.  It opens /dev/knem itself to use KNEM.  A region the access
 * policy refuses (EPERM) is logged, one ratelimited line.
 * An O_RDONLY open gets no
 * context: ioctl() and mmap() fail with EBADF, and read() returns a
 * snapshot of the statistics taken at open, which is what `cat /dev/knem`
 * has always shown administrators.
 */
#include <linux/compat.h>
#include <linux/cred.h>
#include <linux/fs.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/moduleparam.h>
#include <linux/mutex.h>
#include <linux/pid.h>
#include <linux/poll.h>
#include <linux/printk.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/sysfs.h>
#include <linux/uidgid.h>

#include "knem_io.h"
#include "knem_core.h"
#include "knem_shim.h"

/*
 * The real uid of the current task, as KNEM uses it: region owners and
 * callers compare in the initial user namespace, so that they compare
 * equal across user namespaces.
 */
static u32 knem_caller_uid(void)
{
	return from_kuid(&init_user_ns, current_uid());
}

static int knem_open(struct inode *inode, struct file *file)
{
	struct knem_file *kf;
	int err;

	kf = kzalloc(sizeof(*kf), GFP_KERNEL_ACCOUNT);
	if (!kf)
		return -ENOMEM;
	mutex_init(&kf->status_lock);
	knem_dma_file_init(kf);
	err = knem_offload_init(kf);
	if (err)
		goto free_file;

	if ((file->f_flags & O_ACCMODE) == O_RDONLY) {
		kf->stats_text = knem_stats_text(&kf->stats_len);
		if (!kf->stats_text) {
			err = -ENOMEM;
			goto free_file;
		}
	} else {
		u64 account[KNEM_CORE_ACCOUNT_LEVELS];

		kf->ctx = knem_core_ctx_new(knem_caller_uid(), account,
					    knem_shim_account(account), kf);
		if (!kf->ctx) {
			err = -ENOMEM;
			goto free_file;
		}
		kf->opener = get_pid(task_tgid(current));
	}

	file->private_data = kf;
	return 0;

free_file:
	knem_offload_free(kf);
	kfree(kf);
	return err;
}

static int knem_release(struct inode *inode, struct file *file)
{
	struct knem_file *kf = file->private_data;

	/*
	 * The thread finishes the request it is running, then the core drops
	 * the queued ones; it may write the status array until it returns.
	 */
	knem_offload_stop(kf);
	/* ASYNCDMACOMPLETE requests write the array and hold references. */
	knem_dma_file_quiesce(kf);
	if (kf->ctx)
		knem_core_ctx_release(kf->ctx);
	knem_status_put(kf->status);
	knem_offload_free(kf);
	put_pid(kf->opener);
	kfree(kf->stats_text);
	kfree(kf);
	return 0;
}

/* The context of an O_RDWR file, for its opener only (see the top). */
static struct knem_core_ctx *knem_file_ctx(struct knem_file *kf)
{
	if (!kf->ctx || task_tgid(current) != kf->opener)
		return NULL;
	return kf->ctx;
}

static ssize_t knem_read(struct file *file, char __user *buf, size_t count,
			 loff_t *ppos)
{
	struct knem_file *kf = file->private_data;

	if (knem_file_ctx(kf))
		return knem_notify_read(kf, file, buf, count);
	if (kf->ctx)
		return -EBADF;
	return simple_read_from_buffer(buf, count, ppos, kf->stats_text,
				       kf->stats_len);
}

static __poll_t knem_poll(struct file *file, poll_table *wait)
{
	struct knem_file *kf = file->private_data;

	if (!kf->ctx)
		return DEFAULT_POLLMASK;
	poll_wait(file, &kf->notify_wq, wait);
	return knem_core_ctx_notify_ready(kf->ctx) ? EPOLLIN | EPOLLRDNORM : 0;
}

static long knem_ioctl(struct file *file, unsigned int cmd,
		       unsigned long arg)
{
	struct knem_file *kf = file->private_data;
	struct knem_core_ctx *ctx = knem_file_ctx(kf);
	long ret;

	if (!ctx)
		return -EBADF;
	ret = knem_core_ioctl(ctx, cmd, arg, knem_caller_uid());
	/*
	 * The core answers EPERM only when the access policy refuses a region
	 * (another user's, or a process the caller may not ptrace): in a
	 * container that is most often a setup mistake, and nothing else
	 * would say so.
	 */
	if (ret == -EPERM)
		pr_info_ratelimited("knem: %s[%d]: uid %u: region refused by access_policy=%s\n",
				    current->comm, task_tgid_vnr(current),
				    knem_caller_uid(),
				    knem_shim_access_policy() ==
				    KNEM_CORE_ACCESS_PTRACE ? "ptrace" : "uid");
	return ret;
}

static int knem_mmap(struct file *file, struct vm_area_struct *vma)
{
	struct knem_file *kf = file->private_data;
	int err;

	if (!knem_file_ctx(kf))
		return -EBADF;

	mutex_lock(&kf->status_lock);
	err = knem_core_ctx_status_mmap_check(kf->ctx, vma->vm_pgoff,
					      vma->vm_end - vma->vm_start,
					      !!(vma->vm_flags & VM_MAYSHARE));
	if (!err)
		err = knem_status_mmap(kf->ctx, &kf->status, vma);
	mutex_unlock(&kf->status_lock);
	return err;
}

/*
 * Who may open the device and read the counters, as
 * /etc/knem-rs/device.conf's KNEM_RS_ACCESS says: "all" (0666 and 0444,
 * KNEM's own modes) or "group" (0660 and 0440).  The udev rule
 * 60-knem.rules gives the node and the counters the group knem when it
 * runs; the packaged modprobe.d file passes the parameter from the same
 * file at every load, so that in group mode they are created with the
 * final modes (group root until udev runs: nobody but root can open them
 * meanwhile), never open to everyone between insmod and udev.  Read at
 * load only: the node and the files exist from then on.
 */
bool knem_device_group;

static int knem_device_access_set(const char *val,
				  const struct kernel_param *kp)
{
	if (sysfs_streq(val, "all"))
		knem_device_group = false;
	else if (sysfs_streq(val, "group"))
		knem_device_group = true;
	else
		return -EINVAL;
	return 0;
}

static int knem_device_access_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n", knem_device_group ? "group" : "all");
}

static const struct kernel_param_ops knem_device_access_ops = {
	.set = knem_device_access_set,
	.get = knem_device_access_get,
};
module_param_cb(device_access, &knem_device_access_ops, NULL, 0444);
MODULE_PARM_DESC(device_access,
		 "who may open /dev/knem and read the counters: all (0666, 0444, default) or group (0660, 0440), as /etc/knem-rs/device.conf's KNEM_RS_ACCESS");

static const struct file_operations knem_fops = {
	.owner = THIS_MODULE,   /* pins the module while a file is open */
	.open = knem_open,
	.release = knem_release,
	.read = knem_read,
	.poll = knem_poll,
	.llseek = default_llseek,
	.unlocked_ioctl = knem_ioctl,
	/*
	 * Every argument struct has the same layout for 32-bit callers (all
	 * u64 fields are naturally aligned by explicit padding), so only the
	 * pointer needs converting.
	 */
	.compat_ioctl = compat_ptr_ioctl,
	.mmap = knem_mmap,
};

static struct miscdevice knem_misc = {
	.minor = MISC_DYNAMIC_MINOR,
	.name = KNEM_DEVICE_NAME,
	.fops = &knem_fops,
	.mode = 0666,
	.groups = knem_stats_groups,
};

static int __init knem_init(void)
{
	int err;

	err = knem_stats_init();
	if (err)
		return err;

	err = knem_core_init();
	if (err)
		goto exit_stats;

	knem_misc.mode = knem_device_group ? 0660 : 0666;
	err = misc_register(&knem_misc);
	if (err)
		goto exit_core;

	return 0;

exit_core:
	knem_core_exit();
exit_stats:
	knem_stats_exit();
	return err;
}

static void __exit knem_exit(void)
{
	misc_deregister(&knem_misc);
	knem_dma_exit();
	/*
	 * No file is open (the module could not be unloading otherwise), but
	 * regions they destroyed may still wait for a grace period: let those
	 * callbacks run before the table they point into goes, and again
	 * after, for anything the core's teardown queued itself.
	 */
	rcu_barrier();
	knem_core_exit();
	rcu_barrier();
	knem_stats_exit();
}

module_init(knem_init);
module_exit(knem_exit);

MODULE_DESCRIPTION("knem-rs: single-copy intra-node transfers, KNEM ABI 0x0d");
MODULE_VERSION(KNEM_VERSION);
MODULE_LICENSE("GPL");
