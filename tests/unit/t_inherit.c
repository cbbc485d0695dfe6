// SPDX-License-Identifier: MIT
/*
 * t_inherit.c - sockets that other processes inherit (fork, exec) while
 * this one goes on using its own.
 *
 *   thread_client  a forking server whose client is another thread of the
 *                  same process (Python's ForkingTCPServer with a client
 *                  thread): every child inherits the client's connection
 *                  too, serves its request and leaves with _exit(); every
 *                  request is answered, nothing crashes (children used to
 *                  die in their first call on the inherited connection:
 *                  its counters pointed into a mapping the child had
 *                  replaced)
 *
 * usage: t_inherit [check...]
 */
#include "t_util.h"

#include <pthread.h>
#include <sys/mman.h>

#define THREAD_REQS 40

struct client_arg {
	uint16_t port;
	int n;
};

static void line_request(char *buf, size_t len, int i)
{
	snprintf(buf, len, "request %d from the client thread\n", i);
}

/* Read up to and including '\n' (one byte at a time: nothing past it). */
static size_t read_line(int fd, char *buf, size_t len)
{
	size_t got = 0;

	while (got + 1 < len) {
		ssize_t n = read(fd, buf + got, 1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			t_fail("read line: %zd (%s) after %zu bytes", n, n ? strerror(errno) : "EOF",
			       got);
		if (buf[got++] == '\n')
			break;
	}
	buf[got] = '\0';
	return got;
}

static void *client_thread(void *p)
{
	struct client_arg *a = p;
	char req[64], resp[64];
	int i;

	for (i = 0; i < a->n; i++) {
		int fd = t_connect(a->port);

		line_request(req, sizeof(req), i);
		t_write_all(fd, req, strlen(req));
		read_line(fd, resp, sizeof(resp));
		if (strcmp(req, resp))
			t_fail("request %d: answer \"%s\"", i, resp);
		t_ok(close(fd));
	}
	return NULL;
}

/*
 * A forked child maps usmc's counters again (it must not share the
 * parent's file description); connections it inherits keep pointers into
 * the old mapping.  Where the new mapping lands is up to the kernel: in
 * the old one's place when that hole is the highest that fits (usually,
 * on tmpfs), elsewhere when the hole is too tight for the alignment the
 * file system asks for, or when a higher one opened since.  This makes
 * the last case certain: a reservation taken before the counters are
 * mapped (top-down, they land below it) and freed after.
 */
#define ROOM_LEN	(64ul << 20)

static void *room_take(void)
{
	void *p = mmap(NULL, ROOM_LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

static void room_free(void *room)
{
	unsigned long lo, hi, stats = 0;
	char line[512];
	FILE *f = fopen("/proc/self/maps", "r");

	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "/stats-v") && sscanf(line, "%lx-%lx", &lo, &hi) == 2)
			stats = lo;
	if (f)
		fclose(f);
	t_info("counters mapped at %#lx, room at %p", stats, room);
	if (room)
		munmap(room, ROOM_LEN);
}

static void check_thread_client(void)
{
	struct client_arg a = { .n = THREAD_REQS };
	pid_t kids[THREAD_REQS];
	pthread_t th;
	int lfd, c, s, i;

	void *room = room_take();

	/* The counters are mapped with the first connection. */
	t_pair_smc(&c, &s);
	close(c);
	close(s);
	room_free(room);
	lfd = t_listen(&a.port);
	t_assert(!pthread_create(&th, NULL, client_thread, &a));
	for (i = 0; i < THREAD_REQS; i++) {
		char line[64];

		s = t_accept(lfd);
		kids[i] = t_fork_helper();
		if (kids[i] == 0) {
			/* The child also holds the client thread's connection
			 * (and the listener), and leaves without closing them. */
			read_line(s, line, sizeof(line));
			t_write_all(s, line, strlen(line));
			close(s);
			_exit(0);
		}
		t_ok(close(s));
	}
	t_assert(!pthread_join(th, NULL));
	for (i = 0; i < THREAD_REQS; i++)
		t_wait_child(kids[i], "server child");
	close(lfd);
	t_smc_pairs += THREAD_REQS;
}

static const struct t_check checks[] = {
	{ "thread_client", check_thread_client },
};

int main(int argc, char **argv)
{
	t_name = "t_inherit";
	signal(SIGPIPE, SIG_IGN);
	return t_run_checks(checks, (int)ARRAY_LEN(checks), argc, argv, NULL);
}
