// SPDX-License-Identifier: MIT
/*
 * real.c - the table of libc functions past libusmc's wrappers (real.h).
 */
#include "real.h"
#include "usmc.h"

#include <dlfcn.h>

struct usmc_real real;
_Atomic int usmc_real_ready;

#define R(name) real.name = dlsym(RTLD_NEXT, #name)
/*
 * Fill the whole table, then say so (release, pairs with ENSURE_REAL's
 * acquire): a wrapper that runs before the constructor (another library's
 * constructor, a thread it started) may use any entry once it sees the
 * flag.  Idempotent: two callers racing store the same values.
 */
void usmc_real_init(void)
{
	R(socket); R(socketpair); R(connect); R(listen); R(accept); R(accept4);
	R(close); R(shutdown); R(read); R(write); R(readv); R(writev);
	R(recv); R(send); R(recvfrom); R(sendto); R(recvmsg); R(sendmsg);
	R(recvmmsg); R(sendmmsg); R(sendfile); R(splice); R(poll); R(ppoll);
	R(select); R(pselect); R(epoll_create); R(epoll_create1); R(epoll_ctl);
	R(epoll_wait); R(epoll_pwait); R(epoll_pwait2); R(dup); R(dup2); R(dup3);
	R(fcntl); R(ioctl); R(getsockopt); R(setsockopt); R(close_range); R(execve);
	R(open); R(open64); R(openat); R(openat64); R(pipe); R(pipe2); R(eventfd);
	R(__open_2); R(__open64_2); R(__openat_2); R(__openat64_2);
	R(fopen); R(fopen64); R(opendir);
	R(fdopen); R(vdprintf); R(__vdprintf_chk);
	R(fclose); R(sigaction); R(signal); R(fork); R(execvpe); R(fexecve); R(_exit);
	R(prctl); R(posix_spawn); R(posix_spawnp); R(posix_spawn_file_actions_adddup2);
	R(posix_spawn_file_actions_addclose); R(posix_spawn_file_actions_addclosefrom_np);
	R(posix_spawn_file_actions_init); R(posix_spawn_file_actions_destroy);
	STORE_RELEASE(&usmc_real_ready, 1);
}
#undef R
