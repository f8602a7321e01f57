// SPDX-License-Identifier: GPL-2.0-only
/*
 * cma-containers.c - the containers of cma-refused.c, built from the same
 * system calls their runtimes use:
 *
 *   pid namespace   unshare(CLONE_NEWPID | CLONE_NEWNS); the first child is
 *                   the namespace's init, with a fresh /proc mounted (as
 *                   Docker and `unshare --pid --mount-proc` do) or the
 *                   host's /proc left in place (`unshare --pid` alone)
 *   private /dev    a mount namespace with a tmpfs on /dev holding only
 *                   /dev/knem, bind-mounted (`docker run --device` on the
 *                   tmpfs /dev Docker mounts)
 *   Apptainer-like  an unprivileged user: a user namespace mapping its uid
 *                   to itself, a mount namespace, a minimal root (tmpfs)
 *                   with /dev/knem bind-mounted, chroot into it, every
 *                   capability dropped and no_new_privs set, as
 *                   `apptainer exec --userns` runs a container
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "knem_io.h"
#include "cma-containers.h"

int become(uid_t uid)
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

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY);
	ssize_t n;

	if (fd < 0)
		return -1;
	n = write(fd, text, strlen(text));
	close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

/* An empty file at path, for a bind mount to cover. */
static int make_node_target(const char *path)
{
	int fd = open(path, O_CREAT | O_WRONLY, 0600);

	if (fd < 0)
		return -1;
	return close(fd);
}

/* Mounts made from here on stay in this mount namespace. */
static int private_mounts(void)
{
	return mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);
}

/*
 * Returns in the namespace's init; the process that made the namespace
 * waits for it and leaves with its status.
 */
static int enter_pidns(int own_proc)
{
	int status;
	pid_t init;

	if (unshare(CLONE_NEWPID | CLONE_NEWNS) || private_mounts())
		return -1;
	init = fork();
	if (init < 0)
		return -1;
	if (init > 0) {
		int fd;

		/* Only waits: the pipes are for the processes inside. */
		for (fd = 3; fd < 1024; fd++)
			close(fd);
		if (waitpid(init, &status, 0) < 0)
			_exit(1);
		_exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
	}
	if (getpid() != 1) {
		errno = ECHILD;
		return -1;
	}
	if (own_proc && mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL))
		return -1;
	return 0;
}

int enter_pidns_own_proc(void)
{
	return enter_pidns(1);
}

int enter_pidns_host_proc(void)
{
	return enter_pidns(0);
}

int enter_private_dev(void)
{
	struct stat host, here;

	if (stat(KNEM_DEVICE_FILENAME, &host) || unshare(CLONE_NEWNS) || private_mounts())
		return -1;
	/* Built aside, then moved over /dev, which hides the host's nodes. */
	if (mount("tmpfs", STAGE_DEV, "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=64k") ||
	    make_node_target(STAGE_DEV "/knem") ||
	    mount(KNEM_DEVICE_FILENAME, STAGE_DEV "/knem", NULL, MS_BIND, NULL) ||
	    mount(STAGE_DEV, "/dev", NULL, MS_MOVE, NULL))
		return -1;
	/* Only /dev/knem, and it is the host's node: same device, same mode. */
	if (access("/dev/null", F_OK) == 0 || stat(KNEM_DEVICE_FILENAME, &here)) {
		errno = EEXIST;
		return -1;
	}
	if (here.st_rdev != host.st_rdev || here.st_mode != host.st_mode ||
	    here.st_uid != host.st_uid || here.st_gid != host.st_gid) {
		errno = ENOTBLK;
		return -1;
	}
	return 0;
}

static int map_to_self(const char *file, unsigned int id)
{
	char line[64];

	snprintf(line, sizeof(line), "%u %u 1\n", id, id);
	return write_file(file, line);
}

/* Every capability out of every set: the container's processes have none. */
static int drop_capabilities(void)
{
	struct __user_cap_header_struct head = { _LINUX_CAPABILITY_VERSION_3, 0 };
	struct __user_cap_data_struct none[_LINUX_CAPABILITY_U32S_3];

	memset(none, 0, sizeof(none));
	return syscall(SYS_capset, &head, none);
}

int enter_apptainer_like(void)
{
	if (become(CONTAINER_USER) || unshare(CLONE_NEWUSER | CLONE_NEWNS))
		return -1;
	if (write_file("/proc/self/setgroups", "deny") ||
	    map_to_self("/proc/self/uid_map", CONTAINER_USER) ||
	    map_to_self("/proc/self/gid_map", CONTAINER_USER) || private_mounts())
		return -1;
	/*
	 * A tmpfs mounted in a user namespace refuses device nodes; the bind
	 * mount keeps the host's devtmpfs node, and its mount flags.
	 */
	if (mount("tmpfs", STAGE_ROOT, "tmpfs", MS_NOSUID, "mode=0755,size=64k") ||
	    mkdir(STAGE_ROOT "/dev", 0755) || make_node_target(STAGE_ROOT "/dev/knem") ||
	    mount(KNEM_DEVICE_FILENAME, STAGE_ROOT "/dev/knem", NULL, MS_BIND, NULL))
		return -1;
	if (chdir(STAGE_ROOT) || chroot(".") || chdir("/"))
		return -1;
	/* Nothing of the host's root is left to see. */
	if (access("/proc", F_OK) == 0 || access("/tmp", F_OK) == 0) {
		errno = EEXIST;
		return -1;
	}
	if (drop_capabilities() || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0))
		return -1;
	return prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
}
