/* SPDX-License-Identifier: MIT */
/*
 * fdtab.h - descriptor -> struct usmc_sock, the one lookup every wrapper does.
 *
 * A miss (any descriptor that is not a TCP socket we track) costs two
 * loads and a branch; that is the whole overhead usmc adds to files,
 * pipes, UDP and UNIX sockets.
 */
#ifndef USMC_FDTAB_H
#define USMC_FDTAB_H

#include "sock.h"

/* Returns the socket with a reference held, or NULL. */
struct usmc_sock *usmc_fd_get(int fd);
/* Install sk at fd (takes over one reference). */
int usmc_fd_install(int fd, struct usmc_sock *sk);
/* Remove fd's entry; returns the socket whose reference the caller drops. */
struct usmc_sock *usmc_fd_remove(int fd);
/* dup: newfd refers to the same socket as oldfd (no-op when untracked). */
void usmc_fd_dup(int oldfd, int newfd);
/* Call fn for every tracked descriptor (fork, exec, exit). */
void usmc_fd_foreach(void (*fn)(int fd, struct usmc_sock *sk, void *arg), void *arg);
void usmc_fd_after_fork(void);
void usmc_fd_fork_prepare(void);
void usmc_fd_fork_parent(bool failed);

#endif
