// SPDX-License-Identifier: GPL-2.0-only
/*
 * knem_owner.c - who pinned a region: the pinned_vm charge and the access
 * policy.
 *
 * Pinned pages are charged to the pinning user, as io_uring registered
 * buffers are: user->locked_vm against the pinner's RLIMIT_MEMLOCK, so a
 * process that exec()s or forks, or hands its fd to another, pins no more
 * than the limit in all (CAP_IPC_LOCK bypasses it, and such pins are not
 * charged to the user at all).  Before asking for the record, the core
 * counts them per level of the pinner's account (state/pins.rs, with
 * knem_shim_account() and the limit and exemption below), so that the uids
 * of one account, such as a subordinate range in a user namespace, share
 * the limit instead of pinning it once per kernel uid.  They are also
 * counted in the pinning process's mm->pinned_vm, as RDMA does, so VmPin
 * in /proc/PID/status shows them.  The record keeps the user (through a
 * reference to the pinner's credentials, which hold it: free_uid() is not
 * exported before 5.11) and the mm (mmgrab), so the same ones are
 * uncharged whoever drops the last reference: the offload thread, another
 * process's close, or a close after the owner exited.  It also keeps the process (a struct pid, which outlives its
 * task safely) for the ptrace access rule.
 *
 * The kernel exports neither ptrace_may_access() nor the LSM hook behind
 * it, so the ptrace rule is checked in two steps.  First the credential
 * rule of __ptrace_may_access() and the commoncap module, here, with the
 * caller's real ids as CMA does: same credentials and no capability the
 * caller lacks, or CAP_SYS_PTRACE over the owner.  Then the whole of
 * ptrace_may_access() - dumpability, Yama's scope and the other LSMs'
 * hooks - through the one exported path that runs it: opening the
 * /proc/TGID/task/TID/mem of a thread of the owner as the caller (see
 * knem_ptrace_may_attach()): the leader's, or another thread's while the
 * leader has exited alone and the rest run on.  Dumpability is left to
 * that open because where it lives is the kernel's business (the mm before
 * 7.2, the task's exec state since, behind unexported accessors); the open
 * is mandatory, so a kernel or namespace where it cannot run refuses
 * access.
 */
#include <linux/capability.h>
#include <linux/cred.h>
#include <linux/dcache.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <linux/moduleparam.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/rcupdate.h>
#include <linux/sched.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/sched/user.h>
#include <linux/slab.h>
#include <linux/string.h>
#include <linux/stringify.h>
#include <linux/sysfs.h>
#include <linux/uidgid.h>
#include <linux/user_namespace.h>

#include "knem_core.h"
#include "knem_shim.h"

/*
 * Off, the limit is not enforced (KNEM's old behaviour) but pinned_vm is
 * still charged, so VmPin in /proc/PID/status keeps telling the truth.
 */
static bool knem_account_pinned = true;
module_param_named(account_pinned, knem_account_pinned, bool, 0644);
MODULE_PARM_DESC(account_pinned,
		 "refuse pins over RLIMIT_MEMLOCK without CAP_IPC_LOCK (default 1)");

/*
 * One user could otherwise fill the whole table (2^20 regions; zero-length
 * ones cost no locked memory).  Over the limit CREATE_REGION is ENOMEM.
 */
static ulong knem_regions_per_user = KNEM_CORE_REGIONS_PER_USER_DEFAULT;
module_param_named(max_regions_per_user, knem_regions_per_user, ulong, 0644);
MODULE_PARM_DESC(max_regions_per_user,
		 "live regions one user may hold (default "
		 __stringify(KNEM_CORE_REGIONS_PER_USER_DEFAULT) ")");

u64 knem_shim_regions_per_user(void)
{
	return READ_ONCE(knem_regions_per_user);
}

