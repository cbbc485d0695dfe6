// SPDX-License-Identifier: MIT
/*
 * t_scm_forge.c - forged tickets (src/scm.h): a process of the same user
 * that does not run usmc (the forger, this program exec'ed without
 * libusmc) passes a TCP connection of its own to a usmc receiver (this
 * program exec'ed under usmc) with SCM_RIGHTS, followed by a ticket and
 * extra descriptors it made up.  The receiver, like a program that expects
 * one descriptor, takes the first and talks on it: a probe byte out, then
 * the forger's answer of ANSWER pattern bytes and EOF.  It must never
 * crash or hang, and never read anything but the forger's bytes on it:
 * the worst outcome is that connection on TCP, or reset (the forger said
 * it was on shared memory).  Meanwhile the receiver holds a connection of
 * its own on shared memory (the victim) with VICTIM pattern bytes unread
 * in its ring; at the end every one of them is read, in order, and the
 * victim still carries bytes both ways.
 *
 *   garbage        a "ticket" of random bytes: no ticket; the program gets
 *                  every descriptor, as the kernel delivered them
 *   wrong_memfd    the family region is a small memfd
 *   truncated      the family region is one page short (sealed)
 *   unsealed       the family region has the size but no seals
 *   bad_index      a sealed region of zeros: shared half out of range, not
 *                  in use, extras out of range, positions out of range,
 *                  more extras named than sent, a record for every slot
 *   own_region     a region the forger made (sealed, slot in use) whose
 *                  shared half says rings, undecided, migrating, TCP or
 *                  nonsense, under records that say TCP, shared memory or
 *                  nothing: never a ring where the receiver has none
 *   fifo           a FIFO among the extras, and a FIFO as the ticket
 *   other_socket   the receiver's own family region (opened through
 *                  /proc), naming each shared half in use there: the
 *                  victim's among them (the receiver used to install the
 *                  forger's descriptor on the victim's socket and read the
 *                  victim's bytes from it)
 *   listener_lie   records of a listener, and a bound socket, for the
 *                  connection (kinds that do not match the kernel socket)
 *
 * usage: t_scm_forge [check...]
 */
#include "scm.h"
#include "sock.h"

#include "t_util.h"

#include <dirent.h>
#include <sys/mman.h>
#include <sys/stat.h>

#define VICTIM		4096
#define ANSWER		1000
#define PAT_VICTIM	31
#define PAT_ANSWER	32

#define FAMILY_LEN	(sizeof(struct usmc_sock_sh) * USMC_FAMILY_OBJS)

/* Outcomes the receiver reports per message. */
#define R_DATA	'd'	/* the forger's answer, then EOF */
#define R_RESET	'r'	/* reset (or EPIPE) */
#define R_NOFD	'n'	/* no descriptor delivered (not a socket) */

static void to_addr(struct usmc_addr *out, int fd, bool peer)
{
	struct sockaddr_in a;
	socklen_t l = sizeof(a);

	memset(out, 0, sizeof(*out));
	t_ok(peer ? getpeername(fd, (struct sockaddr *)&a, &l) :
		    getsockname(fd, (struct sockaddr *)&a, &l));
	out->a[10] = out->a[11] = 0xff;
	memcpy(out->a + 12, &a.sin_addr, 4);
	out->port = ntohs(a.sin_port);
}

static int memfd_with(const void *data, size_t len, size_t size, unsigned int seals)
{
	int fd = t_ok(memfd_create("forged", MFD_CLOEXEC | MFD_ALLOW_SEALING));

	t_ok(ftruncate(fd, (off_t)size));
	if (len)
		t_assert(pwrite(fd, data, len, 0) == (ssize_t)len, "pwrite");
	if (seals)
		t_ok(fcntl(fd, F_ADD_SEALS, seals));
	return fd;
}

/* ---- receiver (under usmc) --------------------------------------------- */

/* Talk on fd as the program would: probe out, the answer in. */
static char talk(int fd)
{
	char buf[ANSWER + 64], p = 'P';
	size_t got = 0;
	ssize_t n;

	if (write(fd, &p, 1) != 1)
		return R_RESET;
	for (;;) {
		if (!t_wait_fd(fd, POLLIN, 5000))
			t_fail("no answer in 5 s (hang)");
		n = read(fd, buf + got, sizeof(buf) - got);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == ECONNRESET || errno == EPIPE))
			return R_RESET;
		if (n < 0)
			t_fail("read: %s", strerror(errno));
		if (n == 0)
			break;
		if (t_pat_check(PAT_ANSWER, got, buf + got, (size_t)n) >= 0)
			t_fail("read bytes that are not the forger's (victim's: %s)",
			       t_pat_check(PAT_VICTIM, got, buf + got, (size_t)n) < 0 ? "yes" : "no");
		got += (size_t)n;
	}
	t_assert(got == ANSWER, "a clean EOF after %zu of %d bytes", got, ANSWER);
	return R_DATA;
}

