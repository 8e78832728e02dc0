//! The kernel backend's state for one id (`KSt`, in the id's own allocation:
//! `IdCore::kern`) and the way from the `uid` the kernel echoes in events
//! back to ids (their address and generation, checked in the handle
//! registry) and multicast memberships (cookies): an event for something
//! already gone finds nothing and is dropped.
//!
//! Locking: the kernel state lock may be taken before an id's core state
//! lock (queries fill the public struct, QPs are modified under
//! `with_public`), never after it. Kernel commands on an id run under it via
//! `with_handle`, or counted in `IdCore::kern_cmds` via `command`; destroy takes
//! the handle away under the same lock and waits for the counted ones, so
//! no command can reach a kernel id number after it was destroyed (the
//! kernel reuses numbers).

use super::abi::*;
use super::convert;
use super::dev::{self, Dev};
use super::ucma::{PathResp, Ucma};
use crate::cm::registry::{lock, Cookies};
use crate::cm::{Channel, IdBox, IdCore};
use crate::sys::{Errno, Result};
use crate::verbs::{ibv_detach_mcast, ibv_modify_qp, verr};
use rdma_abi::cma::rdma_cm_id;
use rdma_abi::verbs::*;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// `route.path_rec`: an array allocated with libc (the application reads it).
pub struct PathArray(std::ptr::NonNull<ibv_sa_path_rec>);
// SAFETY: plain heap memory owned by one id.
unsafe impl Send for PathArray {}
impl Drop for PathArray {
    fn drop(&mut self) {
        // SAFETY: allocated by calloc in `query_path`, freed once here.
        unsafe { libc::free(self.0.as_ptr().cast()) };
    }
}

/// The kernel backend's part of one id, inside the id's own allocation
/// (`IdCore::kern`): one allocation per id, as upstream's.
#[derive(Default)]
pub struct Kern {
    slot: Mutex<KSlot>,
}

/// What `Kern`'s lock guards.
#[derive(Default)]
pub struct KSlot {
    /// The kernel id; None before it is made and once destroyed.
    pub handle: Option<u32>,
    /// The rdma_cm file the kernel id is on (its channel's; MIGRATE_ID moves it).
    pub file: Option<Arc<Ucma>>,
    /// The rest, which commands on the kernel id may change (`with_handle`).
    pub st: KSt,
}

/// The kernel state of an id besides its kernel id and file.
#[derive(Default)]
pub struct KSt {
    /// The `uid` cookie the kernel echoes in this id's events (0: none yet).
    pub key: u64,
    /// Set by destroy: nothing may be posted for the id after that.
    pub dead: bool,
    pub dev: Option<&'static Dev>,
    /// What REQ/REP carry and the QP transitions use (RDMA_MAX_* = device maxima).
    pub initiator_depth: u8,
    pub responder_resources: u8,
    /// Processing the peer's reply failed: its later REJECTED/DISCONNECTED are swallowed.
    pub connect_error: bool,
    /// Path records (every routed id on IB and RoCE has them).
    pub path: Option<PathArray>,
    /// Multicast memberships, boxed: most ids never join, and every byte of
    /// an id is heap that a burst of creates faults in (`IdState::extra`).
    pub mcs: Option<Box<Vec<Arc<Mc>>>>,
}

/// Whether `query_addr` also reads the id's GIDs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Gids {
    IbTransport,
    Yes,
}

/// One multicast membership (rdma_join_multicast).
pub struct Mc {
    pub key: u64,
    /// The kernel's handle for it (u32::MAX until JOIN_MCAST returned).
    pub handle: AtomicU32,
    pub addr: Vec<u8>,
    pub context: usize,
    pub send_only: bool,
    /// (mgid, mlid) once attached to the id's QP.
    pub attached: Mutex<Option<([u8; 16], u16)>>,
}

#[derive(Clone)]
pub enum Owner {
    Id(Arc<IdCore>),
    Mc(Arc<IdCore>, Arc<Mc>),
}

/// The top bit of a `uid` says it names a multicast membership (a cookie of
/// `MCS`); else it is the id's own address with the id's generation above
/// bit 48, checked against the handle registry, so an event for an id gone
/// (and its memory reused) finds nothing.
const MC_BIT: u64 = 1 << 63;
const ADDR_BITS: u32 = 48;

