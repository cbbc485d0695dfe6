// SPDX-License-Identifier: MIT
/*
 * exit.c - a process's sockets when it ends (exit() or _exit()).
 */
#include "af_usmc.h"
#include "close.h"
#include "conn.h"
#include "exit.h"
#include "fdtab.h"
#include "listener.h"
#include "sock.h"
#include "sys.h"
#include "tcp.h"

#include <fcntl.h>
#include <stdlib.h>

/*
 * Process exit, exit() or _exit() (exec.c usmc_process_exit): the kernel
 * is about to close our descriptors, so each socket's shared count loses
 * this process, as a close would make it.  Each socket once:
 *  - others still hold it (a forking server's child leaving with copies
 *    of its parent's sockets, which it never used): only our share goes,
 *    so that their last close is the last one.  It used to stay counted:
 *    the close protocol never ran, a client's slot stayed busy, and link
 *    groups piled up until descriptors ran out;
 *  - we hold the last: a listener is unregistered and its index removed;
 *    a connection gets its last close's lock-free part (usmc_conn_exit)
 *    and its shared half is freed, but only while nothing else can run
 *    here (one thread); otherwise the kernel's FIN tells the peer.
 * Nothing waits, and no lock is taken beyond unregistering a listener:
 * exit() may come from a signal handler inside one of our calls.  A
 * later close of one of them (a thread still running, a destructor after
 * ours) finds its share gone (exit_dropped) and lets go of nothing more.
 */
struct exit_ctx {
	bool alone;
	bool settle;
};

/*
 * Does this process have one thread?  __libc_single_threaded never goes
 * back to true, not even in a child forked from a process with threads
 * (where the answer matters most), so then the kernel is asked: field 20
 * of /proc/self/stat, with raw system calls (a signal handler may be
 * calling).  Unknown counts as "no".
 */
static bool exit_alone(void)
{
	char buf[512], *p;
	ssize_t n;
	int fd, field;

	if (__libc_single_threaded)
		return true;
	fd = (int)usmc_sys6(SYS_openat, AT_FDCWD, (long)"/proc/self/stat", O_RDONLY | O_CLOEXEC, 0, 0, 0);
	if (fd < 0)
		return false;
	n = sys_read(fd, buf, sizeof(buf) - 1);
	sys_close(fd);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	/* The command name may hold spaces and parentheses: count from its end. */
	p = strrchr(buf, ')');
	for (field = 2; p && field < 20; field++)
		p = strchr(p + 1, ' ');
	return p && strtol(p + 1, NULL, 10) == 1;
}

/*
 * Does our private half (slot, rings) go with the shared mode?  Not in a
 * copy forked while another thread was connecting the socket: the mode
 * says proposed (stored after the fork, in shared memory) while the copy
 * was made before the slot was bound.
 */
static bool exit_private_ok(const struct usmc_sock *sk)
{
	uint32_t m = sk_mode(sk);

	return (m != USMC_MODE_PROPOSED && m != USMC_MODE_SMCD) || (sk->lgr && sk->ctrl);
}

/*
 * _exit(): a peer that moved to TCP while we never looked is still owed
 * the bytes it had not read from our ring; the look that exit() makes
 * sends them before the kernel's FIN.  Only while none of the
 * connection's locks is held (a handler that interrupted one of our calls
 * may be the one exiting; another thread in a call on it keeps its bytes
 * for its own look).
 */
static bool exit_owes_peer(struct usmc_sock *sk)
{
	bool free;

	if (!sk_peer_moved(sk) || pthread_mutex_trylock(&sk->lock))
		return false;
	free = !usmc_family_trylock(&sk->sh->tx_lock);
	if (free) {
		free = !usmc_family_trylock(&sk->sh->rx_lock);
		if (free)
			usmc_family_unlock(&sk->sh->rx_lock);
		usmc_family_unlock(&sk->sh->tx_lock);
	}
	pthread_mutex_unlock(&sk->lock);
	return free;
}

static void exit_one(int fd, struct usmc_sock *sk, struct exit_ctx *x)
{
	int32_t r;

	/* exit(): settle what the counters say about connections we never
	 * looked at again (a client that wrote, shut down and exited).  Not
	 * at _exit(), which skips the process's cleanup, nor where our copy
	 * cannot (looking at the answer without the slot crashed). */
	if (sk->kind == SK_CONN && exit_private_ok(sk) &&
	    (x->settle || exit_owes_peer(sk))) {
		usmc_sock_refresh(sk, fd);
		if (sk_flag(sk, SKF_COUNT_LATER))
			usmc_sock_count_late(sk, fd);
	}
	if (LOAD_RELAXED(&sk->sh->in_use) == USMC_SH_PRIVATE)
		return;
	r = atomic_load(&sk->sh->refs);
	while (r > 1)
		if (atomic_compare_exchange_weak(&sk->sh->refs, &r, r - 1))
			goto dropped;
	/* Ours is the last copy: the peer's CLC message, if it came, is taken
	 * (threads or not: the look arbitrates), or the kernel's close of a
	 * socket with an unread byte resets it (close.c, at a close). */
	if (r == 1 && sk->kind == SK_CONN && sk_close_owes_byte(sk) && exit_private_ok(sk))
		usmc_tcp_skip_wake(sk, fd, true);
	if (r != 1 || (sk->kind != SK_LISTEN && !x->alone) ||
	    !atomic_compare_exchange_strong(&sk->sh->refs, &r, 0))
		return;
	if (sk->kind == SK_LISTEN)
		usmc_listen_release(sk);
	else if (sk->kind == SK_CONN && exit_private_ok(sk))
		usmc_conn_exit(sk, fd);
	usmc_family_free(sk->sh);
dropped:
	STORE_RELAXED(&sk->exit_dropped, true);
}

/*
 * Another thread may be closing the socket as we go (libzmq's reaper
 * closes its listeners while the main thread runs exit(): the two
 * released one listener at once, and the exit freed a shared half the
 * close had taken away, SIGSEGV).  A reference of ours keeps the object
 * and its shared half ours until we are done: a close that came before
 * it released the socket itself (we skip it; so we do a descriptor no
 * longer the socket's).  One after it leaves the last reference to us,
 * and it stays taken: the release could wait (a proposal, a byte owed)
 * or take a lock a handler interrupted, and the process is ending; the
 * kernel's FIN tells the peer, as for a socket a thread left open.
 */
static void exit_sock(int fd, struct usmc_sock *sk, void *arg)
{
	struct usmc_sock *now;

	if (!usmc_sock_get_live(sk))
		return;
	now = usmc_fd_peek(fd);
	if (now && now == sk)
		exit_one(fd, now, arg);
	local_fetch_add_int(&sk->ref, -1);
}

void usmc_socks_exit(bool settle)
{
	static _Atomic bool done;
	struct exit_ctx x;

	if (atomic_exchange(&done, true))
		return;
	x.alone = exit_alone();
	x.settle = settle;
	usmc_fd_foreach_sock(exit_sock, &x);
}
