/* SPDX-License-Identifier: MIT */
/*
 * af_usmc.h - internal entry points between the socket layers.
 */
#ifndef USMC_AF_USMC_H
#define USMC_AF_USMC_H

#include <stdbool.h>
#include <stdint.h>

struct usmc_sock;

/* listener.c: the socket's last close: record and index removed. */
void usmc_listen_release(struct usmc_sock *sk);
/* listener.c: clients stop finding it (it goes where nobody answers). */
void usmc_listen_unpublish(struct usmc_sock *sk);
/* listener.c: accept() on a socket we only know as bound, which another
 * holder made a listener: ours is one too, joined to its publication. */
void usmc_listen_follow(struct usmc_sock *sk, int fd);
/* listener.c: the listener's TCP_DEFER_ACCEPT (set, or cleared) tells
 * its clients whether to send the wake byte always (clc.h wake_always). */
void usmc_listen_defer(struct usmc_sock *sk, int fd);
/* listener.c: a holder of the socket may not run usmc: no holder publishes
 * it from now on (SKF_NOPUB).  true the first time. */
bool usmc_listen_nopub(struct usmc_sock *sk);
struct usmc_clc_ln;
/* listener.c: the index another holder published for listening socket fd
 * (a reference, and its record in *reg_idx), or NULL. */
struct usmc_clc_ln *usmc_listen_find(int fd, int *reg_idx);
/* Take back a proposal the server has not answered (caller holds sk->lock). */
bool usmc_proposal_take_back(struct usmc_sock *sk);
/* clc_proof.c: is the listener's namespace ns where the kernel sends us?
 * (true when ns is 0: ours) */
bool usmc_route_proven(struct usmc_sock *sk, uint64_t ns);
/* Once connected with the proposal posted: a route not proven, or a server
 * end no usmc listener holds, takes the proposal back (uncertain_route,
 * unbound).  Takes sk->lock. */
void usmc_connect_check_done(struct usmc_sock *sk);
/* An accept in our control block: did the holder of the server end give it? */
bool usmc_accept_proven(struct usmc_sock *sk);
/* The client's one CLC wake byte, if not sent yet (clc.h). */
void usmc_client_send_wake(struct usmc_sock *sk, int fd);
void usmc_conn_release(struct usmc_sock *sk, int fd);
/* shed.c: out of descriptors: give some of usmc's back; true if any went. */
bool usmc_shed(void);
/* shed.c: RLIMIT_AS was lowered: give back the link groups no connection
 * of ours reads any more. */
void usmc_shed_address_space(void);
/* accept.c: an undecided server connection looks for a proposal (cheap). */
void usmc_server_resolve_quick(struct usmc_sock *sk, int fd);
/* exec.c */
void usmc_exec_adopt(void);
/* Does an image started with envp preload libusmc? */
bool usmc_env_has_usmc(char *const envp[]);
struct exec_ctx;
/* posix_spawn() (spawn.c): prepare what the child inherits; env is the
 * child's environment or NULL (envp as it is); finish once it returned. */
struct exec_ctx *usmc_spawn_prepare(char *const envp[], bool (*closed)(int fd, void *arg),
				    void *arg, char ***env);
void usmc_spawn_finish(struct exec_ctx *c, char **env, bool spawned);

/* close.c: tell the peer we are gone (FIN or, with unread data, RST). */
void usmc_conn_close_protocol(struct usmc_sock *sk);
void usmc_conn_close(struct usmc_sock *sk, int fd);
/* close.c: the same when the last holder exits without closing. */
void usmc_conn_exit(struct usmc_sock *sk, int fd);
/* exec.c: the process ends (exit() or _exit()): what our sockets'
 * descriptors going away means to the other processes (fdtab.c). */
void usmc_process_exit(bool settle);

#endif