/// Who each membership `uid` belongs to.
static MCS: Mutex<Cookies<Owner>> = Mutex::new(Cookies::new());

/// Doorbell uids (`bell`) have the top two bits set: neither an address
/// (below bit 48) nor a membership cookie (bit 63 and a generation of 30 bits).
const BELL_BITS: u64 = 3 << 62;

/// A new doorbell uid.
pub fn bell_key() -> u64 {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    BELL_BITS | (NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) & !BELL_BITS)
}

/// Whether an event's uid is a doorbell's.
pub fn is_bell(uid: u64) -> bool {
    uid & BELL_BITS == BELL_BITS
}

/// Who an event's `uid` belongs to.
pub fn lookup(uid: u64) -> Option<Owner> {
    if uid & MC_BIT != 0 {
        return lock(&MCS).get(uid & !MC_BIT).cloned();
    }
    let ptr = (uid & ((1 << ADDR_BITS) - 1)) as *const rdma_cm_id;
    IdBox::lookup_gen(ptr, (uid >> ADDR_BITS) as u16).map(Owner::Id)
}

fn forget(key: u64) {
    let gone = lock(&MCS).remove(key & !MC_BIT);
    // The owner may hold the last reference to its id: dropped outside the lock.
    drop(gone);
}

/// The `uid` naming `core` (its kernel id's events find it by it). User
/// addresses on x86-64 Linux lie below 2^47; one that does not cannot be
/// named this way (never seen; refused rather than misrouted).
fn own(core: &IdCore) -> Result<u64> {
    let addr = core.ptr().0 as u64;
    if addr >> ADDR_BITS != 0 {
        return Err(Errno::ENOMEM);
    }
    Ok(((core.gen() as u64 & 0x7fff) << ADDR_BITS) | addr)
}

/// The id's kernel state, locked (taken before the id's core state lock).
pub fn st(core: &IdCore) -> MutexGuard<'_, KSlot> {
    lock(&core.kern.slot)
}

/// Runs a command that needs only the kernel id (and the id's device)
/// outside the kernel state lock, making the kernel id first if `create`
/// and it has none. The kernel may queue the command's event before write()
/// returns (a local ADDR_RESOLVED, a ROUTE_RESOLVED, a RoCE MULTICAST_JOIN),
/// and the thread reading events takes that lock to handle it: held across
/// the write, it made that thread sleep on it and this one wake it, on about
/// a quarter of the resolves of a cmtime run, where upstream's library takes
/// no lock at all. `with_handle` is for commands that read or change `KSt`.
/// Counted in `IdCore::kern_cmds` (commands written outside the lock and
/// not yet returned), so teardown and migrate still come after it
/// (`quiesce`): no command reaches a kernel id number after destroy (the
/// kernel reuses numbers) or the file an id left.
pub fn command<R>(core: &Arc<IdCore>, create: bool, f: impl FnOnce(&Ucma, u32, Option<&'static Dev>) -> Result<R>) -> Result<R> {
    counted(
        core,
        |slot| {
            if create && slot.handle.is_none() {
                create_locked(core, slot)?;
            }
            let (Some(h), Some(u)) = (slot.handle, slot.file.clone()) else { return Err(Errno::EINVAL) };
            Ok((u, (h, slot.st.dev)))
        },
        |u, (h, dev)| f(u, h, dev),
    )
}

/// `prep` under the kernel state lock (the file to write to and what `run`
/// needs), then `run` outside it, counted in `IdCore::kern_cmds` until it returns.
fn counted<S, R>(
    core: &IdCore,
    prep: impl FnOnce(&mut KSlot) -> Result<(Arc<Ucma>, S)>,
    run: impl FnOnce(&Ucma, S) -> Result<R>,
) -> Result<R> {
    struct Done<'a>(&'a AtomicU32);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::Release);
        }
    }
    let (u, v) = {
        let mut slot = st(core);
        let r = prep(&mut slot)?;
        // Under the lock: a teardown or migrate that takes it next sees this.
        core.kern_cmds.fetch_add(1, Ordering::Relaxed);
        r
    };
    let _done = Done(&core.kern_cmds);
    run(&u, v)
}

