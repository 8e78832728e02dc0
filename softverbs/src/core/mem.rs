//! Protection domains and memory regions, and every access to application memory.
//!
//! All reads and writes of registered memory happen here, while the key table's read lock
//! is held and only after the key, PD, bounds and access flags were checked; `ibv_dereg_mr`
//! takes the write lock, so once it returns no frame can touch that memory again.

use super::context::Context;
use super::window;
use crate::sys::random_u32;
use common::inthash::IntMap;
use rdma_abi::verbs::*;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

#[repr(C)]
pub struct Pd {
    pub c: UnsafeCell<ibv_pd>,
    pub ctx: Arc<Context>,
    /// MRs, QPs, SRQs and AHs using this PD (dealloc fails with EBUSY while > 0).
    pub users: AtomicUsize,
    pub id: u64,
}

// SAFETY: the C struct is written only before the PD is published; other fields are Sync.
unsafe impl Sync for Pd {}
// SAFETY: see Sync.
unsafe impl Send for Pd {}

impl Pd {
    pub fn ibv(&self) -> *mut ibv_pd {
        self.c.get()
    }
}

#[repr(C)]
pub struct Mr {
    pub c: UnsafeCell<ibv_mr>,
    pub pd: Arc<Pd>,
    pub addr: usize,
    pub len: usize,
    /// Address the keys are used with (`iova`; equals `addr` for `ibv_reg_mr`).
    pub iova: u64,
    pub access: u32,
    pub lkey: u32,
    pub rkey: u32,
}

// SAFETY: the C struct is written only before publication (and by rereg under the key
// table's write lock); the other fields are plain data.
unsafe impl Sync for Mr {}
// SAFETY: see Sync.
unsafe impl Send for Mr {}

impl Mr {
    pub fn ibv(&self) -> *mut ibv_mr {
        self.c.get()
    }

    /// Byte offset of `[iova, iova+len)` inside this MR, if it fits.
    pub fn offset_of(&self, iova: u64, len: u64) -> Option<usize> {
        range_offset(self.iova, self.len as u64, iova, len)
    }
}

/// Pure bounds check: offset of `[addr, addr+len)` inside `[base, base+size)`.
pub fn range_offset(base: u64, size: u64, addr: u64, len: u64) -> Option<usize> {
    let end = addr.checked_add(len)?;
    if addr < base || end > base.checked_add(size)? {
        return None;
    }
    usize::try_from(addr - base).ok()
}

/// Access bits the kernel accepts (optional-range bits are ignored before this check).
pub const ACCESS_SUPPORTED: u32 = IBV_ACCESS_LOCAL_WRITE
    | IBV_ACCESS_REMOTE_WRITE
    | IBV_ACCESS_REMOTE_READ
    | IBV_ACCESS_REMOTE_ATOMIC
    | IBV_ACCESS_MW_BIND
    | IBV_ACCESS_ZERO_BASED
    | IBV_ACCESS_ON_DEMAND
    | IBV_ACCESS_HUGETLB;

/// Kernel rule: remote write/atomic need local write. Returns the flags to keep.
pub fn check_access(access: u32) -> Option<u32> {
    let a = access & !IBV_ACCESS_OPTIONAL_RANGE;
    if a & !ACCESS_SUPPORTED != 0 {
        return None;
    }
    if a & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC) != 0 && a & IBV_ACCESS_LOCAL_WRITE == 0 {
        return None;
    }
    Some(a)
}

#[derive(Default)]
pub struct Keys {
    pub lkeys: IntMap<u32, Arc<Mr>>,
    pub rkeys: IntMap<u32, Arc<Mr>>,
}

pub static KEYS: LazyLock<RwLock<Keys>> = LazyLock::new(|| RwLock::new(Keys::default()));

pub fn keys_read() -> std::sync::RwLockReadGuard<'static, Keys> {
    KEYS.read().unwrap_or_else(|e| e.into_inner())
}

pub fn keys_write() -> std::sync::RwLockWriteGuard<'static, Keys> {
    KEYS.write().unwrap_or_else(|e| e.into_inner())
}

/// Two fresh keys, unused as lkey and rkey. Caller holds the write lock.
pub fn fresh_keys(k: &Keys) -> (u32, u32) {
    let pick = |m: &IntMap<u32, Arc<Mr>>, tries: &mut u32| loop {
        let v = random_u32();
        if v != 0 && !m.contains_key(&v) {
            break v;
        }
        *tries += 1;
    };
    let lkey = pick(&k.lkeys, &mut 0);
    // An rkey whose window slot is free, so that same-host peers may use it directly
    // (`window`); after a few tries any rkey (it takes the stream path).
    let mut tries = 0;
    let rkey = loop {
        let r = pick(&k.rkeys, &mut tries);
        tries += 1;
        if window::mr_slot_free(r) || tries > 32 {
            break r;
        }
    };
    (lkey, rkey)
}

