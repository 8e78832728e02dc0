/* What the sleeper checks share (dgram_sleepers, stream_sleepers): two
 * threads asleep on ONE rsocket, each in rrecvfrom, rpoll (POLLIN) or
 * repoll_wait (a set of its own), none with a timeout (a lost wake-up must not
 * be hidden), and the CPU time they use.
 * "Asleep" is measured as the CPU time the two use in the 500 ms after a
 * change that readies neither of them: a sleeper woken by the change looks
 * once and sleeps again (a few ms at most, also under valgrind); two sleepers
 * that keep each other's wake-up alive (each re-counted while the other still
 * is, so the wake flag is never lowered) poll in a loop and use most of a
 * core each, until data readies one of them. */
#ifndef SLEEPERS_H
#define SLEEPERS_H

#include <sys/epoll.h>

#include "rs_util.h"

/* CPU the two sleepers may use in the 500 ms after the change. */
#define CPU_LIMIT_MS 60

enum how { RECV, POLL, EPOLL };

struct sleeper {
	pthread_t t;
	enum how how;
	int fd;
	ssize_t got; /* rrecvfrom: bytes; rpoll/repoll_wait: the call's result */
	char buf[16];
	int revents;
	int done; /* read and written with __atomic builtins */
};

static void *sleeper_main(void *arg)
{
	struct sleeper *s = arg;
	struct epoll_event ev = { .events = EPOLLIN }, out;
	struct pollfd p = { .fd = s->fd, .events = POLLIN };
	int ep;

	switch (s->how) {
	case RECV:
		s->got = rrecvfrom(s->fd, s->buf, sizeof(s->buf), 0, NULL, NULL);
		break;
	case POLL:
		s->got = rpoll(&p, 1, -1);
		s->revents = p.revents;
		break;
	case EPOLL:
		ep = repoll_create(0);
		if (ep < 0 || repoll_ctl(ep, EPOLL_CTL_ADD, s->fd, &ev))
			fail_stuck("repoll set for the sleeper");
		s->got = repoll_wait(ep, &out, 1, -1);
		s->revents = s->got == 1 ? (int)out.events : 0;
		rclose(ep);
		break;
	}
	__atomic_store_n(&s->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static inline long long cpu_ms(pthread_t t)
{
	struct timespec ts;
	clockid_t c;

	if (pthread_getcpuclockid(t, &c) || clock_gettime(c, &ts))
		fail_stuck("thread CPU clock");
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Starts both sleepers on `fd`, lets them fall asleep, makes the change and
 * checks the CPU they used in the 500 ms after it. */
static inline void sleepers_through(struct sleeper s[2], int fd, enum how h0, enum how h1, const char *what,
				    void (*change)(void))
{
	long long c0, c1;
	int i;

	memset(s, 0, 2 * sizeof(*s));
	s[0].how = h0;
	s[1].how = h1;
	for (i = 0; i < 2; i++) {
		s[i].fd = fd;
		if (pthread_create(&s[i].t, NULL, sleeper_main, &s[i]))
			fail_stuck("pthread_create");
	}
	sleep_ms(300);
	c0 = cpu_ms(s[0].t) + cpu_ms(s[1].t);
	change();
	sleep_ms(500);
	c1 = cpu_ms(s[0].t) + cpu_ms(s[1].t);
	fprintf(stderr, "%s: the sleepers used %lld ms of CPU in 500 ms\n", what, c1 - c0);
	CHECK(c1 - c0 <= CPU_LIMIT_MS, what, "the two sleepers used %lld ms of CPU in the 500 ms after it (limit %d)",
	      c1 - c0, CPU_LIMIT_MS);
}

/* Whether sleeper `s` woke for the 2-byte messages "m<digit>" (one, or on a stream two). */
static inline int sleeper_woke_for_data(const struct sleeper *s)
{
	switch (s->how) {
	case RECV:
		/* a stream's rrecv takes every message there: "m0m1" when the other
		 * sleeper only polled and left "m0" unread */
		return s->got >= 2 && s->got % 2 == 0 && s->buf[0] == 'm';
	case POLL:
		return s->got == 1 && s->revents == POLLIN;
	default:
		return s->got == 1 && (s->revents & EPOLLIN);
	}
}

static inline int sleepers_done(struct sleeper s[2])
{
	return __atomic_load_n(&s[0].done, __ATOMIC_ACQUIRE) + __atomic_load_n(&s[1].done, __ATOMIC_ACQUIRE);
}

/* Sends the 2-byte messages "m0", "m1" (with `send`), the second only once
 * the first has ended one sleeper's call and if one still sleeps: a receiver
 * takes what is there, so two at once could go to one of them. Each message
 * must end a call within 5 s (with a 60 s wake_up_interval a lost wake-up
 * fails here). Then joins both and checks each woke for data. */
static inline void sleepers_wake(struct sleeper s[2], void (*send)(const char *msg))
{
	char msg[4];
	long long end;
	int i;

	for (i = 0; i < 2 && sleepers_done(s) < 2; i++) {
		snprintf(msg, sizeof(msg), "m%d", i);
		send(msg);
		for (end = now_ms() + 5000; sleepers_done(s) < i + 1; sleep_ms(5))
			if (now_ms() > end)
				fail_stuck("a sleeper did not wake for the data sent to it");
	}
	for (i = 0; i < 2; i++)
		pthread_join(s[i].t, NULL);
	CHECK(sleeper_woke_for_data(&s[0]) && sleeper_woke_for_data(&s[1]), "then each sleeper woke for data",
	      "results %zd/%zd, revents %#x/%#x", s[0].got, s[1].got, s[0].revents, s[1].revents);
}

#endif
