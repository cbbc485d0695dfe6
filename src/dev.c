// SPDX-License-Identifier: MIT
/*
 * dev.c - the device table and the choice of a connection's device.
 *
 * A client picks the device of a new link group: the first of its own
 * devices (best first) that the listener's registry record offers too.
 * The proposal names it first (clc.h devs[0]); the server takes it only if
 * it offers that device itself (clc.c usmc_clc_prop_check) and attaches
 * the link group with it, which checks the link group says the same.
 */
#include "dev.h"

static const struct usmc_dev_ops *const devices[] = {
#ifdef USMC_TEST_DEVICES
	&usmc_dev_copy,		/* a test build: the suite runs over it */
#endif
	&usmc_dev_loopback,
};

void usmc_dev_list(uint8_t ids[4], uint8_t first)
{
	unsigned int i, n = 0;

	memset(ids, 0, 4);
	if (first)
		ids[n++] = first;
	for (i = 0; i < ARRAY_SIZE(devices) && n < 4; i++)
		if (devices[i]->id != first && devices[i]->probe())
			ids[n++] = devices[i]->id;
}

const struct usmc_dev_ops *usmc_dev_get(uint8_t id)
{
	unsigned int i;

	for (i = 0; id && i < ARRAY_SIZE(devices); i++)
		if (devices[i]->id == id)
			return devices[i];
	return NULL;
}

bool usmc_dev_all_can(uint32_t caps)
{
	unsigned int i;

	for (i = 0; i < ARRAY_SIZE(devices); i++)
		if (!usmc_dev_can(devices[i], caps))
			return false;
	return true;
}

const struct usmc_dev_ops *usmc_dev_pick(const uint8_t offered[4])
{
	unsigned int i, j;

	for (i = 0; i < ARRAY_SIZE(devices); i++)
		for (j = 0; j < 4 && offered[j]; j++)
			if (offered[j] == devices[i]->id && devices[i]->probe())
				return devices[i];
	return NULL;
}