static int receiver(int chan)
{
	char cbuf[CMSG_SPACE(64 * sizeof(int))], b, out;
	int vc, vs;

	/* The victim: on shared memory, its bytes unread in our ring. */
	t_pair(&vc, &vs);
	t_send_pat(vc, PAT_VICTIM, VICTIM);
	t_wait_fd(vs, POLLIN, 5000);
	t_assert_smc(vs);
	t_sync_post(chan);
	for (;;) {
		struct iovec v = { &b, 1 };
		struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		struct cmsghdr *c;
		ssize_t n;
		int fd = -1;

		do
			n = recvmsg(chan, &m, MSG_CMSG_CLOEXEC);
		while (n < 0 && errno == EINTR);
		t_assert(n >= 0, "recvmsg: %s", strerror(errno));
		if (n == 0 || b == 'E')
			break;
		/* Whatever came is the program's: the first is its socket,
		 * the rest it closes. */
		for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
			size_t i, k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

			for (i = 0; c->cmsg_type == SCM_RIGHTS && i < k; i++) {
				int d;

				memcpy(&d, CMSG_DATA(c) + i * sizeof(int), sizeof(d));
				if (fd < 0)
					fd = d;
				else
					close(d);
			}
		}
		out = R_NOFD;
		if (fd >= 0) {
			struct stat st;

			if (!fstat(fd, &st) && S_ISSOCK(st.st_mode))
				out = talk(fd);
			close(fd);
		}
		t_sync_send(chan, &out, 1);
	}
	/* The victim is whole, and still works both ways. */
	t_recv_pat(vs, PAT_VICTIM, VICTIM);
	t_assert_smc(vs);
	t_send_pat(vs, PAT_ANSWER, ANSWER);
	t_recv_pat(vc, PAT_ANSWER, ANSWER);
	close(vc);
	close(vs);
	return 0;
}

/* ---- forger (no usmc) -------------------------------------------------- */

struct forge {
	int chan;
	pid_t receiver;
	int msgs, resets;
};

/*
 * One message: a fresh TCP connection of ours (its client end first), the
 * descriptors in extra[] after it; the receiver talks, we answer.
 */
static void send_pair(struct forge *f, int c, int s, const int *extra, int nextra)
{
	char cbuf[CMSG_SPACE(64 * sizeof(int))], b = 'm', out;
	int fds[64], i;
	struct iovec v = { &b, 1 };
	struct msghdr m = { .msg_iov = &v, .msg_iovlen = 1, .msg_control = cbuf,
			    .msg_controllen = CMSG_SPACE((size_t)(nextra + 1) * sizeof(int)) };
	struct cmsghdr *cm;

	fds[0] = c;
	for (i = 0; i < nextra; i++)
		fds[i + 1] = extra[i];
	memset(cbuf, 0, sizeof(cbuf));
	cm = CMSG_FIRSTHDR(&m);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN((size_t)(nextra + 1) * sizeof(int));
	memcpy(CMSG_DATA(cm), fds, (size_t)(nextra + 1) * sizeof(int));
	t_assert(sendmsg(f->chan, &m, 0) == 1, "sendmsg: %s", strerror(errno));
	close(c);
	/* The probe (or a reset), then our answer. */
	if (t_wait_fd(s, POLLIN, 5000) && read(s, &b, 1) == 1) {
		t_assert(b == 'P', "probe 0x%02x", (uint8_t)b);
		signal(SIGPIPE, SIG_IGN);
		t_send_pat(s, PAT_ANSWER, ANSWER);
	}
	close(s);
	if (!t_sync_recv(f->chan, &out, 1))
		t_fail("the receiver died (message %d)", f->msgs);
	t_assert(out == R_DATA || out == R_RESET, "outcome %c", out);
	f->msgs++;
	f->resets += out == R_RESET;
}

static void send_forged(struct forge *f, const int *extra, int nextra)
{
	int c, s;

	t_pair(&c, &s);
	send_pair(f, c, s, extra, nextra);
}

