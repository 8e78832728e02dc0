//! The kernel backend's state for one id (`KId`, kept in `IdState::ext`) and
//! the map from the `uid` cookies the kernel echoes in events back to ids and
//! multicast memberships. A cookie is a number from a counter, never a
//! pointer: an event for something already gone finds nothing and is dropped.
//!
//! Locking: `KId::st` may be taken before an id's core state lock (queries
//! fill the public struct, QPs are modified under `with_public`), never after
//! it. Kernel commands on an id run under `st` via `with_handle`, and
//! destroy takes the handle away under the same lock, so no command can reach
//! a kernel id number after it was destroyed (the kernel reuses numbers).

use super::abi::*;
use super::convert;
use super::dev::{self, Dev};
use super::ucma::Ucma;
use crate::cm::registry::{lock, Cookies};
use crate::cm::{Channel, IdCore, Pending};
use crate::sys::{Errno, Result};
use crate::verbs::{ibv_detach_mcast, ibv_modify_qp, verr};
use rdma_abi::verbs::*;
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, MutexGuard};

/// `route.path_rec`: an array allocated with libc (the application reads it).
pub struct PathArray(pub *mut ibv_sa_path_rec);
// SAFETY: plain heap memory owned by one id.
unsafe impl Send for PathArray {}
impl Drop for PathArray {
    fn drop(&mut self) {
        // SAFETY: allocated by calloc in `query_path`, freed once here.
        unsafe { libc::free(self.0.cast()) };
    }
}

pub struct KSt {
    /// The kernel id; None once destroyed.
    pub handle: Option<u32>,
    /// The rdma_cm file the kernel id is on (its channel's; MIGRATE_ID moves it).
    pub file: Arc<Ucma>,
    /// Set by destroy: nothing may be posted for the id after that.
    pub dead: bool,
    pub dev: Option<&'static Dev>,
    /// What REQ/REP carry and the QP transitions use (RDMA_MAX_* = device maxima).
    pub initiator_depth: u8,
    pub responder_resources: u8,
    /// Processing the peer's reply failed: its later REJECTED/DISCONNECTED are swallowed.
    pub connect_error: bool,
    pub path: Option<PathArray>,
    pub mcs: Vec<Arc<Mc>>,
}

/// Whether `KId::query_addr` also reads the id's GIDs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Gids {
    IbTransport,
    Yes,
}

pub struct KId {
    pub core: Arc<IdCore>,
    pub key: u64,
    st: Mutex<KSt>,
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
    Id(Arc<KId>),
    Mc(Arc<KId>, Arc<Mc>),
}

/// Who each `uid` the kernel echoes belongs to.
static OWNERS: Mutex<Cookies<Owner>> = Mutex::new(Cookies::new());

/// Who an event's `uid` belongs to.
pub fn lookup(uid: u64) -> Option<Owner> {
    lock(&OWNERS).get(uid).cloned()
}

fn forget(key: u64) {
    let gone = lock(&OWNERS).remove(key);
    // The owner may hold the last reference to its id: dropped outside the lock.
    drop(gone);
}

fn ext_of(core: &IdCore) -> Option<Arc<KId>> {
    core.state().ext.as_ref().and_then(|e| e.clone().downcast::<KId>().ok())
}

/// The id's kernel state, if it has a kernel id.
pub fn get(core: &Arc<IdCore>) -> Result<Arc<KId>> {
    ext_of(core).ok_or(Errno::EINVAL)
}

fn new_kid(core: &Arc<IdCore>, handle: Option<u32>, file: Arc<Ucma>) -> Arc<KId> {
    let mut owners = lock(&OWNERS);
    let key = owners.reserve();
    let k = Arc::new(KId {
        core: core.clone(),
        key,
        st: Mutex::new(KSt {
            handle,
            file,
            dead: false,
            dev: None,
            initiator_depth: 0,
            responder_resources: 0,
            connect_error: false,
            path: None,
            mcs: Vec::new(),
        }),
    });
    owners.fill(key, Owner::Id(k.clone()));
    k
}

