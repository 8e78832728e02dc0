//! errno as a value: carried as data until the C boundary sets it.

/// A positive errno value.
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
    pub const EOPNOTSUPP: Errno = Errno(libc::EOPNOTSUPP);
    pub const ENODATA: Errno = Errno(libc::ENODATA);
    pub const ENOENT: Errno = Errno(libc::ENOENT);
    pub const EEXIST: Errno = Errno(libc::EEXIST);
    pub const EHOSTUNREACH: Errno = Errno(libc::EHOSTUNREACH);
    pub const EAFNOSUPPORT: Errno = Errno(libc::EAFNOSUPPORT);

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
    // SAFETY: __errno_location always returns the calling thread's valid errno slot.
    unsafe { *libc::__errno_location() = e.0 };
}

/// The calling thread's errno, raw (to restore it after work that may change it).
pub fn get_errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// Turns a libc `-1 + errno` result into a `Result`.
pub fn cerr(ret: libc::c_int) -> Result<libc::c_int> {
    if ret < 0 {
        Err(Errno::last())
    } else {
        Ok(ret)
    }
}