/// `with_handle`'s `locked` under the kernel state lock, then `after` with
/// its result outside it, counted as a `command`: for a command whose
/// arguments come from `KSt` and whose write must not hold the lock. The
/// kernel can queue an event for the id while the write is still in the
/// kernel (on rxe a passive side's ESTABLISHED arrives during its ACCEPT),
/// and the thread reading events takes the lock to route it: held, it made
/// that thread sleep and this one wake it once per connection.
pub fn with_handle_then<S, R>(
    core: &IdCore,
    locked: impl FnOnce(&Ucma, u32, &mut KSt) -> Result<S>,
    after: impl FnOnce(&Ucma, S) -> Result<R>,
) -> Result<R> {
    counted(
        core,
        |slot| {
            let v = on_handle(slot, locked)?;
            Ok((slot.file.clone().ok_or(Errno::EINVAL)?, v))
        },
        after,
    )
}

/// Waits until no `command` is in flight. Called after taking the kernel id
/// away or while holding the lock, so none can start meanwhile; a command
/// is one write(), so the wait is short.
fn quiesce(core: &IdCore) {
    while core.kern_cmds.load(Ordering::Acquire) != 0 {
        std::thread::yield_now();
    }
}

/// Makes the id's kernel id on its channel's file, under its state lock.
/// A channel without a file means no device: ENODEV.
fn create_locked(core: &Arc<IdCore>, st: &mut KSlot) -> Result<()> {
    if st.st.dead {
        return Err(Errno::EINVAL);
    }
    let u = {
        let cs = core.state();
        if !cs.alive {
            return Err(Errno::EINVAL);
        }
        super::source::file_of(&cs.channel).ok_or(Errno::ENODEV)?
    };
    let (key, h) = make(core, &u)?;
    fill(st, key, h, u);
    Ok(())
}

/// rdma_create_id: the kernel id at once, as upstream makes it, on an id
/// nothing else can reach yet (so without its locks). ENODEV: the channel
/// has no rdma_cm file.
pub fn create_unique(core: &mut IdCore) -> Result<()> {
    let u = super::source::file_of(core.unique_channel()).ok_or(Errno::ENODEV)?;
    let (key, h) = make(core, &u)?;
    fill(core.kern.slot.get_mut().unwrap_or_else(|e| e.into_inner()), key, h, u);
    Ok(())
}

/// CREATE_ID on `u` for `core`: its uid and the kernel's id number.
fn make(core: &IdCore, u: &Ucma) -> Result<(u64, u32)> {
    let key = own(core)?;
    Ok((key, u.create_id(key, core.ps(), core.qp_type())?))
}

/// Records a kernel id made by `make`.
fn fill(st: &mut KSlot, key: u64, h: u32, u: Arc<Ucma>) {
    st.st.key = key;
    st.handle = Some(h);
    st.file = Some(u);
}

/// Runs `f` with the kernel id and its file while it exists (EINVAL before
/// it is made and after destroy). Kernel commands on an id run here, under
/// its state lock: destroy takes the handle away under the same lock, so no
/// command reaches a kernel id number after it was destroyed (the kernel
/// reuses numbers).
pub fn with_handle<R>(core: &IdCore, f: impl FnOnce(&Ucma, u32, &mut KSt) -> Result<R>) -> Result<R> {
    on_handle(&mut st(core), f)
}

/// `with_handle` for a caller that holds the kernel state lock.
pub fn on_handle<R>(slot: &mut KSlot, f: impl FnOnce(&Ucma, u32, &mut KSt) -> Result<R>) -> Result<R> {
    let KSlot { handle, file, st } = slot;
    let (Some(h), Some(u)) = (*handle, file.as_deref()) else { return Err(Errno::EINVAL) };
    f(u, h, st)
}

/// `with_handle`, making the kernel id first if the id has none yet (an id
/// made before its channel had a device).
pub fn with_handle_or_create<R>(core: &Arc<IdCore>, f: impl FnOnce(&Ucma, u32, &mut KSt) -> Result<R>) -> Result<R> {
    let mut st = st(core);
    if st.handle.is_none() {
        create_locked(core, &mut st)?;
    }
    on_handle(&mut st, f)
}

