//! `rdmacm-soft` preloads this into the programs it runs. Some RDMA stacks decide whether a
//! verbs device is usable by looking at its character device, `/dev/infiniband/<dev_name>`
//! (UCX: `stat` must show a character device and `access` must grant read and write),
//! before they open it through libibverbs. softverbs' device has no kernel node; where
//! none exists, these overrides report one for softverbs' own names, `uverbs-soft<N>`,
//! as a uverbs node (major 231) readable and writable by everyone. Opening it still fails
//! (nothing opens it: the device is opened through libibverbs, which is softverbs). Every
//! other path, and a node that does exist, goes to libc unchanged.

use libc::{c_char, c_int};
use std::sync::atomic::{AtomicUsize, Ordering};

const NODE_PREFIX: &[u8] = b"/dev/infiniband/uverbs-soft";
/// The kernel's uverbs character devices: major 231, minors from 192.
const UVERBS_MAJOR: u32 = 231;
const UVERBS_MINOR: u32 = 192;

/// libc's definition of `name` (NUL-terminated), looked up once.
fn next(name: &'static [u8], slot: &AtomicUsize) -> usize {
    let p = slot.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT finds the definition after ours (libc's).
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr().cast()) } as usize;
    if p == 0 {
        let msg = b"libsoftverbs-devnode: cannot find a libc function\n";
        // SAFETY: raw write syscall to stderr; nothing overridden is involved.
        unsafe { libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len()) };
        // SAFETY: nothing can continue without libc.
        unsafe { libc::abort() };
    }
    slot.store(p, Ordering::Release);
    p
}

/// The softverbs node `path` names, if it does, as its minor number.
///
/// # Safety
/// `path` is NULL or a NUL-terminated string.
unsafe fn soft_node(path: *const c_char) -> Option<u32> {
    if path.is_null() {
        return None;
    }
    // SAFETY: the caller's NUL-terminated path.
    let p = unsafe { std::ffi::CStr::from_ptr(path) }.to_bytes();
    let index: u32 = std::str::from_utf8(p.strip_prefix(NODE_PREFIX)?).ok()?.parse().ok()?;
    UVERBS_MINOR.checked_add(index)
}

fn missing() -> bool {
    std::io::Error::last_os_error().raw_os_error() == Some(libc::ENOENT)
}

/// Fills `buf` as `stat` would for the node; the real call said ENOENT.
///
/// # Safety
/// `buf` points to a writable `struct stat`.
unsafe fn fake_stat(buf: *mut libc::stat, minor: u32) -> c_int {
    // SAFETY: the caller's stat buffer; all-zero is a valid stat.
    unsafe {
        std::ptr::write_bytes(buf, 0, 1);
        (*buf).st_mode = libc::S_IFCHR | 0o666;
        (*buf).st_rdev = libc::makedev(UVERBS_MAJOR, minor);
        (*buf).st_nlink = 1;
        (*buf).st_blksize = 4096;
    }
    0
}

macro_rules! stat_override {
    ($name:ident, $sym:literal) => {
        /// `stat(2)`, and the softverbs node where it is missing.
        ///
        /// # Safety
        /// As libc's: a NUL-terminated path and a writable stat buffer.
        #[no_mangle]
        pub unsafe extern "C" fn $name(path: *const c_char, buf: *mut libc::stat) -> c_int {
            static SLOT: AtomicUsize = AtomicUsize::new(0);
            // SAFETY: libc's definition of this very function, same signature.
            let real: unsafe extern "C" fn(*const c_char, *mut libc::stat) -> c_int =
                unsafe { std::mem::transmute(next($sym, &SLOT)) };
            // SAFETY: the caller's arguments, passed on.
            let r = unsafe { real(path, buf) };
            // SAFETY: path as the caller gave it; buf is its stat buffer.
            match unsafe { soft_node(path) } {
                Some(minor) if r != 0 && missing() => unsafe { fake_stat(buf, minor) },
                _ => r,
            }
        }
    };
}

stat_override!(stat, b"stat\0");
stat_override!(stat64, b"stat64\0");

/// `access(2)`: the softverbs node, where it is missing, grants every mode.
///
/// # Safety
/// As libc's: a NUL-terminated path.
#[no_mangle]
pub unsafe extern "C" fn access(path: *const c_char, mode: c_int) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    // SAFETY: libc's definition of this very function, same signature.
    let real: unsafe extern "C" fn(*const c_char, c_int) -> c_int = unsafe { std::mem::transmute(next(b"access\0", &SLOT)) };
    // SAFETY: the caller's arguments, passed on.
    let r = unsafe { real(path, mode) };
    // SAFETY: path as the caller gave it.
    if r != 0 && unsafe { soft_node(path) }.is_some() && missing() {
        return 0;
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(p: &str) -> Option<u32> {
        let c = std::ffi::CString::new(p).unwrap();
        // SAFETY: a NUL-terminated string.
        unsafe { soft_node(c.as_ptr()) }
    }

    #[test]
    fn only_softverbs_names_are_nodes() {
        assert_eq!(node("/dev/infiniband/uverbs-soft0"), Some(192));
        assert_eq!(node("/dev/infiniband/uverbs-soft3"), Some(195));
        for p in ["/dev/infiniband/uverbs0", "/dev/infiniband/uverbs-soft", "/dev/infiniband/uverbs-soft0/x",
                  "/dev/infiniband/uverbs-soft-1", "/dev/infiniband/uverbs-soft99999999999", "/etc/passwd"] {
            assert_eq!(node(p), None, "{p}");
        }
    }

    #[test]
    fn the_missing_node_looks_like_a_uverbs_device() {
        let p = std::ffi::CString::new("/dev/infiniband/uverbs-soft0").unwrap();
        // SAFETY: stat is plain data; a NUL-terminated path and a live buffer.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        let r = unsafe { stat(p.as_ptr(), &mut st) };
        if std::path::Path::new("/dev/infiniband/uverbs-soft0").exists() {
            return;
        }
        assert_eq!(r, 0);
        assert_eq!(st.st_mode & libc::S_IFMT, libc::S_IFCHR);
        assert_eq!((libc::major(st.st_rdev), libc::minor(st.st_rdev)), (231, 192));
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { access(p.as_ptr(), libc::R_OK | libc::W_OK) }, 0);
        let other = std::ffi::CString::new("/nonexistent/uverbs-soft0").unwrap();
        // SAFETY: as above.
        assert_eq!(unsafe { stat(other.as_ptr(), &mut st) }, -1);
    }
}
