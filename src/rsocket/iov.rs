//! Cursors over the caller's iovecs: gathering bytes to send, scattering
//! bytes received. The pointers come from C and are trusted like read(2)'s.

use crate::sys::{Errno, Result};

/// A run of the caller's memory.
#[derive(Clone, Copy)]
pub struct Seg {
    pub ptr: *mut u8,
    pub len: usize,
}

/// The caller's segments: one held inline (rsend, rrecv, rread, rwrite: no
/// allocation per call) or a list (the iovec calls).
pub enum Segs {
    One([Seg; 1]),
    Many(Vec<Seg>),
}

impl Segs {
    /// Bytes in all segments (one buffer's length without walking a list).
    #[inline]
    fn total(&self) -> usize {
        match self {
            Segs::One([s]) => s.len,
            Segs::Many(v) => v.iter().map(|s| s.len).sum(),
        }
    }
}

impl std::ops::Deref for Segs {
    type Target = [Seg];
    fn deref(&self) -> &[Seg] {
        match self {
            Segs::One(a) => a,
            Segs::Many(v) => v,
        }
    }
}

/// Copies out of a list of segments, front to back.
pub struct Gather {
    segs: Segs,
    i: usize,
    off: usize,
    left: usize,
}

impl Gather {
    pub fn new(segs: Segs) -> Gather {
        let left = segs.total();
        Gather { segs, i: 0, off: 0, left }
    }

    pub fn left(&self) -> usize {
        self.left
    }

    /// The next `n` contiguous bytes, when they lie in one segment.
    #[inline]
    pub fn contiguous(&self, n: usize) -> Option<*const u8> {
        let mut i = self.i;
        let mut off = self.off;
        while i < self.segs.len() && off == self.segs[i].len {
            i += 1;
            off = 0;
        }
        let s = self.segs.get(i)?;
        // SAFETY: off ≤ s.len, inside the caller's segment.
        (s.len - off >= n).then(|| unsafe { s.ptr.add(off) as *const u8 })
    }

    /// Copies the next `n` bytes to `dst`.
    ///
    /// # Safety
    /// `dst` is writable for `n` bytes; the segments are readable.
    pub unsafe fn copy_to(&mut self, dst: *mut u8, n: usize) {
        let mut done = 0;
        while done < n && self.i < self.segs.len() {
            let s = self.segs[self.i];
            let k = (s.len - self.off).min(n - done);
            // SAFETY: per the contract; ranges lie inside their buffers.
            unsafe { std::ptr::copy_nonoverlapping(s.ptr.add(self.off), dst.add(done), k) };
            done += k;
            self.off += k;
            if self.off == s.len {
                self.i += 1;
                self.off = 0;
            }
        }
        self.left -= done;
    }

    /// The next `n` bytes, consumed, when they lie in one segment (sent from
    /// where they are). The one-buffer calls (rsend, rwrite) take the short way.
    #[inline(always)]
    pub fn take_contiguous(&mut self, n: usize) -> Option<*const u8> {
        if let Segs::One([s]) = &self.segs {
            if self.i == 0 && s.len - self.off >= n {
                // SAFETY: off + n ≤ s.len, inside the caller's segment.
                let p = unsafe { s.ptr.add(self.off) } as *const u8;
                self.off += n;
                self.left -= n;
                if self.off == s.len {
                    self.i = 1;
                    self.off = 0;
                }
                return Some(p);
            }
        }
        let p = self.contiguous(n)?;
        self.skip(n);
        Some(p)
    }

    /// Skips `n` bytes (sent without copying).
    pub fn skip(&mut self, n: usize) {
        let mut done = 0;
        while done < n && self.i < self.segs.len() {
            let s = self.segs[self.i];
            let k = (s.len - self.off).min(n - done);
            done += k;
            self.off += k;
            if self.off == s.len {
                self.i += 1;
                self.off = 0;
            }
        }
        self.left -= done;
    }
}

/// Copies into a list of segments, front to back.
pub struct Scatter {
    segs: Segs,
    i: usize,
    off: usize,
    pub room: usize,
}

impl Scatter {
    pub fn new(segs: Segs) -> Scatter {
        let room = segs.total();
        Scatter { segs, i: 0, off: 0, room }
    }

    /// Where the next byte goes when the caller gave one buffer (rrecv,
    /// rread): a copy loop writes up to `room` bytes there, then calls `filled`.
    #[inline]
    pub fn single(&self) -> Option<*mut u8> {
        match &self.segs {
            // SAFETY (of the pointer arithmetic): off ≤ s.len, inside the caller's buffer.
            Segs::One([s]) if self.i == 0 => Some(unsafe { s.ptr.add(self.off) }),
            _ => None,
        }
    }

    /// `n` bytes were written at `single()`'s pointer (n ≤ room).
    #[inline]
    pub fn filled(&mut self, n: usize) {
        self.off += n;
        self.room -= n;
        if let Segs::One([s]) = &self.segs {
            if self.off == s.len {
                self.i = 1;
                self.off = 0;
            }
        }
    }

    /// Copies `n` bytes from `src`.
    ///
    /// # Safety
    /// `src` is readable for `n` bytes; the segments are writable.
    pub unsafe fn copy_from(&mut self, src: *const u8, n: usize) {
        let mut done = 0;
        while done < n && self.i < self.segs.len() {
            let s = self.segs[self.i];
            let k = (s.len - self.off).min(n - done);
            // SAFETY: per the contract.
            unsafe { std::ptr::copy_nonoverlapping(src.add(done), s.ptr.add(self.off), k) };
            done += k;
            self.off += k;
            if self.off == s.len {
                self.i += 1;
                self.off = 0;
            }
        }
        self.room -= done;
    }
}

/// The segments of a C iovec array.
///
/// # Safety
/// `iov` is NULL with `cnt` 0, or points to `cnt` iovecs.
pub unsafe fn segs(iov: *const libc::iovec, cnt: i32) -> Result<Segs> {
    if !(0..=1024).contains(&cnt) || (cnt > 0 && iov.is_null()) {
        return Err(Errno::EINVAL);
    }
    if cnt == 0 {
        return Ok(Segs::Many(Vec::new()));
    }
    // SAFETY: per the contract.
    let v = unsafe { std::slice::from_raw_parts(iov, cnt as usize) };
    let mut total: usize = 0;
    let mut out = Vec::with_capacity(v.len());
    for e in v {
        total = total.checked_add(e.iov_len).ok_or(Errno::EINVAL)?;
        if e.iov_len > 0 && e.iov_base.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        out.push(Seg { ptr: e.iov_base as *mut u8, len: e.iov_len });
    }
    if total > isize::MAX as usize {
        return Err(Errno::EINVAL);
    }
    Ok(Segs::Many(out))
}
