//! Communication identifiers: the public `rdma_cm_id` plus the library's
//! state for it, and the calls that need no device (create, destroy,
//! migrate, user events, synchronous completion).

use super::channel::{Channel, ChannelBox};
use super::event::{EventBox, Head, IdPtr, Param, Pending, Slot};
use super::options::Options;
use super::registry::{self, lock, Kind};
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;
use rdma_abi::verbs::ibv_ece;
use std::cell::UnsafeCell;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

const IBV_QPT_RC: u32 = 2;
const IBV_QPT_UD: u32 = 4;

/// The per-id state that is not in the public struct.
pub struct IdState {
    pub channel: Arc<Channel>,
    /// Sync mode: the private channel this id owns.
    pub private_channel: Option<ChannelPtr>,
    pub alive: bool,
    pub options: Options,
    /// What few ids have (the soft backend's ids: their `ext`), behind one
    /// pointer: every byte of an id is heap that a program's burst of
    /// creates faults in (cmtime's 100; under the VM benchmark's TCG some
    /// 25 us per fresh page), and upstream's ids are 600 bytes.
    pub extra: Option<Box<Extra>>,
}

#[derive(Default)]
pub struct Extra {
    /// The id's local and remote ECE (`rdma_set_local_ece`, the peer's).
    ece: [ibv_ece; 2],
    /// Result of `rdma_resolve_addrinfo`, handed over by `rdma_query_addrinfo`.
    pub resolved: Option<crate::addrinfo::List>,
    /// CQs the library created for this id's QP.
    pub lib_cqs: Option<crate::qp::LibCqs>,
    /// The soft backend's own state for this id (the kernel's is `IdCore::kern`).
    pub ext: Option<Arc<dyn std::any::Any + Send + Sync>>,
    /// rdma_create_ep on a passive id: the QP every rdma_get_request child gets.
    pub ep: Option<crate::qp::EpAttr>,
}

/// An ECE that reads as none (what an id without `Extra` reports).
fn ece_is_zero(e: &ibv_ece) -> bool {
    e.vendor_id == 0 && e.options == 0 && e.comp_mask == 0
}

impl Extra {
    /// Whether nothing is kept here. Every field named: a field added to
    /// `Extra` must be added here, or `take_extra` would free it with the rest.
    fn is_empty(&self) -> bool {
        let Extra { ece, resolved, lib_cqs, ext, ep } = self;
        ece.iter().all(ece_is_zero) && resolved.is_none() && lib_cqs.is_none() && ext.is_none() && ep.is_none()
    }
}

impl IdState {
    pub fn extra(&self) -> Option<&Extra> {
        self.extra.as_deref()
    }

    /// The extra part, made on first use.
    pub fn extra_mut(&mut self) -> &mut Extra {
        self.extra.get_or_insert_with(Default::default)
    }

    /// Takes one extra field out (None without the extra part); the part
    /// goes with its last field, so an id is back to one allocation (and
    /// rdma_destroy_qp frees the library's CQs' record, as it did when that
    /// was a box of its own).
    pub fn take_extra<T>(&mut self, f: impl FnOnce(&mut Extra) -> Option<T>) -> Option<T> {
        let x = self.extra.as_deref_mut()?;
        let r = f(x);
        if x.is_empty() {
            self.extra = None;
        }
        r
    }

    pub fn local_ece(&self) -> ibv_ece {
        self.extra().map_or_else(ibv_ece::default, |x| x.ece[0])
    }
    pub fn remote_ece(&self) -> ibv_ece {
        self.extra().map_or_else(ibv_ece::default, |x| x.ece[1])
    }
    pub fn set_local_ece(&mut self, e: ibv_ece) {
        self.set_ece(0, e)
    }
    pub fn set_remote_ece(&mut self, e: ibv_ece) {
        self.set_ece(1, e)
    }
    fn set_ece(&mut self, i: usize, e: ibv_ece) {
        if self.extra.is_none() && ece_is_zero(&e) {
            return; // what an id without the extra part reads already
        }
        self.extra_mut().ece[i] = e;
    }
}

#[derive(Clone, Copy)]
pub struct ChannelPtr(std::ptr::NonNull<rdma_event_channel>);

