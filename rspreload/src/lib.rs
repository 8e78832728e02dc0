//! librspreload.so: an `LD_PRELOAD` module that runs an unmodified sockets
//! program over rsockets (rsocket(7), "preload library"). It overrides the
//! libc socket calls; a TCP or UDP socket the program creates becomes an
//! rsocket of librdmacm (loaded with dlopen), anything else — other
//! families, descriptors that are not rsockets, sockets librdmacm or
//! libibverbs make for themselves — goes to libc unchanged.
//!
//! The program sees ordinary fd numbers: each rsocket is represented by a
//! descriptor reserved with `open("/dev/null")`, mapped to the rsocket's own
//! number. Nothing runs at load time; the first socket() loads librdmacm
//! with an explicit in-progress flag (a call re-entering from that load
//! passes through instead of waiting for itself).
#![deny(unsafe_op_in_unsafe_fn)]
#![allow(clippy::missing_safety_doc)]

mod config;
mod real;

use libc::{c_int, c_long, c_void, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr, socklen_t, ssize_t};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU8, Ordering};
use std::sync::Mutex;

const MAX_FD: usize = 65536;
const SOL_RDMA: c_int = 0x10000;

/// Program fd → rsocket number + 1 (0: not an rsocket).
static MAP: [AtomicI32; MAX_FD] = [const { AtomicI32::new(0) }; MAX_FD];
/// Epoll fds the program added an rsocket to (only those go to repoll_wait).
static EPFDS: [std::sync::atomic::AtomicBool; MAX_FD] = [const { std::sync::atomic::AtomicBool::new(false) }; MAX_FD];
/// Program fds sharing each rsocket (dup, dup2, fcntl F_DUPFD).
static REFS: Mutex<BTreeMap<c_int, u32>> = Mutex::new(BTreeMap::new());

struct State {
    rs: real::Rs,
    cfg: config::Config,
}

static INIT: AtomicU8 = AtomicU8::new(0);
static STATE: AtomicPtr<State> = AtomicPtr::new(std::ptr::null_mut());

thread_local! {
    /// Calls this thread makes into librdmacm (their own socket calls pass through).
    static DEPTH: Cell<u32> = const { Cell::new(0) };
    static INITIALIZING: Cell<bool> = const { Cell::new(false) };
}

struct Inside;
impl Inside {
    fn new() -> Inside {
        DEPTH.with(|d| d.set(d.get() + 1));
        Inside
    }
}
impl Drop for Inside {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

fn inside() -> bool {
    DEPTH.with(|d| d.get() > 0)
}

/// librdmacm's r* functions, loaded on first use; None when unavailable or
/// while this very thread is loading them.
fn state() -> Option<&'static State> {
    loop {
        match INIT.load(Ordering::Acquire) {
            2 => {
                let p = STATE.load(Ordering::Acquire);
                // SAFETY: set once below to a leaked Box, never freed.
                return (!p.is_null()).then(|| unsafe { &*p });
            }
            1 if INITIALIZING.with(|i| i.get()) => return None,
            1 => std::thread::yield_now(),
            _ => {
                if INIT.compare_exchange(0, 1, Ordering::AcqRel, Ordering::Acquire).is_err() {
                    continue;
                }
                INITIALIZING.with(|i| i.set(true));
                let st = {
                    let _g = Inside::new();
                    real::load_rs().map(|rs| State { rs, cfg: config::Config::load() })
                };
                if let Some(s) = st {
                    STATE.store(Box::into_raw(Box::new(s)), Ordering::Release);
                }
                INITIALIZING.with(|i| i.set(false));
                INIT.store(2, Ordering::Release);
            }
        }
    }
}

/// The loaded state; only called for fds already mapped (so it exists).
fn rs() -> &'static real::Rs {
    let p = STATE.load(Ordering::Acquire);
    // SAFETY: a mapped fd exists only after the state was published.
    unsafe { &(*p).rs }
}

fn rs_fd(fd: c_int) -> Option<c_int> {
    if fd < 0 || fd as usize >= MAX_FD {
        return None;
    }
    match MAP[fd as usize].load(Ordering::Acquire) {
        0 => None,
        v => Some(v - 1),
    }
}

fn refs() -> std::sync::MutexGuard<'static, BTreeMap<c_int, u32>> {
    REFS.lock().unwrap_or_else(|e| e.into_inner())
}

