//! Socket glue both libraries need.

use crate::errno::{cerr, Result};

/// The address `fd` is bound to, as getsockname(2) gives its bytes.
pub fn local_name(fd: i32) -> Result<Vec<u8>> {
    // SAFETY: all-zero is a valid sockaddr_storage.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    // SAFETY: ss is writable for len bytes; getsockname fills at most that.
    cerr(unsafe { libc::getsockname(fd, &mut ss as *mut _ as *mut libc::sockaddr, &mut len) })?;
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_storage>());
    // SAFETY: the first n bytes of the storage, filled above.
    Ok(unsafe { std::slice::from_raw_parts(&ss as *const _ as *const u8, n) }.to_vec())
}