impl ChannelPtr {
    /// Some for a channel `ChannelBox::create` made (never NULL); non-null,
    /// an `Option` of it costs the id no more than the pointer.
    fn new(p: *mut rdma_event_channel) -> Option<ChannelPtr> {
        std::ptr::NonNull::new(p).map(ChannelPtr)
    }

    fn get(self) -> *mut rdma_event_channel {
        self.0.as_ptr()
    }
}
// SAFETY: a registered handle, used only through ChannelBox's functions.
unsafe impl Send for ChannelPtr {}

/// One allocation per id: the public struct C sees comes first, so the
/// handle (`ptr()`) is also the address of the `Arc`'s data. The registry
/// holds one strong reference per live handle (taken back by destroy); the
/// struct stays allocated while anything else (queued events, backends) still
/// holds the core, but `alive` keeps everyone off it after destroy.
/// Fields in order of alignment: a program's burst of creates (cmtime's
/// 100) faults in every byte of its ids, so no padding (`layout_tests`).
#[repr(C)]
pub struct IdCore {
    public: Public,
    st: Mutex<IdState>,
    /// Events handed out for this id: counted where one leaves its queue (or
    /// the kernel's routing) for a reader, under that queue's (or the kernel
    /// id's) lock, so destroy and migrate, which empty the queue and stop
    /// the kernel id under the same locks, also wait for an event a reader
    /// holds but has not given the application yet (as the kernel counts
    /// events in GET_EVENT). Not under `st`: `post` takes `st` before a queue.
    /// Wrapping counts: only their difference means anything, and fewer than
    /// 2^31 events are ever out at once.
    reported: AtomicU32,
    /// Acks of the events in `reported`.
    acked: AtomicU32,
    /// The kernel CM's state for the id (unused by the other backends): in
    /// the same allocation, as upstream keeps one allocation per id. Its lock
    /// is taken before `st`, never after (`kernel::kid`).
    pub(crate) kern: crate::kernel::kid::Kern,
    /// The address of `st.channel`, written with it (under the lock), for
    /// `is_on`'s comparison without it.
    on: std::sync::atomic::AtomicPtr<Channel>,
    /// Held by rdma_destroy_qp while it takes the QP away and destroys it, and
    /// by a backend thread that modifies the QP outside `st` (the modify takes
    /// `st` itself), so the QP is not destroyed under it. Taken before `st`.
    qp_lock: Mutex<()>,
    cond: Condvar,
    /// Threads waiting for acks (destroy, migrate).
    waiting: AtomicU32,
    /// The kernel backend's commands written outside its lock and not yet
    /// returned (`kernel::kid::command`): here rather than in `kern`, where
    /// it would round that struct up by 4 bytes.
    pub(crate) kern_cmds: AtomicU32,
    /// `ps` and `qp_type` as made (the library never changes them in the
    /// public struct): read on many calls, without the state lock.
    ps: u32,
    qp_type: u32,
    /// Tells this id from an earlier one at the same address (`gen`).
    gen: u16,
    /// Whether `st.private_channel` is set (written with it, under the lock;
    /// read without it on every synchronous-mode check).
    sync: AtomicBool,
}

/// The struct the application reads and writes on its own terms (as with
/// upstream's); the library only through `IdCore::with_public`.
/// Transparent: the handle is the address of the `IdCore`.
#[repr(transparent)]
struct Public(UnsafeCell<rdma_cm_id>);

// SAFETY: the library touches the struct only in `with_public`, under the
// id's state lock; what it holds (C pointers) is data for C, never used by
// the library without that lock.
unsafe impl Send for Public {}
// SAFETY: as above.
unsafe impl Sync for Public {}

/// The calls on id handles (create, lookup, destroy, migrate, user events).
pub struct IdBox;

/// `qp_type` implied by a port space; `None` for an unknown one.
pub fn qp_type_for(ps: u32) -> Option<u32> {
    match ps {
        RDMA_PS_IPOIB | RDMA_PS_UDP => Some(IBV_QPT_UD),
        RDMA_PS_TCP | RDMA_PS_IB => Some(IBV_QPT_RC),
        _ => None,
    }
}

