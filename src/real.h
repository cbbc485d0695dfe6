/* SPDX-License-Identifier: MIT */
/*
 * real.h - the libc functions libusmc wraps, resolved with dlsym(RTLD_NEXT).
 *
 * Filled once by usmc_real_init() (real.c: the library constructor, or
 * lazily by the first wrapper that runs before it).  Internal code calls
 * real.X() when it means "what the application would have got without
 * usmc"; it is the one way past the wrappers besides raw system calls
 * (sys.h, -errno returns).
 */
#ifndef USMC_REAL_H
#define USMC_REAL_H

#include "usmc.h"

#include <dirent.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdarg.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

struct usmc_real {
	int (*socket)(int, int, int);
	int (*socketpair)(int, int, int, int *);
	int (*connect)(int, const struct sockaddr *, socklen_t);
	int (*listen)(int, int);
	int (*accept)(int, struct sockaddr *, socklen_t *);
	int (*accept4)(int, struct sockaddr *, socklen_t *, int);
	int (*close)(int);
	int (*shutdown)(int, int);
	ssize_t (*read)(int, void *, size_t);
	ssize_t (*write)(int, const void *, size_t);
	ssize_t (*readv)(int, const struct iovec *, int);
	ssize_t (*writev)(int, const struct iovec *, int);
	ssize_t (*recv)(int, void *, size_t, int);
	ssize_t (*send)(int, const void *, size_t, int);
	ssize_t (*recvfrom)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
	ssize_t (*sendto)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
	ssize_t (*recvmsg)(int, struct msghdr *, int);
	ssize_t (*sendmsg)(int, const struct msghdr *, int);
	int (*recvmmsg)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
	int (*sendmmsg)(int, struct mmsghdr *, unsigned int, int);
	ssize_t (*sendfile)(int, int, off_t *, size_t);
	ssize_t (*splice)(int, off_t *, int, off_t *, size_t, unsigned int);
	int (*poll)(struct pollfd *, nfds_t, int);
	int (*ppoll)(struct pollfd *, nfds_t, const struct timespec *, const sigset_t *);
	int (*select)(int, fd_set *, fd_set *, fd_set *, struct timeval *);
	int (*pselect)(int, fd_set *, fd_set *, fd_set *, const struct timespec *,
		       const sigset_t *);
	int (*epoll_create)(int);
	int (*epoll_create1)(int);
	int (*epoll_ctl)(int, int, int, struct epoll_event *);
	int (*epoll_wait)(int, struct epoll_event *, int, int);
	int (*epoll_pwait)(int, struct epoll_event *, int, int, const sigset_t *);
	int (*epoll_pwait2)(int, struct epoll_event *, int, const struct timespec *,
			    const sigset_t *);
	int (*dup)(int);
	int (*dup2)(int, int);
	int (*dup3)(int, int, int);
	int (*fcntl)(int, int, ...);
	int (*ioctl)(int, unsigned long, ...);
	int (*getsockopt)(int, int, int, void *, socklen_t *);
	int (*setsockopt)(int, int, int, const void *, socklen_t);
	int (*close_range)(unsigned int, unsigned int, int);
	int (*execve)(const char *, char *const[], char *const[]);
	/* Calls that only make descriptors (interpose_open.c). */
	int (*open)(const char *, int, ...);
	int (*open64)(const char *, int, ...);
	int (*openat)(int, const char *, int, ...);
	int (*openat64)(int, const char *, int, ...);
	int (*__open_2)(const char *, int);
	int (*__open64_2)(const char *, int);
	int (*__openat_2)(int, const char *, int);
	int (*__openat64_2)(int, const char *, int);
	int (*pipe)(int[2]);
	int (*pipe2)(int[2], int);
	int (*eventfd)(unsigned int, int);
	FILE *(*fopen)(const char *, const char *);
	FILE *(*fopen64)(const char *, const char *);
	DIR *(*opendir)(const char *);
	FILE *(*fdopen)(int, const char *);
	int (*vdprintf)(int, const char *, va_list);
	int (*__vdprintf_chk)(int, int, const char *, va_list);
	/* Process and signal calls (interpose.c, exec.c, guard.c). */
	int (*fclose)(FILE *);
	int (*sigaction)(int, const struct sigaction *, struct sigaction *);
	sighandler_t (*signal)(int, sighandler_t);
	pid_t (*fork)(void);
	int (*execvpe)(const char *, char *const[], char *const[]);
	int (*fexecve)(int, char *const[], char *const[]);
	void (*_exit)(int);
	int (*prctl)(int, ...);
	/* posix_spawn and its file actions (spawn.c). */
	int (*posix_spawn)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			   const posix_spawnattr_t *, char *const[], char *const[]);
	int (*posix_spawnp)(pid_t *, const char *, const posix_spawn_file_actions_t *,
			    const posix_spawnattr_t *, char *const[], char *const[]);
	int (*posix_spawn_file_actions_adddup2)(posix_spawn_file_actions_t *, int, int);
	int (*posix_spawn_file_actions_addclose)(posix_spawn_file_actions_t *, int);
	int (*posix_spawn_file_actions_addclosefrom_np)(posix_spawn_file_actions_t *, int);
	int (*posix_spawn_file_actions_init)(posix_spawn_file_actions_t *);
	int (*posix_spawn_file_actions_destroy)(posix_spawn_file_actions_t *);
};

extern struct usmc_real real;
void usmc_real_init(void);
/* Set once every entry of real is filled (usmc_real_init). */
extern _Atomic int usmc_real_ready __attribute__((visibility("hidden")));

/*
 * Before the constructor has run, fill the whole table: the data path
 * behind a wrapper uses other entries than the one it names (f only
 * documents which).  One load and branch, as before.
 */
#define ENSURE_REAL(f)							\
	do {								\
		(void)sizeof(real.f);					\
		if (unlikely(!LOAD_ACQUIRE(&usmc_real_ready)))		\
			usmc_real_init();				\
	} while (0)

#endif
