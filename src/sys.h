/* SPDX-License-Identifier: MIT */
/*
 * sys.h - raw system calls for code that runs inside the application.
 *
 * libusmc interposes close/read/write/fcntl/poll/ioctl and syscall(); its
 * own bookkeeping must not recurse into those wrappers, so internal code
 * uses these helpers, which enter the kernel directly.  They return the
 * result or -errno and leave errno as syscall(2) leaves it.
 */
#ifndef USMC_SYS_H
#define USMC_SYS_H

#include <poll.h>
#include <stdbool.h>
#include <errno.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/*
 * One system call without libc.  libusmc exports syscall() itself (to see
 * close, close_range and seccomp made through it), so its own calls must
 * not go through that symbol.  Returns the kernel's result: -errno on
 * failure.  No cancellation point, no errno.
 */
#if defined(__x86_64__) || defined(__aarch64__)
#define USMC_RAW_SYSCALL 1
#endif

static inline long usmc_sys6(long nr, long a, long b, long c, long d, long e, long f)
{
#if defined(__x86_64__)
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;

	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	return ret;
#elif defined(__aarch64__)
	register long x8 __asm__("x8") = nr;
	register long x0 __asm__("x0") = a;
	register long x1 __asm__("x1") = b;
	register long x2 __asm__("x2") = c;
	register long x3 __asm__("x3") = d;
	register long x4 __asm__("x4") = e;
	register long x5 __asm__("x5") = f;

	__asm__ volatile("svc 0"
			 : "+r"(x0)
			 : "r"(x8), "r"(x1), "r"(x2), "r"(x3), "r"(x4), "r"(x5)
			 : "memory", "cc");
	return x0;
#else
	/* Another architecture: libc's syscall() (libusmc then does not
	 * interpose it, see interpose.c), with its -1/errno turned back. */
	long r = syscall(nr, a, b, c, d, e, f);

	return r == -1 ? -errno : r;
#endif
}

#define usmc_sys(nr, a, b, c) usmc_sys6((nr), (long)(a), (long)(b), (long)(c), 0, 0, 0)

/* -errno as the kernel returned it, and errno set as syscall(2) would. */
static inline long sys_ret(long r)
{
	if (r < 0 && r > -4096)
		errno = (int)-r;
	return r;
}

static inline int sys_close(int fd)
{
	return (int)sys_ret(usmc_sys(SYS_close, fd, 0, 0));
}

static inline ssize_t sys_read(int fd, void *buf, size_t len)
{
	return sys_ret(usmc_sys(SYS_read, fd, buf, len));
}

static inline ssize_t sys_write(int fd, const void *buf, size_t len)
{
	return sys_ret(usmc_sys(SYS_write, fd, buf, len));
}

/* Internal opens never reach libusmc's own open()/eventfd() wrappers
 * (interpose_open.c), which may give descriptors back (shed.c). */
static inline int sys_openat(int dfd, const char *path, int flags, unsigned int mode)
{
	return (int)sys_ret(usmc_sys6(SYS_openat, dfd, (long)path, flags, mode, 0, 0));
}

static inline int sys_eventfd(unsigned int val, int flags)
{
	return (int)sys_ret(usmc_sys(SYS_eventfd2, val, flags, 0));
}

static inline int sys_fcntl(int fd, int cmd, long arg)
{
	return (int)sys_ret(usmc_sys(SYS_fcntl, fd, cmd, arg));
}

static inline int sys_poll(struct pollfd *fds, nfds_t n, int timeout)
{
	struct timespec ts = { timeout / 1000, (long)(timeout % 1000) * 1000000 };

	/* ppoll: aarch64 has no poll system call. */
	return (int)sys_ret(usmc_sys6(SYS_ppoll, (long)fds, (long)n, timeout < 0 ? 0 : (long)&ts,
				      0, 8, 0));
}

struct epoll_event;

/* The waitsets' epoll instances (waitset.c): raw, like every descriptor
 * libusmc makes and closes itself (a sanitizer that saw only one half
 * would take a reused number for a race). */
static inline int sys_epoll_create1(int flags)
{
	return (int)sys_ret(usmc_sys(SYS_epoll_create1, flags, 0, 0));
}

static inline int sys_epoll_ctl(int ep, int op, int fd, struct epoll_event *ev)
{
	return (int)sys_ret(usmc_sys6(SYS_epoll_ctl, ep, op, fd, (long)ev, 0, 0));
}

static inline int sys_epoll_wait(int ep, struct epoll_event *ev, int n, int timeout)
{
	/* epoll_pwait: aarch64 has no epoll_wait system call. */
	return (int)sys_ret(usmc_sys6(SYS_epoll_pwait, ep, (long)ev, n, timeout, 0, 8));
}

static inline int sys_ioctl(int fd, unsigned long req, void *arg)
{
	return (int)sys_ret(usmc_sys(SYS_ioctl, fd, req, arg));
}



/*
 * Internal descriptors (runtime-directory files, doorbells) live in the
 * application's fd table; the application must not be able to close or
 * dup2 over them by accident, so they are tracked here.
 */
void usmc_ifd_mark(int fd);
void usmc_ifd_unmark(int fd);
bool usmc_ifd_is(int fd);
/* Move an internal descriptor out of the application's numbering (see
 * ifd.c); returns the descriptor to use from now on, or (required only)
 * -EMFILE with fd closed. */
int usmc_ifd_move_high(int fd, bool required);
/* A close-on-exec duplicate of fd for usmc to keep, marked internal, out of
 * the application's numbering (a number below would be one the program's
 * next open() or socket() expects to get), or, with none free up there,
 * the lowest free one; -errno if none at all. */
int usmc_ifd_dup(int fd);
/* RLIMIT_NOFILE's soft limit (LONG_MAX: none): cached for up to a second,
 * or read now (fresh). */
long usmc_nofile_limit(bool fresh);
/* The lowest number usmc's own descriptors take (see ifd.c). */
long usmc_ifd_base(bool fresh);
/* Close an internal descriptor. */
static inline int usmc_ifd_close(int fd)
{
	if (fd < 0)
		return 0;
	usmc_ifd_unmark(fd);
	return sys_close(fd);
}

#endif