impl IdCore {
    /// Builds the core in its allocation (no copy of the whole struct from
    /// the stack: rdma_create_id is one of the calls cmtime times).
    fn new(
        channel: *mut rdma_event_channel,
        context: *mut libc::c_void,
        ps: u32,
        qp_type: u32,
        chan: Arc<Channel>,
        private_channel: Option<ChannelPtr>,
    ) -> Arc<IdCore> {
        // Not `Arc::new_uninit`, whose layout is computed by a call at run time.
        let mut a = Arc::new(std::mem::MaybeUninit::<IdCore>::uninit());
        let Some(slot) = Arc::get_mut(&mut a) else { unreachable!("a new Arc is unique") };
        let p = slot.as_mut_ptr();
        // SAFETY: `p` is the new, unique allocation; every field is written
        // once before assume_init. All-zero is a valid rdma_cm_id (pointers
        // NULL, numbers 0) and `Public` is a transparent wrapper of one.
        unsafe {
            std::ptr::addr_of_mut!((*p).on).write(std::sync::atomic::AtomicPtr::new(Arc::as_ptr(&chan) as *mut Channel));
            let public = std::ptr::addr_of_mut!((*p).public) as *mut rdma_cm_id;
            public.write_bytes(0, 1);
            (*public).channel = channel;
            (*public).context = context;
            (*public).ps = ps;
            (*public).qp_type = qp_type;
            std::ptr::addr_of_mut!((*p).st).write(Mutex::new(IdState {
                channel: chan,
                private_channel,
                alive: true,
                options: Options::default(),
                extra: None,
            }));
            std::ptr::addr_of_mut!((*p).cond).write(Condvar::new());
            std::ptr::addr_of_mut!((*p).reported).write(AtomicU32::new(0));
            std::ptr::addr_of_mut!((*p).qp_lock).write(Mutex::new(()));
            std::ptr::addr_of_mut!((*p).kern).write(Default::default());
            std::ptr::addr_of_mut!((*p).sync).write(AtomicBool::new(private_channel.is_some()));
            static GEN: std::sync::atomic::AtomicU16 = std::sync::atomic::AtomicU16::new(0);
            std::ptr::addr_of_mut!((*p).gen).write(GEN.fetch_add(1, Ordering::Relaxed));
            std::ptr::addr_of_mut!((*p).acked).write(AtomicU32::new(0));
            std::ptr::addr_of_mut!((*p).waiting).write(AtomicU32::new(0));
            std::ptr::addr_of_mut!((*p).kern_cmds).write(AtomicU32::new(0));
            std::ptr::addr_of_mut!((*p).ps).write(ps);
            std::ptr::addr_of_mut!((*p).qp_type).write(qp_type);
            a.assume_init()
        }
    }

    /// The channel of an id nothing else can reach yet (`IdBox::create_with`'s `init`).
    pub fn unique_channel(&mut self) -> &Channel {
        &self.st.get_mut().unwrap_or_else(|e| e.into_inner()).channel
    }

    /// A number that differs (mostly) between ids made one after another.
    pub fn gen(&self) -> u16 {
        self.gen
    }

    /// The id's port space (`rdma_cm_id::ps`).
    pub fn ps(&self) -> u32 {
        self.ps
    }

    /// The id's QP type (`rdma_cm_id::qp_type`).
    pub fn qp_type(&self) -> u32 {
        self.qp_type
    }

