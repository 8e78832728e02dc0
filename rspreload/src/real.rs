//! The functions we override, as libc defines them (`dlsym(RTLD_NEXT)`),
//! and the r* functions of librdmacm (`dlopen` + `dlvsym(RDMACM_1.0)`).
//! Both are resolved lazily; resolving never calls an overridden function.

use libc::{c_char, c_int, c_void, iovec, msghdr, nfds_t, off_t, pollfd, size_t, sockaddr, socklen_t, ssize_t};
use std::sync::atomic::{AtomicUsize, Ordering};

fn next(name: &'static [u8], slot: &AtomicUsize) -> usize {
    let p = slot.load(Ordering::Acquire);
    if p != 0 {
        return p;
    }
    // SAFETY: a NUL-terminated name; RTLD_NEXT finds libc's definition.
    let p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr() as *const c_char) } as usize;
    if p == 0 {
        let msg = b"librspreload: cannot find a libc function\n";
        // SAFETY: raw write syscall to stderr; no overridden function involved.
        unsafe { libc::syscall(libc::SYS_write, 2, msg.as_ptr(), msg.len()) };
        // SAFETY: nothing can continue without libc.
        unsafe { libc::abort() };
    }
    slot.store(p, Ordering::Release);
    p
}

macro_rules! real {
    ($($name:ident: fn($($t:ty),*) -> $r:ty;)*) => {
        $(
            #[allow(dead_code)]
            pub fn $name() -> unsafe extern "C" fn($($t),*) -> $r {
                static SLOT: AtomicUsize = AtomicUsize::new(0);
                let p = next(concat!(stringify!($name), "\0").as_bytes(), &SLOT);
                // SAFETY: libc's definition of this very function, same signature.
                unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) -> $r>(p) }
            }
        )*
    };
}

real! {
    socket: fn(c_int, c_int, c_int) -> c_int;
    bind: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    listen: fn(c_int, c_int) -> c_int;
    accept: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    accept4: fn(c_int, *mut sockaddr, *mut socklen_t, c_int) -> c_int;
    connect: fn(c_int, *const sockaddr, socklen_t) -> c_int;
    recv: fn(c_int, *mut c_void, size_t, c_int) -> ssize_t;
    recvfrom: fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t;
    recvmsg: fn(c_int, *mut msghdr, c_int) -> ssize_t;
    read: fn(c_int, *mut c_void, size_t) -> ssize_t;
    readv: fn(c_int, *const iovec, c_int) -> ssize_t;
    send: fn(c_int, *const c_void, size_t, c_int) -> ssize_t;
    sendto: fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t;
    sendmsg: fn(c_int, *const msghdr, c_int) -> ssize_t;
    write: fn(c_int, *const c_void, size_t) -> ssize_t;
    writev: fn(c_int, *const iovec, c_int) -> ssize_t;
    poll: fn(*mut pollfd, nfds_t, c_int) -> c_int;
    select: fn(c_int, *mut libc::fd_set, *mut libc::fd_set, *mut libc::fd_set, *mut libc::timeval) -> c_int;
    shutdown: fn(c_int, c_int) -> c_int;
    close: fn(c_int) -> c_int;
    getpeername: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    getsockname: fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int;
    setsockopt: fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int;
    getsockopt: fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int;
    dup: fn(c_int) -> c_int;
    dup2: fn(c_int, c_int) -> c_int;
    dup3: fn(c_int, c_int, c_int) -> c_int;
    sendfile: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    sendfile64: fn(c_int, c_int, *mut off_t, size_t) -> ssize_t;
    epoll_ctl: fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int;
    epoll_wait: fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int;
}

/// fcntl is variadic: its real definition is called through a variadic pointer.
pub fn fcntl_fn(name: &'static [u8], slot: &AtomicUsize) -> unsafe extern "C" fn(c_int, c_int, ...) -> c_int {
    let p = next(name, slot);
    // SAFETY: libc's fcntl/fcntl64, whose C type is variadic.
    unsafe { std::mem::transmute::<usize, unsafe extern "C" fn(c_int, c_int, ...) -> c_int>(p) }
}

pub fn fcntl() -> unsafe extern "C" fn(c_int, c_int, ...) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    fcntl_fn(b"fcntl\0", &SLOT)
}

pub fn fcntl64() -> unsafe extern "C" fn(c_int, c_int, ...) -> c_int {
    static SLOT: AtomicUsize = AtomicUsize::new(0);
    fcntl_fn(b"fcntl64\0", &SLOT)
}