/* A ticket for a message of 1 + nextra descriptors with records r. */
static int ticket(const struct usmc_ticket_rec *r, uint32_t nrec, uint32_t nextra)
{
	size_t len = sizeof(struct usmc_ticket) + nrec * sizeof(*r);
	struct usmc_ticket *t = calloc(1, len);
	int fd;

	t->magic = USMC_TICKET_MAGIC;
	t->version = USMC_PROTO_VERSION;
	t->nprog = 1;
	t->nextra = nextra;
	t->nrec = nrec;
	if (nrec)
		memcpy(t->rec, r, nrec * sizeof(*r));
	fd = memfd_with(t, len, len, 0);
	free(t);
	return fd;
}

/* A record for the connection we pass (send_ticket() writes its real
 * addresses in: the receiver checks them against the kernel socket). */
static struct usmc_ticket_rec conn_rec(uint32_t fam, uint32_t sh, uint32_t mode)
{
	struct usmc_ticket_rec r;

	memset(&r, 0, sizeof(r));
	r.kind = SK_CONN;
	r.fam = fam;
	r.sh = sh;
	r.aux = USMC_TICKET_NONE;
	r.mode = mode;
	r.role = 'C';
	r.lgr_id = 0x1234567890abcdefULL;
	r.slot = 1;
	r.gen = 1;
	r.reg_idx = -1;
	return r;
}

/* Send [conn, ticket(r), extra...], r naming conn's real addresses. */
static void send_ticket(struct forge *f, const struct usmc_ticket_rec *r, uint32_t nrec,
			const int *extra, int nextra)
{
	struct usmc_ticket_rec *w = calloc(nrec ? nrec : 1, sizeof(*w));
	int all[64], i, c, s;
	uint32_t k;

	t_pair(&c, &s);
	for (k = 0; k < nrec; k++) {
		w[k] = r[k];
		to_addr(&w[k].local, c, false);
		to_addr(&w[k].peer, c, true);
	}
	all[0] = ticket(w, nrec, (uint32_t)nextra);
	free(w);
	for (i = 0; i < nextra; i++)
		all[i + 1] = extra[i];
	send_pair(f, c, s, all, nextra + 1);
	close(all[0]);
}

static void forge_garbage(struct forge *f)
{
	uint64_t seed = 21, junk[64];
	int fd, i;

	for (i = 0; i < 64; i++)
		junk[i] = t_rand(&seed);
	fd = memfd_with(junk, sizeof(junk), sizeof(junk), 0);
	send_forged(f, &fd, 1);
	/* Right magic, nonsense after it. */
	junk[0] = USMC_TICKET_MAGIC;
	close(fd);
	fd = memfd_with(junk, sizeof(junk), sizeof(junk), 0);
	send_forged(f, &fd, 1);
	close(fd);
}

static void forge_region(struct forge *f, size_t size, unsigned int seals)
{
	static const uint32_t modes[] = { USMC_MODE_SMCD, USMC_MODE_TCP, USMC_MODE_PROPOSED };
	unsigned int i;

	for (i = 0; i < ARRAY_LEN(modes); i++) {
		struct usmc_ticket_rec r = conn_rec(0, 3, modes[i]);
		int fam = memfd_with(NULL, 0, size, seals);

		send_ticket(f, &r, 1, &fam, 1);
		close(fam);
	}
}

static void forge_wrong_memfd(struct forge *f) { forge_region(f, 4096, F_SEAL_SHRINK | F_SEAL_GROW); }
static void forge_truncated(struct forge *f)
{
	forge_region(f, FAMILY_LEN - 4096, F_SEAL_SHRINK | F_SEAL_GROW);
}
static void forge_unsealed(struct forge *f) { forge_region(f, FAMILY_LEN, 0); }