fn map(fd: c_int, r: c_int) {
    *refs().entry(r).or_insert(0) += 1;
    MAP[fd as usize].store(r + 1, Ordering::Release);
}

/// Forgets `fd`; closes its rsocket when it was the last program fd for it.
fn unmap(fd: c_int) {
    let Some(r) = rs_fd(fd) else { return };
    MAP[fd as usize].store(0, Ordering::Release);
    let last = {
        let mut m = refs();
        let n = m.entry(r).or_insert(1);
        *n -= 1;
        if *n == 0 {
            m.remove(&r);
            true
        } else {
            false
        }
    };
    if last {
        let _g = Inside::new();
        // SAFETY: the rsocket this fd stood for, no longer referenced.
        unsafe { (rs().rclose)(r) };
    }
}

fn set_errno(e: c_int) {
    // SAFETY: the calling thread's errno slot.
    unsafe { *libc::__errno_location() = e };
}

/// A descriptor for the program to hold in place of rsocket `r`.
fn reserve(r: c_int, cloexec: bool) -> c_int {
    let flags = libc::O_RDWR | if cloexec { libc::O_CLOEXEC } else { 0 };
    // SAFETY: open of a constant path (open is not overridden).
    let fd = unsafe { libc::open(c"/dev/null".as_ptr(), flags) };
    if fd < 0 || fd as usize >= MAX_FD {
        if fd >= 0 {
            // SAFETY: the fd we just opened.
            unsafe { real::close()(fd) };
        }
        return -1;
    }
    map(fd, r);
    fd
}

/// Whether `addr` lies in librdmacm, libibverbs (or a provider) or this
/// module: their own sockets must stay real ones.
fn internal_caller(addr: usize) -> bool {
    if addr == 0 {
        return false;
    }
    // SAFETY: all-zero is a valid Dl_info; dladdr only reads the address.
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    if unsafe { libc::dladdr(addr as *const c_void, &mut info) } == 0 || info.dli_fname.is_null() {
        return false;
    }
    // SAFETY: dladdr gives a NUL-terminated path.
    let path = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes();
    let base = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
    base.starts_with(b"librdmacm")
        || base.starts_with(b"libibverbs")
        || base.starts_with(b"librspreload")
        || base.windows(6).any(|w| w == b"-rdmav")
}

// ---- socket(): the one call that decides; its caller's address is needed ----

#[cfg(target_arch = "x86_64")]
#[unsafe(naked)]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // The return address (at [rsp] on entry) becomes a 4th argument.
    core::arch::naked_asm!("mov rcx, [rsp]", "jmp {f}", f = sym socket_from)
}

#[cfg(not(target_arch = "x86_64"))]
#[unsafe(no_mangle)]
pub unsafe extern "C" fn socket(domain: c_int, ty: c_int, protocol: c_int) -> c_int {
    // SAFETY: forwarded unchanged.
    unsafe { socket_from(domain, ty, protocol, 0) }
}

unsafe extern "C" fn socket_from(domain: c_int, ty: c_int, protocol: c_int, caller: usize) -> c_int {
    let real = real::socket();
    let kind = ty & !(libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC);
    let candidate = (domain == libc::AF_INET || domain == libc::AF_INET6)
        && ((kind == libc::SOCK_STREAM && (protocol == 0 || protocol == libc::IPPROTO_TCP))
            || (kind == libc::SOCK_DGRAM && (protocol == 0 || protocol == libc::IPPROTO_UDP)));
    if !candidate || inside() || internal_caller(caller) {
        // SAFETY: libc's socket, arguments unchanged.
        return unsafe { real(domain, ty, protocol) };
    }
    let r = std::panic::catch_unwind(|| {
        let st = state()?;
        if !st.cfg.allows(domain, kind, protocol) {
            return None;
        }
        let _g = Inside::new();
        // SAFETY: librdmacm's rsocket.
        let r = unsafe { (st.rs.rsocket)(domain, ty, protocol) };
        if r < 0 {
            return None;
        }
        for (opt, v) in [(0, st.cfg.sq_size), (1, st.cfg.rq_size), (2, st.cfg.inline)] {
            if let Some(v) = v {
                // SAFETY: an int option of our new rsocket.
                unsafe { (st.rs.rsetsockopt)(r, SOL_RDMA, opt, (&v as *const c_int).cast(), 4) };
            }
        }
        let fd = reserve(r, ty & libc::SOCK_CLOEXEC != 0);
        if fd < 0 {
            // SAFETY: the rsocket we just made.
            unsafe { (st.rs.rclose)(r) };
            return None;
        }
        Some(fd)
    });
    match r {
        Ok(Some(fd)) => fd,
        // No rsocket (no device, not allowed, …): a real socket, as upstream falls back.
        // SAFETY: libc's socket, arguments unchanged.
        _ => unsafe { real(domain, ty, protocol) },
    }
}

