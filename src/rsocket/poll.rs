//! rpoll and rselect (rsocket.md §5): rsockets and ordinary fds in one call.
//! Each round checks every rsocket without blocking (processing its
//! completions) and the ordinary fds with a zero timeout; then busy-polls for
//! `polling_time` µs; then arms the rsockets' CQs and sleeps in poll(2) on
//! their channel fds, CM fds and wake flags plus the ordinary fds, at most
//! `wake_up_interval` ms per slice.

use super::{get, Sock};
use crate::sys::{cerr, Flag, Result};
use std::sync::{Condvar, MutexGuard};
use std::time::{Duration, Instant};

impl Sock {
    /// Readiness and the state generation it was read at.
    pub fn revents(&self, events: i16) -> (i16, u64) {
        match self {
            Sock::Stream(s) => s.revents(events),
            Sock::Dgram(d) => d.revents(events),
        }
    }

    /// Adds what a sleeper on this rsocket polls (its CQs armed), without
    /// counting the sleeper: `count_if` does, after the caller's last look.
    /// Fails when a CQ cannot be armed (see `Dgram::arm_locked`, `Stream::arm`).
    pub fn arm(&self, fds: &mut Vec<libc::pollfd>) -> Result<()> {
        match self {
            Sock::Stream(s) => s.arm(&mut s.lock(), fds),
            Sock::Dgram(d) => d.arm(fds),
        }
    }

    /// Counts the sleeper unless the state changed since generation `gen`
    /// was read.
    fn count_if(&self, gen: u64) -> Count {
        match self {
            Sock::Stream(s) => s.count_waiter(gen),
            Sock::Dgram(d) => d.count_waiter(gen),
        }
    }

    /// After `Count::Busy`, with no count held anywhere.
    fn settle(&self, gen: u64, ms: i32) {
        match self {
            Sock::Stream(s) => s.settle_after(gen, ms),
            Sock::Dgram(d) => d.settle_after(gen, ms),
        }
    }

    /// `polled`: this rsocket's entries after the poll(2) (None: no sleep);
    /// `ticket`: what counting this sleeper returned (None: not counted).
    pub fn finish(&self, ticket: Option<u64>, polled: Option<&[libc::pollfd]>) {
        match (self, ticket) {
            (Sock::Stream(s), Some(t)) => {
                let mut st = s.lock();
                s.finish(&mut st, t, polled);
            }
            (Sock::Dgram(d), Some(t)) => d.finish(t, polled),
            _ => {}
        }
    }
}

/// What counting a sleeper on an rsocket gave.
pub enum Count {
    /// Counted; the ticket goes back to its `finish`.
    Counted(u64),
    /// The state changed since the look: look again instead of sleeping.
    Changed,
    /// The rsocket's wake flag is still up for sleepers counted before the
    /// look: wait for them to lower it, then look again.
    Busy,
}

/// The sleepers of one rsocket and its wake flag, under the rsocket's lock.
///
/// A sleeper counts itself right after its last look at the state (under the
/// lock of that look) and must be told, through the flag, of every change made
/// after it. A raise is for the sleepers counted before it; one counted later
/// has seen the change it announced. So the flag comes down once the last
/// sleeper it was raised for has woken, whoever else sleeps by then. Lowering
/// it only when no sleeper at all was left let two threads keep it up for each
/// other: each woke, looked and counted itself again (under one lock hold)
/// while the other was still counted, and both polled a raised flag in a loop
/// until data readied one of them.
#[derive(Default)]
pub struct Sleepers {
    /// Counted since the last raise (the flag is not for them).
    fresh: u32,
    /// Counted before the last raise, not finished yet.
    raised_for: u32,
    /// Raises so far. A count returns it as the sleeper's ticket: equal at
    /// `finish`, the sleeper is still fresh; older, the flag was raised for it.
    epoch: u64,
    /// Whether the flag is raised (only ever changed under the lock).
    up: bool,
    /// Threads in `settle`, waiting on the rsocket's condition variable.
    settling: u32,
}

impl Sleepers {
    /// Counts a sleeper whose look just ended; returns its ticket.
    pub fn count(&mut self) -> u64 {
        self.fresh += 1;
        self.epoch
    }