    pub fn state(&self) -> MutexGuard<'_, IdState> {
        lock(&self.st)
    }

    /// The handle C has: the public struct's address.
    pub fn ptr(&self) -> IdPtr {
        IdPtr(self.public.0.get())
    }

    /// See `qp_lock`.
    pub fn lock_qp(&self) -> MutexGuard<'_, ()> {
        lock(&self.qp_lock)
    }

    /// An event about to reach a reader (see `reported`).
    pub(crate) fn handed_out(&self) {
        self.reported.fetch_add(1, Ordering::SeqCst);
    }

    /// Events handed out and not acked yet (`st`: the caller holds the state lock).
    pub(crate) fn outstanding(&self, st: &IdState) -> u32 {
        let _ = st;
        // Acks first: an event is acked only after it was handed out, so
        // more acks than hand-outs read in this order would be a counting bug.
        let acked = self.acked.load(Ordering::SeqCst);
        let reported = self.reported.load(Ordering::SeqCst);
        let out = reported.wrapping_sub(acked);
        debug_assert!(out < 1 << 31, "acked {acked} > handed out {reported}");
        out
    }

    /// An event of this id was acked. Only destroy and migrate wait for
    /// acks, so an ack with nobody waiting (nearly every ack) takes no lock:
    /// a waiter counts itself before it looks (`wait_acked`), so an ack it
    /// did not see finds it counted and wakes it under the lock it sleeps with.
    pub(crate) fn acked(&self) {
        self.acked.fetch_add(1, Ordering::SeqCst);
        if self.waiting.load(Ordering::SeqCst) > 0 {
            let _st = self.state();
            self.cond.notify_all();
        }
    }

    /// Runs `f` on the public struct. The struct lives while `alive` is set,
    /// and the state lock keeps destroy from freeing it meanwhile.
    pub fn with_public<R>(&self, f: impl FnOnce(&mut rdma_cm_id) -> R) -> Result<R> {
        let st = self.state();
        if !st.alive {
            return Err(Errno::EINVAL);
        }
        // SAFETY: the struct lives as long as `self`; `alive` (checked under the
        // same lock every Rust access takes) is cleared by destroy.
        let r = f(unsafe { &mut *self.public.0.get() });
        drop(st);
        Ok(r)
    }

    /// `with_public`, also given the rest of the id's state (one lock).
    pub fn with_state_public<R>(&self, f: impl FnOnce(&mut IdState, &mut rdma_cm_id) -> R) -> Result<R> {
        let mut st = self.state();
        if !st.alive {
            return Err(Errno::EINVAL);
        }
        // SAFETY: as in `with_public`.
        let r = f(&mut st, unsafe { &mut *self.public.0.get() });
        drop(st);
        Ok(r)
    }

    pub fn channel(&self) -> Arc<Channel> {
        self.state().channel.clone()
    }

    pub fn is_sync(&self) -> bool {
        self.sync.load(Ordering::Acquire)
    }

    /// The fields of an event owned by and about this id.
    pub fn head(self: &Arc<Self>, event: u32, status: i32, param: Param) -> Head {
        Head { owner: self.clone(), id: self.ptr(), listen_id: IdPtr(std::ptr::null_mut()), event, status, param, ud: false }
    }

    /// Whether the id is on `ch` (else its events go to its own channel's
    /// queue). A caller that must not race rdma_migrate_id holds what it
    /// takes before the switch (the kernel state lock).
    pub fn is_on(&self, ch: &Arc<Channel>) -> bool {
        std::ptr::eq(self.on.load(Ordering::Acquire), Arc::as_ptr(ch))
    }

    /// An event owned by and about this id.
    pub fn pending(self: &Arc<Self>, event: u32, status: i32, param: Param) -> Pending {
        Pending {
            owner: self.clone(),
            id: self.ptr(),
            listen_id: IdPtr(std::ptr::null_mut()),
            event,
            status,
            param,
            private: Vec::new(),
            ud: false,
        }
    }

    /// Queues an event on the id's current channel.
    pub fn post(self: &Arc<Self>, p: Pending) {
        // Pushed under the state lock: rdma_migrate_id switches channels and
        // moves the queued events under the same lock, so an event posted by a
        // backend thread meanwhile lands in the new channel, after them.
        let st = self.state();
        st.channel.push(p);
    }

    /// `post` for a call of the application's (rdma_write_cm_event,
    /// rdma_resolve_addrinfo): the channel's fd is readable when it returns.
    pub fn post_settled(self: &Arc<Self>, p: Pending) {
        let ch = {
            let st = self.state();
            st.channel.push(p);
            st.channel.clone()
        };
        ch.settle();
    }

    /// An event read from a backend's source by a reader of `ch`: delivered
    /// into the reader's `slot` (counted as handed out) when the id is on
    /// `ch`, else queued on the id's own channel (None). The caller keeps
    /// rdma_migrate_id from switching the id's channel meanwhile (the kernel
    /// CM holds the id's kernel state lock, which migrate takes first).
    pub fn deliver_or_post(self: &Arc<Self>, h: Head, private: &[u8], ch: &Arc<Channel>, slot: &mut Option<Slot>) -> Option<*mut rdma_cm_event> {
        if self.is_on(ch) {
            self.handed_out();
            return Some(EventBox::write(slot.take().unwrap_or_default(), h, private));
        }
        self.post(h.pending(private));
        None
    }

    /// rdma_leave_multicast: the group's events not read yet go with it, as the
    /// kernel drops them on LEAVE_MCAST, so none arrives after the call. Events
    /// are matched by the join's context (one group per context on an id).
    pub fn drop_queued_mc(self: &Arc<Self>, context: usize) {
        let st = self.state();
        st.channel.take_where(|p| {
            Arc::ptr_eq(&p.owner, self)
                && p.ud
                && matches!(p.event, RDMA_CM_EVENT_MULTICAST_JOIN | RDMA_CM_EVENT_MULTICAST_ERROR)
                // SAFETY: `ud` is the member in use for multicast events (p.ud).
                && unsafe { p.param.0.ud.private_data } as usize == context
        });
    }

    /// Blocks until every event reported on this id has been acked; gives
    /// back the state lock it checked that under.
    fn wait_acked(&self) -> MutexGuard<'_, IdState> {
        let mut st = self.state();
        self.waiting.fetch_add(1, Ordering::SeqCst);
        while self.outstanding(&st) > 0 {
            st = self.cond.wait(st).unwrap_or_else(|e| e.into_inner());
        }
        self.waiting.fetch_sub(1, Ordering::SeqCst);
        st
    }

    /// Acks the event a synchronous id keeps in `id->event`, if any.
    /// One the application acked itself is left alone.
    pub fn ack_stored_event(&self) -> Result<()> {
        let ev = self.with_public(|p| std::mem::replace(&mut p.event, std::ptr::null_mut()))?;
        if !ev.is_null() && EventBox::is_about(ev, self.ptr()) {
            EventBox::ack(ev)?;
        }
        Ok(())
    }

    /// The completion step of a synchronous call: acks the previous event,
    /// waits for the next one, keeps it in `id->event` and turns a failure
    /// status into an errno.
    pub fn complete(self: &Arc<Self>) -> Result<()> {
        self.ack_stored_event()?;
        let ev = self.channel().next(Slot::new())?;
        // SAFETY: the event just delivered, not handed to the application yet.
        let (event, status) = unsafe { ((*ev).event, (*ev).status) };
        self.with_public(|pb| pb.event = ev)?;
        match (event, status) {
            (RDMA_CM_EVENT_REJECTED, _) => Err(Errno(libc::ECONNREFUSED)),
            (_, 0) => Ok(()),
            (_, s) => Err(Errno(s.abs())),
        }
    }
}

