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

_Atomic bool usmc_dev_progressing;

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

#ifdef USMC_TEST_DEVICES
#include "cdc.h"
#include "lgr.h"

#include <pthread.h>

/*
 * Control views published through their device (dev.h publish): cdc.h's
 * CDC_MIRROR finds a stored word's link group by its address.  Entries are
 * added and removed under the mutex and read without it: a view goes only
 * once no connection of its link group stores into it.
 */
#define VIEWS_MAX	256

struct view {
	_Atomic(uintptr_t) start;	/* 0: free */
	uintptr_t end;
	struct usmc_lgr *lgr;
};

static struct view views[VIEWS_MAX];
static pthread_mutex_t views_lock = PTHREAD_MUTEX_INITIALIZER;
_Atomic bool usmc_cdc_mirroring;

int usmc_dev_view_register(struct usmc_lgr *lgr, void *view, size_t len)
{
	int i, rc = -ENOSPC;

	pthread_mutex_lock(&views_lock);
	for (i = 0; i < VIEWS_MAX; i++)
		if (!LOAD_RELAXED(&views[i].start)) {
			views[i].end = (uintptr_t)view + len;
			views[i].lgr = lgr;
			STORE_RELEASE(&views[i].start, (uintptr_t)view);
			STORE_RELAXED(&usmc_cdc_mirroring, true);
			rc = 0;
			break;
		}
	pthread_mutex_unlock(&views_lock);
	return rc;
}

void usmc_dev_view_unregister(struct usmc_lgr *lgr)
{
	int i;

	pthread_mutex_lock(&views_lock);
	for (i = 0; i < VIEWS_MAX; i++)
		if (LOAD_RELAXED(&views[i].start) && views[i].lgr == lgr)
			STORE_RELEASE(&views[i].start, 0);
	pthread_mutex_unlock(&views_lock);
}

void usmc_cdc_mirror(const volatile void *word, size_t len)
{
	uintptr_t a = (uintptr_t)word, s;
	int i;

	for (i = 0; i < VIEWS_MAX; i++) {
		s = LOAD_ACQUIRE(&views[i].start);
		if (s && a >= s && a + len <= views[i].end) {
			views[i].lgr->dev->publish(views[i].lgr, (uint32_t)(a - s), (uint32_t)len);
			return;
		}
	}
	/* Not a registered view: a mapped device's line. */
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held views_lock at the fork. */
void usmc_dev_after_fork(void)
{
	pthread_mutex_init(&views_lock, NULL);
}
#else
void usmc_dev_after_fork(void)
{
}
#endif
