//! What registering memory checks about its pages. The kernel pins an MR's
//! pages, asking for write access when the MR allows writes: read-only
//! pages then fail with EFAULT (checked against rxe in the VM). Here the
//! progress thread touches the pages itself, so the check also keeps a
//! remote peer from faulting it.

use crate::sys::{Errno, Result};
use rdma_abi::verbs::*;

/// The access bits that make the kernel pin pages for writing.
const WRITES: u32 = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND;

/// What every page of a range allows.
#[derive(Debug, PartialEq, Eq)]
pub struct Prot {
    pub read: bool,
    pub write: bool,
}

/// Whether [addr, addr + len) (len > 0, no overflow) may be registered with
/// `access`: every page mapped, writable if the access writes, and readable
/// if a peer may read it. The kernel takes unreadable pages for REMOTE_READ
/// (it pins them with FOLL_FORCE); a read here would kill the progress
/// thread, so that case fails too.
pub fn check(addr: usize, len: usize, access: u32) -> Result<()> {
    let prot = match std::fs::read_to_string("/proc/self/maps") {
        Ok(maps) => prot_of(&maps, addr, len),
        // Without /proc only holes can be found.
        Err(_) => mapped(addr, len).then_some(Prot { read: true, write: true }),
    };
    let Some(p) = prot else { return Err(Errno(libc::EFAULT)) };
    if (access & WRITES != 0 && !p.write) || (access & IBV_ACCESS_REMOTE_READ != 0 && !p.read) {
        return Err(Errno(libc::EFAULT));
    }
    Ok(())
}

/// The protection of [addr, addr + len) from the text of /proc/self/maps
/// (ascending `start-end perms ...` lines); None when a page is not mapped.
pub fn prot_of(maps: &str, addr: usize, len: usize) -> Option<Prot> {
    let end = addr + len;
    let mut at = addr;
    let mut p = Prot { read: true, write: true };
    for line in maps.lines() {
        let mut f = line.split_whitespace();
        let (Some(range), Some(perms)) = (f.next(), f.next()) else { continue };
        let Some((s, e)) = range.split_once('-') else { continue };
        let (Ok(s), Ok(e)) = (usize::from_str_radix(s, 16), usize::from_str_radix(e, 16)) else { continue };
        if e <= at {
            continue;
        }
        if s > at {
            return None;
        }
        p.read &= perms.starts_with('r');
        p.write &= perms.as_bytes().get(1) == Some(&b'w');
        at = e;
        if at >= end {
            return Some(p);
        }
    }
    None
}

/// Whether every page of [addr, addr + len) is mapped (mincore fails with
/// ENOMEM on a hole).
fn mapped(addr: usize, len: usize) -> bool {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(4096) as usize;
    let start = addr & !(page - 1);
    let pages = (addr + len - start).div_ceil(page);
    let mut vec = vec![0u8; pages];
    // SAFETY: vec has one byte per page of the range; mincore only writes it.
    unsafe { libc::mincore(start as *mut libc::c_void, pages * page, vec.as_mut_ptr()) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
1000-3000 rw-p 00000000 00:00 0
3000-4000 r--p 00000000 00:00 0
4000-5000 ---p 00000000 00:00 0
6000-8000 rw-s 00000000 00:05 12 /dev/zero (deleted)
";

    #[test]
    fn ranges() {
        let rw = Some(Prot { read: true, write: true });
        assert_eq!(prot_of(MAPS, 0x1000, 0x2000), rw);
        assert_eq!(prot_of(MAPS, 0x1800, 0x10), rw);
        assert_eq!(prot_of(MAPS, 0x2800, 0x1000), Some(Prot { read: true, write: false }));
        assert_eq!(prot_of(MAPS, 0x4000, 1), Some(Prot { read: false, write: false }));
        assert_eq!(prot_of(MAPS, 0x6000, 0x2000), rw);
        // a hole inside, before, after
        assert_eq!(prot_of(MAPS, 0x4800, 0x2000), None);
        assert_eq!(prot_of(MAPS, 0x800, 0x1000), None);
        assert_eq!(prot_of(MAPS, 0x7000, 0x2000), None);
        assert_eq!(prot_of("", 0x1000, 1), None);
    }

    #[test]
    fn own_memory() {
        let v = vec![0u8; 10000];
        assert!(check(v.as_ptr() as usize, v.len(), WRITES | IBV_ACCESS_REMOTE_READ).is_ok());
        static RO: [u8; 64] = [1; 64];
        assert_eq!(check(RO.as_ptr() as usize, 64, IBV_ACCESS_REMOTE_READ), Ok(()));
        assert_eq!(check(RO.as_ptr() as usize, 64, IBV_ACCESS_LOCAL_WRITE), Err(Errno(libc::EFAULT)));
    }
}