static void forge_bad_index(struct forge *f)
{
	int fam = memfd_with(NULL, 0, FAMILY_LEN, F_SEAL_SHRINK | F_SEAL_GROW);
	struct usmc_ticket_rec r = conn_rec(0, USMC_FAMILY_OBJS + 5, USMC_MODE_SMCD), many[200];
	int i;

	send_ticket(f, &r, 1, &fam, 1);			/* shared half out of range */
	r = conn_rec(0, 7, USMC_MODE_TCP);
	send_ticket(f, &r, 1, &fam, 1);			/* a slot not in use */
	r = conn_rec(5, 7, USMC_MODE_SMCD);
	send_ticket(f, &r, 1, &fam, 1);			/* extra out of range */
	r = conn_rec(0, 7, USMC_MODE_SMCD);
	r.pos = 9;
	send_ticket(f, &r, 1, &fam, 1);			/* position out of range */
	r = conn_rec(0, 7, USMC_MODE_SMCD);
	r.aux = 40;
	send_ticket(f, &r, 1, &fam, 1);			/* owner lock out of range */
	{
		int two[2] = { fam, fam };
		int t = ticket(&r, 1, 5);		/* more extras named than sent */

		two[0] = t;
		send_forged(f, two, 2);
		close(t);
	}
	for (i = 0; i < 200; i++)
		many[i] = conn_rec(0, (uint32_t)i, USMC_MODE_SMCD);
	send_ticket(f, many, 200, &fam, 1);		/* more records than sockets */
	close(fam);
}

/* A region of our own making, its slot 3 in use and saying mode m. */
static int own_region(uint32_t m)
{
	int fam = memfd_with(NULL, 0, FAMILY_LEN, 0);
	struct usmc_sock_sh *sh = mmap(NULL, FAMILY_LEN, PROT_READ | PROT_WRITE, MAP_SHARED, fam, 0);

	t_assert(sh != MAP_FAILED, "mmap: %s", strerror(errno));
	atomic_store(&sh[3].in_use, 1);
	atomic_store(&sh[3].mode, m);
	atomic_store(&sh[3].refs, 1);
	munmap(sh, FAMILY_LEN);
	t_ok(fcntl(fam, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW));
	return fam;
}

static void forge_own_region(struct forge *f)
{
	static const uint32_t sh_modes[] = { USMC_MODE_SMCD, USMC_MODE_UNDECIDED,
					     USMC_MODE_MIGRATING, USMC_MODE_TCP, 77 };
	static const uint32_t rec_modes[] = { USMC_MODE_TCP, USMC_MODE_SMCD, USMC_MODE_NONE };
	unsigned int i, k;

	for (i = 0; i < ARRAY_LEN(sh_modes); i++)
		for (k = 0; k < ARRAY_LEN(rec_modes); k++) {
			struct usmc_ticket_rec r = conn_rec(0, 3, rec_modes[k]);
			int fam = own_region(sh_modes[i]);

			send_ticket(f, &r, 1, &fam, 1);
			close(fam);
		}
}

static void forge_fifo(struct forge *f)
{
	char path[64];
	struct usmc_ticket_rec r = conn_rec(1, 3, USMC_MODE_SMCD);
	int fam = memfd_with(NULL, 0, FAMILY_LEN, F_SEAL_SHRINK | F_SEAL_GROW), ff, t, e[3];

	snprintf(path, sizeof(path), "/tmp/t_scm_forge.%d", (int)getpid());
	unlink(path);
	t_ok(mkfifo(path, 0600));
	ff = t_ok(open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC));
	unlink(path);
	e[0] = ff;
	e[1] = fam;
	send_ticket(f, &r, 1, e, 2);			/* a FIFO among the extras */
	t = ticket(&r, 1, 1);
	e[0] = t;
	e[1] = ff;
	send_forged(f, e, 2);				/* ... as the last one */
	e[0] = ff;
	e[1] = t;
	send_forged(f, e, 2);				/* a FIFO where the ticket goes */
	close(t);
	close(ff);
	close(fam);
}

/* The receiver's own family region, through /proc. */
static int receiver_family(pid_t pid)
{
	char dir[64], p[PATH_MAX], l[PATH_MAX];
	struct dirent *de;
	DIR *d;
	int fd = -1;

	snprintf(dir, sizeof(dir), "/proc/%d/fd", (int)pid);
	d = opendir(dir);
	t_assert(d, "opendir %s: %s", dir, strerror(errno));
	while (fd < 0 && (de = readdir(d))) {
		ssize_t n;

		snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
		n = readlink(p, l, sizeof(l) - 1);
		if (n <= 0)
			continue;
		l[n] = '\0';
		if (strstr(l, "memfd:usmc-family"))
			fd = open(p, O_RDWR | O_CLOEXEC);
	}
	closedir(d);
	return fd;
}

