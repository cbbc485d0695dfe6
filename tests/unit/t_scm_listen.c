// SPDX-License-Identifier: MIT
/*
 * t_scm_listen.c - a connection handed over a UNIX connection that nobody
 * accepted yet (scm_peer.c, listeners).
 *
 * Dovecot's imap-login hands each logged-in client (SCM_RIGHTS) to an imap
 * process over the master's UNIX listener, and the master starts that
 * process once the login process connected: the message is queued before
 * any process accepted, so no reader ever said it runs libusmc, and the
 * connection moved to TCP (handed_over).  A usmc process that listens on
 * a UNIX socket announces the listener's file; every process that accepts
 * from it inherited it from a usmc image, or was tainted by an exec or
 * spawn without libusmc.
 *
 * This process (under usmc) listens on a UNIX path and connects to it;
 * then starts the receiver (this program exec'ed with the listener, role
 * receiver) and sends it the server end of a shared-memory connection.
 * The receiver accepts, takes the socket, reads a request and answers it;
 * every byte is checked.
 *
 *   on_demand       the receiver runs libusmc and accepts 20 ms after the
 *                   send began (found by the queue: the send waits for the
 *                   accept): the socket stays on shared memory in the
 *                   receiver (no handed_over), and the client's end with it
 *   accepted_first  the same, accepted before the send (found by the file)
 *   plain, plain_first  the receiver runs without libusmc (its exec
 *                   tainted the listener): the socket moves to TCP before
 *                   it leaves (handed_over), the bytes arrive all the same
 *
 * Skips (77) when not accelerating.
 */
#include "t_util.h"

#include <pthread.h>
#include <sys/un.h>

#define REQ	200000
#define RESP	300000
#define PAT_REQ	31
#define PAT_RESP 32

/*
 * Role receiver: says it is up on sync, then accepts on the inherited
 * listener once the parent opens the gate (first: before the parent
 * sends, and says so), takes the socket, serves it.
 */
static int receiver(int lfd, int sync, bool first)
{
	int c, fd;

	t_sync_post(sync);		/* up */
	t_sync_wait(sync);		/* the gate */
	c = t_accept(lfd);
	if (first) {
		t_sync_post(sync);	/* accepted */
		t_sync_wait(sync);	/* sent: we never read before it */
	}
	fd = t_recv_fd(c, MSG_CMSG_CLOEXEC);
	t_recv_pat(fd, PAT_REQ, REQ);
	t_send_pat(fd, PAT_RESP, RESP);
	t_assert(read(fd, &(char){ 0 }, 1) == 0, "receiver: EOF expected");
	close(fd);
	close(c);
	close(lfd);
	close(sync);
	return 0;
}

/* Opens the gate 20 ms after it starts: the parent is in sendmsg then. */
static void *gate_later(void *arg)
{
	t_msleep(20);
	t_sync_post(*(int *)arg);
	return NULL;
}

#define R_PLAIN	0x1	/* the receiver runs without libusmc */
#define R_FIRST	0x2	/* it accepts before the parent sends */

static void handover(int how)
{
	long long before = t_fallbacks("handed_over");
	struct sockaddr_un a = { .sun_family = AF_UNIX };
	bool plain = how & R_PLAIN;
	int lfd, ux, c, s, sv[2];
	pthread_t gate;
	pid_t rcv;

	snprintf(a.sun_path, sizeof(a.sun_path), "/tmp/t_scm_listen.%d.%d", (int)getpid(), how);
	unlink(a.sun_path);
	/* First: its check runs `usmc stat`, a program without libusmc,
	 * which would inherit (and taint) the listener. */
	t_pair_smc(&c, &s);
	t_ok(fcntl(c, F_SETFD, FD_CLOEXEC));	/* the receiver holds only what it is given */
	t_ok(fcntl(s, F_SETFD, FD_CLOEXEC));
	lfd = t_ok(socket(AF_UNIX, SOCK_STREAM, 0));	/* inherited across exec */
	t_ok(bind(lfd, (struct sockaddr *)&a, sizeof(a)));
	t_ok(listen(lfd, 8));
	t_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	t_ok(fcntl(sv[1], F_SETFD, 0));
	ux = t_ok(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
	t_ok(connect(ux, (struct sockaddr *)&a, sizeof(a)));
	rcv = t_start_role(how & R_FIRST ? "receiver-first" : "receiver", lfd, sv[1], plain);
	close(sv[1]);
	close(lfd);
	t_sync_wait(sv[0]);		/* up: its exec is done */
	if (how & R_FIRST) {
		t_sync_post(sv[0]);
		t_sync_wait(sv[0]);	/* accepted */
		t_send_fd(ux, s);
		t_sync_post(sv[0]);	/* sent */
	} else {
		/* Not accepted when we send: the send waits for the accept. */
		t_ok(pthread_create(&gate, NULL, gate_later, &sv[0]) ? -1 : 0);
		t_send_fd(ux, s);
		pthread_join(gate, NULL);
	}
	close(s);
	t_send_pat(c, PAT_REQ, REQ);
	t_recv_pat(c, PAT_RESP, RESP);
	if (!plain)
		t_assert_smc(c);
	close(c);
	t_wait_child(rcv, "receiver");
	close(ux);
	close(sv[0]);
	unlink(a.sun_path);
	t_assert(t_fallbacks("handed_over") == before + plain, "handed_over %lld, was %lld (%s)",
		 t_fallbacks("handed_over"), before, plain ? "plain receiver" : "usmc receiver");
}

static void check_on_demand(void)
{
	handover(0);
}

static void check_accepted_first(void)
{
	handover(R_FIRST);
}

static void check_plain(void)
{
	handover(R_PLAIN);
}

static void check_plain_first(void)
{
	handover(R_PLAIN | R_FIRST);
}

static const struct t_check checks[] = {
	{ "on_demand", check_on_demand },
	{ "accepted_first", check_accepted_first },
	{ "plain", check_plain },
	{ "plain_first", check_plain_first },
};

int main(int argc, char **argv)
{
	t_name = "t_scm_listen";
	signal(SIGPIPE, SIG_IGN);
	if (argc == 4 && !strncmp(argv[1], "receiver", 8)) {
		alarm(60);
		return receiver(atoi(argv[2]), atoi(argv[3]), !strcmp(argv[1], "receiver-first"));
	}
	if (!t_accel())
		t_skip("not accelerating");
	t_tcp_conns = -1;	/* each check counts what moved itself */
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