/// The rsocket functions of librdmacm.
#[allow(clippy::type_complexity)]
pub struct Rs {
    pub rsocket: unsafe extern "C" fn(c_int, c_int, c_int) -> c_int,
    pub rbind: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int,
    pub rlisten: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub raccept: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int,
    pub rconnect: unsafe extern "C" fn(c_int, *const sockaddr, socklen_t) -> c_int,
    pub rshutdown: unsafe extern "C" fn(c_int, c_int) -> c_int,
    pub rclose: unsafe extern "C" fn(c_int) -> c_int,
    pub rrecv: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int) -> ssize_t,
    pub rrecvfrom: unsafe extern "C" fn(c_int, *mut c_void, size_t, c_int, *mut sockaddr, *mut socklen_t) -> ssize_t,
    pub rrecvmsg: unsafe extern "C" fn(c_int, *mut msghdr, c_int) -> ssize_t,
    pub rsend: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int) -> ssize_t,
    pub rsendto: unsafe extern "C" fn(c_int, *const c_void, size_t, c_int, *const sockaddr, socklen_t) -> ssize_t,
    pub rsendmsg: unsafe extern "C" fn(c_int, *const msghdr, c_int) -> ssize_t,
    pub rread: unsafe extern "C" fn(c_int, *mut c_void, size_t) -> ssize_t,
    pub rreadv: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t,
    pub rwrite: unsafe extern "C" fn(c_int, *const c_void, size_t) -> ssize_t,
    pub rwritev: unsafe extern "C" fn(c_int, *const iovec, c_int) -> ssize_t,
    pub rpoll: unsafe extern "C" fn(*mut pollfd, nfds_t, c_int) -> c_int,
    pub rgetpeername: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int,
    pub rgetsockname: unsafe extern "C" fn(c_int, *mut sockaddr, *mut socklen_t) -> c_int,
    pub rsetsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *const c_void, socklen_t) -> c_int,
    pub rgetsockopt: unsafe extern "C" fn(c_int, c_int, c_int, *mut c_void, *mut socklen_t) -> c_int,
    pub rfcntl: unsafe extern "C" fn(c_int, c_int, ...) -> c_int,
    /// RDMACM_1.5 (absent from older librdmacm): epoll interception needs them.
    pub repoll_ctl: Option<unsafe extern "C" fn(c_int, c_int, c_int, *mut libc::epoll_event) -> c_int>,
    pub repoll_wait: Option<unsafe extern "C" fn(c_int, *mut libc::epoll_event, c_int, c_int) -> c_int>,
}

fn sym(h: *mut c_void, name: &'static [u8], version: &'static [u8]) -> usize {
    // SAFETY: a dlopen handle and NUL-terminated strings.
    let p = unsafe { libc::dlvsym(h, name.as_ptr().cast(), version.as_ptr().cast()) };
    if !p.is_null() {
        return p as usize;
    }
    // SAFETY: as above.
    unsafe { libc::dlsym(h, name.as_ptr().cast()) as usize }
}

/// Loads librdmacm and its r* functions; None if anything is missing.
/// (Each transmute's target is the `Rs` field it initialises.)
#[allow(clippy::missing_transmute_annotations)]
pub fn load_rs() -> Option<Rs> {
    // SAFETY: dlopen of a library name; no overridden function is involved
    // beyond those libibverbs/librdmacm call while initialising (which pass
    // straight through: the caller marks this thread as inside rsockets).
    let h = unsafe { libc::dlopen(c"librdmacm.so.1".as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    if h.is_null() {
        return None;
    }
    macro_rules! get {
        ($n:literal) => {{
            let p = sym(h, concat!($n, "\0").as_bytes(), b"RDMACM_1.0\0");
            if p == 0 {
                return None;
            }
            // SAFETY: librdmacm's function of that name (rsocket.h signature).
            unsafe { std::mem::transmute::<usize, _>(p) }
        }};
    }
    let opt = |n: &'static [u8]| -> usize { sym(h, n, b"RDMACM_1.5\0") };
    let (ctl, wait) = (opt(b"repoll_ctl\0"), opt(b"repoll_wait\0"));
    Some(Rs {
        rsocket: get!("rsocket"),
        rbind: get!("rbind"),
        rlisten: get!("rlisten"),
        raccept: get!("raccept"),
        rconnect: get!("rconnect"),
        rshutdown: get!("rshutdown"),
        rclose: get!("rclose"),
        rrecv: get!("rrecv"),
        rrecvfrom: get!("rrecvfrom"),
        rrecvmsg: get!("rrecvmsg"),
        rsend: get!("rsend"),
        rsendto: get!("rsendto"),
        rsendmsg: get!("rsendmsg"),
        rread: get!("rread"),
        rreadv: get!("rreadv"),
        rwrite: get!("rwrite"),
        rwritev: get!("rwritev"),
        rpoll: get!("rpoll"),
        rgetpeername: get!("rgetpeername"),
        rgetsockname: get!("rgetsockname"),
        rsetsockopt: get!("rsetsockopt"),
        rgetsockopt: get!("rgetsockopt"),
        rfcntl: get!("rfcntl"),
        // SAFETY: librdmacm's repoll functions (rsocket.h signatures), when present.
        repoll_ctl: (ctl != 0).then(|| unsafe { std::mem::transmute::<usize, _>(ctl) }),
        // SAFETY: as above.
        repoll_wait: (wait != 0).then(|| unsafe { std::mem::transmute::<usize, _>(wait) }),
    })
}
