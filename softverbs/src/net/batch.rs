//! Datagrams received in batches: one `recvmmsg` takes what waits (up to `SLOTS`), so a
//! pass costs one system call whether one datagram came or several, and a short batch
//! says the queue is empty without the extra read that would return EAGAIN.

use super::addr::from_raw;
use std::net::SocketAddr;

/// Datagrams per `recvmmsg`.
pub const SLOTS: usize = 8;
/// Room per datagram: a UD frame (4 KiB payload and its header) and a forwarded RoCEv2
/// packet fit; a longer datagram arrives truncated and is reported so (`Datagram::whole`).
const SLOT_LEN: usize = 8 << 10;

pub struct Batch {
    buf: Vec<u8>,
    from: [libc::sockaddr_storage; SLOTS],
    /// Per datagram of the last `recv`: its length, address length and flags.
    got: [(usize, libc::socklen_t, libc::c_int); SLOTS],
}

/// One received datagram.
pub struct Datagram<'a> {
    pub data: &'a [u8],
    pub from: Option<SocketAddr>,
    /// False when the datagram was longer than its slot.
    pub whole: bool,
}

impl Default for Batch {
    fn default() -> Batch {
        Batch {
            buf: vec![0u8; SLOTS * SLOT_LEN],
            // SAFETY: sockaddr_storage is plain data; all-zero is valid.
            from: unsafe { std::mem::zeroed() },
            got: [(0, 0, 0); SLOTS],
        }
    }
}

impl Batch {
    /// Receives what waits on `fd` without blocking; returns how many came (0: none).
    pub fn recv(&mut self, fd: i32) -> usize {
        let mut iov = [libc::iovec { iov_base: std::ptr::null_mut(), iov_len: 0 }; SLOTS];
        // SAFETY: mmsghdr is plain data; all-zero is valid.
        let mut hdrs: [libc::mmsghdr; SLOTS] = unsafe { std::mem::zeroed() };
        for (i, ((v, h), from)) in iov.iter_mut().zip(hdrs.iter_mut()).zip(self.from.iter_mut()).enumerate() {
            v.iov_base = self.buf[i * SLOT_LEN..].as_mut_ptr().cast();
            v.iov_len = SLOT_LEN;
            h.msg_hdr.msg_name = (from as *mut libc::sockaddr_storage).cast();
            h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = v;
            h.msg_hdr.msg_iovlen = 1;
        }
        // SAFETY: each header points at a live slot of `buf`, its own `from` entry and its
        // iovec in `iov`, all of which outlive the call.
        let r = unsafe { libc::recvmmsg(fd, hdrs.as_mut_ptr(), SLOTS as u32, libc::MSG_DONTWAIT, std::ptr::null_mut()) };
        let n = r.max(0) as usize;
        for (g, h) in self.got.iter_mut().zip(&hdrs).take(n) {
            *g = (h.msg_len as usize, h.msg_hdr.msg_namelen, h.msg_hdr.msg_flags);
        }
        n
    }

    /// The `i`th datagram of the last `recv`.
    pub fn get(&self, i: usize) -> Datagram<'_> {
        let (len, namelen, flags) = self.got[i];
        let len = len.min(SLOT_LEN);
        // SAFETY: the kernel wrote namelen bytes of this slot's address.
        let from = unsafe { from_raw((&self.from[i] as *const libc::sockaddr_storage).cast(), namelen) };
        Datagram { data: &self.buf[i * SLOT_LEN..i * SLOT_LEN + len], from, whole: flags & libc::MSG_TRUNC == 0 }
    }
}