/// The id's kernel state, creating its kernel id (on its channel's file) if
/// it has none yet. A channel without a file means no device: ENODEV.
pub fn get_or_create(core: &Arc<IdCore>) -> Result<Arc<KId>> {
    // Every call after rdma_create_id finds it: one lock, not two.
    if let Some(k) = ext_of(core) {
        return Ok(k);
    }
    let (ps, qp_type) = core.with_public(|p| (p.ps, p.qp_type))?;
    let mut st = core.state();
    if let Some(k) = st.ext.as_ref().and_then(|e| e.clone().downcast::<KId>().ok()) {
        return Ok(k);
    }
    if !st.alive {
        return Err(Errno::EINVAL);
    }
    let u = super::source::file_of(&st.channel).ok_or(Errno::ENODEV)?;
    let k = new_kid(core, None, u.clone());
    match u.create_id(k.key, ps, qp_type) {
        Ok(h) => {
            k.st().handle = Some(h);
            st.ext = Some(k.clone());
            Ok(k)
        }
        Err(e) => {
            forget(k.key);
            Err(e)
        }
    }
}

/// A CONNECT_REQUEST's new kernel id, given to the new core id.
pub fn adopt(core: &Arc<IdCore>, handle: u32, file: Arc<Ucma>) -> Arc<KId> {
    let k = new_kid(core, Some(handle), file);
    core.state().ext = Some(k.clone());
    k
}

/// A membership made before JOIN_MCAST is written (its events may come at once).
pub fn add_mc(k: &Arc<KId>, addr: &[u8], context: usize, send_only: bool) -> Arc<Mc> {
    let mc = {
        let mut owners = lock(&OWNERS);
        let key = owners.reserve();
        let mc = Arc::new(Mc {
            key,
            handle: AtomicU32::new(u32::MAX),
            addr: addr.to_vec(),
            context,
            send_only,
            attached: Mutex::new(None),
        });
        owners.fill(key, Owner::Mc(k.clone(), mc.clone()));
        mc
    };
    k.st().mcs.push(mc.clone());
    mc
}

/// Takes a membership out of the id (by the address it was joined with).
pub fn take_mc(k: &KId, addr: &[u8]) -> Option<Arc<Mc>> {
    let mc = {
        let mut st = k.st();
        let i = st.mcs.iter().position(|m| m.addr == addr)?;
        st.mcs.remove(i)
    };
    forget(mc.key);
    Some(mc)
}

