//! Protection domains and memory regions (and the import/dmabuf/fork entry points).

use super::handles::{self, MRS, PDS};
use crate::core::mem::{self, check_access, Pd};
use crate::core::pin;
use crate::sys::{Errno, Result};
use crate::trace as t;
use libc::{c_int, c_void};
use rdma_abi::verbs::*;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

static NEXT_PD: AtomicU64 = AtomicU64::new(1);

/// After `ibv_rereg_mr`, the application's `ibv_mr *` still points into the first MR
/// object: it is kept here (keyed by that pointer) until `ibv_dereg_mr`.
static HELD: std::sync::LazyLock<crate::core::registry::Table<mem::Mr>> = std::sync::LazyLock::new(Default::default);

export! {
    null fn ibv_alloc_pd(context: *mut ibv_context) -> *mut ibv_pd,
        trace |_, r| (format!("ibv_alloc_pd({context:p})"), handles::pd(*r).map(|p| format!(" handle {}", p.id)).unwrap_or_default()),
    {
        let ctx = handles::ctx(context)?;
        let id = NEXT_PD.fetch_add(1, Ordering::SeqCst);
        let pd = Arc::new(Pd {
            c: UnsafeCell::new(ibv_pd { context: ctx.ibv(), handle: id as u32 }),
            ctx,
            users: AtomicUsize::new(0),
            id,
        });
        let p = pd.ibv();
        PDS.insert(p, pd);
        Ok(p)
    }
}

export! {
    /// EBUSY (and the PD stays usable) while MRs, QPs, SRQs or AHs use it.
    errno fn ibv_dealloc_pd(pd: *mut ibv_pd) -> c_int,
        trace |_, _r| format!("ibv_dealloc_pd({pd:p})"),
    {
        let p = handles::pd(pd)?;
        if p.users.load(Ordering::SeqCst) > 0 {
            return Err(Errno::EBUSY);
        }
        PDS.remove(pd);
        Ok(0)
    }
}