impl IdBox {
    /// `rdma_create_id`: a NULL channel makes a synchronous id with a private channel.
    pub fn create(
        channel: *mut rdma_event_channel,
        context: *mut libc::c_void,
        ps: u32,
        qp_type: Option<u32>,
    ) -> Result<*mut rdma_cm_id> {
        Self::create_core(channel, context, ps, qp_type).map(|(ptr, _)| ptr)
    }

    /// `create`, also giving the new id's core.
    pub fn create_core(
        channel: *mut rdma_event_channel,
        context: *mut libc::c_void,
        ps: u32,
        qp_type: Option<u32>,
    ) -> Result<(*mut rdma_cm_id, Arc<IdCore>)> {
        let core = Self::build(channel, context, ps, qp_type, |_| Ok(()))?;
        Ok((Self::register(core.clone()), core))
    }

    /// `rdma_create_id`: `create`, with `init` (the backend's part, such as
    /// the kernel id) run on the new core before anything else can reach
    /// it, so it needs none of the id's locks; when it fails the id was
    /// never registered and simply goes.
    pub fn create_with(
        channel: *mut rdma_event_channel,
        context: *mut libc::c_void,
        ps: u32,
        init: impl FnOnce(&mut IdCore) -> Result<()>,
    ) -> Result<*mut rdma_cm_id> {
        Self::build(channel, context, ps, None, init).map(Self::register)
    }

    /// Makes a built core reachable: `core` becomes the registry's reference
    /// (given back by `destroy`) and its public struct the handle.
    fn register(core: Arc<IdCore>) -> *mut rdma_cm_id {
        let ptr = core.ptr().0;
        let _ = Arc::into_raw(core);
        registry::register(ptr, Kind::Id);
        ptr
    }