/// A CONNECT_REQUEST's new kernel id, given to the new core id (the
/// kernel's own uid for it is set by ACCEPT, which names `key`).
pub fn adopt(core: &Arc<IdCore>, handle: u32, file: Arc<Ucma>) -> Result<()> {
    let key = own(core)?;
    let mut st = st(core);
    st.st.key = key;
    st.handle = Some(handle);
    st.file = Some(file);
    Ok(())
}

/// A membership made before JOIN_MCAST is written (its events may come at once).
pub fn add_mc(core: &Arc<IdCore>, addr: &[u8], context: usize, send_only: bool) -> Arc<Mc> {
    let mc = {
        let mut owners = lock(&MCS);
        let key = owners.reserve() | MC_BIT;
        let mc = Arc::new(Mc {
            key,
            handle: AtomicU32::new(u32::MAX),
            addr: addr.to_vec(),
            context,
            send_only,
            attached: Mutex::new(None),
        });
        owners.fill(key & !MC_BIT, Owner::Mc(core.clone(), mc.clone()));
        mc
    };
    st(core).st.mcs.get_or_insert_with(Default::default).push(mc.clone());
    mc
}

/// Takes a membership out of the id (by the address it was joined with).
pub fn take_mc(core: &IdCore, addr: &[u8]) -> Option<Arc<Mc>> {
    let mc = {
        let mut st = st(core);
        let mcs = st.st.mcs.as_mut()?;
        let i = mcs.iter().position(|m| m.addr == addr)?;
        mcs.remove(i)
    };
    forget(mc.key);
    Some(mc)
}

/// rdma_migrate_id: the kernel id (with its unread events) moves to the
/// file of the channel `to`.
pub fn migrate(core: &IdCore, to: &Channel) -> Result<()> {
    let mut st = st(core);
    let (Some(h), Some(from)) = (st.handle, st.file.clone()) else { return Ok(()) };
    if super::source::file_of(to).is_some_and(|f| Arc::ptr_eq(&f, &from)) {
        return Ok(());
    }
    quiesce(core);
    st.file = Some(super::source::migrate_into(to, h, &from)?);
    Ok(())
}

/// QUERY(ADDR): the id's addresses; attaches it to its device the first
/// time the kernel names one. QUERY(GID) then gives sgid/dgid where
/// upstream asks for them (`gids`): an ADDR_RESOLVED asks on IB-transport
/// devices only (an iWARP id's stay zero), bind, listen and a
/// CONNECT_REQUEST's new id always (`dev_attrs` compares them).
pub fn query_addr(core: &IdCore, u: &Ucma, h: u32, st: &mut KSt, gids: Gids) -> Result<()> {
    let mut r = rdma_ucm_query_addr_resp::default();
    u.query_addr(h, QUERY_ADDR, &mut r)?;
    let dev = if st.dev.is_none() && r.node_guid != 0 { Some(dev::find(r.node_guid, r.ibdev_index)?) } else { None };
    let ask = match gids {
        Gids::IbTransport => dev.or(st.dev).is_some_and(|d| d.is_ib_transport()),
        Gids::Yes => true,
    };
    let mut g = rdma_ucm_query_addr_resp::default();
    let have_g = ask && u.query_addr(h, QUERY_GID, &mut g).is_ok();
    core.with_public(|p| {
        let copy = |dst: &mut libc::sockaddr_storage, src: &kernel_sockaddr_storage, n: u16| {
            let n = (n as usize).min(128);
            if n > 0 {
                // SAFETY: sockaddr_storage is 128 plain bytes; n ≤ 128.
                let d = unsafe { std::slice::from_raw_parts_mut(dst as *mut _ as *mut u8, 128) };
                d[..n].copy_from_slice(&src.0[..n]);
            }
        };
        // SAFETY: the storage members of the address unions (plain bytes).
        unsafe {
            copy(&mut p.route.addr.src.storage, &r.src_addr, r.src_size);
            copy(&mut p.route.addr.dst.storage, &r.dst_addr, r.dst_size);
        }
        if let Some(d) = dev {
            p.verbs = d.ctx();
            if p.pd.is_null() {
                p.pd = d.pd();
            }
            p.port_num = r.port_num;
            p.route.addr.addr.ibaddr.pkey = r.pkey;
        }
        if have_g {
            // sockaddr_ib: the GID sits at offset 8.
            if g.src_size as usize >= 24 {
                p.route.addr.addr.ibaddr.sgid.raw = gid_at(&g.src_addr);
            }
            if g.dst_size as usize >= 24 {
                p.route.addr.addr.ibaddr.dgid.raw = gid_at(&g.dst_addr);
            }
        }
    })?;
    if dev.is_some() {
        st.dev = dev;
    }
    Ok(())
}