    /// `count`, unless the flag is up for older sleepers (Busy: `settle`, then
    /// look again).
    pub fn try_count(&mut self) -> Count {
        if self.up {
            return Count::Busy;
        }
        Count::Counted(self.count())
    }

    /// Whether the flag is up for sleepers counted before now: a thread that
    /// looks now must `settle` rather than count itself and poll it.
    pub fn up(&self) -> bool {
        self.up
    }

    /// The state changed: raises `wake` for the fresh sleepers (it is still up
    /// for the others). True when threads settle: the caller wakes them.
    pub fn notify(&mut self, wake: &Flag) -> bool {
        if self.fresh > 0 {
            if !self.up {
                wake.raise();
                self.up = true;
            }
            self.raised_for += std::mem::take(&mut self.fresh);
            self.epoch += 1;
        }
        self.settling > 0
    }

    /// Undoes the count that returned `ticket`. True when it lowered the flag
    /// with threads settling: the caller wakes them.
    pub fn finish(&mut self, ticket: u64, wake: &Flag) -> bool {
        if ticket == self.epoch {
            self.fresh = self.fresh.saturating_sub(1);
        } else {
            self.raised_for = self.raised_for.saturating_sub(1);
        }
        // The last sleeper the flag was up for has woken; the fresh ones saw
        // every change it announced.
        if self.raised_for == 0 && self.up {
            wake.lower();
            self.up = false;
            return self.settling > 0;
        }
        false
    }
}

/// An rsocket's state, as `settle` needs it.
pub trait Sleepy {
    fn sleepers(&mut self) -> &mut Sleepers;
    /// Whether the state changed since a look read generation `gen`, or the
    /// rsocket was closed.
    fn moved_on(&self, gen: u64) -> bool;
}

/// Waits on `cond`, counted nowhere, until the sleepers the wake flag is up
/// for have woken and lowered it, or the state moves on from generation `gen`,
/// or `ms` pass. A sleeper that counted itself while the flag is up would poll
/// a raised flag, return at once and look again, over and over, until then.
/// Those sleepers only poll (the flag wakes them) and finish; holding no count
/// here, this thread is never one they wait for.
pub fn settle<'a, T: Sleepy>(cond: &Condvar, mut st: MutexGuard<'a, T>, gen: u64, ms: i32) -> MutexGuard<'a, T> {
    let until = Instant::now() + Duration::from_millis(ms.max(1) as u64);
    st.sleepers().settling += 1;
    while st.sleepers().up && !st.moved_on(gen) {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        st = match cond.wait_timeout(st, left) {
            Ok((g, _)) => g,
            Err(e) => e.into_inner().0,
        };
    }
    st.sleepers().settling -= 1;
    st
}

/// Busy-polling for `polling_time` µs before a wait sleeps (rsocket.md §5).
/// A pass is short, so the clock is read every 8th; once spent (or with
/// `polling_time` 0) every later question says sleep. No `pause` between
/// passes, as upstream's loop: a pass is a CQ poll, not a spin on one word,
/// and under qemu's TCG (the VM benchmark) a `pause` leaves the translated
/// code for qemu's own loop, 130 ns a pass against 2 for the rest of a
/// trivial loop (measured in the guest).
pub struct Spin {
    until: Option<Instant>,
    passes: u32,
}

impl Spin {
    pub fn new(polling_time_us: u64) -> Spin {
        Spin { until: (polling_time_us > 0).then(|| Instant::now() + Duration::from_micros(polling_time_us)), passes: 0 }
    }

    /// Whether to make another pass instead of sleeping.
    pub fn again(&mut self) -> bool {
        let Some(until) = self.until else { return false };
        self.passes = self.passes.wrapping_add(1);
        if !self.passes.is_multiple_of(8) || Instant::now() < until {
            return true;
        }
        self.until = None;
        false
    }
}

/// A sleep on several rsockets: `add` each one's entries after the caller's
/// own, then `finish` hands each rsocket its entries (on drop at the latest, so
/// an early return cannot leave a rsocket counting a sleeper that left).
pub struct Sleep<'a> {
    fds: Vec<libc::pollfd>,
    /// Each rsocket, where its entries start, and this sleeper's ticket there
    /// once counted.
    socks: Vec<(&'a Sock, usize, Option<u64>)>,
    finished: bool,
}

impl Drop for Sleep<'_> {
    fn drop(&mut self) {
        self.finish(false);
    }
}

