// SPDX-License-Identifier: GPL-2.0-only
/*
 * cma-refused.c - knem works where the kernel refuses cross-memory attach
 * (process_vm_readv), in the setups users meet in containers; run as root
 * in the VM (tests/vm/check-shim, last).  In each setup an owner process
 * declares a region over 32 KiB and a sibling reader, with its own
 * /dev/knem fd, reads it both ways: process_vm_readv on the owner's
 * address, and KNEM_CMD_INLINE_COPY on the owner's cookie.  Both copies
 * are checked byte for byte.  In the container setups (cma-containers.c)
 * owner and reader both run inside, and a process of another user outside
 * every namespace tries the cookie too: users stay apart.
 *
 *   none      control: ptrace_scope 0, one uid; both work (so the refusals
 *             below come from the setup, not from the probe)
 *   seccomp   the reader under a seccomp filter that fails
 *             process_vm_readv/writev with EPERM, as Docker's default
 *             profile does without CAP_SYS_PTRACE: CMA EPERM, knem works
 *   pidns     ptrace_scope 0, the reader in a pid namespace of its own,
 *             made without privilege (with a user namespace): the owner's
 *             pid names nothing there, CMA ESRCH; knem needs no pid, works
 *   pidns+proc, pidns-proc   both in one pid namespace, with its own /proc
 *             and with the host's: CMA works (the pids are the
 *             namespace's); knem works under access_policy=uid either way,
 *             and under access_policy=ptrace only with the namespace's own
 *             /proc (the check opens /proc/PID/task/TID/mem, which the
 *             host's /proc resolves to another process: refused, EPERM)
 *   dev       a private tmpfs /dev holding only /dev/knem, bind-mounted, the
 *             reader under Docker's seccomp refusal: CMA EPERM, knem
 *             works; with the host's node at 0600, the same node refuses
 *             the user (EACCES): its permissions hold
 *   apptainer an unprivileged user's user + mount namespace, a minimal
 *             root with /dev/knem bind-mounted, no capabilities,
 *             no_new_privs: at ptrace_scope 1 CMA EPERM, knem works; the
 *             same uid outside reaches the region (KNEM compares uids in
 *             the initial user namespace), another uid does not (EPERM)
 *   yama1     ptrace_scope 1 (the reader is no ancestor): CMA EPERM, knem works
 *   yama2     ptrace_scope 2, a reader without CAP_SYS_PTRACE: likewise
 *   users     ptrace_scope 0, owner and reader of different uids: CMA
 *             EPERM, and knem refuses too (EPERM): users stay apart
 *   yama3     ptrace_scope 3 (no attach at all, and it cannot be undone:
 *             last): CMA EPERM, knem works
 *
 * First of all, the module's one log line for a refused region: uid
 * 65002 tries uid 65001's region 100 times; each is EPERM and the kernel
 * log gets at least one and at most the ratelimit's burst (10) per window
 * of the ratelimit (5 s) of the shim's line for them.
 *
 * Prints one line per setup and "N passed, N failed" last.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "knem_io.h"
#include "cma-containers.h"

#define LEN (32UL << 10)
#define YAMA "/proc/sys/kernel/yama/ptrace_scope"
#define POLICY "/sys/module/knem/parameters/access_policy"

/* The shim's line for a refused region (c-shim/knem_main.c). */
#define REFUSAL_LINE "region refused by access_policy="
/* pr_info_ratelimited(): DEFAULT_RATELIMIT_INTERVAL and _BURST. */
#define RATELIMIT_SECONDS 5
#define RATELIMIT_BURST 10
#define STORM 100

struct offer {
	pid_t pid;
	uint64_t addr;
	knem_cookie_t cookie;
	int err;                /* errno of the owner's open or CREATE_REGION */
};

/* What the readers saw: 0 or the errno of each way. */
struct outcome {
	int cma;
	int knem;
	int outsider;           /* knem, for the process outside */
};

