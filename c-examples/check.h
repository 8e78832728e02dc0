/*
 * Tiny helpers shared by the c-examples programs.
 *
 * Every program prints deterministic lines:
 *   "ok <what>"              a promise held
 *   "FAIL <what>: <details>" a promise broken (exit status 1)
 *   "skip: <reason>"         (single line, exit 77) the library under test lacks
 *                            a precondition, e.g. channel creation fails with
 *                            ENODEV as Debian's librdmacm does without a device.
 *
 * Nothing printed on stdout may depend on pointers, fds, timing or the host,
 * because run.sh compares stdout of the build against our library with the
 * build against Debian's.
 */
#ifndef RDMACM_RS_CHECK_H
#define RDMACM_RS_CHECK_H

#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <rdma/rdma_cma.h>

#define SKIP_STATUS 77

static int check_failures;

__attribute__((format(printf, 2, 3)))
static inline void check(int cond, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	if (cond) {
		fputs("ok ", stdout);
		vprintf(fmt, ap);
		fputc('\n', stdout);
	} else {
		check_failures++;
		fputs("FAIL ", stdout);
		vprintf(fmt, ap);
		fputc('\n', stdout);
	}
	va_end(ap);
	fflush(stdout);
}

/* Like check() but appends ": <details>" on failure. */
#define CHECK(cond, what, ...)                                                 \
	do {                                                                   \
		if (cond) {                                                    \
			check(1, "%s", what);                                  \
		} else {                                                       \
			char check_buf_[256];                                  \
			snprintf(check_buf_, sizeof(check_buf_), __VA_ARGS__); \
			check(0, "%s: %s", what, check_buf_);                  \
		}                                                              \
	} while (0)

/* Expect "-1 with errno == want" from an int-returning call. */
#define CHECK_ERRNO(call, want, what)                                          \
	do {                                                                   \
		int ret_;                                                      \
		int err_;                                                      \
		errno = 0;                                                     \
		ret_ = (call);                                                 \
		err_ = errno;                                                  \
		CHECK(ret_ == -1 && err_ == (want), what,                      \
		      "got ret=%d errno=%d (%s), want -1/%s", ret_, err_,      \
		      strerror(err_), #want);                                  \
	} while (0)

__attribute__((noreturn, format(printf, 1, 2)))
static inline void skip(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("skip: ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	fflush(stdout);
	exit(SKIP_STATUS);
}

__attribute__((noreturn, format(printf, 1, 2)))
static inline void fatal(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	fputs("FAIL ", stdout);
	vprintf(fmt, ap);
	fputc('\n', stdout);
	va_end(ap);
	fflush(stdout);
	exit(1);
}

static inline int check_done(void)
{
	fflush(stdout);
	return check_failures ? 1 : 0;
}

/* Milliseconds on the monotonic clock. */
static inline long long now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void sleep_ms(long ms)
{
	struct timespec ts = { ms / 1000, (ms % 1000) * 1000000L };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/*
 * Watchdog: no program may hang even if the library under test blocks
 * forever; after `seconds` print a FAIL line and exit without running
 * atexit handlers or library destructors (they might block too).
 */
static inline void watchdog_handler(int sig)
{
	static const char msg[] = "FAIL watchdog: program did not finish in time\n";
	ssize_t r;

	(void)sig;
	r = write(STDOUT_FILENO, msg, sizeof(msg) - 1);
	(void)r;
	_exit(1);
}

/* Installs fn for sig with sa_flags = flags (SA_RESTART or 0). */
static inline void check_handle(int sig, void (*fn)(int), int flags)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = fn;
	sa.sa_flags = flags;
	if (sigaction(sig, &sa, NULL)) {
		printf("FAIL sigaction(%d): errno=%d\n", sig, errno);
		exit(1);
	}
}

/* SA_RESTART: the handler exits, so it never interrupts a call it returns to,
 * and a program checking EINTR rules counts it as restarting. */
static inline void watchdog(unsigned int seconds)
{
	check_handle(SIGALRM, watchdog_handler, SA_RESTART);
	alarm(seconds);
}

/* ---- signals that interrupt a blocked call (EINTR checks) ---------- */

static volatile sig_atomic_t check_signals; /* how many check_count_signal caught */

static inline void check_count_signal(int sig)
{
	(void)sig;
	check_signals++;
}

/* A thread that, 200 ms in, sends SIGUSR1 to `target` and, 400 ms later,
 * runs `then(arg)` (if set): what ends the blocked call with SA_RESTART. */
struct check_poke {
	pthread_t target, thread;
	void (*then)(void *);
	void *arg;
};

static inline void *check_poke_main(void *arg)
{
	struct check_poke *p = arg;

	sleep_ms(200);
	pthread_kill(p->target, SIGUSR1);
	if (p->then) {
		sleep_ms(400);
		p->then(p->arg);
	}
	return NULL;
}

/* Starts the poke at the calling thread (join p->thread after the call). */
static inline void check_poke_me(struct check_poke *p, void (*then)(void *), void *arg)
{
	p->target = pthread_self();
	p->then = then;
	p->arg = arg;
	if (pthread_create(&p->thread, NULL, check_poke_main, p)) {
		printf("FAIL pthread_create\n");
		exit(1);
	}
}

/* Stop now with a FAIL line; used when a thread is stuck and cannot be joined. */
__attribute__((noreturn))
static inline void fail_stuck(const char *what)
{
	printf("FAIL %s\n", what);
	fflush(stdout);
	_exit(1);
}

/* fail_stuck with errno's text: "FAIL what: strerror(errno)". */
static inline void fail_stuck_errno(const char *what)
{
	printf("FAIL %s: %s\n", what, strerror(errno));
	fflush(stdout);
	_exit(1);
}

/*
 * Create an event channel or skip: Debian's librdmacm fails here with
 * ENODEV when the machine has no RDMA device.
 */
static inline struct rdma_event_channel *channel_or_skip(void)
{
	struct rdma_event_channel *ch;

	errno = 0;
	ch = rdma_create_event_channel();
	if (!ch) {
		if (errno == ENODEV)
			skip("rdma_create_event_channel failed with ENODEV (no RDMA device)");
		fatal("rdma_create_event_channel: errno=%d (%s)", errno, strerror(errno));
	}
	return ch;
}

#endif
