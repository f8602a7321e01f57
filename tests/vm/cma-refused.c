// SPDX-License-Identifier: GPL-2.0-only
/*
 * cma-refused.c - knem works where the kernel refuses cross-memory attach
 * (process_vm_readv), in the setups users meet in containers; run as root
 * in the VM (tests/vm/containers.sh).  In each setup an owner process
 * declares a region over 32 KiB and a sibling reader, with its own
 * /dev/knem fd, reads it both ways: process_vm_readv on the owner's
 * address, and KNEM_CMD_INLINE_COPY on the owner's cookie.  Both copies
 * are checked byte for byte.
 *
 *   none      control: ptrace_scope 0, one uid; both work (so the refusals
 *             below come from the setup, not from the probe)
 *   seccomp   the reader under a seccomp filter that fails
 *             process_vm_readv/writev with EPERM, as Docker's default
 *             profile does without CAP_SYS_PTRACE: CMA EPERM, knem works
 *   yama1     ptrace_scope 1 (the reader is no ancestor): CMA EPERM, knem works
 *   yama2     ptrace_scope 2, a reader without CAP_SYS_PTRACE: likewise
 *   pidns     ptrace_scope 0, the reader in a pid namespace of its own,
 *             made without privilege (with a user namespace): the owner's
 *             pid names nothing there, CMA ESRCH; knem needs no pid, works
 *   users     ptrace_scope 0, owner and reader of different uids: CMA
 *             EPERM, and knem refuses too (EPERM): users stay apart
 *   yama3     ptrace_scope 3 (no attach at all, and it cannot be undone:
 *             last): CMA EPERM, knem works
 *
 * Prints one line per setup and "N passed, N failed" last.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "knem_io.h"

#define LEN (32UL << 10)
#define YAMA "/proc/sys/kernel/yama/ptrace_scope"

struct offer {
	pid_t pid;
	uint64_t addr;
	knem_cookie_t cookie;
	int err;                /* errno of the owner's open or CREATE_REGION */
};

/* What the reader saw: 0 or the errno of each way. */
struct outcome {
	int cma;
	int knem;
};

static int passed, failed;

static void fill(unsigned char *p)
{
	size_t i;

	for (i = 0; i < LEN; i++)
		p[i] = (unsigned char)(i * 13 + (i >> 9) + 1);
}

static int verify(const unsigned char *p)
{
	unsigned char want[LEN];

	fill(want);
	return memcmp(p, want, LEN) == 0 ? 0 : EILSEQ;
}

static int become(uid_t uid)
{
	if (uid == 0)
		return 0;
	if (setresgid(uid, uid, uid) || setgroups(0, NULL) || setresuid(uid, uid, uid))
		return -1;
	/*
	 * Changing uid cleared the dumpable flag, which alone refuses any
	 * ptrace access (CMA included): set it back, as a process the user
	 * started has it.
	 */
	return prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}

static int set_yama(int scope)
{
	FILE *f = fopen(YAMA, "w");

	if (!f)
		return -1;
	fprintf(f, "%d\n", scope);
	return fclose(f);
}

/* process_vm_readv/writev fail with EPERM, everything else is allowed. */
static int deny_cma(void)
{
	struct sock_filter filter[] = {
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 2, 0),
		BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_writev, 1, 0),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
		BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | EPERM),
	};
	struct sock_fprog prog = { .len = sizeof(filter) / sizeof(filter[0]), .filter = filter };

	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog);
}

/* The owner: declare the region, offer it, wait until the reader is done. */
static void owner(uid_t uid, int offer_fd, int done_fd)
{
	static unsigned char src[LEN] __attribute__((aligned(4096)));
	struct knem_cmd_param_iovec iov = { (uintptr_t)src, LEN };
	struct knem_cmd_create_region r;
	struct offer o = { getpid(), (uintptr_t)src, 0, 0 };
	char c;
	int fd;

	fill(src);
	if (become(uid)) {
		o.err = errno;
	} else if ((fd = open(KNEM_DEVICE_FILENAME, O_RDWR)) < 0) {
		o.err = errno;
	} else {
		memset(&r, 0, sizeof(r));
		r.iovec_array = (uintptr_t)&iov;
		r.iovec_nr = 1;
		r.protection = PROT_READ;
		if (ioctl(fd, KNEM_CMD_CREATE_REGION, &r) < 0)
			o.err = errno;
		o.cookie = r.cookie;
	}
	if (write(offer_fd, &o, sizeof(o)) != sizeof(o))
		_exit(1);
	(void)!read(done_fd, &c, 1);
	_exit(0);
}

