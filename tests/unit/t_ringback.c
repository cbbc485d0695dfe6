// SPDX-License-Identifier: MIT
/*
 * t_ringback.c - a ring that grew while its connection streamed gives its
 * memory back when the connection goes quiet (issue 16 item 1), and grows
 * again, bytes intact, when it streams again.
 *
 * One process, two threads, one connection.  Per cycle the client streams
 * 4 MiB (the server starts reading only once the ring is full, so the
 * client's ring is backed to its whole size), the server answers 'A', the
 * client sends a short request (the empty ring rewinds: the request lies
 * in the first page) and waits for 'B' in one of three ways: a blocking
 * recv, poll() or epoll_wait().  While it sleeps, the server checks that
 * the client's ring gave back what lies above the first pages: usmc stat's
 * ring_given_back grew by at least 3 MiB and the link group's file holds
 * at least 3 MiB less than it did.  Three cycles per way: the ring grows
 * back each time, and every byte of every stream is checked.
 *
 * Without acceleration (USMC_DISABLE=1) the same traffic runs and only the
 * bytes are checked.
 */
#include "t_util.h"
#include "t_stat.h"

#include <dirent.h>
#include <poll.h>
#include <pthread.h>
#include <sys/epoll.h>
#include <sys/stat.h>

#define STREAM		(4u << 20)
#define CYCLES		3
#define GIVEN_BACK_MIN	(3u << 20)

enum way { W_RECV, W_POLL, W_EPOLL };
static const char *const way_name[] = { "recv", "poll", "epoll" };

struct client {
	int fd;
	enum way way;
};

static void wait_readable(int fd, enum way way)
{
	struct epoll_event ev = { .events = EPOLLIN };
	struct pollfd p = { .fd = fd, .events = POLLIN };
	int ep, n;

	switch (way) {
	case W_RECV:
		return;		/* the recv itself sleeps */
	case W_POLL:
		/* EINTR: a sibling's SIGCHLD (usmc stat's exit) ends the
		 * kernel's waits too, default disposition or not. */
		while ((n = poll(&p, 1, -1)) < 0 && errno == EINTR)
			;
		t_assert(n == 1 && (p.revents & POLLIN), "poll: %d, revents %#x", n, p.revents);
		return;
	case W_EPOLL:
		ep = epoll_create1(0);
		t_ok(ep);
		t_ok(epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev));
		while ((n = epoll_wait(ep, &ev, 1, -1)) < 0 && errno == EINTR)
			;
		t_assert(n == 1 && (ev.events & EPOLLIN), "epoll_wait: %d (%s), events %#x", n,
			 n < 0 ? t_errname(errno) : "-", n == 1 ? ev.events : 0);
		close(ep);
		return;
	}
}

static void *client_main(void *arg)
{
	struct client *c = arg;
	int i;

	for (i = 0; i < CYCLES; i++) {
		t_send_pat(c->fd, (uint32_t)(100 + i), STREAM);
		t_recv_exact(c->fd, "A", 1);
		t_write_all(c->fd, "ping", 4);
		wait_readable(c->fd, c->way);
		t_recv_exact(c->fd, "B", 1);
	}
	return NULL;
}

/* Bytes the tmpfs holds for the link groups' files (every lg-X/mem). */
static long long lg_blocks_bytes(void)
{
	const char *rd = getenv("USMC_RUNDIR");
	long long sum = 0;
	struct dirent *e;
	char path[PATH_MAX];
	struct stat st;
	DIR *d;

	t_assert(rd, "USMC_RUNDIR is not set");
	d = opendir(rd);
	t_assert(d, "opendir %s", rd);
	while ((e = readdir(d))) {
		if (strncmp(e->d_name, "lg-", 3))
			continue;
		snprintf(path, sizeof(path), "%s/%s/mem", rd, e->d_name);
		if (stat(path, &st) == 0)
			sum += (long long)st.st_blocks * 512;
	}
	closedir(d);
	return sum;
}

static long long given_back(void)
{
	char *j = t_stats_json();
	long long v = t_json_int(j, "ring_given_back");

	t_assert(v >= 0, "no ring_given_back in usmc stat --json: %.300s", j);
	free(j);
	return v;
}

static void run(enum way way)
{
	struct client c = { .way = way };
	struct t_stats before;
	pthread_t th;
	int s, i;

	if (t_accel())
		t_stats_get(&before);
	t_pair(&c.fd, &s);
	t_ok(pthread_create(&th, NULL, client_main, &c));
	for (i = 0; i < CYCLES; i++) {
		long long gb0 = 0, gb1, mem0 = 0, mem1;
		uint64_t t0;

		t_msleep(100);		/* the client fills its ring first */
		t_recv_pat(s, (uint32_t)(100 + i), STREAM);
		/* The client's ring is as large as it got, and asleep in its
		 * recv of 'A' (it looked when the ring was full: nothing to
		 * give back then). */
		if (t_accel()) {
			gb0 = given_back();
			mem0 = lg_blocks_bytes();
		}
		t_write_all(s, "A", 1);
		t_recv_exact(s, "ping", 4);
		/* The client is on its way to sleep (or asleep): wait until its
		 * ring gave back (a minute at most: a clearer failure than the
		 * harness's timeout). */
		for (t0 = t_now_ms(); t_accel(); ) {
			gb1 = given_back();
			mem1 = lg_blocks_bytes();
			if (gb1 - gb0 >= GIVEN_BACK_MIN) {
				t_assert(mem0 - mem1 >= GIVEN_BACK_MIN,
					 "%s cycle %d: %lld bytes given back, but the link group's "
					 "file went from %lld to %lld bytes", way_name[way], i,
					 gb1 - gb0, mem0, mem1);
				t_info("%s cycle %d: %lld bytes given back, link group file %lld -> "
				       "%lld bytes", way_name[way], i, gb1 - gb0, mem0, mem1);
				break;
			}
			t_assert(t_now_ms() - t0 < 60000, "%s cycle %d: the sleeping client's ring "
				 "gave back %lld bytes in a minute", way_name[way], i, gb1 - gb0);
			t_msleep(20);
		}
		t_write_all(s, "B", 1);
	}
	t_ok(pthread_join(th, NULL));
	close(c.fd);
	close(s);
	t_stats_expect(&before, 2, 0);
}

int main(int argc, char **argv)
{
	t_name = "t_ringback";
	run(W_RECV);
	run(W_POLL);
	run(W_EPOLL);
	printf("t_ringback: ok\n");
	return T_EXIT_PASS;
}
