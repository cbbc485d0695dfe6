// SPDX-License-Identifier: MIT
/*
 * epoll_kernel.c - what the kernel says for an epoll instance that holds
 * shared-memory connections: its events for our entries (a connection's
 * TCP socket, a link group's doorbell, an undecided server connection)
 * translated into records made ready, in the kernel's order among the
 * program's own events; and whether a call that found records ready on
 * the rings needs to ask the kernel at all.  Everything under ep_lock.
 */
#include "accept.h"
#include "af_usmc.h"
#include "epoll.h"
#include "epoll_int.h"
#include "fdtab.h"
#include "log.h"
#include "options.h"
#include "real.h"
#include "sock.h"
#include "tcp.h"
#include "wait.h"

/* The kernel's wait as the program called it (epoll_pwait2's timespec
 * when ts is given, else ms). */
int ep_kernel_wait(int epfd, struct epoll_event *kev, int room, int ms,
		   const struct timespec *ts, const sigset_t *mask, enum usmc_epw how)
{
	if (how == USMC_EPW_WAIT)
		return real.epoll_wait(epfd, kev, room, ms);
	if (how == USMC_EPW_PWAIT2 && ts)
		return real.epoll_pwait2(epfd, kev, room, ts, mask);
	return real.epoll_pwait(epfd, kev, room, ms, mask);
}

/*
 * Kernel event for one of ep's live records.  TCP: refresh what the entry
 * says and put every record of the socket in this instance on the ready
 * list (readiness comes from the rings).  Doorbell (one per link group,
 * shared by its connections): the group's armed records in this instance
 * whose arm a ring answered.  Caller holds ep_lock.
 */
static void kernel_event(struct usmc_ep *ep, struct usmc_epreg *r, unsigned int tag,
			 uint32_t kevents, uint64_t *slept_ns)
{
	struct usmc_epreg *s;

	if (tag == EP_TAG_TCP) {
		int fd = usmc_sock_live_fd(r->sk, r->fd);

		/* EPOLLOUT alone (connect completed): nothing to read, no peek. */
		if (fd >= 0) {
			if (kevents & (EPOLLIN | EPOLLRDHUP | EPOLLPRI | EPOLLERR | EPOLLHUP))
				usmc_check_tcp(r->sk, fd);
			usmc_sock_refresh_seen(r->sk, fd, (int)(kevents & ~EPOLLET));
		}
		ep_tcp_event(r);
	}
	/* Woken by a peer soon after falling asleep: a longer spin would
	 * have caught it. */
	if (*slept_ns && *slept_ns < (uint64_t)usmc_opt.spin_us * 1000) {
		ep_spin_feedback(ep, true, *slept_ns);
		*slept_ns = 0;
	}
	if (tag == EP_TAG_TCP) {
		for (s = r->sk->epregs; s; s = s->sk_next)
			if (s->ep == ep && s->translated)
				ep_ready_push(s);
		return;
	}
	ep_bell_event(ep, r->bell_lg);
}

/*
 * Kernel event on an undecided server connection's entry (the program's
 * events, our tag): news on TCP may be the client's wake message, so settle
 * the connection first (a connection on TCP owing a byte: take it).
 * Still undecided (still owing: EOF came first, or another thread holds
 * the TCP look): the event is the program's, as the kernel gave it (true).
 * Settled: the record follows the connection's path, and what is ready is
 * reported from there (the kernel reports again what is pending after the
 * entry's MOD).  Caller holds ep_lock.
 */
static bool undecided_event(struct usmc_epreg *r, uint32_t *kevents)
{
	int fd = usmc_sock_live_fd(r->sk, r->fd);
	struct pollfd p = { .fd = fd, .events = POLLIN | POLLOUT | POLLPRI | POLLRDHUP };

	if (!r->undecided || fd < 0 || ep_reg_closed(r))
		return false;
	if (*kevents & (EPOLLIN | EPOLLRDHUP | EPOLLPRI | EPOLLERR | EPOLLHUP)) {
		if (sk_mode(r->sk) == USMC_MODE_UNDECIDED)
			usmc_server_resolve(r->sk, fd, false);
		else
			usmc_tcp_skip_wake(r->sk, fd, true);	/* if it came */
	}
	if (ep_want_undecided(r->sk))
		return true;
	ep_reg_sync(r);
	if (r->translated || r->disabled || (r->events & (EPOLLET | EPOLLONESHOT)))
		return false;
	/* Plain TCP now, level-triggered: what the kernel has for it is this
	 * call's news (the entry's MOD queues it for the next call only; an
	 * edge-triggered or one-shot entry gets it there, once); poll's bits
	 * are epoll's. */
	if (real.poll(&p, 1, 0) != 1)
		return false;
	*kevents = (uint32_t)p.revents & (r->events | EPOLLERR | EPOLLHUP);
	return *kevents != 0;
}

