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

/// Length of a socket address by its family; 0 for an unknown family, and
/// for AF_IB unless the backend takes it (upstream's `ucma_addrlen`).
pub fn addr_len(family: i32, af_ib: bool) -> usize {
    match family {
        libc::AF_INET => std::mem::size_of::<libc::sockaddr_in>(),
        libc::AF_INET6 => std::mem::size_of::<libc::sockaddr_in6>(),
        AF_IB if af_ib => std::mem::size_of::<rdma_abi::cma::sockaddr_ib>(),
        _ => 0,
    }
}

/// The bytes of a socket address whose length follows from its family,
/// borrowed for the call (no copy: every caller is done with it on return).
///
/// # Safety
/// `p` is NULL or points to a socket address as long as its family says,
/// valid and unchanged for `'a`. An address the backend cannot take (see
/// `addr_len`) gives EINVAL, as upstream's calls do.
pub unsafe fn sockaddr<'a>(p: *const libc::sockaddr, af_ib: bool) -> Result<&'a [u8]> {
    if p.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: p points to at least a sa_family_t.
    let len = addr_len(unsafe { (*p).sa_family } as i32, af_ib);
    if len == 0 {
        return Err(Errno::EINVAL);
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

#[cfg(test)]
mod tests {
    use super::*;

    fn family(f: i32) -> libc::sockaddr_storage {
        // SAFETY: all-zero is a valid sockaddr_storage.
        let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        ss.ss_family = f as libc::sa_family_t;
        ss
    }

    fn len(f: i32, af_ib: bool) -> Result<usize> {
        let ss = family(f);
        // SAFETY: a sockaddr_storage holds any family's address.
        unsafe { sockaddr(&ss as *const _ as *const libc::sockaddr, af_ib) }.map(<[u8]>::len)
    }

    #[test]
    fn an_address_is_as_long_as_its_family_and_unknown_ones_are_einval() {
        assert_eq!(len(libc::AF_INET, false), Ok(16));
        assert_eq!(len(libc::AF_INET6, false), Ok(28));
        assert_eq!(len(AF_IB, true), Ok(48));
        assert_eq!(len(AF_IB, false), Err(Errno::EINVAL), "AF_IB without backend support");
        assert_eq!(len(libc::AF_UNIX, true), Err(Errno::EINVAL));
        // SAFETY: NULL is refused before any read.
        assert_eq!(unsafe { sockaddr(std::ptr::null(), true) }.map(<[u8]>::len), Err(Errno::EINVAL));
    }
}