/// QUERY(PATH) → `route.path_rec` (IB transport: IB and RoCE; iWARP has none).
pub fn query_path(core: &IdCore, u: &Ucma, h: u32, st: &mut KSt) -> Result<()> {
    if !st.dev.map(|d| d.is_ib_transport()).unwrap_or(false) {
        return Ok(());
    }
    let mut resp = PathResp::default();
    let paths = u.query_path(h, &mut resp)?;
    let arr = if paths.is_empty() {
        None
    } else {
        // SAFETY: calloc of n records, checked below; filled before use.
        let a = unsafe { libc::calloc(paths.len(), std::mem::size_of::<ibv_sa_path_rec>()) } as *mut ibv_sa_path_rec;
        let a = std::ptr::NonNull::new(a).ok_or(Errno::ENOMEM)?;
        for (i, d) in paths.iter().enumerate() {
            // SAFETY: a has room for paths.len() records.
            unsafe { a.as_ptr().add(i).write(convert::sa_path_rec(d)) };
        }
        Some(PathArray(a))
    };
    let (ptr, n) = arr.as_ref().map_or((std::ptr::null_mut(), 0), |a| (a.0.as_ptr(), paths.len() as i32));
    core.with_public(|p| {
        p.route.path_rec = ptr;
        p.route.num_paths = n;
    })?;
    st.path = arr; // the previous array (if any) is freed here
    Ok(())
}

/// Moves the id's QP (if any) to `state` alone (ERR flushes, SQD drains).
pub fn qp_to(core: &IdCore, state: u32) -> Result<()> {
    core.with_public(|p| {
        if p.qp.is_null() {
            return Ok(());
        }
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state;
        // SAFETY: the id's live QP (guarded by the id's lock).
        verr(unsafe { ibv_modify_qp(p.qp, &mut a, IBV_QP_STATE as i32) })
    })
    .unwrap_or(Ok(()))
}

/// Detaches a membership's group from the QP, if it was attached.
pub fn detach(core: &IdCore, mc: &Mc) {
    if let Some((gid, lid)) = lock(&mc.attached).take() {
        let _ = core.with_public(|p| {
            if !p.qp.is_null() {
                let g = ibv_gid { raw: gid };
                // SAFETY: the id's live QP (guarded by the id's lock), a valid gid.
                unsafe { ibv_detach_mcast(p.qp, &g, lid) };
            }
        });
    }
}

/// rdma_destroy_id: no event is posted after this, the kernel id and
/// memberships are destroyed (the kernel drops their unread events), the
/// path records freed.
pub fn teardown(core: &IdCore) {
    let (handle, mcs, path, u) = {
        let mut slot = st(core);
        let KSlot { handle, file, st } = &mut *slot;
        st.dead = true;
        (handle.take(), st.mcs.take(), st.path.take(), file.take())
    };
    quiesce(core);
    for mc in mcs.iter().flat_map(|v| v.iter()) {
        forget(mc.key);
        detach(core, mc);
    }
    if let (Some(h), Some(u)) = (handle, u) {
        let _ = u.destroy_id(h);
    }
    if path.is_some() {
        let _ = core.with_public(|p| {
            p.route.path_rec = std::ptr::null_mut();
            p.route.num_paths = 0;
        });
    }
    drop(path);
}

/// The GID of a `sockaddr_ib` (at offset 8).
fn gid_at(a: &kernel_sockaddr_storage) -> [u8; 16] {
    let mut g = [0; 16];
    g.copy_from_slice(&a.0[8..24]);
    g
}

pub fn is_ud(core: &IdCore) -> bool {
    core.qp_type() == IBV_QPT_UD
}
