//! `rdma_getaddrinfo`: name resolution through libc's getaddrinfo, converted to
//! `struct rdma_addrinfo` as upstream does (first result only; passive results
//! fill the source address, active ones the destination). Everything is
//! allocated with libc so the lists are freed in one way only.

use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use std::ffi::CStr;
use std::ptr;

const IBV_QPT_RC: i32 = 2;
const IBV_QPT_UC: i32 = 3;
const IBV_QPT_UD: i32 = 4;
const IBV_QPT_XRC_SEND: i32 = 9;
const IBV_QPT_XRC_RECV: i32 = 10;

/// An owned `rdma_addrinfo` list (freed on drop).
pub struct List(ptr::NonNull<rdma_addrinfo>);
// SAFETY: the list is plain heap memory owned by this value alone.
unsafe impl Send for List {}

impl List {
    /// Hands the list to C; it is then freed by `rdma_freeaddrinfo`.
    pub fn into_raw(self) -> *mut rdma_addrinfo {
        let p = self.0.as_ptr();
        std::mem::forget(self);
        p
    }
}

impl Drop for List {
    fn drop(&mut self) {
        // SAFETY: built by `resolve` and owned by us.
        unsafe { free_list(self.0.as_ptr()) }
    }
}

/// Input of one resolution, read out of C by the boundary.
#[derive(Default, Clone)]
pub struct Hints {
    pub flags: i32,
    pub family: i32,
    pub qp_type: i32,
    pub port_space: i32,
    pub src: Option<Vec<u8>>,
    pub dst: Option<Vec<u8>>,
}

/// What `rdma_getaddrinfo` returns: a list, or a getaddrinfo EAI code.
pub enum Outcome {
    Found(List),
    Eai(i32),
}

fn to_ai_hints(h: &Hints) -> libc::addrinfo {
    // SAFETY: all-zero is a valid `struct addrinfo` (no flags, NULL pointers).
    let mut ai: libc::addrinfo = unsafe { std::mem::zeroed() };
    if h.flags & RAI_PASSIVE != 0 {
        ai.ai_flags |= libc::AI_PASSIVE;
    }
    if h.flags & RAI_NUMERICHOST != 0 {
        ai.ai_flags |= libc::AI_NUMERICHOST;
    }
    if h.family != AF_IB {
        ai.ai_family = h.family;
    }
    ai.ai_socktype = match h.qp_type {
        IBV_QPT_RC | IBV_QPT_UC | IBV_QPT_XRC_SEND | IBV_QPT_XRC_RECV => libc::SOCK_STREAM,
        IBV_QPT_UD => libc::SOCK_DGRAM,
        _ => 0,
    };
    ai.ai_protocol = match h.port_space as u32 {
        RDMA_PS_TCP => libc::IPPROTO_TCP,
        RDMA_PS_UDP | RDMA_PS_IPOIB => libc::IPPROTO_UDP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_STREAM => libc::IPPROTO_TCP,
        RDMA_PS_IB if ai.ai_socktype == libc::SOCK_DGRAM => libc::IPPROTO_UDP,
        _ => 0,
    };
    ai
}

fn dup_bytes(b: &[u8]) -> Result<*mut libc::sockaddr> {
    // SAFETY: calloc of a non-zero size; checked for NULL.
    let p = unsafe { libc::calloc(1, b.len().max(1)) } as *mut u8;
    if p.is_null() {
        return Err(Errno::ENOMEM);
    }
    // SAFETY: p has room for b.len() bytes and does not overlap b.
    unsafe { ptr::copy_nonoverlapping(b.as_ptr(), p, b.len()) };
    Ok(p.cast())
}

/// Resolves `node`/`service` with `hints` into a one-entry list.
pub fn resolve(node: Option<&CStr>, service: Option<&CStr>, h: &Hints) -> Result<Outcome> {
    // SAFETY: calloc; checked for NULL; the list owns it from here on.
    let rai = unsafe { libc::calloc(1, std::mem::size_of::<rdma_addrinfo>()) } as *mut rdma_addrinfo;
    let list = List(ptr::NonNull::new(rai).ok_or(Errno::ENOMEM)?);
    // SAFETY: rai is a live, zeroed rdma_addrinfo owned by `list`.
    let r = unsafe { &mut *rai };
    r.ai_flags = h.flags;
    r.ai_family = h.family;
    r.ai_qp_type = h.qp_type;
    r.ai_port_space = h.port_space;

    if node.is_some() || service.is_some() {
        let hints = to_ai_hints(h);
        let mut res: *mut libc::addrinfo = ptr::null_mut();
        // SAFETY: C strings and hints are live; res is an out pointer.
        let ret = unsafe {
            libc::getaddrinfo(
                node.map_or(ptr::null(), |n| n.as_ptr()),
                service.map_or(ptr::null(), |s| s.as_ptr()),
                &hints,
                &mut res,
            )
        };
        if ret != 0 {
            return Ok(Outcome::Eai(ret));
        }
        // SAFETY: getaddrinfo succeeded, so res points to at least one entry.
        let ai = unsafe { &*res };
        let fill = convert(r, h, ai);
        // SAFETY: res came from getaddrinfo and is freed once.
        unsafe { libc::freeaddrinfo(res) };
        fill?;
    } else if h.src.is_none() && h.dst.is_none() {
        return Ok(Outcome::Eai(libc::EAI_NONAME));
    }
    if r.ai_src_addr.is_null() {
        if let Some(src) = &h.src {
            r.ai_src_addr = dup_bytes(src)?;
            r.ai_src_len = src.len() as u32;
        }
    }
    if r.ai_dst_addr.is_null() && r.ai_flags & RAI_PASSIVE == 0 {
        if let Some(dst) = &h.dst {
            r.ai_dst_addr = dup_bytes(dst)?;
            r.ai_dst_len = dst.len() as u32;
        }
    }
    if r.ai_family == 0 {
        let a = if r.ai_src_addr.is_null() { r.ai_dst_addr } else { r.ai_src_addr };
        if !a.is_null() {
            // SAFETY: a points to a sockaddr we allocated above.
            r.ai_family = unsafe { (*a).sa_family } as i32;
        }
    }
    Ok(Outcome::Found(list))
}