/// Why an access to local memory failed (`IBV_WC_LOC_PROT_ERR` / `IBV_WC_LOC_LEN_ERR`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalErr {
    Prot,
    Len,
}

/// Why a remote access was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RemoteErr {
    Access,
}

fn local_mr<'a>(k: &'a Keys, pd: u64, sge: &ibv_sge, need: u32) -> Result<(&'a Arc<Mr>, usize), LocalErr> {
    let mr = k.lkeys.get(&sge.lkey).ok_or(LocalErr::Prot)?;
    if mr.pd.id != pd || mr.access & need != need {
        return Err(LocalErr::Prot);
    }
    let off = mr.offset_of(sge.addr, sge.length as u64).ok_or(LocalErr::Prot)?;
    Ok((mr, off))
}

/// Copies the bytes named by a local scatter/gather list (send side: no access bit needed).
pub fn gather(pd: u64, sges: &[ibv_sge]) -> Result<Vec<u8>, LocalErr> {
    let k = keys_read();
    let total: u64 = sges.iter().map(|s| s.length as u64).sum();
    let mut out = Vec::with_capacity(total.min(1 << 26) as usize);
    for s in sges.iter().filter(|s| s.length > 0) {
        let (mr, off) = local_mr(&k, pd, s, 0)?;
        // SAFETY: [addr+off, +length) lies inside a registered MR (checked above) and the
        // read lock keeps it registered while we copy.
        let src = unsafe { std::slice::from_raw_parts((mr.addr + off) as *const u8, s.length as usize) };
        out.extend_from_slice(src);
    }
    Ok(out)
}

/// Runs `f` on the bytes named by a local scatter/gather list, in place (send side: no
/// access bit needed), while the key table's read lock keeps them registered.
pub fn with_gather<R>(pd: u64, sges: &[ibv_sge], f: impl FnOnce(&[&[u8]]) -> R) -> Result<R, LocalErr> {
    let k = keys_read();
    let mut parts: Vec<&[u8]> = Vec::with_capacity(sges.len());
    for s in sges.iter().filter(|s| s.length > 0) {
        let (mr, off) = local_mr(&k, pd, s, 0)?;
        // SAFETY: [addr+off, +length) lies inside a registered MR (checked above) and the
        // read lock keeps it registered until `f` returns.
        parts.push(unsafe { std::slice::from_raw_parts((mr.addr + off) as *const u8, s.length as usize) });
    }
    Ok(f(&parts))
}

/// Total capacity of a scatter list.
pub fn capacity(sges: &[ibv_sge]) -> u64 {
    sges.iter().map(|s| s.length as u64).sum()
}

/// Writes `parts` (concatenated) into a local scatter list; needs LOCAL_WRITE.
pub fn scatter(pd: u64, sges: &[ibv_sge], parts: &[&[u8]]) -> Result<(), LocalErr> {
    let total: usize = parts.iter().map(|p| p.len()).sum();
    if (total as u64) > capacity(sges) {
        return Err(LocalErr::Len);
    }
    let k = keys_read();
    // Check everything first so a failure writes nothing.
    let mut dsts = Vec::with_capacity(sges.len());
    for s in sges.iter().filter(|s| s.length > 0) {
        let (mr, off) = local_mr(&k, pd, s, IBV_ACCESS_LOCAL_WRITE)?;
        dsts.push((mr.addr + off, s.length as usize));
    }
    let mut di = 0;
    let mut doff = 0;
    for p in parts {
        let mut src = *p;
        while !src.is_empty() {
            let (base, len) = dsts[di];
            let n = (len - doff).min(src.len());
            // SAFETY: the destination range lies inside a registered MR with LOCAL_WRITE
            // (checked above, lock held); source is a live slice of n bytes.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), (base + doff) as *mut u8, n) };
            src = &src[n..];
            doff += n;
            if doff == len {
                di += 1;
                doff = 0;
            }
        }
    }
    Ok(())
}

/// Runs `f` on the first `len` bytes of a local scatter list, as (address, length)
/// pieces, after checking them for LOCAL_WRITE, while the key table's read lock keeps
/// them registered. `f` may write only those pieces.
pub fn with_scatter<R>(pd: u64, sges: &[ibv_sge], len: usize, f: impl FnOnce(&[(usize, usize)]) -> R) -> Result<R, LocalErr> {
    if len as u64 > capacity(sges) {
        return Err(LocalErr::Len);
    }
    let k = keys_read();
    let mut parts = Vec::with_capacity(sges.len());
    let mut left = len;
    for s in sges.iter().filter(|s| s.length > 0) {
        let (mr, off) = local_mr(&k, pd, s, IBV_ACCESS_LOCAL_WRITE)?;
        if left > 0 {
            let n = left.min(s.length as usize);
            parts.push((mr.addr + off, n));
            left -= n;
        }
    }
    Ok(f(&parts))
}

