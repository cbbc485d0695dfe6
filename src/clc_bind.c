// SPDX-License-Identifier: MIT
/*
 * clc_bind.c - the CLC decision bound to the TCP connection.
 *
 * Discovery and the handshake live in files of the runtime directory, and
 * every process of the user can write those: a neighbour could publish a
 * record for a port it does not own (a plain server's), answer the
 * proposals made to it and take the client's bytes, or post a proposal for
 * a connection it does not hold.  Only the kernel knows which process holds
 * which end of a TCP connection.  So every step that trusts the other end
 * is checked against a mark that only a holder of that end can set: an
 * option on the socket itself, which the kernel reports to anyone in the
 * namespace who asks sock_diag (NETLINK_SOCK_DIAG) for that exact 4-tuple
 * (INET_DIAG_SOCKOPT, Linux 5.10):
 *
 *   USMC_BIND_LISTENER  IP_BIND_ADDRESS_NO_PORT, set on a usmc listener;
 *                       the kernel copies it to every socket the listener
 *                       accepts.  A client proposes, and sends a wake message
 *                       (clc.h), only to a server end that carries it.
 *   USMC_BIND_DECIDED   IP_RECVERR_RFC4884.  A client sets it on its socket
 *                       before it proposes, and a server takes a proposal
 *                       only from a client end that carries it; a server
 *                       sets it on the accepted socket before it answers
 *                       accept, and a client takes an accept only from a
 *                       server end that carries it.
 *
 * Both options are inert where we set them (the port is bound already; TCP
 * queues no ICMP errors for the error queue, so the extension format is
 * never used), no program sets them on a TCP socket, and getsockopt shows
 * a program the value it set itself (interpose.c).
 *
 * A lookup that finds no such connection in our namespace means the other
 * end lives in another one (route.c proved which): the kernel cannot tell
 * us there, and the runtime directory the namespaces share is trusted, as
 * docs/containers.md says.  One netlink request per check.
 */
#include "clc_bind.h"
#include "nl.h"

#include <linux/inet_diag.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "real.h"
#include "sandbox.h"
#include "sock.h"
#include "sys.h"

#ifndef IP_RECVERR_RFC4884
#define IP_RECVERR_RFC4884	26
#endif

static int mark_option(int mark)
{
	return mark == USMC_BIND_LISTENER ? IP_BIND_ADDRESS_NO_PORT : IP_RECVERR_RFC4884;
}

int usmc_bind_mark(int fd, int mark)
{
	static const int one = 1;

	/* SOL_IP on an AF_INET6 socket too: the option lives in the IPv4
	 * part every inet socket has, which is what sock_diag reports. */
	return real.setsockopt(fd, SOL_IP, mark_option(mark), &one, sizeof(one)) ? -errno : 0;
}

bool usmc_bind_is_mark_option(int level, int name)
{
	return level == SOL_IP && (name == IP_BIND_ADDRESS_NO_PORT || name == IP_RECVERR_RFC4884);
}

static uint32_t app_flag(int name)
{
	return name == IP_BIND_ADDRESS_NO_PORT ? SKF_APP_NOPORT : SKF_APP_RFC4884;
}

/* After the kernel answered (its errors and its length rules): the
 * program's own value, an int or, asked for less, one byte. */
int usmc_bind_getsockopt(struct usmc_sock *sk, int fd, int name, void *val, socklen_t *len)
{
	int v = sk_flag(sk, app_flag(name)) ? 1 : 0;

	if (real.getsockopt(fd, SOL_IP, name, val, len))
		return -1;
	if (*len >= sizeof(int))
		*(int *)val = v;
	else if (*len == 1)
		*(unsigned char *)val = (unsigned char)v;
	return 0;
}

/* The program's value as the kernel parses it (an int, or one byte when
 * it gives less; nothing read for no length), and the kernel's errors for
 * its pointer and length: set on a scratch inet socket, so the kernel
 * reads the program's memory and never we.  Out of descriptors: read it
 * ourselves (a program at its limit passing a bad pointer faults). */
