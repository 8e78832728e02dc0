//! The listen service (upstream's listen_svc): one thread per process that
//! watches the CM channels of listening rsockets and accepts each request
//! as it arrives (QP, buffers, rdma_accept with our connection data), so
//! connections complete like TCP's backlog does, before raccept is called.
//! raccept then only takes the next one from the accept queue.

use super::cm::{self, Id};
use super::stream::{Phase, Stream};
use crate::cm::registry::lock;
use crate::sys::{Errno, Flag};
use std::sync::{Arc, LazyLock, Mutex, Weak};

struct Svc {
    list: Mutex<Vec<Weak<Stream>>>,
    cmd: Flag,
    pid: Mutex<u32>,
}

static SVC: LazyLock<Option<Svc>> =
    LazyLock::new(|| Some(Svc { list: Mutex::new(Vec::new()), cmd: Flag::new().ok()?, pid: Mutex::new(0) }));

pub fn register(s: &Arc<Stream>) {
    let Some(svc) = SVC.as_ref() else { return };
    lock(&svc.list).push(Arc::downgrade(s));
    {
        let mut pid = lock(&svc.pid);
        let me = std::process::id();
        if *pid != me {
            *pid = me;
            let _ = common::thread::spawn("rsocket-listen", run);
        }
    }
    svc.cmd.raise();
}

pub fn unregister(s: &Stream) {
    let Some(svc) = SVC.as_ref() else { return };
    lock(&svc.list).retain(|w| w.upgrade().is_some_and(|l| !std::ptr::eq(Arc::as_ptr(&l), s)));
    svc.cmd.raise();
}

fn run() {
    let Some(svc) = SVC.as_ref() else { return };
    loop {
        let ls: Vec<Arc<Stream>> = {
            let mut list = lock(&svc.list);
            list.retain(|w| w.strong_count() > 0);
            list.iter().filter_map(|w| w.upgrade()).collect()
        };
        let mut fds = vec![libc::pollfd { fd: svc.cmd.raw(), events: libc::POLLIN, revents: 0 }];
        fds.extend(ls.iter().map(|l| libc::pollfd { fd: l.fd, events: libc::POLLIN, revents: 0 }));
        // SAFETY: a live pollfd array.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 1000) };
        svc.cmd.lower();
        for (l, p) in ls.iter().zip(&fds[1..]) {
            if p.revents != 0 {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| accept_pending(l)));
            }
        }
    }
}

/// Takes every queued connection request of listener `l` and accepts it.
fn accept_pending(l: &Arc<Stream>) {
    let mut st = l.lock();
    if st.phase != Phase::Listening {
        return;
    }
    let Some(lid) = st.id.as_ref().map(|i| i.raw()) else { return };
    let mut added = false;
    for _ in 0..4096 {
        let mut child = std::ptr::null_mut();
        // SAFETY: the listener's synchronous id; its channel fd is non-blocking.
        if unsafe { cm::rdma_get_request(lid, &mut child) } != 0 {
            match Errno::last() {
                Errno::EINVAL => continue, // a non-request event was consumed
                _ => break,
            }
        }
        if let Ok(s) = Stream::accept_child(&st, l.domain, Id(child)) {
            if let Some(q) = st.listen.as_mut() {
                q.queue.push_back(s);
                q.flag.raise();
                added = true;
            }
        }
    }
    if added {
        l.notify(&mut st);
    }
}