static ulong knem_regions_max = KNEM_CORE_REGIONS_MAX_DEFAULT;
module_param_named(max_regions, knem_regions_max, ulong, 0644);
MODULE_PARM_DESC(max_regions,
		 "live regions on the node, all users together (default "
		 __stringify(KNEM_CORE_REGIONS_MAX_DEFAULT) ")");

u64 knem_shim_regions_max(void)
{
	return READ_ONCE(knem_regions_max);
}

/*
 * The keys the current task's new context, or its pins, are counted under
 * against the per-user bounds (knem_core_ctx_new(), knem_shim_account() in
 * knem_core.h), as the kernel's ucounts charge RLIMIT_NPROC: at each user
 * namespace level, from the task's own (its namespace, its real uid) up to
 * the initial namespace, the key of the level above being (the parent
 * namespace, the uid that created the child).  A key is the namespace's
 * inode number and the uid as the initial namespace sees it.  A
 * namespace's inode number is not reused while a process in it can open
 * the device, and a stale key only makes the bound stricter.  The core
 * gives a namespace that global root created a budget of its own instead
 * of root's (state/account.rs).  Returns the number of levels.
 */
u32 knem_shim_account(u64 *keys)
{
	const struct cred *cred = current_cred();
	struct user_namespace *ns = cred->user_ns;
	kuid_t uid = cred->uid;
	u32 n = 0;

	for (;;) {
		keys[n++] = (u64)ns->ns.inum << 32 |
			    from_kuid(&init_user_ns, uid);
		if (ns == &init_user_ns || !ns->parent ||
		    n == KNEM_CORE_ACCOUNT_LEVELS)
			return n;
		uid = ns->owner;
		ns = ns->parent;
	}
}

static int knem_access_policy = KNEM_CORE_ACCESS_UID;

static int knem_access_policy_set(const char *val,
				  const struct kernel_param *kp)
{
	if (sysfs_streq(val, "uid"))
		WRITE_ONCE(knem_access_policy, KNEM_CORE_ACCESS_UID);
	else if (sysfs_streq(val, "ptrace"))
		WRITE_ONCE(knem_access_policy, KNEM_CORE_ACCESS_PTRACE);
	else
		return -EINVAL;
	return 0;
}

static int knem_access_policy_get(char *buf, const struct kernel_param *kp)
{
	return sysfs_emit(buf, "%s\n",
			  READ_ONCE(knem_access_policy) ==
			  KNEM_CORE_ACCESS_PTRACE ? "ptrace" : "uid");
}

static const struct kernel_param_ops knem_access_policy_ops = {
	.set = knem_access_policy_set,
	.get = knem_access_policy_get,
};
module_param_cb(access_policy, &knem_access_policy_ops, NULL, 0644);
MODULE_PARM_DESC(access_policy,
		 "who may use another process's region: uid (KNEM, default) or ptrace (CMA)");

struct knem_owner {
	struct mm_struct *mm;   /* mmgrab()ed; pinned_vm counts our pages */
	const struct cred *cred;   /* its user is charged; or NULL: exempt */
	struct pid *tgid;       /* the pinning process */
	u64 pages;
};

/*
 * Charge pages to the current user's locked_vm; -EDQUOT over the
 * caller's RLIMIT_MEMLOCK unless exempt (o->cred stays NULL then), so
 * that the core can tell the limit from a failed allocation.
 */