/* The reader: both ways, the outcome to the parent. */
static void reader(uid_t uid, int seccomp, int ns, int offer_fd, int out_fd)
{
	static unsigned char dst[LEN];
	struct outcome res = { 0, 0 };
	struct knem_cmd_param_iovec kiov = { (uintptr_t)dst, LEN };
	struct knem_cmd_inline_copy copy;
	struct iovec local = { dst, LEN }, remote;
	struct offer o;
	int fd;

	if (read(offer_fd, &o, sizeof(o)) != sizeof(o) || o.err) {
		res.cma = res.knem = o.err ? o.err : EPIPE;
		goto out;
	}
	if (become(uid) || (seccomp && deny_cma()) || (ns && unshare(ns))) {
		res.cma = res.knem = errno;
		goto out;
	}
	/* A new pid namespace holds the children made after unshare(). */
	if (ns & CLONE_NEWPID) {
		pid_t child = fork();

		if (child < 0) {
			res.cma = res.knem = errno;
			goto out;
		}
		if (child > 0) {
			waitpid(child, NULL, 0);
			_exit(0);
		}
	}
	remote.iov_base = (void *)(uintptr_t)o.addr;
	remote.iov_len = LEN;
	memset(dst, 0, LEN);
	if (process_vm_readv(o.pid, &local, 1, &remote, 1, 0) != (ssize_t)LEN)
		res.cma = errno ? errno : EIO;
	else
		res.cma = verify(dst);

	memset(dst, 0, LEN);
	fd = open(KNEM_DEVICE_FILENAME, O_RDWR);
	if (fd < 0) {
		res.knem = errno;
		goto out;
	}
	memset(&copy, 0, sizeof(copy));
	copy.local_iovec_array = (uintptr_t)&kiov;
	copy.local_iovec_nr = 1;
	copy.remote_cookie = o.cookie;
	if (ioctl(fd, KNEM_CMD_INLINE_COPY, &copy) < 0)
		res.knem = errno;
	else if (copy.current_status != KNEM_STATUS_SUCCESS)
		res.knem = EIO;
	else
		res.knem = verify(dst);
out:
	if (write(out_fd, &res, sizeof(res)) != sizeof(res))
		_exit(1);
	_exit(0);
}

static const char *name_of(int err)
{
	static char buf[32];

	if (err == 0)
		return "ok, bytes verified";
	if (err == EPERM)
		return "EPERM";
	if (err == EACCES)
		return "EACCES";
	if (err == ESRCH)
		return "ESRCH";
	snprintf(buf, sizeof(buf), "errno %d", err);
	return buf;
}

static void setup(const char *what, int scope, int seccomp, int ns, uid_t owner_uid,
		  uid_t reader_uid, int want_cma, int want_knem)
{
	int offer[2], done[2], out[2];
	struct outcome res = { -1, -1 };
	pid_t a, b;

	if (set_yama(scope)) {
		printf("FAIL %s: cannot set %s to %d: %s\n", what, YAMA, scope, strerror(errno));
		failed++;
		return;
	}
	if (pipe(offer) || pipe(done) || pipe(out)) {
		perror("pipe");
		exit(1);
	}
	a = fork();
	if (a == 0)
		owner(owner_uid, offer[1], done[0]);
	b = fork();
	if (b == 0)
		reader(reader_uid, seccomp, ns, offer[0], out[1]);
	if (read(out[0], &res, sizeof(res)) != sizeof(res))
		res.cma = res.knem = EPIPE;
	(void)!write(done[1], "x", 1);
	waitpid(a, NULL, 0);
	waitpid(b, NULL, 0);
	close(offer[0]), close(offer[1]), close(done[0]), close(done[1]), close(out[0]), close(out[1]);

	if (res.cma == want_cma && res.knem == want_knem) {
		printf("ok   %s: CMA %s, knem %s\n", what, name_of(res.cma), name_of(res.knem));
		passed++;
	} else {
		printf("FAIL %s: CMA %s", what, name_of(res.cma));
		printf(" (want %s), knem %s", name_of(want_cma), name_of(res.knem));
		printf(" (want %s)\n", name_of(want_knem));
		failed++;
	}
	fflush(stdout);
}

int main(void)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	setup("none (control: ptrace_scope 0, one uid)", 0, 0, 0, 65001, 65001, 0, 0);
	setup("seccomp (process_vm_readv/writev -> EPERM, as Docker's default profile)", 0, 1, 0,
	      65001, 65001, EPERM, 0);
	setup("pid namespace of the reader's own, unprivileged (with a user namespace)", 0, 0,
	      CLONE_NEWUSER | CLONE_NEWPID, 65001, 65001, ESRCH, 0);
	setup("yama ptrace_scope 1 (reader is not an ancestor)", 1, 0, 0, 65001, 65001, EPERM, 0);
	setup("yama ptrace_scope 2 (reader without CAP_SYS_PTRACE)", 2, 0, 0, 65001, 65001, EPERM, 0);
	setup("users apart (uid 65001's region, uid 65002 reads)", 0, 0, 0, 65001, 65002, EPERM,
	      EPERM);
	/* Sticky: nothing can lower it again, so last. */
	setup("yama ptrace_scope 3 (no attach at all)", 3, 0, 0, 65001, 65001, EPERM, 0);
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
