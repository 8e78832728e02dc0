//! libc glue: errno as a value (shared with librdmacm, `common::errno`), owned fds,
//! eventfd "doorbells", randomness.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

pub use common::errno::{cerr, set_errno, Errno, Result};

/// Wraps a fresh fd returned by a syscall.
pub fn owned(fd: libc::c_int) -> Result<OwnedFd> {
    let fd = cerr(fd)?;
    // SAFETY: fd was just returned by the kernel and nobody else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A counting doorbell: an `eventfd(EFD_SEMAPHORE)`; each `ring` adds one readable unit,
/// each blocking `read` by a consumer takes one. Pollable; the application may set
/// `O_NONBLOCK` on it.
pub struct Doorbell {
    fd: OwnedFd,
}

impl Doorbell {
    pub fn new() -> Result<Doorbell> {
        // SAFETY: plain syscall; checked by `owned`.
        let fd = owned(unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_SEMAPHORE) })?;
        Ok(Doorbell { fd })
    }

    pub fn raw(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    pub fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own eventfd.
        unsafe { libc::write(self.raw(), (&one as *const u64).cast(), 8) };
    }
}

/// Reads one 8-byte unit from `fd`; returns the raw `read` result (errno set by libc).
///
/// This is the blocking point of `ibv_get_cq_event`/`ibv_get_async_event`. It is an
/// `extern "C"` function with no Rust value that needs dropping and calls nothing that can
/// unwind, so it has no landing pad: glibc's forced unwinding (`pthread_cancel`) passes
/// through it cleanly.
#[inline(never)]
pub extern "C" fn read_unit(fd: libc::c_int) -> isize {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a live u64.
    unsafe { libc::read(fd, (&mut v as *mut u64).cast(), 8) }
}

/// Random bytes from the kernel (never blocks after boot).
pub fn random_u64() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: getrandom writes at most 8 bytes into a live u64.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        // Fallback: time and address entropy (only if getrandom is unavailable).
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = t ^ ((&v as *const u64 as u64).rotate_left(17));
    }
    v
}

pub fn random_u32() -> u32 {
    random_u64() as u32
}

/// A shared read-write mapping of the first `len` bytes of a file (memory other processes
/// map too), unmapped on drop. What lives in it is the user's to order: atomics, or a
/// protocol such as `net::ring`'s.
pub struct SharedMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the mapping itself may be used from any thread; accesses to its contents are
// ordered by its users (see the type's comment).
unsafe impl Send for SharedMap {}
// SAFETY: as for Send.
unsafe impl Sync for SharedMap {}

impl SharedMap {
    /// Maps `fd` if the file holds at least `len` bytes.
    pub fn of(fd: &impl AsRawFd, len: usize) -> Option<SharedMap> {
        // SAFETY: stat is plain data; fstat fills it for our open fd.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } != 0 || (st.st_size as u64) < len as u64 {
            return None;
        }
        // SAFETY: maps `len` bytes of a file at least that large.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
        (p != libc::MAP_FAILED).then_some(SharedMap { ptr: p.cast(), len })
    }

    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }
}

impl Drop for SharedMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping of `len` bytes, unmapped once.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}