impl<'a> Sleep<'a> {
    pub fn new(fds: Vec<libc::pollfd>) -> Self {
        Sleep { fds, socks: Vec::new(), finished: false }
    }

    /// Adds `s` (its CQ armed) without counting this sleeper yet: the look the
    /// caller takes next may change it, and a counted sleeper would then be
    /// woken by its own change. `count` after that look.
    pub fn arm(&mut self, s: &'a Sock) -> Result<()> {
        let start = self.fds.len();
        // Recorded first: the entries a failing arm added still belong to this rsocket.
        self.socks.push((s, start, None));
        s.arm(&mut self.fds)
    }

    /// Counts this sleeper on every rsocket `arm` added, each if its state is
    /// still at the generation that look read (`gens`, in the order added);
    /// false when one changed: do not sleep, look again. On an rsocket whose
    /// wake flag is still up for older sleepers it also waits for them first
    /// (at most `ms`, the sleep it would have had), having given back every
    /// count (see `settle`).
    pub fn count(&mut self, gens: &[u64], ms: i32) -> bool {
        for (i, &gen) in gens.iter().enumerate().take(self.socks.len()) {
            let (s, _, ticket) = self.socks[i];
            if ticket.is_some() {
                continue;
            }
            match s.count_if(gen) {
                Count::Counted(t) => self.socks[i].2 = Some(t),
                Count::Changed => return false,
                Count::Busy => {
                    self.finish(false);
                    s.settle(gen, ms);
                    return false;
                }
            }
        }
        true
    }

    /// Sleeps in poll(2) for at most `ms`; returns its result and errno.
    pub fn poll(&mut self, ms: i32) -> (i32, crate::sys::Errno) {
        // SAFETY: a live pollfd array.
        let r = unsafe { libc::poll(self.fds.as_mut_ptr(), self.fds.len() as libc::nfds_t, ms) };
        (r, crate::sys::Errno::last())
    }

    /// `slept`: whether `poll` ran and succeeded (its revents are valid). Once.
    pub fn finish(&mut self, slept: bool) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        for (i, &(s, start, ticket)) in self.socks.iter().enumerate() {
            let end = self.socks.get(i + 1).map_or(self.fds.len(), |n| n.1);
            s.finish(ticket, slept.then(|| &self.fds[start..end]));
        }
    }
}

/// One non-blocking pass; returns how many entries have events. `gens` gets
/// the state generation each rsocket was read at, in order.
fn scan(
    fds: &mut [libc::pollfd],
    socks: &[Option<Sock>],
    plain: &mut Vec<libc::pollfd>,
    idx: &[usize],
    gens: &mut Vec<u64>,
) -> Result<i32> {
    let mut n = 0;
    gens.clear();
    for (p, s) in fds.iter_mut().zip(socks) {
        if let Some(s) = s {
            let (r, gen) = s.revents(p.events);
            p.revents = r;
            gens.push(gen);
            if p.revents != 0 {
                n += 1;
            }
        }
    }
    if !plain.is_empty() {
        for p in plain.iter_mut() {
            p.revents = 0;
        }
        // SAFETY: a live pollfd array; zero timeout.
        cerr(unsafe { libc::poll(plain.as_mut_ptr(), plain.len() as libc::nfds_t, 0) })?;
        for (p, &i) in plain.iter().zip(idx) {
            fds[i].revents = p.revents;
            if p.revents != 0 {
                n += 1;
            }
        }
    }
    Ok(n)
}