    /// A new, unregistered core on `channel` (a private channel when NULL),
    /// `init` applied while the caller holds its only reference.
    fn build(
        channel: *mut rdma_event_channel,
        context: *mut libc::c_void,
        ps: u32,
        qp_type: Option<u32>,
        init: impl FnOnce(&mut IdCore) -> Result<()>,
    ) -> Result<Arc<IdCore>> {
        let implied = qp_type_for(ps).ok_or(Errno::EINVAL)?;
        let qp_type = qp_type.unwrap_or(implied);
        let (chan, public_chan, private_channel) = if channel.is_null() {
            let pc = ChannelBox::create()?;
            (ChannelBox::lookup(pc)?, pc, ChannelPtr::new(pc))
        } else {
            (ChannelBox::lookup(channel)?, channel, None)
        };
        let mut core = IdCore::new(public_chan, context, ps, qp_type, chan, private_channel);
        // `public` is the first field of a repr(C) struct: same address as the data.
        debug_assert_eq!(core.ptr().0 as usize, Arc::as_ptr(&core) as usize);
        let Some(unique) = Arc::get_mut(&mut core) else { unreachable!("a new Arc is unique") };
        if let Err(e) = init(unique) {
            drop(core);
            if let Some(pc) = private_channel {
                let _ = ChannelBox::destroy(pc.get());
            }
            return Err(e);
        }
        Ok(core)
    }

    pub fn lookup(ptr: *const rdma_cm_id) -> Result<Arc<IdCore>> {
        registry::with_live(ptr, Kind::Id, || {
            // SAFETY: a live id handle is the data pointer of an Arc<IdCore>
            // whose registry reference is given back only after unregistering,
            // which waits for this lock.
            unsafe {
                Arc::increment_strong_count(ptr as *const IdCore);
                Arc::from_raw(ptr as *const IdCore)
            }
        })
        .ok_or(Errno::EINVAL)
    }

    /// `lookup` of an id that must also still have generation `gen` (low 15
    /// bits compared): an address the kernel echoes may name a newer id.
    /// Built on `lookup` itself, which the calls on an id have run before its
    /// first event: under the VM benchmark's TCG, code a process runs for the
    /// first time is translated first, and a second copy of the lookup cost
    /// the first event about 0.08 ms.
    pub fn lookup_gen(ptr: *const rdma_cm_id, gen: u16) -> Option<Arc<IdCore>> {
        Self::lookup(ptr).ok().filter(|core| core.gen & 0x7fff == gen & 0x7fff)
    }

    /// `rdma_destroy_id`: unread events are dropped, the stored sync event is
    /// acked, then the call waits until the application acked every event it
    /// was given for this id (the man page's promise).
    pub fn destroy(ptr: *mut rdma_cm_id) -> Result<()> {
        if !registry::unregister(ptr, Kind::Id) {
            return Err(Errno::EINVAL);
        }
        // SAFETY: unregistered by this call alone: the registry's reference
        // (from `create`) is this call's to take back, once.
        let core = unsafe { Arc::from_raw(ptr as *const IdCore) };
        crate::backend::destroy(&core);
        let (chan, stored) = {
            let st = core.state();
            // SAFETY: under the state lock; the struct is alive (only this call clears `alive`).
            let stored = unsafe { std::mem::replace(&mut (*core.public.0.get()).event, std::ptr::null_mut()) };
            (st.channel.clone(), stored)
        };
        for p in chan.take_where(|p| Arc::ptr_eq(&p.owner, &core)) {
            p.discard();
        }
        drop(chan);
        // The id is unregistered already: nothing may stop it halfway. The
        // event a synchronous id kept is acked for it (unless the
        // application acked it itself).
        if !stored.is_null() && EventBox::is_about(stored, core.ptr()) {
            let _ = EventBox::ack(stored);
        }
        let private = {
            let mut st = core.wait_acked();
            st.alive = false;
            st.private_channel.take()
        };
        if let Some(pc) = private {
            // Ours, registered at create: this cannot fail.
            let _ = ChannelBox::destroy(pc.get());
        }
        // The registry's reference goes; the struct with the last one.
        drop(core);
        Ok(())
    }

