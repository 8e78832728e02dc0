//! The process's shared window: a file in the user's registry (`win-<pid>`), mapped by
//! this process and by same-host peers, that says which MRs and QPs a remote RDMA WRITE
//! or READ may use. A peer of the same user reads it and moves the bytes itself with
//! `process_vm_writev`/`readv` (`qp::direct`), one copy, while our threads are busy,
//! asleep or stopped, as a NIC would.
//!
//! Only this process writes its slots, always under the key table's write lock (MRs) or
//! the QP's lock (QPs); peers only read them, except the pin lanes of an MR slot. A peer
//! pins an MR by storing its pid in a free lane, then reads the rkey: retracting the MR
//! clears the rkey first and then waits until every lane is free (or its pid is dead), so
//! once `ibv_dereg_mr` returns no peer copies into or out of that memory (both sides
//! use sequentially consistent operations, so one of them sees the other).
//!
//! A slot a peer cannot use (no free slot, all lanes busy, a QP slot taken by another
//! QP) only means the request takes the stream path, whose checks are the same.

use crate::sys::SharedMap;
use std::fs::{self, File};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::OnceLock;

const MAGIC: u64 = 0x534f_4654_5749_4e31; // "SOFTWIN1"
pub const MR_SLOTS: usize = 1 << 16;
const QP_SLOTS: usize = 1 << 12;
const LANES: usize = 6;
const HEAD_BYTES: usize = 4096;
const QP_AT: usize = HEAD_BYTES;
const MR_AT: usize = QP_AT + QP_SLOTS * std::mem::size_of::<QpSlot>();
const SIZE: usize = MR_AT + MR_SLOTS * std::mem::size_of::<MrSlot>();

#[repr(C)]
struct Head {
    magic: AtomicU64,
    pid: AtomicU64,
    /// Where the owner mapped the window: a peer reads its magic there through
    /// `process_vm_readv` to learn whether the kernel lets it reach the owner at all.
    base: AtomicU64,
}

/// One QP: `word` holds the QPN (bits 0-23), its `dest_qp_num` (24-47) and what a remote
/// peer may do right now (`QP_*`), or 0; `pd` its PD's id.
#[repr(C)]
struct QpSlot {
    word: AtomicU64,
    pd: AtomicU64,
}

const QP_USED: u64 = 1 << 63;
pub const QP_WRITE: u64 = 1 << 48;
pub const QP_READ: u64 = 1 << 49;

#[repr(C)]
struct MrSlot {
    rkey: AtomicU32,
    access: AtomicU32,
    pd: AtomicU64,
    iova: AtomicU64,
    len: AtomicU64,
    addr: AtomicU64,
    lanes: [AtomicU32; LANES],
}

const _: () = assert!(std::mem::size_of::<MrSlot>() == 64 && std::mem::size_of::<Head>() <= HEAD_BYTES);

/// A mapping of a window file (accessed only through atomics).
struct Map(SharedMap);

impl Map {
    fn of(f: &File) -> Option<Map> {
        SharedMap::of(f, SIZE).map(Map)
    }

    fn head(&self) -> &Head {
        // SAFETY: the head lies at offset 0 of the mapping; all its fields are atomics.
        unsafe { &*(self.0.ptr() as *const Head) }
    }

    fn qp(&self, qpn: u32) -> &QpSlot {
        let i = qpn as usize & (QP_SLOTS - 1);
        // SAFETY: slot i of the QP array lies inside the mapping; fields are atomics.
        unsafe { &*(self.0.ptr().add(QP_AT) as *const QpSlot).add(i) }
    }

    fn mr(&self, rkey: u32) -> &MrSlot {
        let i = rkey as usize & (MR_SLOTS - 1);
        // SAFETY: slot i of the MR array lies inside the mapping; fields are atomics.
        unsafe { &*(self.0.ptr().add(MR_AT) as *const MrSlot).add(i) }
    }
}

/// The shared-memory path is on: `SOFTVERBS_SHM` is not "0" and same-host streams are
/// on (`SOFTVERBS_LOCAL`), since peers are found through them.
pub fn enabled() -> bool {
    static ON: OnceLock<bool> = OnceLock::new();
    *ON.get_or_init(|| crate::net::local::enabled() && std::env::var("SOFTVERBS_SHM").map(|v| v.trim() != "0").unwrap_or(true))
}

fn path_of(pid: u32) -> Option<PathBuf> {
    Some(registry_dir()?.join(format!("win-{pid}")))
}

