// SPDX-License-Identifier: MIT
/*
 * t_clc_bind.c - a neighbour that speaks for a connection it does not hold.
 *
 * The runtime directory is writable by every process of the user.  A
 * "thief" (a process of ours, libusmc loaded, that holds no end of the
 * victim's connection) forges what discovery and the handshake read there,
 * and the test asserts that the client's bytes reach only the process that
 * holds the server end of its TCP connection, and what it reads comes only
 * from there (clc_bind.c):
 *
 *   forged_record   a plain server listens on 127.0.0.1:P; the thief
 *                   listens under usmc on 127.0.0.2:P and rewrites its
 *                   registry record to 127.0.0.1, then answers every
 *                   proposal in its index (accept), takes the ring's bytes
 *                   and writes a reply of its own.  The client must not
 *                   even propose (unbound): the server end has no usmc
 *                   listener's mark.
 *   forged_answer   a usmc server listens on P and accepts late; the thief
 *                   takes the client's proposal out of the server's index
 *                   and answers accept in the client's control block, with
 *                   a reply of its own in the ring.  The client's check of
 *                   the answer fails (the server end never decided) and its
 *                   request goes to the server on TCP (unbound).
 *   forged_answer_keep  the same, leaving the proposal in the index: the
 *                   server accepts it later, finds the client gone to TCP
 *                   from its first byte, and follows (migrate.c).
 *   forged_wake     forged_record, with the thief's index asking every
 *                   client for a wake byte (wake_always, clc.h): the plain
 *                   server must not get one before the request.
 *   forged_proposal a plain client connects to a usmc server that accepts
 *                   late; the thief posts a proposal for the client's
 *                   4-tuple in the server's index, naming a slot of a link
 *                   group of its own that it rewrote to describe that
 *                   connection, with a request of its own in the ring.  The
 *                   server must take the client's request from TCP
 *                   (unbound: the client end never proposed), and send no
 *                   decline byte the plain client would read.
 *
 * On a device whose proposals travel on TCP (clc_inband.h, the copy
 * build) the index entry names nothing: the forged_answer thieves find a
 * proposal with no link group to answer in, and the server accepts the
 * client (SMCD) from the body only it received.
 *
 * With the library before clc_bind.c the client read the thief's reply, or
 * hung (SIGALRM).  Skips (77) when not accelerating.
 */
#include "cdc.h"
#include "clc.h"
#include "lgr.h"
#include "registry.h"

#include "t_util.h"

#include <sys/mman.h>

#define REQ_LEN		1000
#define PAT_REQ		7
#define PAT_REPLY	8
#define PAT_FORGED	9

