//! Same-host byte rings: a unix stream between two processes of one user can carry its
//! frames through shared memory instead of the socket. The connector makes a memfd with
//! two single-producer single-consumer byte rings (one per direction) and passes it with
//! the stream's first byte (`local::offer_rings`); from then on both sides write frames
//! into their outgoing ring, and the socket carries only doorbells (single bytes, sent
//! only to a side that said it sleeps) and, when a process dies, EOF.
//!
//! A write is a copy into the ring and an atomic store, a read the reverse: no system
//! call while both sides are polling. Writers and readers of one direction are each
//! serialised by the link's locks (`tx`, `rx`), so each ring has one producer and one
//! consumer at a time. Sleep/wake follows the usual order: the consumer raises
//! `sleeping` and then looks at `tail` once more; the producer stores `tail` and then
//! takes `sleeping` down (ringing if it was up); both sequentially consistent, so one
//! of them sees the other. Room works the same way with `want_room`.

use crate::sys::SharedMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};

/// Bytes per direction.
pub const RING: usize = 1 << 20;
const CTL: usize = 256;
const SIZE: usize = 2 * CTL + 2 * RING;

#[repr(C)]
struct Ctl {
    /// Bytes written so far (producer).
    tail: AtomicU64,
    _p1: [u64; 7],
    /// Bytes read so far (consumer).
    head: AtomicU64,
    _p2: [u64; 7],
    /// The consumer may be asleep in `epoll_wait`: ring its socket after writing.
    sleeping: AtomicU32,
    /// The producer waits for room: ring its socket after reading.
    want_room: AtomicU32,
}

const _: () = assert!(std::mem::size_of::<Ctl>() <= CTL);

/// Bytes between `head` and `tail`, never more than the ring: the peer could write
/// anything into the counters, and no copy may then leave the data area (the frames that
/// come out go through `frame::decode` as any others).
fn used(tail: u64, head: u64) -> usize {
    tail.wrapping_sub(head).min(RING as u64) as usize
}

/// Takes down a flag the other side raised: true once per raise.
fn take(f: &AtomicU32) -> bool {
    f.load(SeqCst) != 0 && f.swap(0, SeqCst) != 0
}

/// One side's view of the two rings. Control words are atomics; each data area has one
/// producer and one consumer at a time (the link's locks), ordered by the counters.
pub struct Rings {
    map: SharedMap,
    /// 0: the connector's side (writes ring 0, reads ring 1); 1: the acceptor's.
    side: usize,
}

