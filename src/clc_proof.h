/* SPDX-License-Identifier: MIT */
/*
 * clc_proof.h - the client's proofs that the handshake is bound to its TCP connection (clc_proof.c).
 */
#ifndef USMC_CLC_PROOF_H
#define USMC_CLC_PROOF_H

#include <stdbool.h>
#include <stdint.h>

struct usmc_sock;

/* Take back a proposal the server has not answered (caller holds sk->lock). */
bool usmc_proposal_take_back(struct usmc_sock *sk);
/* Is the listener's namespace ns where the kernel sends us?
 * (true when ns is 0: ours) */
bool usmc_route_proven(struct usmc_sock *sk, uint64_t ns);
/* Once connected with the proposal posted: a route not proven, or a server
 * end no usmc listener holds, takes the proposal back (uncertain_route,
 * unbound).  Takes sk->lock. */
void usmc_connect_check_done(struct usmc_sock *sk);
/* An accept in our control block: did the holder of the server end give it? */
bool usmc_accept_proven(struct usmc_sock *sk);
/* The body of our proposal, from the connection as it stands: what
 * af_usmc.c posts and usmc_client_send_wake sends (no link group any
 * more: its fields zero). */
struct usmc_clc_prop;
void usmc_client_prop(const struct usmc_sock *sk, struct usmc_clc_prop *p);
/* The client's one CLC wake message, if not sent yet (clc.h). */
void usmc_client_send_wake(struct usmc_sock *sk, int fd);

#endif