static int app_value(int name, const void *val, socklen_t len, int *v)
{
	socklen_t l = sizeof(*v);
	int s, rc;

	s = (int)usmc_sys(SYS_socket, AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	if (s < 0) {
		if (!val && len)
			return -EFAULT;
		*v = len >= sizeof(int) ? *(const int *)val : len ? *(const unsigned char *)val : 0;
		return 0;
	}
	rc = (int)usmc_sys6(SYS_setsockopt, s, SOL_IP, name, (long)val, len, 0);
	if (!rc)
		rc = (int)usmc_sys6(SYS_getsockopt, s, SOL_IP, name, (long)v, (long)&l, 0);
	sys_close(s);
	return rc;
}

/*
 * setsockopt() of a mark option on one of our sockets: remember the
 * program's value, and give the kernel our mark, no more and no less, in
 * one write: a mark is never off for an instant (a client proving our
 * accept, or a listener's end, at that instant would move to TCP while we
 * use the ring), nor on where it must not be.  Under sk->lock: a server
 * deciding in another thread marks under it (accept.c).  0 or -1 with
 * errno, as the kernel.
 */
int usmc_bind_setsockopt(struct usmc_sock *sk, int fd, int name, const void *val, socklen_t len)
{
	int v = 0, want, cur = 0, rc;
	socklen_t l = sizeof(cur);

	rc = app_value(name, val, len, &v);
	if (rc) {
		errno = -rc;
		return -1;
	}
	pthread_mutex_lock(&sk->lock);
	if (name == IP_BIND_ADDRESS_NO_PORT) {
		/* Ours on a listener that published, and kept where the
		 * kernel has it on a listener or what one accepted (copied);
		 * elsewhere the program's: it changes what bind does. */
		bool kept = (sk->kind == SK_LISTEN || (sk->kind == SK_CONN && sk->role == 'S')) &&
			    !real.getsockopt(fd, SOL_IP, name, &cur, &l) && cur;

		want = v || kept || (sk->kind == SK_LISTEN && sk->lst);
	} else {
		/* Ours on a client and on a server end that decided; the
		 * program's value never reaches the kernel (on a socket that
		 * becomes a listener it would be copied to what it accepts,
		 * which would say it decided before it did). */
		want = sk->kind == SK_CONN && (sk->role == 'C' || sk_mode(sk) == USMC_MODE_SMCD);
	}
	rc = real.setsockopt(fd, SOL_IP, name, &want, sizeof(want));
	if (!rc) {
		if (v)
			sk_set_flag(sk, app_flag(name));
		else
			sk_clear_flag(sk, app_flag(name));
	}
	pthread_mutex_unlock(&sk->lock);
	return rc;
}

static int sockopt_marks(const struct inet_diag_sockopt *o)
{
	return (o->bind_address_no_port ? USMC_BIND_LISTENER : 0) |
	       (o->recverr_rfc4884 ? USMC_BIND_DECIDED : 0);
}

/* What diag_ask saw of the socket besides its marks: its inode (0 once
 * no file holds it) and its state. */
struct diag_seen {
	uint32_t ino;
	uint8_t state;
};

/* Ask for the socket whose own address is src and whose peer is dst (dst
 * port 0: the listener on src).  Its marks as usmc_bind_peer_marks, or
 * -EAGAIN: a connection not established on that side yet (SYN_RECV: no
 * socket options to report).  *seen, if asked for, as above. */
static int diag_ask(int s, const struct usmc_addr *src, const struct usmc_addr *dst,
		    struct diag_seen *seen)
{
	struct {
		struct nlmsghdr h;
		struct inet_diag_req_v2 r;
	} q;
	char buf[USMC_NL_BUF] __attribute__((aligned(8)));
	bool v4 = usmc_addr_is_v4(src) && (!dst->port || usmc_addr_is_v4(dst));
	const struct inet_diag_msg *m;
	const struct rtattr *a;
	struct nlmsghdr *h;
	int rc;

	memset(&q, 0, sizeof(q));
	q.h.nlmsg_len = sizeof(q);
	q.h.nlmsg_type = SOCK_DIAG_BY_FAMILY;
	q.r.sdiag_family = v4 ? AF_INET : AF_INET6;
	q.r.sdiag_protocol = IPPROTO_TCP;
	q.r.idiag_states = ~0u;
	q.r.id.idiag_sport = htons(src->port);
	q.r.id.idiag_dport = htons(dst->port);
	memcpy(q.r.id.idiag_src, v4 ? src->a + 12 : src->a, v4 ? 4 : 16);
	if (dst->port)
		memcpy(q.r.id.idiag_dst, v4 ? dst->a + 12 : dst->a, v4 ? 4 : 16);
	q.r.id.idiag_cookie[0] = q.r.id.idiag_cookie[1] = INET_DIAG_NOCOOKIE;
	rc = usmc_nl_ask(s, &q.h, buf, sizeof(buf), &h);
	if (rc)
		return rc;
	if (h->nlmsg_type != SOCK_DIAG_BY_FAMILY || h->nlmsg_len < NLMSG_LENGTH(sizeof(*m)))
		return -EPROTO;
	m = NLMSG_DATA(h);
	/* The exact connection (a lookup falls back to a listener on src). */
	if (m->id.idiag_sport != htons(src->port) || m->id.idiag_dport != htons(dst->port))
		return -ENOENT;
	if (seen) {
		seen->ino = m->idiag_inode;
		seen->state = m->idiag_state;
	}
	if (m->idiag_state == TCP_SYN_RECV && dst->port)
		return -EAGAIN;
	a = usmc_nl_attr((const struct rtattr *)(m + 1), (long)(h->nlmsg_len - NLMSG_LENGTH(sizeof(*m))),
			 INET_DIAG_SOCKOPT);
	if (!a || RTA_PAYLOAD(a) < sizeof(struct inet_diag_sockopt))
		return -EOPNOTSUPP;	/* a kernel before 5.10 */
	return sockopt_marks(RTA_DATA(a));
}

/*
 * One sock_diag socket per process, among usmc's own descriptors (ifd.c),
 * so a check costs a request and not a socket (a third of the time).  A
 * fork child closes its copy of the parent's and opens its own on first
 * use: sharing one would mix the two processes' answers.
 * A thread that finds it in use (or a signal handler that interrupted its
 * user) takes a socket of its own for the one request.
 *
 * The child's copy of diag_fd is only a number: fork() copies the
 * descriptor table before the memory, and a parent thread that opened the
 * socket in between leaves the child a diag_fd it has no descriptor for.
 * The child soon has a file of its own there (a link group's, moved to
 * the same lowest free number above usmc_ifd_base): closing "the parent's
 * copy" by number closed that one (its connections then fell back,
 * out_of_memory).  So the child closes the number only while it still
 * names the very socket the parent opened (diag_dev, diag_ino).
 */
static int diag_fd = -1;
static pid_t diag_pid;
static dev_t diag_dev;		/* diag_fd's socket, for a fork child's check */
static ino_t diag_ino;
static bool diag_shed;		/* the application needed its number (shed.c) */
static pthread_mutex_t diag_lock = PTHREAD_MUTEX_INITIALIZER;

/* A fork child's diag_fd (see above): its copy of the parent's socket is
 * closed; a number that names anything else is not ours to close. */
static void diag_drop_inherited(void)
{
	struct stat st;

	if (diag_fd >= 0 && !fstat(diag_fd, &st) && st.st_dev == diag_dev &&
	    st.st_ino == diag_ino)
		usmc_ifd_close(diag_fd);
	diag_fd = -1;
}

/* A socket for one request: the process's, held under diag_lock until
 * diag_put() (*held), or one of the caller's own. */
static int diag_get(bool *held)
{
	int s;

	*held = false;
	if (pthread_mutex_trylock(&diag_lock))
		return usmc_nl_open(NETLINK_SOCK_DIAG);
	if (diag_shed) {
		pthread_mutex_unlock(&diag_lock);
		return usmc_nl_open(NETLINK_SOCK_DIAG);
	}
	if (diag_fd < 0 || diag_pid != usmc_getpid()) {
		struct stat st;

		diag_drop_inherited();	/* a fork that bypassed our handlers */
		s = usmc_nl_open(NETLINK_SOCK_DIAG);
		if (s < 0) {
			pthread_mutex_unlock(&diag_lock);
			return s;
		}
		usmc_ifd_mark(s);
		s = usmc_ifd_move_high(s, false);
		if (fstat(s, &st)) {
			int rc = -errno;

			usmc_ifd_close(s);
			pthread_mutex_unlock(&diag_lock);
			return rc;
		}
		diag_dev = st.st_dev;
		diag_ino = st.st_ino;
		diag_pid = usmc_getpid();
		diag_fd = s;
	}
	*held = true;
	return diag_fd;
}

/* Out of descriptors (shed.c): ours goes, and none is kept from now on:
 * each check opens one for its request.  1 if one was closed. */
int usmc_bind_shed(void)
{
	int n = 0;

	if (pthread_mutex_trylock(&diag_lock))
		return 0;
	diag_shed = true;
	if (diag_fd >= 0) {		/* (used only under the lock) */
		usmc_ifd_close(diag_fd);
		n = 1;
	}
	diag_fd = -1;
	pthread_mutex_unlock(&diag_lock);
	return n;
}

static void diag_put(int s, bool held)
{
	if (held)
		pthread_mutex_unlock(&diag_lock);
	else
		usmc_nl_close(s);
}

/* One request on a socket of ours (diag_get), as diag_ask answers it. */
static int diag_once(const struct usmc_addr *src, const struct usmc_addr *dst,
		     struct diag_seen *seen)
{
	bool held;
	int s = diag_get(&held), rc;

	if (s < 0)
		return s;
	rc = diag_ask(s, src, dst, seen);
	diag_put(s, held);
	return rc;
}

/* The marks of the listener on peer that our connection local -> peer
 * would reach, as diag_ask gives them. */
static int listener_marks(const struct usmc_addr *local, const struct usmc_addr *peer)
{
	struct usmc_addr any = *local;

	any.port = 0;
	return diag_once(peer, &any, NULL);
}

int usmc_bind_peer_marks(const struct usmc_addr *local, const struct usmc_addr *peer)
{
	int rc = diag_once(peer, local, NULL);

	/* Not established on that side yet (SYN_RECV): nobody decided it,
	 * and its listener's mark is the one it will have.  Pending: the
	 * kernel dropped the handshake's last ACK (the listener's accept
	 * queue was full, whatever it holds now), or that ACK still waits in
	 * a softirq backlog; the first needs a TCP segment from the client,
	 * and the two look alike. */
	if (rc == -EAGAIN) {
		rc = listener_marks(local, peer);
		if (rc >= 0)
			rc = (rc & USMC_BIND_LISTENER) | USMC_BIND_PENDING;
	}
	return rc;
}

int usmc_bind_peer_marked(const struct usmc_addr *local, const struct usmc_addr *peer, int mark)
{
	int rc = usmc_bind_peer_marks(local, peer);

	return rc < 0 ? rc : (rc & mark) != 0;
}

bool usmc_bind_listener_here(const struct usmc_addr *local, const struct usmc_addr *peer)
{
	int rc = listener_marks(local, peer);

	return rc > 0 && (rc & USMC_BIND_LISTENER);
}

int usmc_bind_conn_held(const struct usmc_addr *src, const struct usmc_addr *dst)
{
	struct diag_seen seen = { 0, 0 };
	int rc = diag_once(src, dst, &seen);

	if (rc == -ENOENT)
		return rc;
	if (rc < 0 && rc != -EAGAIN && rc != -EOPNOTSUPP)
		return rc;
	/* An orphan closing: no file holds it.  Not TIME_WAIT: a socket
	 * still held goes there too once both FINs passed (its full socket,
	 * closed and unhashed, waits for its holder's close). */
	switch (seen.state) {
	case TCP_FIN_WAIT1:
	case TCP_FIN_WAIT2:
	case TCP_CLOSING:
	case TCP_LAST_ACK:
		return seen.ino != 0;
	default:
		return 1;
	}
}

/* Fork child (atfork.c): the only thread now; a parent thread may have
 * held diag_lock at the fork. */
void usmc_bind_after_fork(void)
{
	pthread_mutex_init(&diag_lock, NULL);
	/* Before the child opens anything of its own (see diag_fd); under a
	 * seccomp filter no system call of ours (sandbox.c): the copy stays,
	 * unused. */
	if (!usmc_sandboxed())
		diag_drop_inherited();
}
