/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * smsc/knem: Open MPI 5/6 single copy (the smsc framework) over /dev/knem,
 * built out of Open MPI's tree against the distribution's devel headers
 * and include/knem_io.h.
 *
 * A sender registers its buffer as a knem region; the registration data
 * that Open MPI ships to the peer is the region's cookie and the address
 * the region starts at, so the peer copies with KNEM_CMD_INLINE_COPY at
 * (its remote address - that start).  knem cannot map peer memory, so the
 * module has no map_peer_region.
 */
#ifndef SMSC_KNEM_H
#define SMSC_KNEM_H

#include "opal_config.h"

#include <stdint.h>

#include "opal/mca/smsc/smsc.h"

/* What the peer receives for a registered region: the bytes at the
 * pointer register_region returns, registration_data_size of them. */
struct smsc_knem_reg_data {
	uint64_t cookie;
	uint64_t base;
};

struct smsc_knem_endpoint {
	mca_smsc_endpoint_t super;
};
typedef struct smsc_knem_endpoint smsc_knem_endpoint_t;
OBJ_CLASS_DECLARATION(smsc_knem_endpoint_t);

struct smsc_knem_component {
	mca_smsc_component_t super;
	/* /dev/knem, opened by query, closed with the component. */
	int fd;
	int output;
};

OPAL_DECLSPEC extern struct smsc_knem_component mca_smsc_knem_component;
extern mca_smsc_module_t smsc_knem_module;

#endif
