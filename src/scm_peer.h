/* SPDX-License-Identifier: MIT */
/*
 * scm_peer.h - who reads a UNIX socket: usmc processes announce the
 * sockets they read descriptors from, exec and spawn taint those a program
 * without libusmc may read (scm_peer.c).
 */
#ifndef USMC_SCM_PEER_H
#define USMC_SCM_PEER_H

#include "usmc.h"

struct msghdr;

/* Is fd a UNIX socket?  Its inode in *ino. */
bool usmc_scm_unix_ino(int fd, uint64_t *ino);
/* This process reads descriptors from UNIX socket ino with libusmc. */
void usmc_scm_announce(uint64_t ino);
/* A program without libusmc may read UNIX socket ino (or fd) too. */
void usmc_scm_taint(uint64_t ino);
void usmc_scm_taint_fd(int fd);
/* Every UNIX socket an exec'ed image inherits (no FD_CLOEXEC). */
void usmc_scm_taint_inherited(void);
/* Every UNIX socket this image inherited from a usmc image (exec.c). */
void usmc_scm_announce_inherited(void);
/* listen(2) for a socket that is not ours: a UNIX one announces the
 * identity of its file (its holders run libusmc, until one is tainted). */
int usmc_scm_listen(int fd, int backlog);
/* Will whoever reads msg, sent on UNIX socket fd, run libusmc?  (fd's
 * peer, or the socket bound at msg's name.)  wait: a peer not accepted
 * yet may be waited for (up to 200 ms). */
bool usmc_scm_peer_adopts(int fd, const struct msghdr *msg, bool wait);

#endif
