//! libc glue: the errno type (shared with softverbs, `common::errno`), the
//! event flag and an epoll set.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub use common::errno::{cerr, set_errno, Errno, Result};

/// An eventfd used as a level-triggered "something is queued" flag: `poll()`
/// reports it readable exactly while it is raised.
pub struct Flag {
    fd: OwnedFd,
    /// Ours alone, so non-blocking: lowering is one read, raised or not.
    private: bool,
}

impl Flag {
    /// A flag only the library reads.
    pub fn new() -> Result<Flag> {
        Self::create(true)
    }

    /// A flag that is an application's fd (a channel's): it stays blocking,
    /// as the application may rely on, so lowering polls before it reads.
    pub fn public() -> Result<Flag> {
        Self::create(false)
    }

    fn create(private: bool) -> Result<Flag> {
        let flags = libc::EFD_CLOEXEC | if private { libc::EFD_NONBLOCK } else { 0 };
        // SAFETY: plain syscall; the result is checked before use.
        let fd = cerr(unsafe { libc::eventfd(0, flags) })?;
        // SAFETY: fd was just returned by eventfd and is owned by nobody else.
        Ok(Flag { fd: unsafe { OwnedFd::from_raw_fd(fd) }, private })
    }

    pub fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub fn raise(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }

    pub fn lower(&self) {
        if self.private {
            self.read();
            return;
        }
        // A blocking fd: only read when raised.
        let mut pfd = libc::pollfd { fd: self.raw(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd, zero timeout.
        if unsafe { libc::poll(&mut pfd, 1, 0) } == 1 {
            self.read();
        }
    }

    fn read(&self) {
        let mut v: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own eventfd.
        unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
    }
}

/// Whether O_NONBLOCK is set on `fd`.
pub fn nonblocking(fd: i32) -> bool {
    // SAFETY: F_GETFL on an fd the caller owns.
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    fl >= 0 && fl & libc::O_NONBLOCK != 0
}

/// Sets or clears O_NONBLOCK on `fd` (no F_SETFL when it already is so).
pub fn set_nonblock(fd: i32, on: bool) -> Result<()> {
    // SAFETY: F_GETFL/F_SETFL on an fd the caller owns.
    let fl = cerr(unsafe { libc::fcntl(fd, libc::F_GETFL) })?;
    let new = if on { fl | libc::O_NONBLOCK } else { fl & !libc::O_NONBLOCK };
    if new != fl {
        // SAFETY: as above.
        cerr(unsafe { libc::fcntl(fd, libc::F_SETFL, new) })?;
    }
    Ok(())
}

/// Whether `fd` is readable right now.
pub fn readable_now(fd: i32) -> bool {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd, zero timeout.
    unsafe { libc::poll(&mut p, 1, 0) > 0 }
}

/// Whether a signal handler that interrupted a blocking wait ends the call
/// with EINTR. Upstream blocks in read(2)/write(2), which the kernel restarts
/// after a handler installed with SA_RESTART and fails with EINTR otherwise;
/// poll(2) is never restarted and does not say which signal it was, so:
/// EINTR unless every handler the process installed asks for SA_RESTART.
/// Asked only when a wait was interrupted.
pub fn eintr_ends_call() -> bool {
    (1..=libc::SIGRTMAX()).any(|sig| {
        // SAFETY: all-zero is a valid sigaction to be filled.
        let mut sa: libc::sigaction = unsafe { std::mem::zeroed() };
        // SAFETY: reads the disposition only (no new action).
        let ok = unsafe { libc::sigaction(sig, std::ptr::null(), &mut sa) } == 0;
        ok && sa.sa_sigaction != libc::SIG_DFL
            && sa.sa_sigaction != libc::SIG_IGN
            && sa.sa_flags & libc::SA_RESTART == 0
    })
}

/// Whether a poll(2) that failed with `e` ends the caller's wait: a signal
/// as `eintr_ends_call` says, any other error always (it would fail again).
pub fn poll_error_ends_wait(e: Errno) -> bool {
    e.0 != libc::EINTR || eintr_ends_call()
}

/// Blocks until `fd` is readable; the caller re-checks what it waited for.
/// A signal ends the wait with EINTR as `eintr_ends_call` says (else the
/// caller waits again); other poll(2) errors end it too.
pub fn wait_readable(fd: i32) -> Result<()> {
    let mut p = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
    // SAFETY: one live pollfd.
    if unsafe { libc::poll(&mut p, 1, -1) } < 0 {
        let e = Errno::last();
        if poll_error_ends_wait(e) {
            return Err(e);
        }
    }
    Ok(())
}

/// An epoll set watching fds for input, each reported with a caller's token.
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    pub fn new() -> Result<Epoll> {
        // SAFETY: plain syscall; the result is checked.
        let fd = cerr(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
        // SAFETY: fd was just returned by epoll_create1 and is owned by nobody else.
        Ok(Epoll { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
    }

    pub fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// EPOLL_CTL_ADD / _MOD (input, reported with `token`) or _DEL of `fd`.
    pub fn ctl(&self, op: i32, fd: i32, token: u64) -> Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: token };
        // SAFETY: `ev` is a live epoll_event (ignored by DEL); a bad fd is an error return.
        cerr(unsafe { libc::epoll_ctl(self.raw(), op, fd, &mut ev) }).map(|_| ())
    }
}