/// Runs `f` on the rsocket behind `fd`, or `g` (libc) when it is none.
macro_rules! route {
    ($fd:expr, |$r:ident| $rs:expr, $real:expr) => {
        match rs_fd($fd) {
            Some($r) => {
                let _g = Inside::new();
                // SAFETY: librdmacm's function on the rsocket this fd maps to, with the caller's arguments.
                unsafe { $rs }
            }
            // SAFETY: libc's function with the caller's arguments.
            None => unsafe { $real },
        }
    };
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn bind(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    route!(fd, |r| (rs().rbind)(r, addr, len), real::bind()(fd, addr, len))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn listen(fd: c_int, backlog: c_int) -> c_int {
    route!(fd, |r| (rs().rlisten)(r, backlog), real::listen()(fd, backlog))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn connect(fd: c_int, addr: *const sockaddr, len: socklen_t) -> c_int {
    route!(fd, |r| (rs().rconnect)(r, addr, len), real::connect()(fd, addr, len))
}

fn do_accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    let Some(r) = rs_fd(fd) else {
        // SAFETY: libc's accept4 with the caller's arguments.
        return unsafe { real::accept4()(fd, addr, len, flags) };
    };
    let n = {
        let _g = Inside::new();
        // SAFETY: librdmacm's raccept on the listener's rsocket.
        unsafe { (rs().raccept)(r, addr, len) }
    };
    if n < 0 {
        return -1;
    }
    // Linux semantics: the new socket is blocking unless SOCK_NONBLOCK.
    let nb = if flags & libc::SOCK_NONBLOCK != 0 { libc::O_NONBLOCK } else { 0 };
    {
        let _g = Inside::new();
        // SAFETY: F_SETFL on the new rsocket.
        unsafe { (rs().rfcntl)(n, libc::F_SETFL, nb as c_long) };
    }
    let a = reserve(n, flags & libc::SOCK_CLOEXEC != 0);
    if a < 0 {
        let _g = Inside::new();
        // SAFETY: the rsocket we just accepted.
        unsafe { (rs().rclose)(n) };
        set_errno(libc::EMFILE);
        return -1;
    }
    a
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    if rs_fd(fd).is_none() {
        // SAFETY: libc's accept with the caller's arguments.
        return unsafe { real::accept()(fd, addr, len) };
    }
    do_accept(fd, addr, len, 0)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn accept4(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t, flags: c_int) -> c_int {
    do_accept(fd, addr, len, flags)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recv(fd: c_int, buf: *mut c_void, n: size_t, flags: c_int) -> ssize_t {
    route!(fd, |r| (rs().rrecv)(r, buf, n, flags), real::recv()(fd, buf, n, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvfrom(
    fd: c_int,
    buf: *mut c_void,
    n: size_t,
    flags: c_int,
    addr: *mut sockaddr,
    len: *mut socklen_t,
) -> ssize_t {
    route!(fd, |r| (rs().rrecvfrom)(r, buf, n, flags, addr, len), real::recvfrom()(fd, buf, n, flags, addr, len))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn recvmsg(fd: c_int, msg: *mut msghdr, flags: c_int) -> ssize_t {
    route!(fd, |r| (rs().rrecvmsg)(r, msg, flags), real::recvmsg()(fd, msg, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn read(fd: c_int, buf: *mut c_void, n: size_t) -> ssize_t {
    route!(fd, |r| (rs().rread)(r, buf, n), real::read()(fd, buf, n))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn readv(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    route!(fd, |r| (rs().rreadv)(r, iov, cnt), real::readv()(fd, iov, cnt))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn send(fd: c_int, buf: *const c_void, n: size_t, flags: c_int) -> ssize_t {
    route!(fd, |r| (rs().rsend)(r, buf, n, flags), real::send()(fd, buf, n, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendto(
    fd: c_int,
    buf: *const c_void,
    n: size_t,
    flags: c_int,
    addr: *const sockaddr,
    len: socklen_t,
) -> ssize_t {
    route!(fd, |r| (rs().rsendto)(r, buf, n, flags, addr, len), real::sendto()(fd, buf, n, flags, addr, len))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendmsg(fd: c_int, msg: *const msghdr, flags: c_int) -> ssize_t {
    route!(fd, |r| (rs().rsendmsg)(r, msg, flags), real::sendmsg()(fd, msg, flags))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn write(fd: c_int, buf: *const c_void, n: size_t) -> ssize_t {
    route!(fd, |r| (rs().rwrite)(r, buf, n), real::write()(fd, buf, n))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn writev(fd: c_int, iov: *const iovec, cnt: c_int) -> ssize_t {
    route!(fd, |r| (rs().rwritev)(r, iov, cnt), real::writev()(fd, iov, cnt))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn shutdown(fd: c_int, how: c_int) -> c_int {
    route!(fd, |r| (rs().rshutdown)(r, how), real::shutdown()(fd, how))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getpeername(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    route!(fd, |r| (rs().rgetpeername)(r, addr, len), real::getpeername()(fd, addr, len))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockname(fd: c_int, addr: *mut sockaddr, len: *mut socklen_t) -> c_int {
    route!(fd, |r| (rs().rgetsockname)(r, addr, len), real::getsockname()(fd, addr, len))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn setsockopt(fd: c_int, level: c_int, name: c_int, val: *const c_void, len: socklen_t) -> c_int {
    route!(fd, |r| (rs().rsetsockopt)(r, level, name, val, len), real::setsockopt()(fd, level, name, val, len))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn getsockopt(
    fd: c_int,
    level: c_int,
    name: c_int,
    val: *mut c_void,
    len: *mut socklen_t,
) -> c_int {
    route!(fd, |r| (rs().rgetsockopt)(r, level, name, val, len), real::getsockopt()(fd, level, name, val, len))
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn close(fd: c_int) -> c_int {
    if rs_fd(fd).is_some() {
        unmap(fd);
    }
    if fd >= 0 && (fd as usize) < MAX_FD {
        EPFDS[fd as usize].store(false, Ordering::Relaxed);
    }
    // SAFETY: libc's close of the caller's fd (the reserved one for rsockets).
    unsafe { real::close()(fd) }
}

// ---- fcntl and dup: the rsocket follows its descriptors ----

fn fcntl_common(real: unsafe extern "C" fn(c_int, c_int, ...) -> c_int, fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    let Some(r) = rs_fd(fd) else {
        // SAFETY: libc's fcntl with the caller's arguments (the one optional
        // argument passed on as a long, as it arrived).
        return unsafe { real(fd, cmd, arg) };
    };
    match cmd {
        libc::F_GETFL | libc::F_SETFL => {
            let _g = Inside::new();
            // SAFETY: librdmacm's rfcntl on the rsocket.
            unsafe { (rs().rfcntl)(r, cmd, arg) }
        }
        libc::F_DUPFD | libc::F_DUPFD_CLOEXEC => {
            // SAFETY: duplicates the reserved fd; the copy maps to the same rsocket.
            let n = unsafe { real(fd, cmd, arg) };
            if n >= 0 && (n as usize) < MAX_FD {
                map(n, r);
            }
            n
        }
        _ => {
            if matches!(cmd, libc::F_SETFD) {
                let _g = Inside::new();
                // SAFETY: keeps the rsocket's own flag in step.
                unsafe { (rs().rfcntl)(r, cmd, arg) };
            }
            // SAFETY: descriptor flags and locks live on the reserved fd.
            unsafe { real(fd, cmd, arg) }
        }
    }
}

/// Variadic in C; on x86-64 the one optional argument arrives like a third named one.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    fcntl_common(real::fcntl(), fd, cmd, arg)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    fcntl_common(real::fcntl64(), fd, cmd, arg)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup(fd: c_int) -> c_int {
    // SAFETY: libc's dup of the caller's fd.
    let n = unsafe { real::dup()(fd) };
    if let Some(r) = rs_fd(fd) {
        if n >= 0 && (n as usize) < MAX_FD {
            map(n, r);
        }
    }
    n
}

fn dup_to(old: c_int, new: c_int, flags: Option<c_int>) -> c_int {
    if old == new && flags.is_none() {
        // SAFETY: libc's dup2 (validates old).
        return unsafe { real::dup2()(old, new) };
    }
    let r = rs_fd(old);
    if rs_fd(new).is_some() && old != new {
        unmap(new);
    }
    // SAFETY: libc's dup2/dup3 with the caller's arguments.
    let n = unsafe {
        match flags {
            None => real::dup2()(old, new),
            Some(f) => real::dup3()(old, new, f),
        }
    };
    if let Some(r) = r {
        if n >= 0 && (n as usize) < MAX_FD {
            map(n, r);
        }
    }
    n
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup2(old: c_int, new: c_int) -> c_int {
    dup_to(old, new, None)
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn dup3(old: c_int, new: c_int, flags: c_int) -> c_int {
    dup_to(old, new, Some(flags))
}

// ---- sendfile: file bytes written into the rsocket ----

fn sendfile_common(out: c_int, inp: c_int, offset: *mut off_t, count: size_t, r: c_int) -> ssize_t {
    let mut buf = vec![0u8; 65536];
    let mut done: usize = 0;
    // SAFETY: offset is NULL or the caller's off_t.
    let mut pos = if offset.is_null() { None } else { Some(unsafe { *offset }) };
    while done < count {
        let want = (count - done).min(buf.len());
        // SAFETY: reads into our buffer from the caller's input fd (not overridden: pread; read of a file).
        let n = unsafe {
            match pos {
                Some(p) => libc::pread(inp, buf.as_mut_ptr().cast(), want, p),
                None => real::read()(inp, buf.as_mut_ptr().cast(), want),
            }
        };
        if n <= 0 {
            if n < 0 && done == 0 {
                return -1;
            }
            break;
        }
        let mut sent = 0;
        while sent < n as usize {
            let k = {
                let _g = Inside::new();
                // SAFETY: our buffer's filled part, written into the rsocket.
                unsafe { (rs().rsend)(r, buf[sent..].as_ptr().cast(), n as usize - sent, 0) }
            };
            if k <= 0 {
                if done + sent == 0 {
                    return -1;
                }
                done += sent;
                if let (Some(p), false) = (pos.as_mut(), offset.is_null()) {
                    *p += sent as off_t;
                    // SAFETY: the caller's off_t.
                    unsafe { *offset = *p };
                }
                return done as ssize_t;
            }
            sent += k as usize;
        }
        done += n as usize;
        if let Some(p) = pos.as_mut() {
            *p += n as off_t;
        }
    }
    if let (Some(p), false) = (pos, offset.is_null()) {
        // SAFETY: the caller's off_t.
        unsafe { *offset = p };
    }
    let _ = out;
    done as ssize_t
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile(out: c_int, inp: c_int, offset: *mut off_t, count: size_t) -> ssize_t {
    match rs_fd(out) {
        Some(r) => sendfile_common(out, inp, offset, count, r),
        // SAFETY: libc's sendfile with the caller's arguments.
        None => unsafe { real::sendfile()(out, inp, offset, count) },
    }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn sendfile64(out: c_int, inp: c_int, offset: *mut off_t, count: size_t) -> ssize_t {
    match rs_fd(out) {
        Some(r) => sendfile_common(out, inp, offset, count, r),
        // SAFETY: libc's sendfile64 with the caller's arguments.
        None => unsafe { real::sendfile64()(out, inp, offset, count) },
    }
}

// ---- readiness ----

#[unsafe(no_mangle)]
pub unsafe extern "C" fn poll(fds: *mut pollfd, n: nfds_t, timeout: c_int) -> c_int {
    if fds.is_null() || n == 0 {
        // SAFETY: libc's poll with the caller's arguments.
        return unsafe { real::poll()(fds, n, timeout) };
    }
    // SAFETY: the caller's array of n pollfds.
    let v = unsafe { std::slice::from_raw_parts_mut(fds, n as usize) };
    if !v.iter().any(|p| rs_fd(p.fd).is_some()) {
        // SAFETY: as above.
        return unsafe { real::poll()(fds, n, timeout) };
    }
    let mut t: Vec<pollfd> =
        v.iter().map(|p| pollfd { fd: rs_fd(p.fd).unwrap_or(p.fd), events: p.events, revents: 0 }).collect();
    let ret = {
        let _g = Inside::new();
        // SAFETY: librdmacm's rpoll over the translated array.
        unsafe { (rs().rpoll)(t.as_mut_ptr(), n, timeout) }
    };
    for (p, q) in v.iter_mut().zip(&t) {
        p.revents = q.revents;
    }
    ret
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn select(
    nfds: c_int,
    rd: *mut libc::fd_set,
    wr: *mut libc::fd_set,
    ex: *mut libc::fd_set,
    timeout: *mut libc::timeval,
) -> c_int {
    let lim = nfds.clamp(0, libc::FD_SETSIZE as c_int);
    // SAFETY: the caller's sets cover nfds descriptors.
    let isset = |s: *mut libc::fd_set, fd: c_int| !s.is_null() && unsafe { libc::FD_ISSET(fd, s) };
    let any_rs = (0..lim).any(|fd| rs_fd(fd).is_some() && (isset(rd, fd) || isset(wr, fd) || isset(ex, fd)));
    if !any_rs {
        // SAFETY: libc's select with the caller's arguments.
        return unsafe { real::select()(nfds, rd, wr, ex, timeout) };
    }
    let mut fds = Vec::new();
    for fd in 0..lim {
        let mut ev = 0;
        if isset(rd, fd) {
            ev |= libc::POLLIN;
        }
        if isset(wr, fd) {
            ev |= libc::POLLOUT;
        }
        if isset(ex, fd) {
            ev |= libc::POLLPRI;
        }
        if ev != 0 {
            fds.push((fd, pollfd { fd: rs_fd(fd).unwrap_or(fd), events: ev, revents: 0 }));
        }
    }
    let ms = if timeout.is_null() {
        -1
    } else {
        // SAFETY: the caller's timeval.
        let t = unsafe { *timeout };
        (t.tv_sec * 1000 + (t.tv_usec + 999) / 1000).clamp(0, c_int::MAX as i64) as c_int
    };
    let mut pf: Vec<pollfd> = fds.iter().map(|(_, p)| *p).collect();
    let ret = {
        let _g = Inside::new();
        // SAFETY: librdmacm's rpoll over our array.
        unsafe { (rs().rpoll)(pf.as_mut_ptr(), pf.len() as nfds_t, ms) }
    };
    if ret < 0 {
        return -1;
    }
    for s in [rd, wr, ex] {
        if !s.is_null() {
            // SAFETY: the caller's set.
            unsafe { libc::FD_ZERO(s) };
        }
    }
    let mut count = 0;
    for ((fd, _), p) in fds.iter().zip(&pf) {
        // SAFETY: the caller's sets; fd < nfds.
        unsafe {
            if !rd.is_null()
                && p.events & libc::POLLIN != 0
                && p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR) != 0
            {
                libc::FD_SET(*fd, rd);
                count += 1;
            }
            if !wr.is_null() && p.events & libc::POLLOUT != 0 && p.revents & (libc::POLLOUT | libc::POLLERR) != 0 {
                libc::FD_SET(*fd, wr);
                count += 1;
            }
            if !ex.is_null() && p.events & libc::POLLPRI != 0 && p.revents & libc::POLLPRI != 0 {
                libc::FD_SET(*fd, ex);
                count += 1;
            }
        }
    }
    count
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, ev: *mut libc::epoll_event) -> c_int {
    if let Some(r) = rs_fd(fd) {
        if let Some(ctl) = rs().repoll_ctl {
            if epfd >= 0 && (epfd as usize) < MAX_FD {
                EPFDS[epfd as usize].store(true, Ordering::Release);
            }
            let _g = Inside::new();
            // SAFETY: librdmacm's repoll_ctl; the epoll fd carries the program's other fds.
            return unsafe { ctl(epfd, op, r, ev) };
        }
    }
    // SAFETY: libc's epoll_ctl with the caller's arguments.
    unsafe { real::epoll_ctl()(epfd, op, fd, ev) }
}

#[unsafe(no_mangle)]
pub unsafe extern "C" fn epoll_wait(epfd: c_int, ev: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int {
    let p = STATE.load(Ordering::Acquire);
    let has_rs = epfd >= 0 && (epfd as usize) < MAX_FD && EPFDS[epfd as usize].load(Ordering::Acquire);
    if has_rs && !p.is_null() && !inside() {
        // SAFETY: the published state.
        if let Some(wait) = unsafe { &*p }.rs.repoll_wait {
            let _g = Inside::new();
            // SAFETY: librdmacm's repoll_wait (plain epoll when no rsocket is in the set).
            return unsafe { wait(epfd, ev, max, timeout) };
        }
    }
    // SAFETY: libc's epoll_wait with the caller's arguments.
    unsafe { real::epoll_wait()(epfd, ev, max, timeout) }
}