/* Program-visible event from the kernel, or one of ours to translate? */
static bool kernel_direct(uint64_t data)
{
	return !ep_data_ours(data) || ep_tag_is_alias(data) || (data & 3) == EP_TAG_UND;
}

/*
 * The kernel's events, in the kernel's order (first come, first served):
 * records an event of ours puts on the ready list are reported before the
 * next event the program gets as the kernel gave it.  Those always fit
 * (k <= max: room was taken before the wait).  Returns the number written
 * to out.  Caller holds ep_lock.
 */
int ep_kernel_events(struct usmc_ep *ep, const struct epoll_event *kev, int k,
		     struct epoll_event *out, int max, uint64_t call, uint64_t *slept_ns)
{
	int i, n = 0, direct = 0;

	for (i = 0; i < k; i++)
		direct += kernel_direct(kev[i].data.u64);
	for (i = 0; i < k; i++) {
		unsigned int tag = 0;
		struct usmc_epreg *r = ep_reg_from_data(kev[i].data.u64, ep, &tag);

		if (kernel_direct(kev[i].data.u64)) {
			direct--;
			n += ep_collect(ep, false, out + n, max - n - direct - 1, call);
			uint32_t ev_now = kev[i].events;
			uint64_t prog;

			if (!r && !ep_data_ours(kev[i].data.u64)) {
				out[n++] = kev[i];
			} else if (ep_tag_is_alias(kev[i].data.u64)) {
				if (ep_alias_event(ep, kev[i].data.u64, &prog)) {
					out[n].events = kev[i].events;
					out[n++].data.u64 = prog;
				}
			} else if (r && undecided_event(r, &ev_now)) {
				out[n].events = ev_now;
				out[n++].data.u64 = r->data;
			}
		} else if (r) {
			kernel_event(ep, r, tag, kev[i].events, slept_ns);
		}
	}
	return n;
}

/*
 * The same for a wait into the program's own array, made while the
 * instance had no records (nothing of ours to order against): ours are
 * taken out in place, records they name (added meanwhile) reported after.
 */
int ep_kernel_events_inplace(struct usmc_ep *ep, struct epoll_event *ev, int k,
			     uint64_t *slept_ns)
{
	int i, m = 0;

	for (i = 0; i < k; i++) {
		struct epoll_event e = ev[i];
		unsigned int tag = 0;
		struct usmc_epreg *r;

		if (!ep_data_ours(e.data.u64)) {
			ev[m++] = e;
			continue;
		}
		if (ep_tag_is_alias(e.data.u64)) {
			uint64_t prog;

			if (ep_alias_event(ep, e.data.u64, &prog)) {
				ev[m].events = e.events;
				ev[m++].data.u64 = prog;
			}
			continue;
		}
		r = ep_reg_from_data(e.data.u64, ep, &tag);
		if (r && tag == EP_TAG_UND) {
			uint32_t now = e.events;

			if (undecided_event(r, &now)) {
				ev[m].events = now;
				ev[m++].data.u64 = r->data;
			}
		} else if (r) {
			kernel_event(ep, r, tag, e.events, slept_ns);
		}
	}
	return m;
}

/*
 * Found ready on the rings (ready): ask the kernel too?  Not when all it
 * holds for the instance are our own entries (not ordered: no other
 * descriptor, no record whose events the kernel orders, not watched from
 * outside) and a call asked it less than EP_HARVEST_NS ago: what they say
 * (a FIN, a reset, a doorbell rung for an armed record) then waits for the
 * next call that finds nothing ready or comes later.  So a busy connection
 * never hides another's FIN for longer than that, and a program that saw
 * its peer die (kill, waitpid: longer than that) finds the FIN in its next
 * call, as with TCP (t_epoll_mt busy_fin).  A kernel epoll_wait(0) in
 * every call was a system call per message for a single connection.
 */
bool ep_harvest_skip(struct usmc_ep *ep, int kt, bool ready)
{
	return !kt && ready && ep_kernel_ours_only(ep) &&
	       usmc_now_ns() - ep->harvest_ns < EP_HARVEST_NS;
}
