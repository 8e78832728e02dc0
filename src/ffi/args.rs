//! Reading arguments out of C: strings, socket addresses, out-parameters.

use crate::sys::{Errno, Result};
use rdma_abi::cma::AF_IB;
use std::ffi::CStr;

/// A NULL-tolerant C string.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that outlives the returned borrow.
pub unsafe fn opt_cstr<'a>(p: *const libc::c_char) -> Option<&'a CStr> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

/// Length of a socket address by its family (0 for an unknown family).
pub fn addr_len(family: i32) -> usize {
    match family {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        AF_IB => 48,
        _ => 0,
    }
}

/// The bytes of a socket address whose length follows from its family,
/// borrowed for the call (no copy: every caller is done with it on return).
///
/// # Safety
/// `p` is NULL or points to a socket address as long as its family says,
/// valid and unchanged for `'a`.
pub unsafe fn sockaddr<'a>(p: *const libc::sockaddr) -> Result<&'a [u8]> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: p points to at least a sa_family_t.
    let len = addr_len(unsafe { (*p).sa_family } as i32);
    if len == 0 {
        return Err(Errno(libc::EAFNOSUPPORT));
    }
    // SAFETY: the family promises `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p as *const u8, len) })
}

/// Writes an out-parameter, refusing NULL.
///
/// # Safety
/// `p` is NULL or valid for a write of `T`.
pub unsafe fn out<T>(p: *mut T, v: T) -> Result<()> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: non-NULL and valid per the contract.
    unsafe { p.write(v) };
    Ok(())
}

/// Refuses a NULL pointer argument.
pub fn non_null<T>(p: *const T) -> Result<()> {
    if p.is_null() {
        Err(Errno::EINVAL)
    } else {
        Ok(())
    }
}
