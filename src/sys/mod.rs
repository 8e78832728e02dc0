//! libc glue: the errno type, setting errno, and owned file descriptors.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A positive errno value carried as data until the C boundary sets it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Errno(pub i32);

impl Errno {
    pub const EINVAL: Errno = Errno(libc::EINVAL);
    pub const ENODEV: Errno = Errno(libc::ENODEV);
    pub const ENOSYS: Errno = Errno(libc::ENOSYS);
    pub const ENOMEM: Errno = Errno(libc::ENOMEM);
    pub const EAGAIN: Errno = Errno(libc::EAGAIN);
    pub const EBADF: Errno = Errno(libc::EBADF);
    pub const EIO: Errno = Errno(libc::EIO);
    pub const EBUSY: Errno = Errno(libc::EBUSY);
    pub const ENOTSUP: Errno = Errno(libc::ENOTSUP);
    pub const ENODATA: Errno = Errno(libc::ENODATA);

    /// The calling thread's errno right now.
    pub fn last() -> Errno {
        Errno(std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO))
    }
}

impl From<std::io::Error> for Errno {
    fn from(e: std::io::Error) -> Self {
        match (e.raw_os_error(), e.kind()) {
            (Some(n), _) => Errno(n),
            // std makes some errors itself (connect_timeout's timeout has no OS code).
            (None, std::io::ErrorKind::TimedOut) => Errno(libc::ETIMEDOUT),
            (None, std::io::ErrorKind::InvalidInput) => Errno(libc::EINVAL),
            (None, _) => Errno(libc::EIO),
        }
    }
}

pub type Result<T> = std::result::Result<T, Errno>;

/// Sets the calling thread's errno.
pub fn set_errno(e: Errno) {
    // SAFETY: __errno_location always returns the valid thread-local errno slot.
    unsafe { *libc::__errno_location() = e.0 };
}

/// Turns a libc `-1 + errno` result into a `Result`.
pub fn cerr(ret: libc::c_int) -> Result<libc::c_int> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}

/// An eventfd used as a level-triggered "something is queued" flag: `poll()`
/// reports it readable exactly while it is raised.
pub struct Flag {
    fd: OwnedFd,
}

impl Flag {
    pub fn new() -> Result<Flag> {
        // SAFETY: plain syscall; the result is checked before use.
        let fd = cerr(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) })?;
        // SAFETY: fd was just returned by eventfd and is owned by nobody else.
        Ok(Flag { fd: unsafe { OwnedFd::from_raw_fd(fd) } })
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
        // The fd stays blocking (the app decides that), so only read when raised.
        let mut pfd = libc::pollfd { fd: self.raw(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one live pollfd, zero timeout.
        if unsafe { libc::poll(&mut pfd, 1, 0) } == 1 {
            let mut v: u64 = 0;
            // SAFETY: reads 8 bytes into a live u64 from our own eventfd.
            unsafe { libc::read(self.raw(), (&mut v as *mut u64).cast(), 8) };
        }
    }

    /// Whether the application set O_NONBLOCK on the fd it was handed.
    pub fn nonblocking(&self) -> bool {
        // SAFETY: F_GETFL on an fd we own.
        let fl = unsafe { libc::fcntl(self.raw(), libc::F_GETFL) };
        fl >= 0 && fl & libc::O_NONBLOCK != 0
    }
}