/* One setup and what the kernel's and KNEM's rules make of it. */
struct scene {
	const char *what;
	int scope;              /* Yama's ptrace_scope */
	const char *policy;     /* knem's access_policy (NULL: uid) */
	int seccomp;            /* the reader fails CMA as Docker's profile does */
	int ns;                 /* namespaces the reader unshares alone */
	int (*enter)(void);     /* the container owner and reader share, or NULL */
	uid_t owner_uid, reader_uid;   /* 0: as they are in the container */
	uid_t outsider_uid;     /* a reader of this uid outside (0: none) */
	mode_t node_mode;       /* the host's /dev/knem meanwhile (0: as is) */
	int want_cma, want_knem, want_outsider;
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

static int write_setting(const char *path, const char *value)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fprintf(f, "%s\n", value);
	return fclose(f);
}

static int set_yama(int scope)
{
	char v[16];

	snprintf(v, sizeof(v), "%d", scope);
	return write_setting(YAMA, v);
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

/*
 * The owner: declare the region, offer it to the reader (and to the
 * outsider, when outsider_fd >= 0), wait until the parent says done.
 */
static void owner(uid_t uid, int offer_fd, int outsider_fd, int done_fd)
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
	if (outsider_fd >= 0 && write(outsider_fd, &o, sizeof(o)) != sizeof(o))
		_exit(1);
	(void)!read(done_fd, &c, 1);
	_exit(0);
}

/* Reads the region through a /dev/knem fd of the caller's: 0 or an errno. */
static int knem_read(knem_cookie_t cookie, unsigned char *dst)
{
	struct knem_cmd_param_iovec kiov = { (uintptr_t)dst, LEN };
	struct knem_cmd_inline_copy copy;
	int fd, err;

	memset(dst, 0, LEN);
	fd = open(KNEM_DEVICE_FILENAME, O_RDWR);
	if (fd < 0)
		return errno;
	memset(&copy, 0, sizeof(copy));
	copy.local_iovec_array = (uintptr_t)&kiov;
	copy.local_iovec_nr = 1;
	copy.remote_cookie = cookie;
	if (ioctl(fd, KNEM_CMD_INLINE_COPY, &copy) < 0)
		err = errno;
	else if (copy.current_status != KNEM_STATUS_SUCCESS)
		err = EIO;
	else
		err = verify(dst);
	close(fd);
	return err;
}

/*
 * The reader: both ways, the outcome to the parent.  When the owner has
 * no region (its open failed), CMA is still tried and knem gets the
 * owner's errno.
 */