    /// `rdma_migrate_id`: moves the id (and its unread events) to another
    /// channel, or to a new private one when `channel` is NULL.
    pub fn migrate(ptr: *mut rdma_cm_id, channel: *mut rdma_event_channel) -> Result<()> {
        let core = Self::lookup(ptr)?;
        let was_sync = core.is_sync();
        let (new_chan, new_public, new_private) = if channel.is_null() {
            if was_sync {
                return Err(Errno::EINVAL);
            }
            let pc = ChannelBox::create()?;
            (ChannelBox::lookup(pc)?, pc, ChannelPtr::new(pc))
        } else {
            (ChannelBox::lookup(channel)?, channel, None)
        };
        // The backend's side first (the kernel moves the id to the new channel's
        // file); if that fails the id stays where it was.
        if let Err(e) = crate::backend::migrate(&core, &new_chan) {
            if let Some(pc) = new_private {
                ChannelBox::destroy(pc.get())?;
            }
            return Err(e);
        }
        if was_sync {
            core.ack_stored_event()?;
        }
        let old = {
            let mut st = core.state();
            let old_chan = std::mem::replace(&mut st.channel, new_chan.clone());
            core.on.store(Arc::as_ptr(&new_chan) as *mut Channel, Ordering::Release);
            let old_private = std::mem::replace(&mut st.private_channel, new_private);
            core.sync.store(st.private_channel.is_some(), Ordering::Release);
            // Still under the lock `post` takes: the id's events keep their order.
            for p in old_chan.take_where(|p| Arc::ptr_eq(&p.owner, &core)) {
                new_chan.push(p);
            }
            (old_chan, old_private)
        };
        core.with_public(|p| p.channel = new_public)?;
        drop(core.wait_acked());
        if let Some(pc) = old.1 {
            ChannelBox::destroy(pc.get())?;
        }
        Ok(())
    }

    /// `rdma_write_cm_event`: a USER event the application reads back from the
    /// id's own channel.
    pub fn write_user_event(ptr: *mut rdma_cm_id, event: u32, status: i32, arg: u64) -> Result<()> {
        let core = Self::lookup(ptr)?;
        if event != RDMA_CM_EVENT_USER {
            return Err(Errno::EINVAL);
        }
        core.post_settled(core.pending(event, status, Param::arg(arg)));
        Ok(())
    }
}
#[cfg(test)]
mod layout_tests {
    /// A program's burst of creates (cmtime's 100) faults in every byte of
    /// its ids, some 25 us a page under the VM benchmark's TCG: the id stays
    /// within 584 bytes (600 with the Arc's counts: malloc's 608-byte chunks,
    /// as upstream's ids). Rarely used parts go behind a pointer instead
    /// (`IdState::extra`, `KSt::mcs`). It was 712.
    #[test]
    fn an_id_is_one_allocation_of_at_most_584_bytes() {
        let n = std::mem::size_of::<super::IdCore>();
        assert!(n <= 584, "IdCore is {n} bytes");
    }

    #[test]
    fn ece_reads_what_was_set_and_allocates_only_for_a_non_zero_value() {
        use rdma_abi::verbs::ibv_ece;
        let e = |v, o| ibv_ece { vendor_id: v, options: o, comp_mask: 0 };
        let ch = super::Channel::new().expect("a channel");
        let mut p = super::IdState { channel: ch, private_channel: None, alive: true, options: Default::default(), extra: None };
        p.set_remote_ece(e(0, 0));
        assert!(p.extra.is_none());
        assert_eq!((p.local_ece().vendor_id, p.remote_ece().vendor_id), (0, 0));
        p.set_local_ece(e(0x15b3, 7));
        assert!(p.extra.is_some());
        assert_eq!((p.local_ece().vendor_id, p.local_ece().options, p.remote_ece().vendor_id), (0x15b3, 7, 0));
        p.set_remote_ece(e(0x15b3, 3));
        p.set_local_ece(e(0, 0));
        assert_eq!((p.local_ece().vendor_id, p.local_ece().options, p.remote_ece().options), (0, 0, 3));
        assert_eq!(p.take_extra(|x| x.resolved.take()).map(|_| ()), None);
        assert_eq!(p.remote_ece().options, 3, "taking another field keeps the ECE");
        p.set_remote_ece(e(0, 0));
        assert_eq!(p.take_extra(|x| x.resolved.take()).map(|_| ()), None);
        assert!(p.extra.is_none(), "the extra part goes with its last field");
    }
}