static void *map_file(const char *name, size_t *len)
{
	char path[PATH_MAX];
	struct stat st;
	void *p;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", t_rundir(), name);
	fd = t_ok(open(path, O_RDWR | O_CLOEXEC));
	t_ok(fstat(fd, &st));
	*len = (size_t)st.st_size;
	p = mmap(NULL, *len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		t_fail("mmap %s: %s", path, strerror(errno));
	close(fd);
	return p;
}

/* ---- the servers ------------------------------------------------------- */

/* "srv FD GO": listen on 127.0.0.1, port to FD; accept one connection
 * once a byte came on GO (-1: at once); take the request, reply, drain to
 * EOF.  Exit 0 only if the request came whole and intact. */
static int srv_main(int pfd, int go)
{
	uint16_t port;
	int lfd = t_listen(&port), fd;
	char c;

	alarm(30);
	t_write_all(pfd, &port, sizeof(port));
	close(pfd);
	if (go >= 0 && read(go, &c, 1) != 1)
		t_fail("server: no go");
	fd = t_accept(lfd);
	t_recv_pat(fd, PAT_REQ, REQ_LEN);
	t_send_pat(fd, PAT_REPLY, REQ_LEN);
	if (read(fd, &c, 1) != 0)
		t_fail("server: bytes after the request");
	return T_EXIT_PASS;
}

/* A server, plain or under usmc; *go: where to tell it to accept (-1:
 * it accepts at once). */
static pid_t start_srv(bool plain, uint16_t *port, int *go)
{
	int p[2], g[2] = { -1, -1 };
	pid_t pid;

	t_ok(pipe(p));
	if (go)
		t_ok(pipe(g));
	pid = t_start_role("srv", p[1], g[0], plain);
	close(p[1]);
	if (go) {
		close(g[0]);
		*go = g[1];
	}
	t_read_all(p[0], port, sizeof(*port));
	close(p[0]);
	return pid;
}

/* "pcli FD PORT": a plain client of 127.0.0.1:PORT; its local port to FD;
 * sends the request, takes the reply.  Exit 0 only if the reply came
 * whole, intact, and nothing else. */
static int pcli_main(int pfd, uint16_t port)
{
	int fd = t_connect(port);
	uint16_t cport = t_sock_port(fd, false);
	char c;

	alarm(30);
	t_write_all(pfd, &cport, sizeof(cport));
	close(pfd);
	t_send_pat(fd, PAT_REQ, REQ_LEN);
	t_recv_pat(fd, PAT_REPLY, REQ_LEN);
	shutdown(fd, SHUT_WR);
	if (read(fd, &c, 1) != 0)
		t_fail("plain client: bytes after the reply");
	return T_EXIT_PASS;
}

/* ---- the thief ---------------------------------------------------------- */

static struct usmc_registry *registry(void)
{
	size_t len;
	struct usmc_registry *r = map_file(USMC_REGISTRY_FILE, &len);

	if (len < sizeof(*r) || r->magic != USMC_REG_MAGIC)
		t_fail("thief: the registry is not one");
	return r;
}

/* The live record for port (ours, or not ours). */
static struct usmc_reg_listener *record_for(struct usmc_registry *r, uint16_t port, bool ours)
{
	int i, tries;

	for (tries = 0; tries < 500; tries++) {
		for (i = 0; i < USMC_REG_LISTENERS; i++) {
			struct usmc_reg_listener *l = &r->l[i];
			uint64_t seq = atomic_load(&l->seq);

			if (seq && !(seq & 1) && l->addr.port == port &&
			    (l->pid == (uint32_t)getpid()) == ours)
				return l;
		}
		t_msleep(10);
	}
	t_fail("thief: no record for port %u", port);
}

/* Rewrite our record's address to 127.0.0.1, as a writer would (seqlock). */
static void forge_address(struct usmc_reg_listener *l)
{
	uint64_t seq = atomic_load(&l->seq);

	atomic_store(&l->seq, seq + 1);
	l->addr.a[12] = 127;
	l->addr.a[13] = 0;
	l->addr.a[14] = 0;
	l->addr.a[15] = 1;
	atomic_store(&l->seq, seq + 2);
}

/* Wait for the client's proposal in index id, for client port cport; take
 * it out of the index if asked; answer accept in its control block and
 * put a reply of our own in its ring ('S').  false when no proposal came.
 * On a device whose proposals travel on TCP (clc_inband.h) the entry names
 * no link group to answer in: say so ('B') and leave it. */
static bool steal(int sv, uint64_t id, uint16_t cport, bool consume)
{
	struct usmc_clc_entry *e = NULL;
	const struct usmc_lgr_hdr *hdr;
	struct usmc_clc_index *idx;
	struct usmc_cdc_ctrl *c;
	char name[64], b = 1, reply[REQ_LEN];
	uint8_t *base, *ring;
	uint64_t w = 0;
	size_t len;
	int i, tries, bell;

	snprintf(name, sizeof(name), "ln-%016llx", (unsigned long long)id);
	idx = map_file(name, &len);
	for (tries = 0; tries < 200 && !e; tries++) {
		for (i = 0; i < USMC_CLC_WAYS && !e; i++) {
			w = atomic_load(&idx->e[cport][i].word);
			if (CLC_STATE(w) == CLC_PROPOSED)
				e = &idx->e[cport][i];
		}
		if (!e)
			t_msleep(10);
	}
	if (!e)
		return false;
	if (t_clc_inband()) {
		if (e->lgr_id || e->slot || e->gen || e->version != USMC_CLC_INBAND)
			t_fail("thief: an in-band proposal's entry names link group %016llx slot %u",
			       (unsigned long long)e->lgr_id, e->slot);
		t_sync_send(sv, "B", 1);
		return true;
	}
	if (consume && !atomic_compare_exchange_strong(&e->word, &w, 0))
		t_fail("thief: the proposal moved under us");
	snprintf(name, sizeof(name), "lg-%016llx/mem", (unsigned long long)e->lgr_id);
	base = map_file(name, &len);
	hdr = (const struct usmc_lgr_hdr *)base;
	if (hdr->magic != USMC_LGR_MAGIC || e->slot >= hdr->nslots)
		t_fail("thief: not a link group");
	c = (struct usmc_cdc_ctrl *)(base + hdr->ctrl_off + (size_t)e->slot * sizeof(*c));
	ring = base + hdr->dmb_off + ((size_t)e->slot * 2 + 1) * hdr->ring_size;
	t_pat_fill(PAT_FORGED, 0, reply, sizeof(reply));
	memcpy(ring, reply, sizeof(reply));
	atomic_store(&c->s2c_p.prod, sizeof(reply));
	atomic_store(&c->s.answer, CDC_ANSWER(e->gen, CDC_ANS_ACCEPT, 0));
	snprintf(name, sizeof(name), "%s/lg-%016llx/c", t_rundir(), (unsigned long long)e->lgr_id);
	bell = open(name, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (bell >= 0 && write(bell, &b, 1) < 0 && errno != EAGAIN)
		t_fail("thief: doorbell: %s", strerror(errno));
	t_sync_send(sv, "S", 1);
	/* Take what the client writes, as a server reading would, until the
	 * client is done. */
	while (!t_wait_fd(sv, POLLIN, 5))
		atomic_store(&c->c2s_c.cons, atomic_load(&c->c2s_p.prod));
	return true;
}

/* Our own connection's link group and slot, from `usmc stat --json`. */
static void own_conn(int fd, uint64_t *lgr, uint32_t *slot)
{
	char *j = t_stats_json(), pat[64];
	const char *p, *l, *sl;

	snprintf(pat, sizeof(pat), "\"pid\": %d, \"fd\": %d,", (int)getpid(), fd);
	p = strstr(j, pat);
	l = p ? strstr(p, "\"lgr\": \"") : NULL;
	sl = p ? strstr(p, "\"slot\": ") : NULL;
	if (!l || !sl)
		t_fail("thief: its connection lists no link group");
	*lgr = strtoull(l + 8, NULL, 16);
	*slot = (uint32_t)strtoul(sl + 8, NULL, 10);
	free(j);
}

/*
 * Post a proposal for 127.0.0.1:cport -> 127.0.0.1:port in the server's
 * index, naming the slot of a connection of our own (we own its link
 * group: we connected), rewritten to describe the victim's 4-tuple, with
 * our request in its ring.
 */
static void forge_proposal(struct usmc_registry *r, uint16_t port, uint16_t cport, int own)
{
	struct usmc_reg_listener *l = record_for(r, port, false);
	const struct usmc_lgr_hdr *hdr;
	struct usmc_clc_index *idx;
	struct usmc_clc_entry *e;
	struct usmc_cdc_ctrl *c;
	struct usmc_addr cli = l->addr;
	char name[64], req[REQ_LEN];
	uint8_t *base;
	uint64_t lgr, h;
	uint32_t slot;
	size_t len;

	own_conn(own, &lgr, &slot);
	snprintf(name, sizeof(name), "lg-%016llx/mem", (unsigned long long)lgr);
	base = map_file(name, &len);
	hdr = (const struct usmc_lgr_hdr *)base;
	if (hdr->magic != USMC_LGR_MAGIC || slot >= hdr->nslots)
		t_fail("thief: not a link group");
	c = (struct usmc_cdc_ctrl *)(base + hdr->ctrl_off + (size_t)slot * sizeof(*c));
	cli.port = cport;
	c->c.client = cli;
	c->c.server = l->addr;
	c->c.server.port = port;
	t_pat_fill(PAT_FORGED, 0, req, sizeof(req));
	memcpy(base + hdr->dmb_off + (size_t)slot * 2 * hdr->ring_size, req, sizeof(req));
	atomic_store(&c->c2s_p.skip_to, 0);
	atomic_store(&c->c2s_p.prod, sizeof(req));
	snprintf(name, sizeof(name), "ln-%016llx", (unsigned long long)l->id);
	idx = map_file(name, &len);
	h = usmc_clc_tuple_hash(&cli);
	e = &idx->e[cport][h % USMC_CLC_WAYS];
	e->lgr_id = lgr;
	e->slot = slot;
	e->gen = atomic_load(&c->c.gen);
	e->version = USMC_PROTO_VERSION;
	e->devs[0] = USMC_DEV_LOOPBACK;
	e->client = cli;
	e->uid = (uint32_t)geteuid();
	e->pid = (uint32_t)getpid();
	atomic_store(&e->word, CLC_WORD(h, CLC_PROPOSED));
}

/* Scenarios whose thief forges a record for the plain server's port. */
static bool record_forged(int scenario)
{
	return scenario == 0 || scenario == 4;
}

/* Our index asks every client for one wake byte, as a listener with
 * TCP_DEFER_ACCEPT does (clc.h wake_always). */
static void ask_wake_bytes(uint64_t id)
{
	struct usmc_clc_index *idx;
	char name[64];
	size_t len;

	snprintf(name, sizeof(name), "ln-%016llx", (unsigned long long)id);
	idx = map_file(name, &len);
	atomic_store(&idx->wake_always, 1);
}

/* The thief of one scenario: fork()ed, reports on sv: 'R' ready, then 'S'
 * (stole: answered a proposal) or 'N' (none came). */
static void thief_main(int sv, uint16_t port, int scenario)
{
	struct usmc_registry *r = registry();
	struct usmc_reg_listener *l;
	uint16_t cport;
	char verdict;
	int lfd = -1;

	if (scenario == 3) {
		uint16_t oport;
		int olfd = t_listen(&oport), ofd = t_connect(oport), sfd = t_accept(olfd);

		t_write_all(ofd, "x", 1);	/* both ends on shared memory */
		t_recv_exact(sfd, "x", 1);
		t_sync_send(sv, "R", 1);
		if (!t_sync_recv(sv, &cport, sizeof(cport)))
			_exit(T_EXIT_FAIL);
		forge_proposal(r, port, cport, ofd);
		t_sync_send(sv, "F", 1);
		t_sync_wait(sv);
		_exit(T_EXIT_PASS);
	}
	if (record_forged(scenario)) {
		struct sockaddr_in a = t_addr(port);

		a.sin_addr.s_addr = htonl(0x7f000002);
		lfd = t_ok(socket(AF_INET, SOCK_STREAM, 0));
		t_ok(bind(lfd, (struct sockaddr *)&a, sizeof(a)));
		t_ok(listen(lfd, 8));
		l = record_for(r, port, true);
		if (scenario == 4)
			ask_wake_bytes(l->id);
		forge_address(l);
	} else {
		l = record_for(r, port, false);
	}
	t_sync_send(sv, "R", 1);
	if (!t_sync_recv(sv, &cport, sizeof(cport)))
		_exit(T_EXIT_FAIL);
	if (!steal(sv, l->id, cport, scenario != 2)) {
		verdict = 'N';
		t_sync_send(sv, &verdict, 1);
	}
	t_sync_wait(sv);	/* the client is done: our listener may go */
	if (lfd >= 0)
		close(lfd);
	_exit(T_EXIT_PASS);
}

/* ---- the client (the test) ---------------------------------------------- */

static const char *const names[] = { "forged_record", "forged_answer", "forged_answer_keep",
				     "forged_proposal", "forged_wake" };

/* The server's half: a plain client, a forged proposal for its
 * connection, then the server accepts. */
static void scenario_server(void)
{
	int sv[2], p[2], go, st;
	pid_t srv, thief, cli;
	uint16_t port, cport;
	long long before = t_fallbacks("unbound");
	char ready;

	srv = start_srv(false, &port, &go);
	t_sync_pair(sv);
	thief = t_fork_helper();
	if (thief == 0) {
		close(sv[0]);
		thief_main(sv[1], port, 3);
	}
	close(sv[1]);
	if (!t_sync_recv(sv[0], &ready, 1))
		t_fail("forged_proposal: the thief did not start");
	t_ok(pipe(p));
	cli = t_start_role("pcli", p[1], port, true);
	close(p[1]);
	t_read_all(p[0], &cport, sizeof(cport));
	close(p[0]);
	t_sync_send(sv[0], &cport, sizeof(cport));
	if (!t_sync_recv(sv[0], &ready, 1) || ready != 'F')
		t_fail("forged_proposal: the thief did not post its proposal");
	t_write_all(go, "g", 1);
	close(go);
	t_ok(waitpid(cli, &st, 0));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		t_fail("forged_proposal: the plain client did not get the reply (status %#x)", st);
	t_ok(waitpid(srv, &st, 0));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		t_fail("forged_proposal: the server did not get the request whole (status %#x)", st);
	t_sync_post(sv[0]);
	t_wait_child(thief, "thief");
	close(sv[0]);
	if (t_fallbacks("unbound") <= before)
		t_fail("forged_proposal: no unbound fallback counted");
	printf("forged_proposal: the server took the request from the client, on TCP\n");
}

static void scenario(int s)
{
	int sv[2], fd, st, go = -1;
	pid_t srv, thief;
	uint16_t port, cport;
	char m[32], why[64], ready, verdict;
	long long before = t_fallbacks("unbound");
	struct pollfd p;

	srv = start_srv(record_forged(s), &port, record_forged(s) ? NULL : &go);
	t_sync_pair(sv);
	thief = t_fork_helper();
	if (thief == 0) {
		close(sv[0]);
		thief_main(sv[1], port, s);
	}
	close(sv[1]);
	if (!t_sync_recv(sv[0], &ready, 1))
		t_fail("%s: the thief did not start", names[s]);
	fd = t_connect(port);
	cport = t_sock_port(fd, false);
	t_sync_send(sv[0], &cport, sizeof(cport));
	/* The forged answer is in place before the client sends or reads,
	 * and the server accepts only after the client looked at it.  An
	 * in-band proposal gives the thief nothing to answer with. */
	if (!record_forged(s) && (!t_sync_recv(sv[0], &verdict, 1) ||
				  verdict != (t_clc_inband() ? 'B' : 'S')))
		t_fail("%s: the thief found no proposal to answer", names[s]);
	t_send_pat(fd, PAT_REQ, REQ_LEN);
	p.fd = fd;
	p.events = POLLIN;
	poll(&p, 1, 0);		/* looks at the answer */
	if (go >= 0) {
		t_write_all(go, "g", 1);
		close(go);
	}
	t_recv_pat(fd, PAT_REPLY, REQ_LEN);	/* the server's reply, not the thief's */
	t_fd_state(fd, m, why, sizeof(m));
	if (!record_forged(s) && t_clc_inband()) {
		/* Only the server could read the proposal: it accepted. */
		if (strcmp(m, "SMCD"))
			t_fail("%s: in-band: the client's connection is %s (%s), expected SMCD",
			       names[s], m, why);
	} else if (strcmp(m, "TCP") || strcmp(why, "unbound")) {
		t_fail("%s: the client's connection is %s (%s), expected TCP (unbound)", names[s],
		       m, why);
	}
	if (record_forged(s) && (!t_sync_recv(sv[0], &verdict, 1) || verdict != 'N'))
		t_fail("%s: the client proposed to the thief", names[s]);
	close(fd);
	t_sync_post(sv[0]);
	t_ok(waitpid(srv, &st, 0));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		t_fail("%s: the server did not get the request whole (status %#x)", names[s], st);
	t_wait_child(thief, "thief");
	close(sv[0]);
	if ((record_forged(s) || !t_clc_inband()) && t_fallbacks("unbound") <= before)
		t_fail("%s: no unbound fallback counted", names[s]);
	printf("%s: the request reached the server, the reply came from it\n", names[s]);
}

int main(int argc, char **argv)
{
	int i;

	t_name = "t_clc_bind";
	if (argc == 4 && !strcmp(argv[1], "srv"))
		return srv_main(atoi(argv[2]), atoi(argv[3]));
	if (argc == 4 && !strcmp(argv[1], "pcli"))
		return pcli_main(atoi(argv[2]), (uint16_t)atoi(argv[3]));
	if (!t_accel())
		t_skip("not accelerating");
	alarm(60);
	for (i = 0; i < 5; i++)
		if (i != 3 && (argc < 2 || !strcmp(argv[1], names[i])))
			scenario(i);
	if (argc < 2 || !strcmp(argv[1], names[3]))
		scenario_server();
	return T_EXIT_PASS;
}