static void reader(uid_t uid, int seccomp, int ns, int offer_fd, int out_fd)
{
	static unsigned char dst[LEN];
	struct outcome res = { 0, 0, 0 };
	struct iovec local = { dst, LEN }, remote;
	struct offer o;

	if (read(offer_fd, &o, sizeof(o)) != sizeof(o)) {
		res.cma = res.knem = EPIPE;
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
	res.knem = o.err ? o.err : knem_read(o.cookie, dst);
out:
	if (write(out_fd, &res, sizeof(res)) != sizeof(res))
		_exit(1);
	_exit(0);
}

/* Another user outside every namespace, handed the cookie: knem only. */
static void outsider(uid_t uid, int offer_fd, int out_fd)
{
	static unsigned char dst[LEN];
	struct offer o;
	int err;

	if (read(offer_fd, &o, sizeof(o)) != sizeof(o))
		err = EPIPE;
	else if (o.err)
		err = o.err;
	else if (become(uid))
		err = errno;
	else
		err = knem_read(o.cookie, dst);
	if (write(out_fd, &err, sizeof(err)) != sizeof(err))
		_exit(1);
	_exit(0);
}

/* The container's first process: enter it, then start owner and reader. */
static void pod(const struct scene *sc, int offer[2], int outsider_fd, int done_fd, int out_fd)
{
	struct outcome res;
	pid_t a, b;

	if (sc->enter()) {
		res.cma = res.knem = errno;
		res.outsider = 0;
		(void)!write(out_fd, &res, sizeof(res));
		_exit(1);
	}
	a = fork();
	if (a == 0) {
		close(out_fd);
		owner(sc->owner_uid, offer[1], outsider_fd, done_fd);
	}
	b = fork();
	if (b == 0) {
		close(offer[1]);
		if (outsider_fd >= 0)
			close(outsider_fd);
		reader(sc->reader_uid, sc->seccomp, sc->ns, offer[0], out_fd);
	}
	close(out_fd), close(offer[1]);
	if (outsider_fd >= 0)
		close(outsider_fd);
	waitpid(a, NULL, 0);
	waitpid(b, NULL, 0);
	_exit(0);
}

static const char *name_of(int err)
{
	static char buf[4][32];
	static int next;
	char *b = buf[next++ % 4];

	if (err == 0)
		return "ok, bytes verified";
	if (err == EPERM)
		return "EPERM";
	if (err == EACCES)
		return "EACCES";
	if (err == ESRCH)
		return "ESRCH";
	snprintf(b, sizeof(buf[0]), "errno %d (%s)", err, strerror(err));
	return b;
}

static void close_pair(int p[2])
{
	close(p[0]);
	close(p[1]);
}

/* Runs one scene: setup, processes, outcome, the line. */
static void run(const struct scene *sc)
{
	int offer[2], offer_out[2], done[2], out[2], out_out[2];
	struct outcome res = { -1, -1, 0 };
	struct stat node;
	pid_t a, b = -1, c = -1;

	if (set_yama(sc->scope) || write_setting(POLICY, sc->policy ? sc->policy : "uid") ||
	    stat(KNEM_DEVICE_FILENAME, &node) ||
	    (sc->node_mode && chmod(KNEM_DEVICE_FILENAME, sc->node_mode))) {
		printf("FAIL %s: cannot set the scene up: %s\n", sc->what, strerror(errno));
		failed++;
		return;
	}
	if (pipe(offer) || pipe(offer_out) || pipe(done) || pipe(out) || pipe(out_out)) {
		perror("pipe");
		exit(1);
	}
	/*
	 * Each pipe's write end is held by its writers alone (the owner, who
	 * waits for done, holds no result pipe's), so a process that dies or
	 * never starts without a word reads as EOF, not as a hang.
	 */
	if (sc->enter) {
		a = fork();
		if (a == 0) {
			close(out_out[1]);
			pod(sc, offer, sc->outsider_uid ? offer_out[1] : -1, done[0], out[1]);
		}
	} else {
		a = fork();
		if (a == 0) {
			close(out[1]), close(out_out[1]);
			owner(sc->owner_uid, offer[1], sc->outsider_uid ? offer_out[1] : -1, done[0]);
		}
		b = fork();
		if (b == 0) {
			close(out_out[1]), close(offer[1]), close(offer_out[1]);
			reader(sc->reader_uid, sc->seccomp, sc->ns, offer[0], out[1]);
		}
	}
	if (sc->outsider_uid) {
		c = fork();
		if (c == 0) {
			close(out[1]), close(offer[1]), close(offer_out[1]);
			outsider(sc->outsider_uid, offer_out[0], out_out[1]);
		}
	}
	close_pair(offer);
	close(offer_out[0]), close(offer_out[1]), close(out[1]), close(out_out[1]), close(done[0]);
	if (read(out[0], &res, 2 * sizeof(int)) != 2 * sizeof(int))
		res.cma = res.knem = EPIPE;
	if (sc->outsider_uid && read(out_out[0], &res.outsider, sizeof(int)) != sizeof(int))
		res.outsider = EPIPE;
	(void)!write(done[1], "x", 1);
	waitpid(a, NULL, 0);
	if (b > 0)
		waitpid(b, NULL, 0);
	if (c > 0)
		waitpid(c, NULL, 0);
	close(out[0]), close(out_out[0]), close(done[1]);
	if (sc->node_mode)
		chmod(KNEM_DEVICE_FILENAME, node.st_mode & 07777);

	if (res.cma == sc->want_cma && res.knem == sc->want_knem &&
	    (!sc->outsider_uid || res.outsider == sc->want_outsider)) {
		printf("ok   %s: CMA %s, knem %s", sc->what, name_of(res.cma), name_of(res.knem));
		if (sc->outsider_uid)
			printf(", uid %u outside: knem %s", sc->outsider_uid, name_of(res.outsider));
		printf("\n");
		passed++;
	} else {
		printf("FAIL %s: CMA %s (want %s), knem %s (want %s)", sc->what, name_of(res.cma),
		       name_of(sc->want_cma), name_of(res.knem), name_of(sc->want_knem));
		if (sc->outsider_uid)
			printf(", uid %u outside: knem %s (want %s)", sc->outsider_uid,
			       name_of(res.outsider), name_of(sc->want_outsider));
		printf("\n");
		failed++;
	}
	fflush(stdout);
}

/* ---- the refusal's log line ---------------------------------------------- */

/* Writes a mark into the kernel log (info level: not a warning). */
static int kmsg_mark(int fd, const char *mark)
{
	char line[128];
	int n = snprintf(line, sizeof(line), "<6>%s\n", mark);

	return write(fd, line, n) == n ? 0 : -1;
}

/*
 * Reads the log from fd's position up to the record holding mark: how
 * many records of the refusal line came before it, the times of the first
 * and last ones (0 if none) and the mark's, in microseconds of the log's
 * clock.
 */
static int kmsg_scan(int fd, const char *mark, int *lines, unsigned long long *first_ts,
		     unsigned long long *last, unsigned long long *at, char *first,
		     size_t first_len)
{
	char rec[8192];
	unsigned long long ts;
	const char *text;
	ssize_t n;

	*lines = 0;
	*first_ts = 0;
	*last = 0;
	for (;;) {
		n = read(fd, rec, sizeof(rec) - 1);
		if (n < 0 && errno == EPIPE)
			continue;       /* records overwritten: go on from the next */
		if (n <= 0)
			return -1;      /* the mark never came */
		rec[n] = 0;
		text = strchr(rec, ';');
		if (!text || sscanf(rec, "%*u,%*u,%llu", &ts) != 1)
			continue;
		if (strstr(text, mark)) {
			*at = ts;
			return 0;
		}
		if (strstr(text, REFUSAL_LINE)) {
			if (!*lines) {
				*first_ts = ts;
				if (first)
					snprintf(first, first_len, "%.*s",
						 (int)strcspn(text + 1, "\n"), text + 1);
			}
			(*lines)++;
			*last = ts;
		}
	}
}

/* The prober: STORM reads of another user's region; how many were EPERM. */
static void prober(uid_t uid, int offer_fd, int out_fd)
{
	static unsigned char dst[LEN];
	struct offer o;
	int i, eperm = -1;

	if (read(offer_fd, &o, sizeof(o)) == sizeof(o) && !o.err && !become(uid))
		for (eperm = 0, i = 0; i < STORM; i++)
			eperm += knem_read(o.cookie, dst) == EPERM;
	if (write(out_fd, &eperm, sizeof(eperm)) != sizeof(eperm))
		_exit(1);
	_exit(0);
}

static double now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/*
 * A burst of refusals logs the shim's line, ratelimited: at least one
 * line, and at most the burst per window of the ratelimit.  The window is
 * per call site and earlier checks may have opened one: wait until the
 * last refusal line is RATELIMIT_SECONDS old, after which the next
 * refusal opens a fresh window.  The storm is meant to fit in that one
 * window (under a second without load), but a slow emulator may spread it
 * over more: each window starts with a logged line more than
 * RATELIMIT_SECONDS after the previous window's start, so lines that span
 * S seconds of the log's clock come from at most 1 + S / RATELIMIT_SECONDS
 * windows (a tenth of a second added for the jiffies the ratelimit counts
 * in), and the bound is the burst times that.  The bound must stay below
 * STORM, or one line per refusal would pass: a storm too slow for that
 * fails as such.
 */
static void refusals_logged(void)
{
	unsigned long long first_ts, last, at;
	static int runs;
	char first[256] = "", before[64], after[64];
	int kfd, offer[2], done[2], out[2], lines, eperm = -1, windows, allowed;
	double t0, took, wait_s = 0;
	pid_t a, b;

	if (set_yama(0) || write_setting(POLICY, "uid") ||
	    (kfd = open("/dev/kmsg", O_RDWR | O_NONBLOCK)) < 0) {
		printf("FAIL refusals logged: cannot set up: %s\n", strerror(errno));
		failed++;
		return;
	}
	/* Marks of their own: the log may hold an earlier run's. */
	snprintf(before, sizeof(before), "cma-refused[%d]: before refusals %d", getpid(), ++runs);
	snprintf(after, sizeof(after), "cma-refused[%d]: after refusals %d", getpid(), runs);
	if (kmsg_mark(kfd, before) ||
	    kmsg_scan(kfd, before, &lines, &first_ts, &last, &at, NULL, 0)) {
		printf("FAIL refusals logged: cannot read /dev/kmsg: %s\n", strerror(errno));
		failed++;
		close(kfd);
		return;
	}
	if (last && at - last < (RATELIMIT_SECONDS + 1) * 1000000ULL) {
		wait_s = ((RATELIMIT_SECONDS + 1) * 1000000ULL - (at - last)) / 1e6;
		usleep((useconds_t)(wait_s * 1e6));
	}
	if (pipe(offer) || pipe(done) || pipe(out)) {
		perror("pipe");
		exit(1);
	}
	t0 = now();
	a = fork();
	if (a == 0)
		owner(65001, offer[1], -1, done[0]);
	b = fork();
	if (b == 0)
		prober(65002, offer[0], out[1]);
	if (read(out[0], &eperm, sizeof(eperm)) != sizeof(eperm))
		eperm = -1;
	took = now() - t0;
	(void)!write(done[1], "x", 1);
	waitpid(a, NULL, 0);
	waitpid(b, NULL, 0);
	close_pair(offer), close_pair(done), close_pair(out);
	if (kmsg_mark(kfd, after) ||
	    kmsg_scan(kfd, after, &lines, &first_ts, &last, &at, first, sizeof(first))) {
		printf("FAIL refusals logged: cannot read /dev/kmsg: %s\n", strerror(errno));
		failed++;
		close(kfd);
		return;
	}
	close(kfd);
	windows = 1 + (int)((last - first_ts + 100000ULL) / (RATELIMIT_SECONDS * 1000000ULL));
	allowed = RATELIMIT_BURST * windows;
	if (eperm == STORM && lines >= 1 && lines <= allowed && allowed < STORM) {
		printf("ok   refusals logged: %d of %d reads of another uid's region EPERM, %d log lines over %.2f s (ratelimit burst %d, %d window%s; storm %.2f s, after %.1f s for the window)\n",
		       eperm, STORM, lines, (last - first_ts) / 1e6, RATELIMIT_BURST, windows,
		       windows > 1 ? "s" : "", took, wait_s);
		printf("     the first: %s\n", first);
		passed++;
	} else {
		printf("FAIL refusals logged: %d of %d reads EPERM (want all), %d log lines over %.2f s (want 1..%d: burst %d x %d window%s of %d s)%s\n",
		       eperm, STORM, lines, lines ? (last - first_ts) / 1e6 : 0.0, allowed,
		       RATELIMIT_BURST, windows, windows > 1 ? "s" : "", RATELIMIT_SECONDS,
		       allowed >= STORM ? ": the storm was too slow to tell a ratelimit from none" : "");
		failed++;
	}
	fflush(stdout);
}

static const struct scene scenes[] = {
	{ .what = "none (control: ptrace_scope 0, one uid)",
	  .owner_uid = 65001, .reader_uid = 65001 },
	{ .what = "seccomp (process_vm_readv/writev -> EPERM, as Docker's default profile)",
	  .seccomp = 1, .owner_uid = 65001, .reader_uid = 65001, .want_cma = EPERM },
	{ .what = "pid namespace of the reader's own, unprivileged (with a user namespace)",
	  .ns = CLONE_NEWUSER | CLONE_NEWPID, .owner_uid = 65001, .reader_uid = 65001,
	  .want_cma = ESRCH },
	{ .what = "pid namespace, both inside, its own /proc",
	  .enter = enter_pidns_own_proc, .owner_uid = 65001, .reader_uid = 65001,
	  .outsider_uid = 65002, .want_outsider = EPERM },
	{ .what = "pid namespace, both inside, the host's /proc",
	  .enter = enter_pidns_host_proc, .owner_uid = 65001, .reader_uid = 65001,
	  .outsider_uid = 65002, .want_outsider = EPERM },
	{ .what = "pid namespace, its own /proc, access_policy=ptrace",
	  .policy = "ptrace", .enter = enter_pidns_own_proc, .owner_uid = 65001,
	  .reader_uid = 65001, .outsider_uid = 65002, .want_outsider = EPERM },
	{ .what = "pid namespace, the host's /proc, access_policy=ptrace (/proc/PID names another process)",
	  .policy = "ptrace", .enter = enter_pidns_host_proc, .owner_uid = 65001,
	  .reader_uid = 65001, .want_knem = EPERM },
	{ .what = "private /dev (tmpfs, /dev/knem bind-mounted), Docker's seccomp refusal",
	  .enter = enter_private_dev, .seccomp = 1, .owner_uid = 65001, .reader_uid = 65001,
	  .outsider_uid = 65002, .want_cma = EPERM, .want_outsider = EPERM },
	{ .what = "private /dev, the host's node 0600 (its permissions hold)",
	  .enter = enter_private_dev, .owner_uid = 65001, .reader_uid = 65001,
	  .node_mode = 0600, .want_knem = EACCES },
	{ .what = "Apptainer-like (user+mount ns, chroot, no caps, no_new_privs), ptrace_scope 1",
	  .scope = 1, .enter = enter_apptainer_like, .outsider_uid = 65002,
	  .want_cma = EPERM, .want_outsider = EPERM },
	{ .what = "Apptainer-like, the same uid outside (KNEM compares host uids)",
	  .enter = enter_apptainer_like, .outsider_uid = CONTAINER_USER },
	{ .what = "yama ptrace_scope 1 (reader is not an ancestor)",
	  .scope = 1, .owner_uid = 65001, .reader_uid = 65001, .want_cma = EPERM },
	{ .what = "yama ptrace_scope 2 (reader without CAP_SYS_PTRACE)",
	  .scope = 2, .owner_uid = 65001, .reader_uid = 65001, .want_cma = EPERM },
	{ .what = "users apart (uid 65001's region, uid 65002 reads)",
	  .owner_uid = 65001, .reader_uid = 65002, .want_cma = EPERM, .want_knem = EPERM },
	/* Sticky: nothing can lower it again, so last. */
	{ .what = "yama ptrace_scope 3 (no attach at all)",
	  .scope = 3, .owner_uid = 65001, .reader_uid = 65001, .want_cma = EPERM },
};

int main(void)
{
	size_t i;

	setvbuf(stdout, NULL, _IOLBF, 0);
	/* "done" to an owner that never started (its container failed). */
	signal(SIGPIPE, SIG_IGN);
	if ((mkdir(STAGE_DEV, 0755) && errno != EEXIST) ||
	    (mkdir(STAGE_ROOT, 0755) && errno != EEXIST)) {
		perror("mkdir");
		return 1;
	}
	/* First: the checks before this one are the likeliest to be long past. */
	refusals_logged();
	for (i = 0; i < sizeof(scenes) / sizeof(scenes[0]); i++)
		run(&scenes[i]);
	write_setting(POLICY, "uid");
	printf("%d passed, %d failed\n", passed, failed);
	return failed ? 1 : 0;
}