fn remote_mr(k: &Keys, pd: u64, rkey: u32, addr: u64, len: u64, need: u32) -> Result<(&Arc<Mr>, usize), RemoteErr> {
    let mr = k.rkeys.get(&rkey).ok_or(RemoteErr::Access)?;
    if mr.pd.id != pd || mr.access & need != need {
        return Err(RemoteErr::Access);
    }
    let off = mr.offset_of(addr, len).ok_or(RemoteErr::Access)?;
    Ok((mr, off))
}

/// RDMA WRITE at the responder.
pub fn remote_write(pd: u64, rkey: u32, addr: u64, data: &[u8]) -> Result<(), RemoteErr> {
    if data.is_empty() {
        return Ok(());
    }
    let k = keys_read();
    let (mr, off) = remote_mr(&k, pd, rkey, addr, data.len() as u64, IBV_ACCESS_REMOTE_WRITE)?;
    // SAFETY: checked: inside a registered MR with REMOTE_WRITE, lock held.
    unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), (mr.addr + off) as *mut u8, data.len()) };
    Ok(())
}

/// Checks a remote access of `[addr, addr+len)` with access bits `need` and runs `f` on
/// its start address while the key table's read lock keeps the MR registered. `f` may
/// access only that range.
pub fn with_remote<R>(pd: u64, rkey: u32, addr: u64, len: u64, need: u32, f: impl FnOnce(*mut u8) -> R) -> Result<R, RemoteErr> {
    let k = keys_read();
    let (mr, off) = remote_mr(&k, pd, rkey, addr, len, need)?;
    Ok(f((mr.addr + off) as *mut u8))
}

/// RDMA READ at the responder.
pub fn remote_read(pd: u64, rkey: u32, addr: u64, len: u64) -> Result<Vec<u8>, RemoteErr> {
    if len == 0 {
        return Ok(Vec::new());
    }
    let k = keys_read();
    let (mr, off) = remote_mr(&k, pd, rkey, addr, len, IBV_ACCESS_REMOTE_READ)?;
    // SAFETY: checked: inside a registered MR with REMOTE_READ, lock held.
    let src = unsafe { std::slice::from_raw_parts((mr.addr + off) as *const u8, len as usize) };
    Ok(src.to_vec())
}

/// 8-byte atomic at the responder: compare-and-swap (`swap = Some`) or fetch-and-add.
/// Returns the original value.
pub fn remote_atomic(pd: u64, rkey: u32, addr: u64, cmp_add: u64, swap: Option<u64>) -> Result<u64, RemoteErr> {
    if !addr.is_multiple_of(8) {
        return Err(RemoteErr::Access);
    }
    let k = keys_read();
    let (mr, off) = remote_mr(&k, pd, rkey, addr, 8, IBV_ACCESS_REMOTE_ATOMIC)?;
    let p = (mr.addr + off) as *mut u64;
    if !(p as usize).is_multiple_of(8) {
        return Err(RemoteErr::Access);
    }
    // SAFETY: p is 8-byte aligned, inside a registered MR with REMOTE_ATOMIC, lock held;
    // accesses from other threads of this library also go through atomics.
    let a = unsafe { AtomicU64::from_ptr(p) };
    Ok(match swap {
        Some(s) => match a.compare_exchange(cmp_add, s, Ordering::SeqCst, Ordering::SeqCst) {
            Ok(v) | Err(v) => v,
        },
        None => a.fetch_add(cmp_add, Ordering::SeqCst),
    })
}

/// Registers an MR (caller validated pd and flags).
pub fn register(pd: &Arc<Pd>, addr: usize, len: usize, iova: u64, access: u32) -> Arc<Mr> {
    let mut k = keys_write();
    let (lkey, rkey) = fresh_keys(&k);
    let mr = Arc::new(Mr {
        c: UnsafeCell::new(ibv_mr {
            context: pd.ctx.ibv(),
            pd: pd.ibv(),
            addr: addr as *mut libc::c_void,
            length: len,
            handle: lkey,
            lkey,
            rkey,
        }),
        pd: pd.clone(),
        addr,
        len,
        iova,
        access,
        lkey,
        rkey,
    });
    k.lkeys.insert(lkey, mr.clone());
    k.rkeys.insert(rkey, mr.clone());
    if access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ) != 0 {
        window::publish_mr(rkey, pd.id, iova, len as u64, addr as u64, access);
    }
    pd.users.fetch_add(1, Ordering::SeqCst);
    mr
}