fn registry_dir() -> Option<PathBuf> {
    crate::net::peers::registry_dir().cloned()
}

fn alive(pid: u32) -> bool {
    crate::net::peers::alive(pid)
}

/// This process's window, made at first use (None when off or impossible, and in a
/// forked child, which must not publish its memory in its parent's window).
fn local() -> Option<&'static Map> {
    static LOCAL: OnceLock<Option<Map>> = OnceLock::new();
    LOCAL
        .get_or_init(|| {
            if !enabled() {
                return None;
            }
            reclaim_dead();
            let pid = std::process::id();
            let path = path_of(pid)?;
            let _ = fs::remove_file(&path);
            let f = fs::OpenOptions::new().read(true).write(true).create_new(true).open(&path).ok()?;
            let map = f.set_len(SIZE as u64).ok().and_then(|_| Map::of(&f));
            let Some(map) = map else {
                let _ = fs::remove_file(&path);
                return None;
            };
            let h = map.head();
            h.pid.store(pid as u64, SeqCst);
            h.base.store(map.0.ptr() as u64, SeqCst);
            h.magic.store(MAGIC, SeqCst);
            // SAFETY: registers a plain extern "C" function without arguments.
            unsafe { libc::atexit(remove_at_exit) };
            Some(map)
        })
        .as_ref()
        .filter(|m| m.head().pid.load(SeqCst) == std::process::id() as u64)
}

extern "C" fn remove_at_exit() {
    if let Some(p) = path_of(std::process::id()) {
        let _ = fs::remove_file(p);
    }
}

/// Removes the windows of processes that died without exiting (killed).
fn reclaim_dead() {
    let Some(dir) = registry_dir() else { return };
    let Ok(rd) = fs::read_dir(dir) else { return };
    for e in rd.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("win-")).and_then(|p| p.parse::<u32>().ok()) else { continue };
        if !alive(pid) {
            let _ = fs::remove_file(e.path());
        }
    }
}

/// Whether `rkey` would get a slot of its own (caller holds the key table's write lock).
pub fn mr_slot_free(rkey: u32) -> bool {
    match local() {
        Some(m) => m.mr(rkey).rkey.load(SeqCst) == 0,
        None => true,
    }
}

/// Publishes a registered MR (caller holds the key table's write lock).
pub fn publish_mr(rkey: u32, pd: u64, iova: u64, len: u64, addr: u64, access: u32) {
    let Some(m) = local() else { return };
    let s = m.mr(rkey);
    if s.rkey.load(SeqCst) != 0 {
        return;
    }
    s.access.store(access, SeqCst);
    s.pd.store(pd, SeqCst);
    s.iova.store(iova, SeqCst);
    s.len.store(len, SeqCst);
    s.addr.store(addr, SeqCst);
    s.rkey.store(rkey, SeqCst);
}

/// Withdraws an MR and waits until no peer copies through it (caller holds the key
/// table's write lock). A lane of a dead process is freed; a live holder is inside one
/// `process_vm_*` call, which never waits for us.
pub fn retract_mr(rkey: u32) {
    let Some(m) = local() else { return };
    let s = m.mr(rkey);
    if s.rkey.compare_exchange(rkey, 0, SeqCst, SeqCst).is_err() {
        return;
    }
    for lane in &s.lanes {
        let mut spins = 0u32;
        loop {
            let p = lane.load(SeqCst);
            if p == 0 || (!alive(p) && lane.compare_exchange(p, 0, SeqCst, SeqCst).is_ok()) {
                break;
            }
            spins += 1;
            if spins < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(100));
            }
        }
    }
}

/// QP `qpn`'s slot, unless another QP has it (ours then takes the stream path).
fn qp_slot(m: &Map, qpn: u32) -> Option<&QpSlot> {
    let s = m.qp(qpn);
    let cur = s.word.load(SeqCst);
    (cur & QP_USED == 0 || cur as u32 & 0xff_ffff == qpn).then_some(s)
}

/// Publishes what a peer may do to QP `qpn` now (`flags`: `QP_WRITE`, `QP_READ`; 0 when
/// it serves nothing). Caller holds the QP's lock.
pub fn publish_qp(qpn: u32, dest: u32, pd: u64, flags: u64) {
    let Some(s) = local().and_then(|m| qp_slot(m, qpn)) else { return };
    s.pd.store(pd, SeqCst);
    s.word.store(QP_USED | flags | (dest as u64 & 0xff_ffff) << 24 | qpn as u64, SeqCst);
}

