//! Threads of our own that take no asynchronous signal.

use std::io;
use std::thread::{Builder, JoinHandle};

/// Spawns a library thread with every signal blocked, so process-directed signals go to
/// the application's threads as with a library that has none: a SIGALRM meant to
/// interrupt the application's blocking call (qperf's `ibv_get_cq_event`) would
/// otherwise be taken by one of ours, and that call would never return.
pub fn spawn<F, T>(name: &str, f: F) -> io::Result<JoinHandle<T>>
where
    F: FnOnce() -> T + Send + 'static,
    T: Send + 'static,
{
    // SAFETY: sigset_t is plain data; sigfillset initialises `all`, pthread_sigmask `old`.
    let mut all: libc::sigset_t = unsafe { std::mem::zeroed() };
    let mut old: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid sigset pointers; only the calling thread's mask changes, and it is
    // restored below. The new thread inherits the full mask at creation.
    unsafe {
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
    }
    let r = Builder::new().name(name.into()).spawn(f);
    // SAFETY: `old` holds the mask saved above.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
    r
}

#[cfg(test)]
mod tests {
    #[test]
    fn spawned_thread_blocks_every_signal() {
        let blocked = super::spawn("t", || {
            // SAFETY: plain-data sigset filled by pthread_sigmask.
            let mut cur: libc::sigset_t = unsafe { std::mem::zeroed() };
            unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur) };
            // SAFETY: cur was initialised above.
            [libc::SIGALRM, libc::SIGINT, libc::SIGUSR1, libc::SIGTERM]
                .iter()
                .all(|&s| unsafe { libc::sigismember(&cur, s) } == 1)
        })
        .unwrap()
        .join()
        .unwrap();
        assert!(blocked);
        // SAFETY: as above, for the calling thread, whose mask must be as it was.
        let mut cur: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, std::ptr::null(), &mut cur) };
        assert_eq!(unsafe { libc::sigismember(&cur, libc::SIGALRM) }, 0);
    }
}