impl KId {
    pub fn st(&self) -> MutexGuard<'_, KSt> {
        lock(&self.st)
    }

    /// Runs `f` with the kernel id and its file while it exists (EINVAL after destroy).
    pub fn with_handle<R>(&self, f: impl FnOnce(&Ucma, u32, &mut KSt) -> Result<R>) -> Result<R> {
        let mut st = self.st();
        let h = st.handle.ok_or(Errno::EINVAL)?;
        let u = st.file.clone();
        f(&u, h, &mut st)
    }

    /// Hands over an event read from a kernel file by a reader of `ch`:
    /// Ok(Some) when the id is on `ch` (the reader returns it), Ok(None) when
    /// it was queued on the id's own channel, Err when the id is being
    /// destroyed (checked under the lock destroy takes, so nothing slips in
    /// after it).
    pub fn route(&self, p: Pending, ch: &Arc<Channel>) -> std::result::Result<Option<Pending>, Pending> {
        let st = self.st();
        if st.dead {
            return Err(p);
        }
        // Handed out under `st`: teardown takes it too, so destroy waits for it.
        let r = self.core.take_or_post(p, ch).map(Pending::handed_out);
        drop(st);
        Ok(r)
    }

    /// rdma_migrate_id: the kernel id (with its unread events) moves to the
    /// file of the channel `to`.
    pub fn migrate(&self, to: &Channel) -> Result<()> {
        let mut st = self.st();
        let Some(h) = st.handle else { return Ok(()) };
        if super::source::file_of(to).is_some_and(|f| Arc::ptr_eq(&f, &st.file)) {
            return Ok(());
        }
        st.file = super::source::migrate_into(to, h, &st.file)?;
        Ok(())
    }

    /// QUERY(ADDR): the id's addresses; attaches it to its device the first
    /// time the kernel names one. QUERY(GID) then gives sgid/dgid where
    /// upstream asks for them (`gids`): an ADDR_RESOLVED asks on IB-transport
    /// devices only (an iWARP id's stay zero), bind, listen and a
    /// CONNECT_REQUEST's new id always (`dev_attrs` compares them).
    pub fn query_addr(&self, u: &Ucma, h: u32, st: &mut KSt, gids: Gids) -> Result<()> {
        let r = u.query_addr(h, QUERY_ADDR)?;
        let dev = if st.dev.is_none() && r.node_guid != 0 { Some(dev::find(r.node_guid, r.ibdev_index)?) } else { None };
        let ask = match gids {
            Gids::IbTransport => dev.or(st.dev).is_some_and(|d| d.is_ib_transport()),
            Gids::Yes => true,
        };
        let g = if ask { u.query_addr(h, QUERY_GID).ok() } else { None };
        self.core.with_public(|p| {
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
            if let Some(g) = g {
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
    pub fn query_path(&self, u: &Ucma, h: u32, st: &mut KSt) -> Result<()> {
        if !st.dev.map(|d| d.is_ib_transport()).unwrap_or(false) {
            return Ok(());
        }
        let paths = u.query_path(h)?;
        let arr = if paths.is_empty() {
            None
        } else {
            // SAFETY: calloc of n records, checked below; filled before use.
            let a = unsafe { libc::calloc(paths.len(), std::mem::size_of::<ibv_sa_path_rec>()) } as *mut ibv_sa_path_rec;
            if a.is_null() {
                return Err(Errno::ENOMEM);
            }
            for (i, d) in paths.iter().enumerate() {
                // SAFETY: a has room for paths.len() records.
                unsafe { a.add(i).write(convert::sa_path_rec(d)) };
            }
            Some(PathArray(a))
        };
        let (ptr, n) = arr.as_ref().map_or((std::ptr::null_mut(), 0), |a| (a.0, paths.len() as i32));
        self.core.with_public(|p| {
            p.route.path_rec = ptr;
            p.route.num_paths = n;
        })?;
        st.path = arr; // the previous array (if any) is freed here
        Ok(())
    }

    /// INIT_QP_ATTR(state), adjusted by `tweak`, applied to the id's QP (the
    /// QP is used under the id's lock, so rdma_destroy_qp cannot free it meanwhile).
    pub fn modify_qp(
        &self,
        u: &Ucma,
        h: u32,
        state: u32,
        tweak: impl FnOnce(&mut ibv_qp_attr, &mut i32),
    ) -> Result<()> {
        let k = u.init_qp_attr(h, state)?;
        // SAFETY: all-zero is a valid ibv_qp_attr.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        let mut mask = convert::qp_attr(&k, &mut a);
        tweak(&mut a, &mut mask);
        self.core.with_public(|p| {
            if p.qp.is_null() {
                return Err(Errno::EINVAL);
            }
            // SAFETY: the id's live QP (guarded by the id's lock) and a filled attribute block.
            verr(unsafe { ibv_modify_qp(p.qp, &mut a, mask) })
        })?
    }

    /// Moves the id's QP (if any) to `state` alone (ERR flushes, SQD drains).
    pub fn qp_to(&self, state: u32) -> Result<()> {
        self.core
            .with_public(|p| {
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
    pub fn detach(&self, mc: &Mc) {
        if let Some((gid, lid)) = lock(&mc.attached).take() {
            let _ = self.core.with_public(|p| {
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
    pub fn teardown(&self) {
        let (handle, mcs, path, u) = {
            let mut st = self.st();
            st.dead = true;
            (st.handle.take(), std::mem::take(&mut st.mcs), st.path.take(), st.file.clone())
        };
        forget(self.key);
        for mc in &mcs {
            forget(mc.key);
            self.detach(mc);
        }
        if let Some(h) = handle {
            let _ = u.destroy_id(h);
        }
        let _ = self.core.with_public(|p| {
            p.route.path_rec = std::ptr::null_mut();
            p.route.num_paths = 0;
        });
        drop(path);
    }
}

/// The GID of a `sockaddr_ib` (at offset 8).
fn gid_at(a: &kernel_sockaddr_storage) -> [u8; 16] {
    let mut g = [0; 16];
    g.copy_from_slice(&a.0[8..24]);
    g
}

pub fn qp_type(core: &IdCore) -> u32 {
    core.with_public(|p| p.qp_type).unwrap_or(IBV_QPT_RC)
}

pub fn is_ud(core: &IdCore) -> bool {
    qp_type(core) == IBV_QPT_UD
}

/// The ECE the id sends in a REP: the peer's vendor, our options.
pub fn rep_ece(core: &IdCore) -> rdma_ucm_ece {
    let st = core.state();
    rdma_ucm_ece { vendor_id: st.remote_ece.vendor_id, attr_mod: st.local_ece.options }
}

pub fn req_ece(core: &IdCore) -> rdma_ucm_ece {
    let st = core.state();
    rdma_ucm_ece { vendor_id: st.local_ece.vendor_id, attr_mod: st.local_ece.options }
}
