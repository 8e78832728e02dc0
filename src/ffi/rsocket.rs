//! rsocket(7). The socket functions are issue 5 (ENOSYS until then). rpoll,
//! rselect and repoll_* already serve plain file descriptors, which is all
//! that exists while no rsocket can be created: the examples poll their event
//! channel's fd through rpoll.

use crate::sys::cerr;
use libc::{c_int, c_long, c_void, iovec, msghdr, nfds_t, off_t, pollfd, sockaddr, socklen_t};

stub! {
    fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int;
    fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int;
    fn rlisten(socket: c_int, backlog: c_int) -> c_int;
    fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int;
    fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int;
    fn rshutdown(socket: c_int, how: c_int) -> c_int;
    fn rclose(socket: c_int) -> c_int;
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize;
    fn rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src_addr: *mut sockaddr, addrlen: *mut socklen_t) -> isize;
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> isize;
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize;
    fn rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dest_addr: *const sockaddr, addrlen: socklen_t) -> isize;
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> isize;
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize;
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize;
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize;
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize;
    fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int;
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int;
    fn rsetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *const c_void, optlen: socklen_t) -> c_int;
    fn rgetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut socklen_t) -> c_int;
    // Variadic in C; on x86-64 the one optional argument arrives like a third
    // named one (stable Rust cannot define C-variadic functions).
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int;
    fn riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: off_t) -> off_t;
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int;
    fn riowrite(socket: c_int, buf: *const c_void, count: usize, offset: off_t, flags: c_int) -> usize;
}

entry! {
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
        // SAFETY: the caller's array, handed to poll(2) unchanged.
        cerr(unsafe { libc::poll(fds, nfds, timeout) })
    }
}

entry! {
    fn rselect(
        nfds: c_int,
        readfds: *mut libc::fd_set,
        writefds: *mut libc::fd_set,
        exceptfds: *mut libc::fd_set,
        timeout: *mut libc::timeval,
    ) -> c_int {
        // SAFETY: the caller's sets, handed to select(2) unchanged.
        cerr(unsafe { libc::select(nfds, readfds, writefds, exceptfds, timeout) })
    }
}

entry! {
    fn repoll_create(flags: c_int) -> c_int {
        // SAFETY: plain syscall.
        cerr(unsafe { libc::epoll_create1(flags) })
    }
}

entry! {
    fn repoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int {
        // SAFETY: the caller's event, handed to epoll_ctl(2) unchanged.
        cerr(unsafe { libc::epoll_ctl(epfd, op, fd, event) })
    }
}

entry! {
    fn repoll_wait(epfd: c_int, events: *mut libc::epoll_event, maxevents: c_int, timeout: c_int) -> c_int {
        // SAFETY: the caller's array, handed to epoll_wait(2) unchanged.
        cerr(unsafe { libc::epoll_wait(epfd, events, maxevents, timeout) })
    }
}
