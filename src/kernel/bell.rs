//! Doorbells: the kernel event the library makes on a channel's rdma_cm file
//! for each event it queues itself (USER from rdma_write_cm_event, addrinfo
//! results, an event that followed a migrated id), so that the file, which is
//! the fd the application polls and the one rdma_get_cm_event blocks on as
//! upstream's does, is readable and wakes a blocked reader. A doorbell is a
//! datagram kernel id of its own whose address resolution the kernel answers
//! with one event (ADDR_RESOLVED or ADDR_ERROR, either will do); destroying
//! the id drops that event if it is still unread (the kernel drops a kernel
//! id's unread events), so the file is readable exactly while a queued event
//! waits.
//!
//! Where to resolve: the wildcard address resolves to a local device on IB
//! and RoCE; iWARP devices refuse it (no GID to bind the loopback to), so
//! then the first local interface address the kernel takes is used. The
//! answer is kept for the process.

use super::ucma::Ucma;
use crate::sys::{Errno, Result};
use std::sync::Mutex;

const RDMA_PS_UDP: u32 = 0x0111;
const IBV_QPT_UD: u32 = 4;
/// The doorbell's resolution timeout: its event comes at once in practice.
const TIMEOUT_MS: u32 = 2000;

/// The address doorbells resolve (None: not known yet).
static WHERE: Mutex<Option<Vec<u8>>> = Mutex::new(None);

/// A socket address of `family` with `addr` (IPv4 4 bytes, IPv6 16), port 0.
fn sockaddr(family: i32, addr: &[u8]) -> Vec<u8> {
    if family == libc::AF_INET {
        // SAFETY: all-zero is a valid sockaddr_in.
        let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
        sa.sin_family = libc::AF_INET as libc::sa_family_t;
        sa.sin_addr.s_addr = u32::from_ne_bytes(addr.try_into().unwrap_or([0; 4]));
        // SAFETY: the bytes of a plain struct.
        unsafe { std::slice::from_raw_parts(&sa as *const _ as *const u8, std::mem::size_of_val(&sa)) }.to_vec()
    } else {
        // SAFETY: all-zero is a valid sockaddr_in6.
        let mut sa: libc::sockaddr_in6 = unsafe { std::mem::zeroed() };
        sa.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sa.sin6_addr.s6_addr = addr.try_into().unwrap_or([0; 16]);
        // SAFETY: the bytes of a plain struct.
        unsafe { std::slice::from_raw_parts(&sa as *const _ as *const u8, std::mem::size_of_val(&sa)) }.to_vec()
    }
}

/// Where a doorbell may resolve, in the order tried: the wildcard, then
/// every up, non-loopback local address.
fn candidates() -> Vec<Vec<u8>> {
    let mut v = vec![sockaddr(libc::AF_INET, &[0; 4])];
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a list we free below.
    if unsafe { libc::getifaddrs(&mut ifa) } != 0 {
        return v;
    }
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: a node of the list getifaddrs gave.
        let i = unsafe { &*p };
        p = i.ifa_next;
        let up = i.ifa_flags & libc::IFF_UP as u32 != 0 && i.ifa_flags & libc::IFF_LOOPBACK as u32 == 0;
        if !up || i.ifa_addr.is_null() {
            continue;
        }
        // SAFETY: a socket address of the family it names.
        unsafe {
            match (*i.ifa_addr).sa_family as i32 {
                libc::AF_INET => {
                    let a = &*(i.ifa_addr as *const libc::sockaddr_in);
                    v.push(sockaddr(libc::AF_INET, &a.sin_addr.s_addr.to_ne_bytes()));
                }
                libc::AF_INET6 => {
                    let a = &*(i.ifa_addr as *const libc::sockaddr_in6);
                    v.push(sockaddr(libc::AF_INET6, &a.sin6_addr.s6_addr));
                }
                _ => {}
            }
        }
    }
    // SAFETY: the list getifaddrs gave, freed once.
    unsafe { libc::freeifaddrs(ifa) };
    v
}

/// Rings a doorbell with uid `key` on `file`: the kernel id whose event it
/// is (destroy it with `Ucma::destroy_id`).
pub fn ring(file: &Ucma, key: u64) -> Result<u32> {
    let known = crate::cm::registry::lock(&WHERE).clone();
    let tries = match known {
        Some(a) => vec![a],
        None => candidates(),
    };
    let mut last = Errno::ENODEV;
    for dst in tries {
        let h = file.create_id(key, RDMA_PS_UDP, IBV_QPT_UD)?;
        match file.resolve_addr(h, None, &dst, TIMEOUT_MS) {
            Ok(()) => {
                *crate::cm::registry::lock(&WHERE) = Some(dst);
                return Ok(h);
            }
            Err(e) => {
                last = e;
                let _ = file.destroy_id(h);
            }
        }
    }
    Err(last)
}