pub fn rpoll(fds: &mut [libc::pollfd], timeout: i32) -> Result<i32> {
    let socks: Vec<Option<Sock>> =
        if super::any() { fds.iter().map(|p| get(p.fd)).collect() } else { vec![None; fds.len()] };
    if socks.iter().all(|s| s.is_none()) {
        // SAFETY: the caller's array, handed to poll(2) unchanged.
        return cerr(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) });
    }
    let cfg = super::config::get_config();
    let deadline = (timeout >= 0).then(|| Instant::now() + Duration::from_millis(timeout as u64));
    let idx: Vec<usize> = (0..fds.len()).filter(|&i| socks[i].is_none() && fds[i].fd >= 0).collect();
    let mut plain: Vec<libc::pollfd> =
        idx.iter().map(|&i| libc::pollfd { fd: fds[i].fd, events: fds[i].events, revents: 0 }).collect();
    for p in fds.iter_mut() {
        p.revents = 0;
    }
    let mut spin = Spin::new(cfg.polling_time_us);
    let mut gens = Vec::with_capacity(socks.len());
    loop {
        let n = scan(fds, &socks, &mut plain, &idx, &mut gens)?;
        if n > 0 || timeout == 0 {
            return Ok(n);
        }
        if spin.again() {
            continue;
        }
        let mut wait = Sleep::new(plain.iter().map(|p| libc::pollfd { fd: p.fd, events: p.events, revents: 0 }).collect());
        for s in socks.iter().flatten() {
            wait.arm(s)?;
        }
        // Completions that came before the CQs were armed raise no event: look again.
        let n = scan(fds, &socks, &mut plain, &idx, &mut gens)?;
        if n > 0 {
            wait.finish(false);
            return Ok(n);
        }
        let mut slice = cfg.wake_up_interval_ms;
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            slice = slice.min(left.as_millis() as i32 + if left.as_nanos() % 1_000_000 != 0 { 1 } else { 0 });
        }
        if !wait.count(&gens, slice) {
            wait.finish(false);
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return scan(fds, &socks, &mut plain, &idx, &mut gens);
            }
            continue;
        }
        let (r, err) = wait.poll(slice);
        wait.finish(r >= 0);
        if r < 0 {
            return Err(err);
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return scan(fds, &socks, &mut plain, &idx, &mut gens);
        }
    }
}

