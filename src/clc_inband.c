// SPDX-License-Identifier: MIT
/*
 * clc_inband.c - CLC messages on the TCP connection: their wire format,
 * and sending and taking one (clc_inband.h says when each is sent).
 *
 * Layout of every message (USMC_CLC_MSG_LEN bytes, network byte order):
 *
 *    0  eyecatcher "USMC" in EBCDIC (kernel SMC's are "SMCR" and "SMCD")
 *    4  type       5  version      6  length (64)
 *    8  link group id (proposal, decline: the proposal's)
 *   16  slot       20  generation
 *   24  proposal: USMC_PROTO_VERSION     28  proposal: uid
 *   32  proposal: client pid
 *   36  proposal: devices, best first
 *   40  proposal: client address (16, IPv4 mapped)   56  its port
 *   58  decline: reason       60  eyecatcher again
 *
 * Fields a type does not use are zero; a decoder checks the frame (both
 * eyecatchers, version, length, type) and leaves the values to the layer
 * that knows what they must be (usmc_clc_prop_check, accept.c).
 */
#include "clc_inband.h"
#include "real.h"
#include "sys.h"

#include <endian.h>
#include <errno.h>
#include <string.h>
#include <sys/ioctl.h>
#include <linux/sockios.h>

static const uint8_t eye[4] = { 0xe4, 0xe2, 0xd4, 0xc3 };

static void put16(uint8_t *p, uint16_t v)
{
	v = htobe16(v);
	memcpy(p, &v, 2);
}

static void put32(uint8_t *p, uint32_t v)
{
	v = htobe32(v);
	memcpy(p, &v, 4);
}

static void put64(uint8_t *p, uint64_t v)
{
	v = htobe64(v);
	memcpy(p, &v, 8);
}

static uint16_t get16(const uint8_t *p)
{
	uint16_t v;

	memcpy(&v, p, 2);
	return be16toh(v);
}

static uint32_t get32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return be32toh(v);
}

static uint64_t get64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return be64toh(v);
}

void usmc_clc_msg_encode(const struct usmc_clc_msg *m, uint8_t *b)
{
	memset(b, 0, USMC_CLC_MSG_LEN);
	memcpy(b, eye, 4);
	b[4] = m->type;
	b[5] = USMC_CLC_MSG_VERSION;
	put16(b + 6, USMC_CLC_MSG_LEN);
	put64(b + 8, m->p.lgr_id);
	put32(b + 16, m->p.slot);
	put32(b + 20, m->p.gen);
	switch (m->type) {
	case USMC_CLC_MSG_PROPOSAL:
		put32(b + 24, m->p.version);
		put32(b + 28, m->p.uid);
		put32(b + 32, m->p.pid);
		memcpy(b + 36, m->p.devs, 4);
		memcpy(b + 40, m->p.client.a, 16);
		put16(b + 56, m->p.client.port);
		break;
	case USMC_CLC_MSG_DECLINE:
		put16(b + 58, (uint16_t)m->reason);
		break;
	}
	memcpy(b + 60, eye, 4);
}

int usmc_clc_msg_decode(const uint8_t *b, unsigned int want, struct usmc_clc_msg *out)
{
	uint8_t type = b[4];

	if (memcmp(b, eye, 4) || memcmp(b + 60, eye, 4) || b[5] != USMC_CLC_MSG_VERSION ||
	    get16(b + 6) != USMC_CLC_MSG_LEN || type >= 32 || !(want & CLC_MSG_BIT(type)))
		return -EPROTO;
	memset(out, 0, sizeof(*out));
	out->type = type;
	out->p.lgr_id = get64(b + 8);
	out->p.slot = get32(b + 16);
	out->p.gen = get32(b + 20);
	switch (type) {
	case USMC_CLC_MSG_PROPOSAL:
		out->p.version = get32(b + 24);
		out->p.uid = get32(b + 28);
		out->p.pid = get32(b + 32);
		memcpy(out->p.devs, b + 36, 4);
		memcpy(out->p.client.a, b + 40, 16);
		out->p.client.port = get16(b + 56);
		break;
	case USMC_CLC_MSG_DECLINE:
		out->reason = get16(b + 58);
		break;
	default:
		return -EPROTO;
	}
	return 0;
}

int usmc_clc_msg_send(int fd, const struct usmc_clc_msg *m)
{
	uint8_t b[USMC_CLC_MSG_LEN];
	ssize_t n;

	usmc_clc_msg_encode(m, b);
	/* A fresh connection's send buffer is empty (nothing of ours went
	 * on TCP before a CLC message), so all of it fits. */
	n = real.send(fd, b, sizeof(b), MSG_NOSIGNAL | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return n == (ssize_t)sizeof(b) ? 0 : -EAGAIN;
}

int usmc_clc_msg_take(int fd, unsigned int want, struct usmc_clc_msg *out)
{
	uint8_t b[USMC_CLC_MSG_LEN];
	int queued = 0, rc;
	ssize_t n;

	/* Whole before we look: a peek at half of it would still move a
	 * program's SO_PEEK_OFF past bytes we do not take. */
	rc = sys_ioctl(fd, SIOCINQ, &queued);
	if (rc < 0)
		return rc;
	if (queued < (int)sizeof(b)) {
		struct pollfd p = { .fd = fd, .events = POLLRDHUP };
		char c;

		/* Part of it, and the peer ended: it never comes whole. */
		if (queued > 0)
			return sys_poll(&p, 1, 0) > 0 ? -EPROTO : -EINPROGRESS;
		/* Nothing queued may also be the peer's end. */
		n = real.recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
		if (n == 0)
			return -ENODATA;
		if (n < 0)
			return -errno;
		return -EAGAIN;
	}
	n = real.recv(fd, b, sizeof(b), MSG_PEEK | MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	if (n != (ssize_t)sizeof(b))
		return -EAGAIN;
	rc = usmc_clc_msg_decode(b, want, out);
	if (rc)
		return rc;
	n = real.recv(fd, b, sizeof(b), MSG_DONTWAIT);
	if (n < 0)
		return -errno;
	return n == (ssize_t)sizeof(b) ? 0 : -EPROTO;
}