fn reg(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> Result<*mut ibv_mr> {
    let pd = handles::pd(pd)?;
    let access = check_access(access as u32).ok_or(Errno::EINVAL)?;
    if length == 0 || addr.is_null() || (addr as usize).checked_add(length).is_none() {
        return Err(Errno::EINVAL);
    }
    pin::check(addr as usize, length, access)?;
    let iova = if access & IBV_ACCESS_ZERO_BASED != 0 { 0 } else { iova };
    let mr = mem::register(&pd, addr as usize, length, iova, access);
    let p = mr.ibv();
    MRS.insert(p, mr);
    Ok(p)
}

export! {
    null fn ibv_reg_mr(pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> *mut ibv_mr,
        trace |_, r| (format!("ibv_reg_mr({pd:p}, addr {addr:p}, len {length}, access {})", t::access(access as u32)), mr_keys(*r)),
    {
        reg(pd, addr, length, addr as u64, access)
    }
}

export! {
    null fn ibv_reg_mr_iova(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: c_int) -> *mut ibv_mr,
        trace |_, r| (format!("ibv_reg_mr_iova({pd:p}, addr {addr:p}, len {length}, iova {iova:#x}, access {})", t::access(access as u32)), mr_keys(*r)),
    {
        reg(pd, addr, length, iova, access)
    }
}

export! {
    /// Access bits in `IBV_ACCESS_OPTIONAL_RANGE` (0x3ff00000) are ignored.
    null fn ibv_reg_mr_iova2(pd: *mut ibv_pd, addr: *mut c_void, length: usize, iova: u64, access: u32) -> *mut ibv_mr,
        trace |_, r| (format!("ibv_reg_mr_iova2({pd:p}, addr {addr:p}, len {length}, iova {iova:#x}, access {})", t::access(access)), mr_keys(*r)),
    {
        reg(pd, addr, length, iova, access as c_int)
    }
}

export! {
    /// Not supported: no device memory behind a dma-buf here.
    null fn ibv_reg_dmabuf_mr(pd: *mut ibv_pd, offset: u64, length: usize, iova: u64, fd: c_int, access: c_int) -> *mut ibv_mr {
        let _ = (offset, length, iova, fd, access);
        handles::pd(pd)?;
        Err(Errno::EOPNOTSUPP)
    }
}

export! {
    errno fn ibv_dereg_mr(mr: *mut ibv_mr) -> c_int,
        trace [handles::mr(mr).map(|m| mr_keys(m.ibv())).unwrap_or_default()] |keys, _r| (format!("ibv_dereg_mr({mr:p})"), keys),
    {
        let m = MRS.remove(mr).ok_or(Errno::EINVAL)?;
        mem::unregister(&m);
        HELD.remove(mr);
        Ok(0)
    }
}

export! {
    /// Re-registers in place: translation, PD and/or access. Returns 0 or a negative
    /// `IBV_REREG_MR_ERR_*` code (-1 bad input, -4 command failed) with errno set.
    value(-4) fn ibv_rereg_mr(mr: *mut ibv_mr, flags: c_int, pd: *mut ibv_pd, addr: *mut c_void, length: usize, access: c_int) -> c_int,
        trace |_, r| (format!("ibv_rereg_mr({mr:p}, flags {flags:#x}, pd {pd:p}, addr {addr:p}, len {length}, access {})", t::access(access as u32)), if *r == 0 { mr_keys(mr) } else { format!(" errno {}", crate::sys::Errno::last().0) }),
    {
        let fail = |e: Errno, code: c_int| {
            crate::sys::set_errno(e);
            Ok(code)
        };
        let Ok(old) = handles::mr(mr) else { return fail(Errno::EINVAL, -1) };
        let flags = flags as u32;
        if flags == 0 || flags & !IBV_REREG_MR_FLAGS_SUPPORTED != 0 {
            return fail(Errno::EINVAL, -1);
        }
        let new_pd = if flags & IBV_REREG_MR_CHANGE_PD != 0 {
            match handles::pd(pd) {
                Ok(p) => p,
                Err(e) => return fail(e, -1),
            }
        } else {
            old.pd.clone()
        };
        let new_access = if flags & IBV_REREG_MR_CHANGE_ACCESS != 0 {
            match check_access(access as u32) {
                Some(a) => a,
                None => return fail(Errno::EINVAL, -1),
            }
        } else {
            old.access
        };
        let (a, l) = if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 {
            if addr.is_null() || length == 0 {
                return fail(Errno::EINVAL, -1);
            }
            (addr as usize, length)
        } else {
            (old.addr, old.len)
        };
        if a.checked_add(l).is_none() {
            return fail(Errno::EINVAL, -1);
        }
        // The kernel pins the new pages (or the old ones for new access) first.
        if flags & (IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_ACCESS) != 0 {
            if let Err(e) = pin::check(a, l, new_access) {
                return fail(e, -4);
            }
        }
        let iova = if flags & IBV_REREG_MR_CHANGE_TRANSLATION != 0 { a as u64 } else { old.iova };
        MRS.remove(mr);
        mem::unregister(&old);
        if old.ibv() == mr {
            HELD.insert(mr, old.clone());
        }
        let fresh = mem::register(&new_pd, a, l, iova, new_access);
        // Keep the application's pointer: copy the new identity into the old C struct.
        // SAFETY: `mr` is the caller's live ibv_mr (it was in our table); plain stores.
        unsafe {
            let c = &mut *mr;
            c.pd = new_pd.ibv();
            c.addr = a as *mut c_void;
            c.length = l;
            c.lkey = fresh.lkey;
            c.rkey = fresh.rkey;
            c.handle = fresh.lkey;
        }
        MRS.insert(mr, fresh);
        Ok(0)
    }
}

export! {
    null fn ibv_import_pd(context: *mut ibv_context, pd_handle: u32) -> *mut ibv_pd {
        let _ = pd_handle;
        handles::ctx(context)?;
        Err(Errno::EOPNOTSUPP)
    }
}

export! {
    void fn ibv_unimport_pd(pd: *mut ibv_pd) {
        let _ = pd;
        Ok(())
    }
}

export! {
    null fn ibv_import_mr(pd: *mut ibv_pd, mr_handle: u32) -> *mut ibv_mr {
        let _ = mr_handle;
        handles::pd(pd)?;
        Err(Errno::EOPNOTSUPP)
    }
}

export! {
    void fn ibv_unimport_mr(mr: *mut ibv_mr) {
        let _ = mr;
        Ok(())
    }
}

export! {
    /// Returns `struct ibv_dm *`; not supported (no device memory).
    null fn ibv_import_dm(context: *mut ibv_context, dm_handle: u32) -> *mut c_void {
        let _ = dm_handle;
        handles::ctx(context)?;
        Err(Errno::EOPNOTSUPP)
    }
}

export! {
    void fn ibv_unimport_dm(dm: *mut c_void) {
        let _ = dm;
        Ok(())
    }
}

export! {
    /// Nothing to do: this device pins no memory, so fork needs no protection.
    errno fn ibv_fork_init() -> c_int {
        Ok(0)
    }
}

export! {
    value(2) fn ibv_is_fork_initialized() -> u32 {
        Ok(IBV_FORK_UNNEEDED)
    }
}

export! {
    errno fn ibv_dontfork_range(base: *mut c_void, size: usize) -> c_int {
        let _ = (base, size);
        Ok(0)
    }
}

export! {
    errno fn ibv_dofork_range(base: *mut c_void, size: usize) -> c_int {
        let _ = (base, size);
        Ok(0)
    }
}

/// ` lkey … rkey …` of a live MR (trace text); empty for NULL or an unknown pointer.
fn mr_keys(mr: *mut ibv_mr) -> String {
    match handles::mr(mr) {
        Ok(m) => format!(" lkey {:#x} rkey {:#x}", m.lkey, m.rkey),
        Err(_) => String::new(),
    }
}
