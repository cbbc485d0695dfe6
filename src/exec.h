/* SPDX-License-Identifier: MIT */
/*
 * exec.h - exec, posix_spawn and process exit: what the sockets do
 * across them (exec.c, spawn.c).
 */
#ifndef USMC_EXEC_H
#define USMC_EXEC_H

#include <stdbool.h>

struct usmc_sock;

/* exec.c: a new image takes over the sockets of the one before. */
void usmc_exec_adopt(void);
/* Does an image started with envp preload libusmc? */
bool usmc_env_has_usmc(char *const envp[]);
struct exec_ctx;
/* posix_spawn() (spawn.c): prepare what the child inherits; env is the
 * child's environment or NULL (envp as it is); finish once it returned. */
struct exec_ctx *usmc_spawn_prepare(char *const envp[], bool (*closed)(int fd, void *arg),
				    void *arg, char ***env);
void usmc_spawn_finish(struct exec_ctx *c, char **env, bool spawned);
/* The process ends (exit() or _exit()): what our sockets'
 * descriptors going away means to the other processes (exit.c). */
void usmc_process_exit(bool settle);

/* Fork child: the module's lock afresh (atfork.c). */
void usmc_spawn_after_fork(void);

#endif
