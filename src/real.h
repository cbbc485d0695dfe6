/* SPDX-License-Identifier: MIT */
/*
 * real.h - the libc functions libusmc wraps, resolved with dlsym(RTLD_NEXT).
 *
 * Filled once by usmc_real_init() (library constructor, or lazily by the
 * first wrapper that runs before it).  Internal code calls real.X() when it
 * means "what the application would have got without usmc".
 */
#ifndef USMC_REAL_H
#define USMC_REAL_H

#include <poll.h>
#include <signal.h>
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
	FILE *(*fdopen)(int, const char *);
	int (*vdprintf)(int, const char *, va_list);
	int (*__vdprintf_chk)(int, int, const char *, va_list);
};

extern struct usmc_real real;
void usmc_real_init(void);
/* fork() as libusmc's wrapper runs it (interpose.c), for vfork (exec.c). */
pid_t usmc_fork(void);

#endif
