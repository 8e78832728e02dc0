//! repoll_create / repoll_ctl / repoll_wait (RDMACM_1.5): epoll over
//! rsockets and ordinary fds. The handle is a real epoll fd carrying the
//! ordinary fds; rsockets registered on it live in a side table and are
//! checked like rpoll checks them (EPOLLET reports a change of the rsocket's
//! state since the last report, EPOLLONESHOT disarms until EPOLL_CTL_MOD).

use super::poll::Sleep;
use super::{get, Sock};
use crate::cm::registry::lock;
use crate::sys::{cerr, Errno, Result};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::{Duration, Instant};

struct Entry {
    sock: Sock,
    events: u32,
    data: u64,
    last_gen: Option<u64>,
    disabled: bool,
}

struct Set {
    /// Identity of the epoll fd (its inode): a reused number is a new set.
    ino: u64,
    entries: Mutex<HashMap<i32, Entry>>,
}

static SETS: LazyLock<Mutex<HashMap<i32, Arc<Set>>>> = LazyLock::new(|| Mutex::new(HashMap::new()));

fn ino(fd: i32) -> Option<u64> {
    // SAFETY: all-zero is a valid stat buffer; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall on a caller's fd.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

fn set_of(epfd: i32, create: bool) -> Option<Arc<Set>> {
    let id = ino(epfd)?;
    let mut sets = lock(&SETS);
    match sets.get(&epfd) {
        Some(s) if s.ino == id => return Some(s.clone()),
        _ if !create => return None,
        _ => {}
    }
    let s = Arc::new(Set { ino: id, entries: Mutex::new(HashMap::new()) });
    sets.insert(epfd, s.clone());
    Some(s)
}

/// An rsocket was closed: drop it from every set (as close(2) does for epoll).
pub fn forget(fd: i32) {
    let sets: Vec<Arc<Set>> = lock(&SETS).values().cloned().collect();
    for s in sets {
        lock(&s.entries).remove(&fd);
    }
}

pub fn create(flags: i32) -> Result<i32> {
    if flags & !libc::EPOLL_CLOEXEC != 0 {
        return Err(Errno::EINVAL);
    }
    // SAFETY: plain syscall.
    let fd = cerr(unsafe { libc::epoll_create1(flags) })?;
    let mut sets = lock(&SETS);
    sets.remove(&fd);
    drop(sets);
    set_of(fd, true);
    Ok(fd)
}

/// # Safety
/// `event` is NULL or a readable epoll_event.
pub unsafe fn ctl(epfd: i32, op: i32, fd: i32, event: *mut libc::epoll_event) -> Result<i32> {
    let Some(sock) = get(fd) else {
        // SAFETY: the caller's event, handed to epoll_ctl(2) unchanged.
        return cerr(unsafe { libc::epoll_ctl(epfd, op, fd, event) });
    };
    if epfd == fd {
        return Err(Errno::EINVAL);
    }
    let set = set_of(epfd, true).ok_or(Errno::EBADF)?;
    let mut entries = lock(&set.entries);
    let ev = if event.is_null() {
        None
    } else {
        // SAFETY: per the contract.
        Some(unsafe { std::ptr::read_unaligned(event) })
    };
    match op {
        libc::EPOLL_CTL_ADD => {
            let ev = ev.ok_or(Errno(libc::EFAULT))?;
            if entries.get(&fd).is_some_and(|e| e.sock.same(&sock)) {
                return Err(Errno(libc::EEXIST));
            }
            entries.insert(fd, Entry { sock, events: ev.events, data: ev.u64, last_gen: None, disabled: false });
        }
        libc::EPOLL_CTL_MOD => {
            let ev = ev.ok_or(Errno(libc::EFAULT))?;
            let e = entries.get_mut(&fd).filter(|e| e.sock.same(&sock)).ok_or(Errno(libc::ENOENT))?;
            e.events = ev.events;
            e.data = ev.u64;
            e.last_gen = None;
            e.disabled = false;
        }
        libc::EPOLL_CTL_DEL => {
            entries.remove(&fd).ok_or(Errno(libc::ENOENT))?;
        }
        _ => return Err(Errno::EINVAL),
    }
    Ok(0)
}

const EP_IN: u32 = libc::EPOLLIN as u32;
const EP_OUT: u32 = libc::EPOLLOUT as u32;
const EP_ERR: u32 = libc::EPOLLERR as u32;
const EP_HUP: u32 = libc::EPOLLHUP as u32;
const EP_RDHUP: u32 = libc::EPOLLRDHUP as u32;
const EP_PRI: u32 = libc::EPOLLPRI as u32;
const EP_ET: u32 = libc::EPOLLET as u32;
const EP_ONESHOT: u32 = libc::EPOLLONESHOT as u32;

/// Ready rsockets of a set, written to `out` (at most its length). `seen`
/// gets each rsocket looked at, by number, with the state generation read.
fn scan(set: &Set, out: &mut [libc::epoll_event], mut seen: Option<&mut HashMap<i32, (Sock, u64)>>) -> usize {
    let mut entries = lock(&set.entries);
    entries.retain(|fd, e| get(*fd).is_some_and(|s| s.same(&e.sock)));
    let mut n = 0;
    for (fd, e) in entries.iter_mut() {
        if n == out.len() {
            break;
        }
        if e.disabled {
            continue;
        }
        let mut want: i16 = 0;
        if e.events & EP_IN != 0 {
            want |= libc::POLLIN;
        }
        if e.events & EP_OUT != 0 {
            want |= libc::POLLOUT;
        }
        if e.events & EP_PRI != 0 {
            want |= libc::POLLPRI;
        }
        let (r, gen) = e.sock.revents(want);
        if let Some(m) = seen.as_deref_mut() {
            m.insert(*fd, (e.sock.clone(), gen));
        }
        let mut ev = 0u32;
        if r & libc::POLLIN != 0 {
            ev |= EP_IN;
        }
        if r & libc::POLLOUT != 0 {
            ev |= EP_OUT;
        }
        if r & libc::POLLERR != 0 {
            ev |= EP_ERR;
        }
        if r & libc::POLLHUP != 0 {
            ev |= EP_HUP | (e.events & EP_RDHUP);
        }
        if ev == 0 {
            e.last_gen = Some(gen);
            continue;
        }
        if e.events & EP_ET != 0 && e.last_gen == Some(gen) {
            continue;
        }
        e.last_gen = Some(gen);
        if e.events & EP_ONESHOT != 0 {
            e.disabled = true;
        }
        out[n] = libc::epoll_event { events: ev, u64: e.data };
        n += 1;
    }
    n
}

/// # Safety
/// `events` is writable for `maxevents` entries.
pub unsafe fn wait(epfd: i32, events: *mut libc::epoll_event, maxevents: i32, timeout: i32) -> Result<i32> {
    let set = set_of(epfd, false).filter(|s| !lock(&s.entries).is_empty());
    let Some(set) = set else {
        // SAFETY: the caller's array, handed to epoll_wait(2) unchanged.
        return cerr(unsafe { libc::epoll_wait(epfd, events, maxevents, timeout) });
    };
    if maxevents <= 0 || events.is_null() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: per the contract.
    let out = unsafe { std::slice::from_raw_parts_mut(events, maxevents as usize) };
    let cfg = super::config::get_config();
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    loop {
        let mut n = scan(&set, out, None);
        if n < out.len() {
            // SAFETY: the rest of the caller's array; zero timeout.
            let m = cerr(unsafe { libc::epoll_wait(epfd, out[n..].as_mut_ptr(), (out.len() - n) as i32, 0) })?;
            n += m as usize;
        }
        if n > 0 || timeout == 0 {
            return Ok(n as i32);
        }
        let socks: Vec<(i32, Sock)> =
            lock(&set.entries).iter().filter(|(_, e)| !e.disabled).map(|(&fd, e)| (fd, e.sock.clone())).collect();
        let mut sleep = Sleep::new(vec![libc::pollfd { fd: epfd, events: libc::POLLIN, revents: 0 }]);
        for (_, s) in &socks {
            sleep.arm(s)?;
        }
        // Completions that came before the CQs were armed raise no event: look again.
        let mut seen = HashMap::with_capacity(socks.len());
        let n = scan(&set, out, Some(&mut seen));
        if n > 0 {
            sleep.finish(false);
            return Ok(n as i32);
        }
        // Counted only after that look (its own progress would raise this sleeper's
        // wake flag and end the sleep at once), and only where the state is still
        // the one it read; a change since, or an rsocket that left the set: look again.
        let gens: Vec<u64> = socks
            .iter()
            .map(|(fd, s)| seen.get(fd).filter(|(t, _)| t.same(s)).map_or(u64::MAX, |&(_, gen)| gen))
            .collect();
        let mut slice = cfg.wake_up_interval_ms;
        if let Some(d) = deadline {
            slice = slice.min(d.saturating_duration_since(Instant::now()).as_millis() as i32 + 1);
        }
        // Not counted: look again (at once, unless the time is up).
        if sleep.count(&gens, slice) {
            let (r, err) = sleep.poll(slice);
            sleep.finish(r >= 0);
            if r < 0 {
                return Err(err);
            }
        } else {
            sleep.finish(false);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            let mut n = scan(&set, out, None);
            if n < out.len() {
                // SAFETY: as above.
                n +=
                    cerr(unsafe { libc::epoll_wait(epfd, out[n..].as_mut_ptr(), (out.len() - n) as i32, 0) })? as usize;
            }
            return Ok(n as i32);
        }
    }
}
