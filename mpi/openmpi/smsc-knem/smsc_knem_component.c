/*
 * SPDX-License-Identifier: GPL-2.0-only
 *
 * smsc/knem component: the structure Open MPI finds by name
 * (mca_smsc_knem_component) when it loads the DSO, its priority
 * parameter, and the query that opens /dev/knem.
 */
#include "smsc_knem.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "knem_io.h"
#include "opal/constants.h"
#include "opal/mca/base/mca_base_var.h"
#include "opal/util/output.h"

static int knem_register(void);
static int knem_open(void);
static int knem_close(void);
static int knem_query(void);
static mca_smsc_module_t *knem_enable(void);

struct smsc_knem_component mca_smsc_knem_component = {
	.super = {
		.smsc_version = {
			MCA_SMSC_DEFAULT_VERSION("knem"),
			.mca_open_component = knem_open,
			.mca_close_component = knem_close,
			.mca_register_component_params = knem_register,
		},
		.smsc_data = {
			MCA_BASE_METADATA_PARAM_CHECKPOINT
		},
		/* Above smsc/cma: installing the component is asking for knem. */
		.priority = 50,
		.query = knem_query,
		.enable = knem_enable,
	},
	.fd = -1,
	.output = -1,
};

static int knem_verbose;

static int knem_register(void)
{
	mca_base_component_t *c = &mca_smsc_knem_component.super.smsc_version;

	(void)mca_base_component_var_register(c, "priority",
		"Priority of smsc/knem (the highest priority usable smsc component is used)",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9,
		MCA_BASE_VAR_SCOPE_READONLY, &mca_smsc_knem_component.super.priority);
	(void)mca_base_component_var_register(c, "verbose",
		"Verbosity of smsc/knem (20: why /dev/knem cannot be used, failed copies)",
		MCA_BASE_VAR_TYPE_INT, NULL, 0, 0, OPAL_INFO_LVL_9,
		MCA_BASE_VAR_SCOPE_LOCAL, &knem_verbose);
	return OPAL_SUCCESS;
}

static int knem_open(void)
{
	if (knem_verbose > 0) {
		mca_smsc_knem_component.output = opal_output_open(NULL);
		opal_output_set_verbosity(mca_smsc_knem_component.output, knem_verbose);
	}
	return OPAL_SUCCESS;
}

static int knem_close(void)
{
	if (mca_smsc_knem_component.fd >= 0) {
		close(mca_smsc_knem_component.fd);
		mca_smsc_knem_component.fd = -1;
	}
	if (mca_smsc_knem_component.output >= 0) {
		opal_output_close(mca_smsc_knem_component.output);
		mca_smsc_knem_component.output = -1;
	}
	return OPAL_SUCCESS;
}

/* Usable when /dev/knem opens and speaks the ABI of include/knem_io.h. */
static int knem_query(void)
{
	struct knem_cmd_info info;
	int fd;

	if (mca_smsc_knem_component.fd >= 0)
		return OPAL_SUCCESS;
	fd = open(KNEM_DEVICE_FILENAME, O_RDWR | O_CLOEXEC);
	if (fd < 0) {
		opal_output_verbose(20, mca_smsc_knem_component.output,
				    "smsc/knem: cannot open %s: %s", KNEM_DEVICE_FILENAME,
				    strerror(errno));
		return OPAL_ERR_NOT_AVAILABLE;
	}
	memset(&info, 0, sizeof(info));
	if (ioctl(fd, KNEM_CMD_GET_INFO, &info) < 0 || info.abi != KNEM_ABI_VERSION) {
		opal_output_verbose(20, mca_smsc_knem_component.output,
				    "smsc/knem: %s speaks ABI 0x%x, not 0x%x", KNEM_DEVICE_FILENAME,
				    info.abi, KNEM_ABI_VERSION);
		close(fd);
		return OPAL_ERR_NOT_AVAILABLE;
	}
	mca_smsc_knem_component.fd = fd;
	return OPAL_SUCCESS;
}

static mca_smsc_module_t *knem_enable(void)
{
	if (mca_smsc_knem_component.fd < 0)
		return NULL;
	return &smsc_knem_module;
}
