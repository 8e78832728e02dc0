//! Direct placement (rsocket.md §7): riomap registers a buffer and tells
//! the peer where it lives (an rs_iomap entry written into the peer's
//! table), riowrite writes straight into a buffer the peer mapped, found by
//! offset in our own table (which the peer fills), riounmap forgets a map.

use super::conn::{IoMapping, RS_MAX_TRANSFER, RS_OLAP_START_SIZE};
use super::iov::Gather;
use super::stream::{Phase, Stream};
use super::verbs::Mr;
use crate::sys::{Errno, Result};
use rdma_abi::verbs::{IBV_ACCESS_LOCAL_WRITE, IBV_ACCESS_REMOTE_WRITE};

impl Stream {
    pub fn riomap(&self, buf: *mut u8, len: usize, prot: i32, flags: i32, offset: i64) -> Result<i64> {
        if flags != 0 || (prot != libc::PROT_WRITE && prot != libc::PROT_NONE) || buf.is_null() || len == 0 {
            return Err(Errno::EINVAL);
        }
        let mut st = self.lock();
        if st.phase == Phase::Closed {
            return Err(Errno::EBADF);
        }
        let pd = st.id.as_ref().map(|i| i.pd()).ok_or(Errno::EBADF)?;
        let c = st.conn.as_mut().ok_or(Errno::EINVAL)?;
        let index = if prot == libc::PROT_WRITE {
            let size = c.remote_iomap.length as usize;
            let used: Vec<usize> = c.iomaps.iter().filter_map(|m| m.index).collect();
            Some((0..size).find(|i| !used.contains(i)).ok_or(Errno::ENOMEM)?)
        } else {
            None
        };
        let access =
            if index.is_some() { IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE } else { IBV_ACCESS_LOCAL_WRITE };
        let mr = Mr::reg(pd, buf, len, access)?;
        let offset = if offset == -1 { buf as u64 } else { offset as u64 };
        c.iomaps.push(IoMapping { mr, addr: buf as u64, len, offset, index });
        if let Some(i) = index {
            c.iomap_pending.push_back(i);
            let _ = c.send_iomaps();
        }
        Ok(offset as i64)
    }

    pub fn riounmap(&self, buf: *mut u8, len: usize) -> Result<()> {
        let mut st = self.lock();
        if st.phase == Phase::Closed {
            return Err(Errno::EBADF);
        }
        let c = st.conn.as_mut().ok_or(Errno::EINVAL)?;
        let pos = c.iomaps.iter().position(|m| m.addr == buf as u64 && m.len == len).ok_or(Errno::EINVAL)?;
        let m = c.iomaps.remove(pos);
        if let Some(i) = m.index {
            c.iomap_pending.retain(|&p| p != i);
        }
        drop(m);
        Ok(())
    }

    pub fn riowrite(&self, src: &mut Gather, offset: i64, flags: i32) -> Result<usize> {
        let mut st = self.lock();
        if st.phase == Phase::Closed {
            return Err(Errno::EBADF);
        }
        let nonblock = st.nonblock || flags & libc::MSG_DONTWAIT != 0;
        if st.phase != Phase::Open || !st.writable {
            return Err(Errno(if st.phase.connected() { libc::ECONNRESET } else { libc::ENOTCONN }));
        }
        let mut off = offset as u64;
        let mut done = 0;
        let mut olen = RS_OLAP_START_SIZE;
        loop {
            let pending = st.conn.as_ref().is_some_and(|c| !c.iomap_pending.is_empty());
            if pending {
                let c = st.conn.as_mut().ok_or(Errno::EINVAL)?;
                if !c.send_iomaps()? {
                    match self.wait(st, nonblock, None, |s| s.can_send() || s.phase != Phase::Open) {
                        Ok(g) => st = g,
                        Err(e) => return if done > 0 { Ok(done) } else { Err(e) },
                    }
                    continue;
                }
            }
            if src.left() == 0 {
                break;
            }
            let c = st.conn.as_mut().ok_or(Errno::EINVAL)?;
            let entry = (0..c.target_iomap_len)
                .map(|i| c.target_iomap(i))
                .find(|e| e.sge.length > 0 && off >= e.offset && off < e.offset + e.sge.length as u64);
            let Some(e) = entry else {
                return if done > 0 { Ok(done) } else { Err(Errno::EINVAL) };
            };
            if !c.can_write() {
                match self.wait(st, nonblock, None, |s| {
                    s.conn.as_ref().is_some_and(|c| c.can_write()) || s.phase != Phase::Open
                }) {
                    Ok(g) => st = g,
                    Err(e) => return if done > 0 { Ok(done) } else { Err(e) },
                }
                if st.phase != Phase::Open {
                    return if done > 0 { Ok(done) } else { Err(Errno(libc::ECONNRESET)) };
                }
                continue;
            }
            let lkey = src.contiguous(1).and_then(|p| {
                c.iomaps
                    .iter()
                    .find(|m| m.index.is_none() && (p as u64) >= m.addr && (p as u64) < m.addr + m.len as u64)
                    .filter(|m| (p as u64) + src.left().min(olen) as u64 <= m.addr + m.len as u64)
                    .map(|m| m.mr.lkey())
            });
            let room = (e.offset + e.sge.length as u64 - off) as usize;
            let raddr = e.sge.addr + (off - e.offset);
            let n = c.write_plain(src, olen.min(room), raddr, e.sge.key, lkey)?;
            off += n as u64;
            done += n;
            olen = (olen * 2).min(RS_MAX_TRANSFER);
        }
        if st.opts.keepalive {
            st.last_send = std::time::Instant::now();
        }
        self.progress(&mut st);
        Ok(done)
    }
}
