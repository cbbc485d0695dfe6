/* SPDX-License-Identifier: MIT */
/*
 * sigrestart.h - would the kernel restart a socket call a signal
 * interrupted, or return EINTR (sigrestart.c)?  The wrappers of
 * sigaction() and signal() tell it what the program installs; the waits of
 * the data path ask it.
 */
#ifndef USMC_SIGRESTART_H
#define USMC_SIGRESTART_H

#include <signal.h>
#include <stdbool.h>

/* The program installed act for sig (sigaction, or signal: SA_RESTART). */
void usmc_sig_track(int sig, const struct sigaction *act);
/* Should an interrupted wait return EINTR (a handler without SA_RESTART
 * installed, or a timeout set: sock_intr_errno) rather than restart? */
bool usmc_sig_should_eintr(int timeout_ms);
/* Block every signal but the synchronous faults (guard.c turns a SIGBUS
 * from a truncated link group into a reset; a blocked one would kill the
 * process); the mask before into *old. */
void usmc_sig_block_nonfault(sigset_t *old);

#endif