pub fn unregister(mr: &Arc<Mr>) {
    let mut k = keys_write();
    window::retract_mr(mr.rkey);
    k.lkeys.remove(&mr.lkey);
    k.rkeys.remove(&mr.rkey);
    mr.pd.users.fetch_sub(1, Ordering::SeqCst);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds() {
        assert_eq!(range_offset(100, 50, 100, 50), Some(0));
        assert_eq!(range_offset(100, 50, 149, 1), Some(49));
        assert_eq!(range_offset(100, 50, 149, 2), None);
        assert_eq!(range_offset(100, 50, 99, 1), None);
        assert_eq!(range_offset(100, 50, u64::MAX, 2), None);
        assert_eq!(range_offset(0, u64::MAX, 5, 0), Some(5));
    }

    #[test]
    fn access_rules() {
        assert_eq!(check_access(0), Some(0));
        assert_eq!(check_access(IBV_ACCESS_REMOTE_WRITE), None);
        assert_eq!(check_access(IBV_ACCESS_REMOTE_ATOMIC), None);
        assert_eq!(check_access(IBV_ACCESS_REMOTE_READ), Some(IBV_ACCESS_REMOTE_READ));
        let rw = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
        assert_eq!(check_access(rw | IBV_ACCESS_RELAXED_ORDERING), Some(rw));
        assert_eq!(check_access(1 << 15), None);
    }

    fn test_pd(id: u64) -> Arc<Pd> {
        // SAFETY: verbs_context is plain data; all-zero is valid.
        let ctx = Context::new(unsafe { std::mem::zeroed() }).expect("context");
        Arc::new(Pd { c: UnsafeCell::new(ibv_pd { context: ctx.ibv(), handle: 0 }), ctx, users: AtomicUsize::new(0), id })
    }

    #[test]
    fn remote_access_is_checked() {
        let pd = test_pd(1_000_001);
        let other = test_pd(1_000_002);
        let mut buf = vec![0u8; 256];
        let base = buf.as_mut_ptr() as usize;
        let rw = register(&pd, base, 128, base as u64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
        let ro = register(&pd, base + 128, 128, base as u64 + 128, IBV_ACCESS_REMOTE_READ);
        // in bounds, right key and PD
        assert!(remote_write(pd.id, rw.rkey, base as u64 + 8, &[1, 2, 3]).is_ok());
        assert_eq!(&buf[8..11], &[1, 2, 3]);
        // wrong PD, wrong key, lkey instead of rkey, out of bounds, no access bit
        assert!(remote_write(other.id, rw.rkey, base as u64, &[9]).is_err());
        assert!(remote_write(pd.id, rw.rkey ^ 1, base as u64, &[9]).is_err());
        if rw.lkey != rw.rkey {
            assert!(remote_write(pd.id, rw.lkey, base as u64, &[9]).is_err());
        }
        assert!(remote_write(pd.id, rw.rkey, base as u64 + 126, &[9, 9, 9]).is_err());
        assert!(remote_write(pd.id, ro.rkey, base as u64 + 130, &[9]).is_err());
        assert!(remote_read(pd.id, rw.rkey, base as u64, 4).is_err());
        assert_eq!(remote_read(pd.id, ro.rkey, base as u64 + 128, 2).ok(), Some(vec![0, 0]));
        assert!(buf[..8].iter().all(|&b| b == 0) && buf[11..].iter().all(|&b| b == 0));
        // atomics: alignment and access
        assert_eq!(remote_atomic(pd.id, rw.rkey, base as u64 + 16, 5, None).ok(), Some(0));
        assert_eq!(remote_atomic(pd.id, rw.rkey, base as u64 + 16, 5, Some(7)).ok(), Some(5));
        assert!(remote_atomic(pd.id, rw.rkey, base as u64 + 17, 0, None).is_err());
        assert!(remote_atomic(pd.id, ro.rkey, base as u64 + 128, 0, None).is_err());
        // deregistered: refused
        unregister(&rw);
        assert!(remote_write(pd.id, rw.rkey, base as u64, &[1]).is_err());
        // local side: gather needs a valid lkey of the same PD; scatter needs LOCAL_WRITE
        let sge = |mr: &Mr, off: u64, len: u32| ibv_sge { addr: mr.iova + off, length: len, lkey: mr.lkey };
        assert!(gather(pd.id, &[sge(&ro, 0, 4)]).is_ok());
        assert_eq!(gather(other.id, &[sge(&ro, 0, 4)]), Err(LocalErr::Prot));
        assert_eq!(scatter(pd.id, &[sge(&ro, 0, 4)], &[&[1]]), Err(LocalErr::Prot));
        assert_eq!(scatter(pd.id, &[sge(&ro, 0, 4)], &[&[1; 8]]), Err(LocalErr::Len));
        unregister(&ro);
    }
}
