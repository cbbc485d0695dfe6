/* SPDX-License-Identifier: MIT */
/*
 * sys.h - raw system calls for code that runs inside the application.
 *
 * libusmc interposes close/read/write/fcntl/poll/ioctl; its own bookkeeping
 * must not recurse into those wrappers, so internal code uses these thin
 * syscall(2) helpers.  They return the result or -errno and leave errno as
 * syscall(2) leaves it.
 */
#ifndef USMC_SYS_H
#define USMC_SYS_H

#include <poll.h>
#include <stdbool.h>
#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>

static inline long sys_ret(long r)
{
	return r < 0 ? -errno : r;
}

static inline int sys_close(int fd)
{
	return (int)sys_ret(syscall(SYS_close, fd));
}

static inline ssize_t sys_read(int fd, void *buf, size_t len)
{
	return sys_ret(syscall(SYS_read, fd, buf, len));
}

static inline ssize_t sys_write(int fd, const void *buf, size_t len)
{
	return sys_ret(syscall(SYS_write, fd, buf, len));
}

static inline int sys_fcntl(int fd, int cmd, long arg)
{
	return (int)sys_ret(syscall(SYS_fcntl, fd, cmd, arg));
}

static inline int sys_poll(struct pollfd *fds, nfds_t n, int timeout)
{
	return (int)sys_ret(syscall(SYS_poll, fds, n, timeout));
}

static inline int sys_ioctl(int fd, unsigned long req, void *arg)
{
	return (int)sys_ret(syscall(SYS_ioctl, fd, req, arg));
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
/* RLIMIT_NOFILE's soft limit (LONG_MAX: none): cached for up to a second,
 * or read now (fresh). */
long usmc_nofile_limit(bool fresh);
/* Close an internal descriptor. */
static inline int usmc_ifd_close(int fd)
{
	if (fd < 0)
		return 0;
	usmc_ifd_unmark(fd);
	return sys_close(fd);
}

#endif