/// rselect: the fd sets become a pollfd array for rpoll.
///
/// # Safety
/// Each set is NULL or a valid fd_set covering `nfds`.
pub unsafe fn rselect(
    nfds: i32,
    r: *mut libc::fd_set,
    w: *mut libc::fd_set,
    e: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> Result<i32> {
    if !(0..=libc::FD_SETSIZE as i32).contains(&nfds) {
        return Err(crate::sys::Errno::EINVAL);
    }
    let isset = |set: *mut libc::fd_set, fd: i32| -> bool {
        // SAFETY: per the contract; fd < nfds ≤ FD_SETSIZE.
        !set.is_null() && unsafe { libc::FD_ISSET(fd, set) }
    };
    if !(0..nfds).any(|fd| (isset(r, fd) || isset(w, fd) || isset(e, fd)) && get(fd).is_some()) {
        // Only ordinary fds: select(2) itself, unchanged (timeout updated and all).
        // SAFETY: the caller's sets and timeout, as select(2) takes them.
        return cerr(unsafe { libc::select(nfds, r, w, e, timeout) });
    }
    let mut fds = Vec::new();
    for fd in 0..nfds {
        let mut ev = 0;
        if isset(r, fd) {
            ev |= libc::POLLIN;
        }
        if isset(w, fd) {
            ev |= libc::POLLOUT;
        }
        if isset(e, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            fds.push(libc::pollfd { fd, events: ev, revents: 0 });
        }
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: per the contract.
        let t = unsafe { *timeout };
        if t.tv_sec < 0 || t.tv_usec < 0 {
            return Err(crate::sys::Errno::EINVAL);
        }
        (t.tv_sec * 1000 + (t.tv_usec + 999) / 1000).min(i32::MAX as i64) as i32
    };
    rpoll(&mut fds, ms)?;
    if fds.iter().any(|p| p.revents & libc::POLLNVAL != 0) {
        return Err(crate::sys::Errno::EBADF);
    }
    for set in [r, w, e] {
        if !set.is_null() {
            // SAFETY: per the contract.
            unsafe { libc::FD_ZERO(set) };
        }
    }
    let mut count = 0;
    for p in &fds {
        // SAFETY: per the contract; p.fd < nfds.
        unsafe {
            if !r.is_null()
                && p.events & libc::POLLIN != 0
                && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            {
                libc::FD_SET(p.fd, r);
                count += 1;
            }
            if !w.is_null() && p.events & libc::POLLOUT != 0 && p.revents & (libc::POLLOUT | libc::POLLERR) != 0 {
                libc::FD_SET(p.fd, w);
                count += 1;
            }
            if !e.is_null() && p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0 {
                libc::FD_SET(p.fd, e);
                count += 1;
            }
        }
    }
    Ok(count)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sys::readable_now;
    use std::sync::{Arc, Mutex};

    /// Two sleepers on one rsocket, woken by a change that readies neither:
    /// the first to wake looks and counts itself again while the other is
    /// still counted. Once the other has woken too the flag must be down, or
    /// both poll a raised flag in a loop (the flag used to come down only when
    /// no sleeper at all was counted, which this order never reaches).
    #[test]
    fn flag_comes_down_once_its_sleepers_woke() {
        let (w, mut sl) = (Flag::new().unwrap(), Sleepers::default());
        let a = sl.count();
        let b = sl.count();
        assert!(!readable_now(w.raw()));
        sl.notify(&w);
        assert!(readable_now(w.raw()), "a change wakes the sleepers");
        sl.finish(a, &w);
        assert!(readable_now(w.raw()), "still up: b has not woken");
        let a = sl.count();
        sl.finish(b, &w);
        assert!(!readable_now(w.raw()), "down: a looked after the change");
        let b = sl.count();
        sl.notify(&w);
        assert!(readable_now(w.raw()), "the next change wakes both");
        sl.finish(b, &w);
        assert!(readable_now(w.raw()), "up until a woke too");
        sl.finish(a, &w);
        assert!(!readable_now(w.raw()));
        assert_eq!((sl.fresh, sl.raised_for, sl.up), (0, 0, false));
    }

    /// No wake-up is lost: the flag stays up from a change until every sleeper
    /// counted before it has finished, also one counted between two changes.
    #[test]
    fn flag_stays_up_for_every_sleeper_counted_before_a_change() {
        let (w, mut sl) = (Flag::new().unwrap(), Sleepers::default());
        let a = sl.count();
        sl.notify(&w);
        let c = sl.count();
        sl.notify(&w);
        sl.finish(a, &w);
        assert!(readable_now(w.raw()), "c was counted before the second change");
        sl.finish(c, &w);
        assert!(!readable_now(w.raw()));
        // A change with nobody counted raises nothing; a sleeper counted after it is fresh.
        sl.notify(&w);
        assert!(!readable_now(w.raw()));
        let e = sl.count();
        sl.finish(e, &w);
        assert!(!readable_now(w.raw()));
        assert_eq!((sl.fresh, sl.raised_for), (0, 0));
    }

    struct Toy {
        sl: Sleepers,
        gen: u64,
    }

    impl Sleepy for Toy {
        fn sleepers(&mut self) -> &mut Sleepers {
            &mut self.sl
        }
        fn moved_on(&self, gen: u64) -> bool {
            self.gen != gen
        }
    }

    /// A thread that settles while the flag is up for an older sleeper returns
    /// when that sleeper's finish lowers it (told through the condition
    /// variable), well before its bound.
    #[test]
    fn settle_ends_when_the_flag_comes_down() {
        let w = Arc::new(Flag::new().unwrap());
        let m = Arc::new((Mutex::new(Toy { sl: Sleepers::default(), gen: 0 }), Condvar::new()));
        let old = {
            let mut st = m.0.lock().unwrap();
            let t = st.sl.count();
            st.gen += 1;
            assert!(!st.sl.notify(&w), "nobody settles yet");
            t
        };
        let (m2, w2) = (m.clone(), w.clone());
        let waker = std::thread::spawn(move || {
            // Until the other thread settles: the finish must signal it.
            while m2.0.lock().unwrap().sl.settling == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            let mut st = m2.0.lock().unwrap();
            assert!(st.sl.finish(old, &w2), "the finish that lowers the flag wakes the settler");
            m2.1.notify_all();
        });
        let t0 = Instant::now();
        let st = settle(&m.1, m.0.lock().unwrap(), 1, 10_000);
        assert!(!st.sl.up && st.sl.settling == 0);
        assert!(t0.elapsed() < Duration::from_secs(5), "settled for {:?}", t0.elapsed());
        drop(st);
        waker.join().unwrap();
        assert!(!readable_now(w.raw()));
        // Bounded: with the flag up and nothing changing, it returns after `ms`.
        let mut st = m.0.lock().unwrap();
        let t = st.sl.count();
        st.sl.notify(&w);
        let t0 = Instant::now();
        let mut st = settle(&m.1, st, 1, 50);
        assert!(t0.elapsed() >= Duration::from_millis(50) && st.sl.up);
        st.sl.finish(t, &w);
    }
}
