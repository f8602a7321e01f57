/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * cma-containers.h - the containers cma-refused.c runs its owner and reader
 * in (cma-containers.c).  Each enter_*() is called by a process running as
 * root in the VM's namespaces; it returns 0 in the process that is to start
 * the owner and the reader inside the container, or -1 with errno set.
 */
#ifndef CMA_CONTAINERS_H
#define CMA_CONTAINERS_H

#include <sys/types.h>

/* The uid the Apptainer-like container runs as, mapped to itself. */
#define CONTAINER_USER 65001

/* Directories the containers mount over; main() makes them. */
#define STAGE_DEV "/tmp/cma-refused-dev"
#define STAGE_ROOT "/tmp/cma-refused-root"

int enter_pidns_own_proc(void);
int enter_pidns_host_proc(void);
int enter_private_dev(void);
int enter_apptainer_like(void);

/* setresuid/gid to uid (0: stay), dumpable again as a user's process is. */
int become(uid_t uid);

#endif
