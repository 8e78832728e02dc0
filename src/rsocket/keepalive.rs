//! SO_KEEPALIVE (upstream's tcp_svc): a timer thread sends a keepalive (a
//! 0-byte RDMA write, no message) on connections idle for TCP_KEEPIDLE
//! seconds; a dead peer then shows up as a failed completion (POLLERR).

use super::stream::{Phase, Stream};
use super::wire::CTRL_KEEPALIVE;
use crate::cm::registry::lock;
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::time::Duration;

struct Svc {
    list: Mutex<Vec<Weak<Stream>>>,
    pid: Mutex<u32>,
}

static SVC: LazyLock<Svc> = LazyLock::new(|| Svc { list: Mutex::new(Vec::new()), pid: Mutex::new(0) });

pub fn register(s: &Arc<Stream>) {
    let mut list = lock(&SVC.list);
    if !list.iter().any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(s))) {
        list.push(Arc::downgrade(s));
    }
    drop(list);
    let mut pid = lock(&SVC.pid);
    let me = std::process::id();
    if *pid != me {
        *pid = me;
        let _ = common::thread::spawn("rsocket-keepalive", run);
    }
}

pub fn unregister(s: &Stream) {
    lock(&SVC.list).retain(|w| !std::ptr::eq(w.as_ptr(), s) && w.strong_count() > 0);
}

fn run() {
    loop {
        std::thread::sleep(Duration::from_secs(1));
        let live: Vec<Arc<Stream>> = {
            let mut list = lock(&SVC.list);
            list.retain(|w| w.strong_count() > 0);
            list.iter().filter_map(|w| w.upgrade()).collect()
        };
        for s in live {
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| tick(&s)));
        }
    }
}

fn tick(s: &Stream) {
    let mut st = s.lock();
    s.progress(&mut st);
    if st.phase != Phase::Open || !st.opts.keepalive {
        return;
    }
    if st.last_send.elapsed() < Duration::from_secs(st.opts.keepidle as u64) {
        return;
    }
    if let Some(c) = st.conn.as_mut() {
        if c.ctrl_ok(1) && c.send_ctrl(CTRL_KEEPALIVE).is_ok() {
            st.last_send = std::time::Instant::now();
        }
    }
}