fn convert(r: &mut rdma_addrinfo, h: &Hints, ai: &libc::addrinfo) -> Result<()> {
    r.ai_family = ai.ai_family;
    if h.qp_type == 0 {
        r.ai_qp_type = match ai.ai_socktype {
            libc::SOCK_STREAM => IBV_QPT_RC,
            libc::SOCK_DGRAM => IBV_QPT_UD,
            _ => 0,
        };
    }
    if h.port_space == 0 {
        r.ai_port_space = match ai.ai_protocol {
            libc::IPPROTO_TCP => RDMA_PS_TCP as i32,
            libc::IPPROTO_UDP => RDMA_PS_UDP as i32,
            _ => 0,
        };
    }
    // SAFETY: getaddrinfo gives ai_addrlen valid bytes at ai_addr.
    let addr = unsafe { std::slice::from_raw_parts(ai.ai_addr as *const u8, ai.ai_addrlen as usize) };
    let canon = if ai.ai_canonname.is_null() {
        ptr::null_mut()
    } else {
        // SAFETY: a NUL-terminated string from getaddrinfo; strdup copies it.
        unsafe { libc::strdup(ai.ai_canonname) }
    };
    if ai.ai_flags & libc::AI_PASSIVE != 0 {
        r.ai_src_addr = dup_bytes(addr)?;
        r.ai_src_len = ai.ai_addrlen;
        r.ai_src_canonname = canon;
    } else {
        r.ai_dst_addr = dup_bytes(addr)?;
        r.ai_dst_len = ai.ai_addrlen;
        r.ai_dst_canonname = canon;
    }
    Ok(())
}

/// Frees a list made by `resolve` (or any list whose parts come from malloc).
///
/// # Safety
/// `p` is NULL or a list built by this module and not freed yet.
pub unsafe fn free_list(mut p: *mut rdma_addrinfo) {
    while !p.is_null() {
        // SAFETY: per the contract, p is a live node whose parts are malloc'd.
        unsafe {
            let next = (*p).ai_next;
            libc::free((*p).ai_src_addr.cast());
            libc::free((*p).ai_dst_addr.cast());
            libc::free((*p).ai_src_canonname.cast());
            libc::free((*p).ai_dst_canonname.cast());
            libc::free((*p).ai_route);
            libc::free((*p).ai_connect);
            libc::free(p.cast());
            p = next;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> std::ffi::CString {
        std::ffi::CString::new(s).unwrap()
    }

    #[test]
    fn passive_numeric_ipv4() {
        let h = Hints { flags: RAI_PASSIVE | RAI_NUMERICHOST, ..Default::default() };
        let (n, s) = (c("127.0.0.1"), c("7471"));
        let Outcome::Found(l) = resolve(Some(&n), Some(&s), &h).unwrap() else { panic!() };
        // SAFETY: a list we just built.
        let r = unsafe { &*l.0.as_ptr() };
        assert_eq!(r.ai_family, libc::AF_INET);
        assert_eq!(r.ai_port_space, RDMA_PS_TCP as i32);
        assert_eq!(r.ai_qp_type, IBV_QPT_RC);
        assert!(r.ai_dst_addr.is_null());
        assert_eq!(r.ai_src_len as usize, std::mem::size_of::<libc::sockaddr_in>());
        // SAFETY: ai_src_addr holds a sockaddr_in.
        let sin = unsafe { &*(r.ai_src_addr as *const libc::sockaddr_in) };
        assert_eq!(u16::from_be(sin.sin_port), 7471);
    }

    #[test]
    fn active_udp_from_hints() {
        let h = Hints { port_space: RDMA_PS_UDP as i32, qp_type: IBV_QPT_UD, ..Default::default() };
        let n = c("::1");
        let Outcome::Found(l) = resolve(Some(&n), None, &h).unwrap() else { panic!() };
        // SAFETY: a list we just built.
        let r = unsafe { &*l.0.as_ptr() };
        assert_eq!(r.ai_family, libc::AF_INET6);
        assert_eq!(r.ai_port_space, RDMA_PS_UDP as i32);
        assert!(!r.ai_dst_addr.is_null());
        assert!(r.ai_src_addr.is_null());
    }

    #[test]
    fn errors_are_eai_codes() {
        let h = Hints { flags: RAI_NUMERICHOST, ..Default::default() };
        let n = c("not-a-number.invalid");
        assert!(matches!(resolve(Some(&n), None, &h).unwrap(), Outcome::Eai(libc::EAI_NONAME)));
        assert!(matches!(resolve(None, None, &Hints::default()).unwrap(), Outcome::Eai(libc::EAI_NONAME)));
    }
}