/// Withdraws a destroyed QP.
pub fn withdraw_qp(qpn: u32) {
    if let Some(s) = local().and_then(|m| qp_slot(m, qpn)) {
        s.word.store(0, SeqCst);
    }
}

/// A peer's window, mapped by the initiator.
pub struct Peer {
    map: Map,
    pub pid: u32,
    /// A pidfd of the peer: once it exits, its pid may name another process.
    pidfd: std::os::fd::OwnedFd,
    /// When `pidfd` was last seen open (`coarse_ms`).
    checked: AtomicU64,
    /// The kernel refused us `process_vm_*` on this peer: the stream path from now on.
    refused: std::sync::atomic::AtomicBool,
}

/// What a pinned MR allows: the peer's address for `[raddr, raddr+len)`.
pub struct Pinned<'a> {
    lane: &'a AtomicU32,
    pub addr: u64,
}

impl Drop for Pinned<'_> {
    fn drop(&mut self) {
        self.lane.store(0, SeqCst);
    }
}

impl Peer {
    /// Maps the window of the process `pid` (the other end of a same-host stream) and
    /// checks that the kernel lets us reach its memory.
    pub fn open(pid: u32) -> Option<Peer> {
        if !enabled() || pid == 0 {
            return None;
        }
        let f = fs::OpenOptions::new().read(true).write(true).open(path_of(pid)?).ok()?;
        // SAFETY: getuid has no preconditions.
        if std::os::unix::fs::MetadataExt::uid(&f.metadata().ok()?) != unsafe { libc::getuid() } {
            return None;
        }
        let map = Map::of(&f)?;
        let h = map.head();
        if h.magic.load(SeqCst) != MAGIC || h.pid.load(SeqCst) != pid as u64 {
            return None;
        }
        let base = h.base.load(SeqCst);
        // SAFETY: plain syscall; the result is checked by `owned`.
        let pidfd = crate::sys::owned(unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) } as libc::c_int).ok()?;
        let peer = Peer { map, pid, pidfd, checked: AtomicU64::new(u64::MAX), refused: Default::default() };
        let mut magic = [0u8; 8];
        if peer.read(&mut [libc::iovec { iov_base: magic.as_mut_ptr().cast(), iov_len: 8 }], base, 8)? != 8 || u64::from_ne_bytes(magic) != MAGIC {
            return None;
        }
        Some(peer)
    }

    pub fn refused(&self) -> bool {
        self.refused.load(SeqCst)
    }

    /// QP `qpn`'s published word, if it is `qpn`'s and names `dest` as its peer: (flags, pd).
    pub fn qp(&self, qpn: u32, dest: u32) -> Option<(u64, u64)> {
        let s = self.map.qp(qpn);
        let w = s.word.load(SeqCst);
        let pd = s.pd.load(SeqCst);
        (w & QP_USED != 0 && w as u32 & 0xff_ffff == qpn && (w >> 24) as u32 & 0xff_ffff == dest && s.word.load(SeqCst) == w).then_some((w, pd))
    }

    /// Pins MR `rkey` for `[raddr, raddr+len)` with access bits `need` in PD `pd`.
    pub fn pin(&self, rkey: u32, pd: u64, raddr: u64, len: u64, need: u32) -> Option<Pinned<'_>> {
        let s = self.map.mr(rkey);
        let me = std::process::id();
        let lane = s.lanes.iter().find(|l| l.compare_exchange(0, me, SeqCst, SeqCst).is_ok())?;
        let mut pinned = Pinned { lane, addr: 0 };
        if s.rkey.load(SeqCst) != rkey || s.pd.load(SeqCst) != pd || s.access.load(SeqCst) & need != need {
            return None;
        }
        let off = crate::core::mem::range_offset(s.iova.load(SeqCst), s.len.load(SeqCst), raddr, len)?;
        pinned.addr = s.addr.load(SeqCst).checked_add(off as u64)?;
        Some(pinned)
    }

    /// `process_vm_writev` of `local` to the peer's `[addr, addr+len)`: the bytes moved.
    /// None: the kernel refused (the peer is then marked refused) or the copy failed.
    pub fn write(&self, local: &[libc::iovec], addr: u64, len: usize) -> Option<usize> {
        self.vm(local, addr, len, true)
    }

    pub fn read(&self, local: &mut [libc::iovec], addr: u64, len: usize) -> Option<usize> {
        self.vm(local, addr, len, false)
    }

    /// The peer has not exited. Checked at most once per tick of the coarse clock (a few
    /// ms; a poll costs about as much as a small copy): for its pid to name another
    /// process within that time, the whole pid space would have to be used up in it.
    fn still_there(&self) -> bool {
        let now = coarse_ms();
        if self.checked.load(SeqCst) == now {
            return true;
        }
        let mut pfd = libc::pollfd { fd: self.pidfd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: polls one live pollfd without waiting.
        if unsafe { libc::poll(&mut pfd, 1, 0) } != 0 {
            self.refused.store(true, SeqCst);
            return false; // exited (or the poll failed)
        }
        self.checked.store(now, SeqCst);
        true
    }

    fn vm(&self, local: &[libc::iovec], addr: u64, len: usize, write: bool) -> Option<usize> {
        if !self.still_there() {
            return None;
        }
        let remote = libc::iovec { iov_base: addr as *mut libc::c_void, iov_len: len };
        // SAFETY: the local iovecs name memory the caller checked (registered, or the
        // application's inline buffers during ibv_post_send); the remote one is only
        // interpreted by the kernel in the peer's address space.
        let n = unsafe {
            if write {
                libc::process_vm_writev(self.pid as i32, local.as_ptr(), local.len() as u64, &remote, 1, 0)
            } else {
                libc::process_vm_readv(self.pid as i32, local.as_ptr(), local.len() as u64, &remote, 1, 0)
            }
        };
        if n < 0 {
            if matches!(std::io::Error::last_os_error().raw_os_error(), Some(libc::EPERM | libc::ESRCH | libc::ENOSYS)) {
                self.refused.store(true, SeqCst);
            }
            return None;
        }
        Some(n as usize)
    }
}

