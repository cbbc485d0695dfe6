// SPDX-License-Identifier: MIT
/*
 * sigrestart.c - whether the kernel would restart a socket call that a
 * signal interrupted: it does for a handler installed with SA_RESTART and
 * no timeout on the call, and returns EINTR otherwise (sock_intr_errno).
 * The sigaction()/signal() wrappers (interpose.c) keep the set of signals
 * whose handler lacks SA_RESTART; the waits of the data path (rx.c, tx.c)
 * ask.  A leaf: nothing here calls back into the socket layer.
 */
#include "sigrestart.h"
#include "usmc.h"

static _Atomic uint64_t norestart_mask;	/* signals with a handler lacking SA_RESTART */

bool usmc_sig_should_eintr(int timeout_ms)
{
	/* A call with a timeout is never restarted (sock_intr_errno). */
	return timeout_ms >= 0 || LOAD_RELAXED(&norestart_mask) != 0;
}

void usmc_sig_track(int sig, const struct sigaction *act)
{
	uint64_t bit;

	/* Fault signals are synchronous: they never interrupt a blocking
	 * call, and sanitizers and crash reporters install them without
	 * SA_RESTART; counting them would make every call return EINTR. */
	if (!act || sig <= 0 || sig >= 64 || sig == SIGSEGV || sig == SIGBUS || sig == SIGFPE ||
	    sig == SIGILL || sig == SIGTRAP || sig == SIGSYS)
		return;
	bit = 1ULL << sig;
	if (act->sa_handler != SIG_IGN && act->sa_handler != SIG_DFL && !(act->sa_flags & SA_RESTART))
		atomic_fetch_or(&norestart_mask, bit);
	else
		atomic_fetch_and(&norestart_mask, ~bit);
}

void usmc_sig_block_nonfault(sigset_t *old)
{
	static const int faults[] = { SIGBUS, SIGSEGV, SIGILL, SIGFPE, SIGTRAP, SIGSYS };
	sigset_t mask;
	unsigned int i;

	sigfillset(&mask);
	for (i = 0; i < sizeof(faults) / sizeof(faults[0]); i++)
		sigdelset(&mask, faults[i]);
	pthread_sigmask(SIG_BLOCK, &mask, old);
}
