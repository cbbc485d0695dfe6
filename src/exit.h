/* SPDX-License-Identifier: MIT */
/*
 * exit.h - a process's sockets when it ends (exit.c).
 */
#ifndef USMC_EXIT_H
#define USMC_EXIT_H

#include <stdbool.h>

/* The process ends: drop its share of every socket (once); settle: exit()
 * rather than _exit(), connections are looked at once more for the counters. */
void usmc_socks_exit(bool settle);

#endif