static int knem_charge(struct knem_owner *o, u64 pages)
{
	struct user_struct *user = current_user();
	unsigned long limit = rlimit(RLIMIT_MEMLOCK) >> PAGE_SHIFT;
	unsigned long cur, next;

	if (!READ_ONCE(knem_account_pinned))
		return 0;
	cur = atomic_long_read(&user->locked_vm);
	do {
		if (pages > limit || cur > limit - pages)
			goto over;
		next = cur + pages;
	} while (!atomic_long_try_cmpxchg(&user->locked_vm, &cur, next));
	o->cred = get_current_cred();
	return 0;

over:
	/* Asked only past the limit, so exempt tasks are not audited more. */
	if (capable(CAP_IPC_LOCK))
		return 0;
	pr_info_ratelimited("knem: %s[%d]: pinning %llu more KiB exceeds RLIMIT_MEMLOCK (%lu KiB, %lu KiB pinned already by uid %u): raise memlock (ulimit -l, /etc/security/limits.d/) or load knem with account_pinned=0\n",
			    current->comm, task_tgid_vnr(current),
			    pages << (PAGE_SHIFT - 10), limit << (PAGE_SHIFT - 10),
			    cur << (PAGE_SHIFT - 10),
			    from_kuid(&init_user_ns, current_uid()));
	return -EDQUOT;
}

u64 knem_shim_memlock_limit(void)
{
	unsigned long limit = rlimit(RLIMIT_MEMLOCK);

	if (!READ_ONCE(knem_account_pinned) || limit == RLIM_INFINITY)
		return U64_MAX;
	return limit >> PAGE_SHIFT;
}

int knem_shim_memlock_over(u64 pages, u64 limit, u64 pinned)
{
	/* Asked only past the limit, so exempt tasks are not audited more. */
	if (capable(CAP_IPC_LOCK))
		return 1;
	pr_info_ratelimited("knem: %s[%d]: pinning %llu more KiB exceeds RLIMIT_MEMLOCK (%llu KiB, %llu KiB pinned already by uid %u's account): raise memlock (ulimit -l, /etc/security/limits.d/) or load knem with account_pinned=0\n",
			    current->comm, task_tgid_vnr(current),
			    pages << (PAGE_SHIFT - 10), limit << (PAGE_SHIFT - 10),
			    pinned << (PAGE_SHIFT - 10),
			    from_kuid(&init_user_ns, current_uid()));
	return 0;
}

int knem_shim_owner_new(u64 pages, void **owner)
{
	struct mm_struct *mm = current->mm;
	struct knem_owner *o;
	int err;

	knem_might_sleep();
	/* Only user tasks get here, but a kernel thread has no mm to charge. */
	if (!mm)
		return -EFAULT;
	/* Every region has one: charge it to the caller's memcg. */
	o = kzalloc(sizeof(*o), GFP_KERNEL_ACCOUNT);
	if (!o)
		return -ENOMEM;
	err = knem_charge(o, pages);
	if (err)
		goto free_owner;
	atomic64_add(pages, &mm->pinned_vm);
	mmgrab(mm);
	o->mm = mm;
	o->tgid = get_task_pid(current, PIDTYPE_TGID);
	o->pages = pages;
	*owner = o;
	return 0;

free_owner:
	kfree(o);
	return err;
}

void knem_shim_owner_put(void *owner)
{
	struct knem_owner *o = owner;

	if (o->cred) {
		atomic_long_sub(o->pages, &o->cred->user->locked_vm);
		put_cred(o->cred);
	}
	atomic64_sub(o->pages, &o->mm->pinned_vm);
	mmdrop(o->mm);
	put_pid(o->tgid);
	kfree(o);
}

int knem_shim_access_policy(void)
{
	return READ_ONCE(knem_access_policy);
}

/* Whether current's real credentials may ptrace-attach task (see the top). */
static bool knem_creds_may_attach(const struct cred *cred,
				  const struct cred *tcred)
{
	bool same_ids =
		uid_eq(cred->uid, tcred->euid) &&
		uid_eq(cred->uid, tcred->suid) &&
		uid_eq(cred->uid, tcred->uid) &&
		gid_eq(cred->gid, tcred->egid) &&
		gid_eq(cred->gid, tcred->sgid) &&
		gid_eq(cred->gid, tcred->gid);

	if (same_ids && cred->user_ns == tcred->user_ns &&
	    cap_issubset(tcred->cap_permitted, cred->cap_permitted))
		return true;
	return ns_capable(tcred->user_ns, CAP_SYS_PTRACE);
}