/// A millisecond count from the coarse monotonic clock (no syscall).
fn coarse_ms() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: fills a live timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC_COARSE, &mut t) };
    t.tv_sec as u64 * 1000 + t.tv_nsec as u64 / 1_000_000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_checks_and_retract_waits_for_nobody() {
        if local().is_none() {
            return; // no registry directory here
        }
        let me = std::process::id();
        let peer = Peer::open(me).expect("own window");
        // A slot no MR of a concurrent test holds.
        let rkey = (7..).map(|i| 0x1234_0000 | i).find(|&k| mr_slot_free(k)).expect("a free slot");
        publish_mr(rkey, 5, 0x1000, 0x100, 0x7000, libc::c_uint::from(rdma_abi::verbs::IBV_ACCESS_REMOTE_WRITE));
        let w = rdma_abi::verbs::IBV_ACCESS_REMOTE_WRITE;
        let r = rdma_abi::verbs::IBV_ACCESS_REMOTE_READ;
        assert_eq!(peer.pin(rkey, 5, 0x1010, 0x10, w).map(|p| p.addr), Some(0x7010));
        assert!(peer.pin(rkey, 5, 0x10f8, 0x10, w).is_none(), "past the end");
        assert!(peer.pin(rkey, 6, 0x1010, 0x10, w).is_none(), "other PD");
        assert!(peer.pin(rkey, 5, 0x1010, 0x10, r).is_none(), "no REMOTE_READ");
        assert!(peer.pin(rkey ^ 0x10000, 5, 0x1010, 0x10, w).is_none(), "other key, same slot");
        let held: Vec<_> = (0..LANES).filter_map(|_| peer.pin(rkey, 5, 0x1000, 1, w)).collect();
        assert_eq!(held.len(), LANES);
        assert!(peer.pin(rkey, 5, 0x1000, 1, w).is_none(), "every lane busy");
        drop(held);
        retract_mr(rkey);
        assert!(peer.pin(rkey, 5, 0x1010, 0x10, w).is_none(), "retracted");
        assert!(mr_slot_free(rkey));
        publish_qp(0x00ab_cdef, 0x12, 9, QP_WRITE);
        assert_eq!(peer.qp(0x00ab_cdef, 0x12), Some((QP_USED | QP_WRITE | 0x12 << 24 | 0xab_cdef, 9)));
        assert_eq!(peer.qp(0x00ab_cdef, 0x13), None, "another peer QP");
        withdraw_qp(0x00ab_cdef);
        assert_eq!(peer.qp(0x00ab_cdef, 0x12), None);
    }
}
