/* SPDX-License-Identifier: MIT */
/*
 * wait.h - waiting on a connection (wait.c); the doorbell protocol it
 * sleeps on is cdc.c's (cdc.h).
 */
#ifndef USMC_WAIT_H
#define USMC_WAIT_H

#include "usmc.h"

struct usmc_sock;

int usmc_wait(struct usmc_sock *sk, int fd, int what, int timeout_ms);
/* Arm our doorbell for what; returns true if the condition already holds. */
bool usmc_arm(struct usmc_sock *sk, int what);
/* The same; seq: what to give usmc_rung_since() for this arm. */
bool usmc_arm_seq(struct usmc_sock *sk, int what, uint32_t seq[3]);
/* SO_RCVTIMEO / SO_SNDTIMEO in ms, -1 for none. */
int usmc_sock_timeout(struct usmc_sock *sk, int fd, int optname);
/* About to sleep in a call the program made blocking: is the open file
 * O_NONBLOCK after all (set past libc: a raw ioctl or fcntl system call,
 * rustix)?  Then the call says EAGAIN, as TCP would. */
bool usmc_sock_nonblock_now(struct usmc_sock *sk, int fd);
/* A peer on our CPU gets it (sched_yield) this often before we sleep. */
#define USMC_WAIT_YIELDS	4

#endif