/*
 * Whether ptrace_may_access() lets current attach to task, a thread of the
 * owner that runs on mm the region pinned: a non-dumpable task only with
 * CAP_SYS_PTRACE over its mm's user namespace, then Yama and the other
 * LSMs.  Opening /proc/TGID/task/TID/mem runs it with
 * PTRACE_MODE_ATTACH_FSCREDS, every LSM hook included, as the opener.
 *
 * The open goes through the caller's /proc by the owner's numbers in the
 * caller's pid namespace, paths the caller controls; so the file must prove
 * it is the owner's: a procfs file named "mem" (not another per-process
 * file bind-mounted there, opened under a weaker ptrace mode) whose
 * private_data is the mm procfs resolved, which must be the owner's.  A
 * recycled pid, a /proc of another namespace, no /proc at all, or an owner
 * that has exec()ed since it pinned all fail closed.
 */
static bool knem_ptrace_may_attach(struct task_struct *task,
				struct mm_struct *mm)
{
	char path[sizeof("/proc/2147483647/task/2147483647/mem")];
	struct pid_namespace *ns = task_active_pid_ns(current);
	struct file *file;
	pid_t tgid, tid;
	bool ok;

	tgid = task_tgid_nr_ns(task, ns);
	tid = task_pid_nr_ns(task, ns);
	if (!tgid || !tid)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/mem", tgid, tid);
	file = filp_open(path, O_RDONLY | O_LARGEFILE, 0);
	if (IS_ERR(file)) {
		if (PTR_ERR(file) == -ENOENT)
			pr_info_ratelimited("knem: %s[%d]: access_policy=ptrace needs /proc mounted in the caller's namespace\n",
					    current->comm, task_tgid_vnr(current));
		return false;
	}
	ok = file_inode(file)->i_sb->s_magic == PROC_SUPER_MAGIC &&
	     strcmp(file->f_path.dentry->d_name.name, "mem") == 0 &&
	     file->private_data == mm;
	filp_close(file, NULL);
	return ok;
}

static bool knem_may_attach(struct task_struct *task,
			    struct mm_struct *owner_mm)
{
	const struct cred *tcred;
	bool ok;

	tcred = get_task_cred(task);
	ok = knem_creds_may_attach(current_cred(), tcred);
	put_cred(tcred);
	return ok && knem_ptrace_may_attach(task, owner_mm);
}

/*
 * The thread of leader's group that stands for the owner: the leader while
 * it runs, else any thread still on mm.  A leader that left with the raw
 * exit syscall is a zombie without an mm for as long as its other threads
 * live, and the process is no less alive for it.  The choice is only a
 * guess made without locks; the /proc open proves it.  NULL when no
 * thread is on mm any more.
 */
static struct task_struct *knem_owner_thread(struct task_struct *leader,
					     struct mm_struct *mm)
{
	struct task_struct *t, *found = NULL;

	rcu_read_lock();
	for_each_thread(leader, t) {
		if (READ_ONCE(t->mm) == mm &&
		    !(READ_ONCE(t->flags) & PF_EXITING)) {
			found = get_task_struct(t);
			break;
		}
	}
	rcu_read_unlock();
	return found;
}

int knem_shim_may_access(void *owner)
{
	struct knem_owner *o = owner;
	struct task_struct *leader, *task;
	bool ok = false;

	/* A process that is gone cannot consent: EPERM, as CMA's ESRCH. */
	leader = get_pid_task(o->tgid, PIDTYPE_TGID);
	if (!leader)
		return 0;
	if (same_thread_group(leader, current)) {
		ok = true;
		goto put_leader;
	}
	task = knem_owner_thread(leader, o->mm);
	if (task) {
		ok = knem_may_attach(task, o->mm);
		put_task_struct(task);
	}
put_leader:
	put_task_struct(leader);
	return ok;
}
