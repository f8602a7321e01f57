/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * smsc/knem module: registration as a knem region, copies to and from a
 * peer's registered region with KNEM_CMD_INLINE_COPY.
 */
#include "smsc_knem.h"

#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/uio.h>

#include "knem_io.h"
#include "opal/constants.h"
#include "opal/util/output.h"

/* knem keeps no per-peer state: the endpoint is what the base caches. */
OBJ_CLASS_INSTANCE(smsc_knem_endpoint_t, opal_object_t, NULL, NULL);

static mca_smsc_endpoint_t *knem_get_endpoint(opal_proc_t *peer_proc)
{
	smsc_knem_endpoint_t *ep = OBJ_NEW(smsc_knem_endpoint_t);

	if (ep == NULL)
		return NULL;
	ep->super.proc = peer_proc;
	return &ep->super;
}

static void knem_return_endpoint(mca_smsc_endpoint_t *endpoint)
{
	OBJ_RELEASE(endpoint);
}

/* One synchronous copy between [local, local + size) and the peer's
 * region described by reg_data, at remote_address in the peer. */
static int knem_copy(void *local, void *remote_address, size_t size, void *reg_data, int write)
{
	const struct smsc_knem_reg_data *reg = reg_data;
	struct knem_cmd_param_iovec iov = {
		.base = (uintptr_t)local,
		.len = size,
	};
	struct knem_cmd_inline_copy copy = {
		.local_iovec_array = (uintptr_t)&iov,
		.local_iovec_nr = 1,
		.write = write,
		.remote_cookie = reg->cookie,
		.remote_offset = (uintptr_t)remote_address - reg->base,
		.flags = 0,
	};

	if (ioctl(mca_smsc_knem_component.fd, KNEM_CMD_INLINE_COPY, &copy) < 0 ||
	    copy.current_status != KNEM_STATUS_SUCCESS) {
		opal_output_verbose(20, mca_smsc_knem_component.output,
				    "smsc/knem: copy of %zu bytes %s cookie 0x%llx at offset %llu failed",
				    size, write ? "to" : "from", (unsigned long long)reg->cookie,
				    (unsigned long long)copy.remote_offset);
		return OPAL_ERROR;
	}
	return OPAL_SUCCESS;
}

static int knem_copy_to(mca_smsc_endpoint_t *endpoint, void *local_address, void *remote_address,
			size_t size, void *reg_data)
{
	(void)endpoint;
	return knem_copy(local_address, remote_address, size, reg_data, 1);
}

static int knem_copy_from(mca_smsc_endpoint_t *endpoint, void *local_address,
			  void *remote_address, size_t size, void *reg_data)
{
	(void)endpoint;
	return knem_copy(local_address, remote_address, size, reg_data, 0);
}

/* The returned pointer is the registration data itself: Open MPI ships
 * registration_data_size bytes from it to the peer. */
static void *knem_register_region(void *local_address, size_t size)
{
	struct smsc_knem_reg_data *reg = malloc(sizeof(*reg));
	struct knem_cmd_param_iovec iov = {
		.base = (uintptr_t)local_address,
		.len = size,
	};
	struct knem_cmd_create_region create = {
		.iovec_array = (uintptr_t)&iov,
		.iovec_nr = 1,
		.flags = 0,
		.protection = PROT_READ | PROT_WRITE,
	};

	if (reg == NULL)
		return NULL;
	if (ioctl(mca_smsc_knem_component.fd, KNEM_CMD_CREATE_REGION, &create) < 0) {
		opal_output_verbose(20, mca_smsc_knem_component.output,
				    "smsc/knem: cannot register %zu bytes at %p", size, local_address);
		free(reg);
		return NULL;
	}
	reg->cookie = create.cookie;
	reg->base = (uintptr_t)local_address;
	return reg;
}

static void knem_deregister_region(void *reg_data)
{
	struct smsc_knem_reg_data *reg = reg_data;

	if (reg == NULL)
		return;
	(void)ioctl(mca_smsc_knem_component.fd, KNEM_CMD_DESTROY_REGION, &reg->cookie);
	free(reg);
}

mca_smsc_module_t smsc_knem_module = {
	.features = MCA_SMSC_FEATURE_REQUIRE_REGISTRATION,
	.registration_data_size = sizeof(struct smsc_knem_reg_data),
	.get_endpoint = knem_get_endpoint,
	.return_endpoint = knem_return_endpoint,
	.copy_to = knem_copy_to,
	.copy_from = knem_copy_from,
	.register_region = knem_register_region,
	.deregister_region = knem_deregister_region,
};