impl Rings {
    /// The connector's side and the memfd to pass.
    pub fn create() -> Option<(Rings, OwnedFd)> {
        // SAFETY: plain syscall with a NUL-terminated name; checked by `owned`.
        let fd = crate::sys::owned(unsafe { libc::memfd_create(c"softverbs-rings".as_ptr(), libc::MFD_CLOEXEC) }).ok()?;
        // SAFETY: sizing our own fresh memfd.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), SIZE as libc::off_t) } != 0 {
            return None;
        }
        Some((Rings::map(&fd, 0)?, fd))
    }

    /// Maps a memfd received from the connector (`side` 1), or our own (`side` 0).
    pub fn map(fd: &OwnedFd, side: usize) -> Option<Rings> {
        Some(Rings { map: SharedMap::of(fd, SIZE)?, side })
    }

    fn ctl(&self, ring: usize) -> &Ctl {
        // SAFETY: control block `ring` lies inside the mapping; its fields are atomics.
        unsafe { &*(self.map.ptr().add(ring * CTL) as *const Ctl) }
    }

    fn data(&self, ring: usize) -> *mut u8 {
        // SAFETY: data area `ring` lies inside the mapping.
        unsafe { self.map.ptr().add(2 * CTL + ring * RING) }
    }

    fn out(&self) -> usize {
        self.side
    }

    fn inn(&self) -> usize {
        1 - self.side
    }

    /// Copies as much of `parts` as fits into the outgoing ring. Returns the bytes taken
    /// and whether the consumer must be rung.
    pub fn write(&self, parts: &[&[u8]]) -> (usize, bool) {
        let c = self.ctl(self.out());
        let tail = c.tail.load(SeqCst);
        let mut room = RING - used(tail, c.head.load(SeqCst));
        let want: usize = parts.iter().map(|p| p.len()).sum();
        if room < want {
            c.want_room.store(1, SeqCst);
            room = RING - used(tail, c.head.load(SeqCst));
        }
        // Counters wrap (they may start anywhere a peer left them).
        let mut done = 0usize;
        for p in parts {
            let n = p.len().min(room - done);
            self.copy_in(tail.wrapping_add(done as u64), &p[..n]);
            done += n;
            if n < p.len() {
                break;
            }
        }
        if done == 0 {
            return (0, false);
        }
        c.tail.store(tail.wrapping_add(done as u64), SeqCst);
        (done, take(&c.sleeping))
    }

    fn copy_in(&self, at: u64, src: &[u8]) {
        let off = (at % RING as u64) as usize;
        let first = src.len().min(RING - off);
        // SAFETY: [off, off+first) and [0, rest) lie in the outgoing data area, which only
        // this producer writes, beyond what the consumer may still read (room checked).
        unsafe {
            std::ptr::copy_nonoverlapping(src.as_ptr(), self.data(self.out()).add(off), first);
            std::ptr::copy_nonoverlapping(src.as_ptr().add(first), self.data(self.out()), src.len() - first);
        }
    }

    /// Copies waiting bytes into `iov` (in order). Returns the bytes read and whether the
    /// producer must be rung (it waits for room).
    pub fn read(&self, iov: &[libc::iovec]) -> (usize, bool) {
        let c = self.ctl(self.inn());
        let head = c.head.load(SeqCst);
        let avail = used(c.tail.load(SeqCst), head);
        let mut done = 0usize;
        for v in iov {
            let n = v.iov_len.min(avail - done);
            // SAFETY: the caller's iovec names a writable buffer of iov_len >= n bytes.
            unsafe { self.copy_out(head.wrapping_add(done as u64), v.iov_base.cast(), n) };
            done += n;
            if n < v.iov_len {
                break;
            }
        }
        if done == 0 {
            return (0, false);
        }
        c.head.store(head.wrapping_add(done as u64), SeqCst);
        (done, take(&c.want_room))
    }

    /// Copies `n` published bytes from offset `at` of the incoming ring to `dst`.
    ///
    /// # Safety
    /// `dst` must be writable for `n` bytes, and `n` at most the bytes published there.
    unsafe fn copy_out(&self, at: u64, dst: *mut u8, n: usize) {
        let off = (at % RING as u64) as usize;
        let first = n.min(RING - off);
        // SAFETY: [off, off+first) and [0, n-first) lie in the incoming data area (n <= RING);
        // dst is the caller's.
        unsafe {
            std::ptr::copy_nonoverlapping(self.data(self.inn()).add(off), dst, first);
            std::ptr::copy_nonoverlapping(self.data(self.inn()), dst.add(first), n - first);
        }
    }

    /// Bytes wait in the incoming ring.
    pub fn readable(&self) -> bool {
        let c = self.ctl(self.inn());
        c.tail.load(SeqCst) != c.head.load(SeqCst)
    }

    /// Bytes written to the outgoing ring that the consumer has not read yet.
    pub fn unread(&self) -> usize {
        let c = self.ctl(self.out());
        used(c.tail.load(SeqCst), c.head.load(SeqCst))
    }

    /// The outgoing ring has room.
    pub fn has_room(&self) -> bool {
        let c = self.ctl(self.out());
        used(c.tail.load(SeqCst), c.head.load(SeqCst)) < RING
    }

    /// The consumer side is about to block (`on`), or is awake again. Returns whether
    /// bytes wait (then it must not block).
    pub fn sleep(&self, on: bool) -> bool {
        self.ctl(self.inn()).sleeping.store(on as u32, SeqCst);
        self.readable()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_all(r: &Rings, n: usize) -> Vec<u8> {
        let mut b = vec![0u8; n];
        let (got, _) = r.read(&[libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: n }]);
        b.truncate(got);
        b
    }

    #[test]
    fn bytes_cross_in_order_and_wrap() {
        let (a, fd) = Rings::create().expect("memfd");
        let b = Rings::map(&fd, 1).expect("map");
        let chunk: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let mut sent = 0u64;
        let mut seen = 0u64;
        for round in 0..10 {
            let (n, _) = a.write(&[&chunk[..100], &chunk[100..]]);
            assert_eq!(n, chunk.len(), "round {round}");
            sent += n as u64;
            let got = read_all(&b, chunk.len());
            assert_eq!(got, chunk);
            seen += got.len() as u64;
        }
        assert_eq!(sent, seen);
        // full ring: a write takes what fits and asks for room; the read that frees it rings
        let big = vec![1u8; RING + 10];
        let (n, _) = a.write(&[&big]);
        assert_eq!(n, RING);
        assert!(!a.has_room());
        let (m, bell) = b.read(&[libc::iovec { iov_base: vec![0u8; 10].as_mut_ptr().cast(), iov_len: 10 }]);
        assert_eq!((m, bell), (10, true));
        assert!(a.has_room());
        // a sleeping consumer is rung once
        assert!(b.sleep(true), "bytes still wait");
        let _ = read_all(&b, RING);
        assert!(!b.sleep(true));
        assert_eq!(a.write(&[b"x"]), (1, true));
        assert_eq!(a.write(&[b"y"]), (1, false));
        assert_eq!(read_all(&b, 8), b"xy");
        // the other direction
        assert_eq!(b.write(&[b"back"]).0, 4);
        assert_eq!(read_all(&a, 8), b"back");
    }

    #[test]
    fn counters_a_peer_scribbled_on_keep_copies_inside() {
        let (a, fd) = Rings::create().expect("memfd");
        let b = Rings::map(&fd, 1).expect("map");
        for (tail, head) in [(u64::MAX, 0), (0, u64::MAX), (5 * RING as u64 + 3, 1), (7, 9)] {
            a.ctl(0).tail.store(tail, SeqCst);
            a.ctl(0).head.store(head, SeqCst);
            let mut buf = vec![0u8; 3 * RING];
            let (n, _) = b.read(&[libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() }]);
            assert!(n <= RING);
            let (m, _) = a.write(&[&buf]);
            assert!(m <= RING);
        }
    }
}