static void forge_other_socket(struct forge *f)
{
	static const uint32_t modes[] = { USMC_MODE_TCP, USMC_MODE_SMCD };
	int fam = receiver_family(f->receiver);
	struct usmc_sock_sh *sh;
	uint32_t i, k, named = 0;

	if (fam < 0) {
		t_info("the receiver has no family region (not under usmc): nothing to name");
		return;
	}
	sh = mmap(NULL, FAMILY_LEN, PROT_READ, MAP_SHARED, fam, 0);
	t_assert(sh != MAP_FAILED, "mmap: %s", strerror(errno));
	for (i = 0; i < USMC_FAMILY_OBJS && named < 16; i++) {
		if (atomic_load(&sh[i].in_use) != 1)
			continue;
		named++;
		for (k = 0; k < ARRAY_LEN(modes); k++) {
			struct usmc_ticket_rec r = conn_rec(0, i, modes[k]);

			send_ticket(f, &r, 1, &fam, 1);
		}
	}
	t_assert(named >= 2, "only %u shared halves in use in the receiver", named);
	munmap(sh, FAMILY_LEN);
	close(fam);
}

static void forge_listener_lie(struct forge *f)
{
	int fam = memfd_with(NULL, 0, FAMILY_LEN, F_SEAL_SHRINK | F_SEAL_GROW), two[2];
	struct usmc_ticket_rec r = conn_rec(0, 3, USMC_MODE_TCP);

	r.kind = SK_LISTEN;
	r.aux = 1;
	two[0] = fam;
	two[1] = memfd_with(NULL, 0, 4096, 0);		/* "its index" */
	send_ticket(f, &r, 1, two, 2);
	close(two[1]);
	r.kind = SK_TCP;
	r.aux = USMC_TICKET_NONE;
	send_ticket(f, &r, 1, &fam, 1);
	close(fam);
}

static const struct {
	const char *name;
	void (*fn)(struct forge *f);
} forgeries[] = {
	{ "garbage", forge_garbage },
	{ "wrong_memfd", forge_wrong_memfd },
	{ "truncated", forge_truncated },
	{ "unsealed", forge_unsealed },
	{ "bad_index", forge_bad_index },
	{ "own_region", forge_own_region },
	{ "other_socket", forge_other_socket },
	{ "fifo", forge_fifo },
	{ "listener_lie", forge_listener_lie },
};

static int forger(int chan, pid_t receiver_pid, int which)
{
	struct forge f = { .chan = chan, .receiver = receiver_pid };
	char e = 'E';

	t_sync_wait(chan);	/* the receiver holds its victim */
	forgeries[which].fn(&f);
	t_sync_send(chan, &e, 1);
	t_info("%s: %d messages, %d reset", forgeries[which].name, f.msgs, f.resets);
	return 0;
}

/* ---- checks -------------------------------------------------------------- */

static void run(int which)
{
	int sv[2];
	pid_t r, f;

	t_ok(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv));
	t_ok(fcntl(sv[0], F_SETFD, 0));
	t_ok(fcntl(sv[1], F_SETFD, 0));
	r = t_start_role("receiver", sv[0], 0, false);
	f = t_start_role("forger", sv[1], (long)r * 16 + which, true);
	close(sv[0]);
	close(sv[1]);
	t_wait_child(f, "forger");
	t_wait_child(r, "receiver");
}

/* check_NAME runs forgeries[i], whose name is NAME. */
#define CHECK(i, name) static void check_##name(void) { run(i); }
CHECK(0, garbage)
CHECK(1, wrong_memfd)
CHECK(2, truncated)
CHECK(3, unsealed)
CHECK(4, bad_index)
CHECK(5, own_region)
CHECK(6, other_socket)
CHECK(7, fifo)
CHECK(8, listener_lie)

static const struct t_check checks[] = {
	{ "garbage", check_garbage },
	{ "wrong_memfd", check_wrong_memfd },
	{ "truncated", check_truncated },
	{ "unsealed", check_unsealed },
	{ "bad_index", check_bad_index },
	{ "own_region", check_own_region },
	{ "other_socket", check_other_socket },
	{ "fifo", check_fifo },
	{ "listener_lie", check_listener_lie },
};

int main(int argc, char **argv)
{
	t_name = "t_scm_forge";
	signal(SIGPIPE, SIG_IGN);
	if (argc == 4) {
		alarm(100);	/* a role: never outlive a hang */
		if (!strcmp(argv[1], "receiver"))
			return receiver(atoi(argv[2]));
		if (!strcmp(argv[1], "forger"))
			return forger(atoi(argv[2]), (pid_t)(atol(argv[3]) / 16), (int)(atol(argv[3]) % 16));
	}
	/* The receiver's counters depend on what it could adopt; its
	 * outcomes are checked message by message. */
	t_tcp_conns = -1;
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
