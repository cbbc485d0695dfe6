// SPDX-License-Identifier: MIT
/*
 * fuzz_clc_msg.c - CLC messages on TCP (clc_inband.c) as a peer may send
 * them: any 64 bytes, taken by a receiver that wants any set of types.
 *
 * Properties:
 *   - decode accepts exactly the frames of the independent reading below
 *     (both eyecatchers, version 1, length 64, a known type the receiver
 *     wants) and rejects everything else;
 *   - what it decodes encodes back to a message that decodes to the same
 *     contents (fields a type does not carry come out zero);
 *   - any contents encode to a frame that decodes to them, for every type.
 */
#include "fuzz.h"

#include "clc_inband.h"

#include <string.h>

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	fz_setup(NULL);
	return 0;
}

static bool expect_frame(const uint8_t *b, unsigned int want)
{
	static const uint8_t eye[4] = { 0xe4, 0xe2, 0xd4, 0xc3 };	/* "USMC", EBCDIC */
	unsigned int t = b[4];

	if (memcmp(b, eye, 4) || memcmp(b + 60, eye, 4) || b[5] != 1 || b[6] != 0 || b[7] != 64)
		return false;
	if (t != USMC_CLC_MSG_PROPOSAL && t != USMC_CLC_MSG_DECLINE)
		return false;
	return want & (1u << t);
}

/* The contents a type carries (the rest must be zero after a decode). */
static void keep_carried(struct usmc_clc_msg *m)
{
	struct usmc_clc_msg k;

	memset(&k, 0, sizeof(k));	/* padding too: compared with memcmp */
	k.type = m->type;
	k.p.lgr_id = m->p.lgr_id;
	k.p.slot = m->p.slot;
	k.p.gen = m->p.gen;
	switch (m->type) {
	case USMC_CLC_MSG_PROPOSAL:
		k.p.version = m->p.version;
		k.p.uid = m->p.uid;
		k.p.pid = m->p.pid;
		memcpy(k.p.devs, m->p.devs, 4);
		memcpy(k.p.client.a, m->p.client.a, 16);
		k.p.client.port = m->p.client.port;
		break;
	case USMC_CLC_MSG_DECLINE:
		k.reason = m->reason & 0xffff;
		break;
	}
	*m = k;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t b[USMC_CLC_MSG_LEN], again[USMC_CLC_MSG_LEN];
	struct usmc_clc_msg m, m2;
	unsigned int want;
	int rc;

	if (size < 1 + USMC_CLC_MSG_LEN)
		return 0;
	want = data[0];
	memcpy(b, data + 1, USMC_CLC_MSG_LEN);
	rc = usmc_clc_msg_decode(b, want, &m);
	FZ_CHECK((rc == 0) == expect_frame(b, want), "decode %d for a frame the reading %s", rc,
		 expect_frame(b, want) ? "accepts" : "rejects");
	if (!rc) {
		usmc_clc_msg_encode(&m, again);
		FZ_CHECK(!usmc_clc_msg_decode(again, want, &m2), "a decoded message re-encodes badly");
		FZ_CHECK(!memcmp(&m, &m2, sizeof(m)), "re-encoded contents differ");
	}

	/* Any contents, every type: encode then decode is the identity on
	 * what the type carries. */
	if (size >= 1 + 2 * USMC_CLC_MSG_LEN) {
		static const uint8_t types[] = { USMC_CLC_MSG_PROPOSAL, USMC_CLC_MSG_DECLINE };
		unsigned int i;

		for (i = 0; i < sizeof(types); i++) {
			memset(&m, 0, sizeof(m));
			memcpy(&m.p.lgr_id, data + 1 + 64, 8);
			memcpy(&m.p.slot, data + 1 + 72, 4);
			memcpy(&m.p.gen, data + 1 + 76, 4);
			memcpy(&m.p.version, data + 1 + 80, 4);
			memcpy(&m.p.uid, data + 1 + 84, 4);
			memcpy(&m.p.pid, data + 1 + 88, 4);
			memcpy(m.p.devs, data + 1 + 92, 4);
			memcpy(m.p.client.a, data + 1 + 96, 16);
			memcpy(&m.p.client.port, data + 1 + 112, 2);
			memcpy(&m.reason, data + 1 + 114, 4);
			m.type = types[i];
			keep_carried(&m);
			usmc_clc_msg_encode(&m, b);
			rc = usmc_clc_msg_decode(b, 1u << m.type, &m2);
			FZ_CHECK(!rc, "type %u: our own encoding does not decode (%d)", m.type, rc);
			FZ_CHECK(!memcmp(&m, &m2, sizeof(m)), "type %u: contents changed", m.type);
		}
	}
	return 0;
}
