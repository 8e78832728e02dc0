//! rsocket(7): the socket API over RDMA. Each export checks and copies its
//! C arguments and calls `crate::rsocket`, which holds the logic. rpoll,
//! rselect and repoll_* take rsockets and ordinary fds alike.

use crate::rsocket::{self, iov::Seg, iov::Segs};
use crate::sys::{set_errno, Errno, Result};
use libc::{c_int, c_long, c_void, iovec, msghdr, nfds_t, off_t, pollfd, sockaddr, socklen_t};

/// A socket address argument as bytes (`len` as the caller gave it).
///
/// # Safety
/// `addr` is NULL or readable for `len` bytes.
unsafe fn addr_in(addr: *const sockaddr, len: socklen_t) -> Result<Vec<u8>> {
    if addr.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    if len as usize > std::mem::size_of::<libc::sockaddr_storage>() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: per the contract.
    Ok(unsafe { std::slice::from_raw_parts(addr as *const u8, len as usize) }.to_vec())
}

/// Writes an address result the way accept(2)/getsockname(2) do: truncated
/// to `*len`, with `*len` set to the full size. NULL `addr` writes nothing.
///
/// # Safety
/// `addr` is NULL or writable for `*len` bytes; `len` NULL only with `addr` NULL.
unsafe fn addr_out(addr: *mut sockaddr, len: *mut socklen_t, bytes: &[u8]) -> Result<()> {
    if addr.is_null() {
        return Ok(());
    }
    if len.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    // SAFETY: per the contract.
    unsafe {
        let room = (*len as usize).min(bytes.len());
        std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, room);
        *len = bytes.len() as socklen_t;
    }
    Ok(())
}

/// EFAULT for a NULL buffer of some length.
fn buf_ok(buf: *const c_void, len: usize) -> Result<()> {
    if len > 0 && buf.is_null() {
        return Err(Errno(libc::EFAULT));
    }
    Ok(())
}

fn one(buf: *const c_void, len: usize) -> Result<Segs> {
    buf_ok(buf, len)?;
    Ok(Segs::One([Seg { ptr: buf as *mut u8, len }]))
}

// Every rsocket call is implemented now; `stub!` (ENOSYS) stays available
// to the other families, and this empty use keeps it referenced.
stub! {}

entry! {
    fn rsocket(domain: c_int, kind: c_int, protocol: c_int) -> c_int {
        rsocket::socket(domain, kind, protocol)
    }
}

entry! {
    fn rbind(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
        // SAFETY: the caller's address of addrlen bytes.
        let a = unsafe { addr_in(addr, addrlen) }?;
        rsocket::bind(socket, &a).map(|()| 0)
    }
}

entry! {
    fn rlisten(socket: c_int, backlog: c_int) -> c_int {
        rsocket::listen(socket, backlog).map(|()| 0)
    }
}

entry! {
    fn raccept(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
        if !addr.is_null() && addrlen.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        let (fd, peer) = rsocket::accept(socket)?;
        // SAFETY: the caller's optional address buffer.
        unsafe { addr_out(addr, addrlen, &peer) }?;
        Ok(fd)
    }
}

entry! {
    fn rconnect(socket: c_int, addr: *const sockaddr, addrlen: socklen_t) -> c_int {
        // SAFETY: the caller's address of addrlen bytes.
        let a = unsafe { addr_in(addr, addrlen) }?;
        rsocket::connect(socket, &a).map(|()| 0)
    }
}

entry! {
    fn rshutdown(socket: c_int, how: c_int) -> c_int {
        rsocket::shutdown(socket, how).map(|()| 0)
    }
}

entry! {
    fn rclose(socket: c_int) -> c_int {
        match rsocket::close(socket) {
            Ok(()) => Ok(0),
            Err(Errno::EBADF) => {
                // Upstream returns the positive value for an unknown socket.
                set_errno(Errno::EBADF);
                Ok(libc::EBADF)
            }
            Err(e) => Err(e),
        }
    }
}

entry! {
    fn rrecv(socket: c_int, buf: *mut c_void, len: usize, flags: c_int) -> isize {
        buf_ok(buf, len)?;
        // SAFETY: the caller's buffer (NULL only when empty: checked above).
        unsafe { rsocket::recv_one(socket, buf.cast(), len, flags) }.map(|n| n as isize)
    }
}

entry! {
    fn rrecvfrom(socket: c_int, buf: *mut c_void, len: usize, flags: c_int, src_addr: *mut sockaddr, addrlen: *mut socklen_t) -> isize {
        if !src_addr.is_null() && addrlen.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        let (n, src) = rsocket::recv(socket, one(buf, len)?, flags)?;
        match src {
            // SAFETY: the caller's optional address buffer.
            Some(a) => unsafe { addr_out(src_addr, addrlen, &a) }?,
            None if !addrlen.is_null() && !src_addr.is_null() => {
                // SAFETY: as above; a connected stream has no per-message source.
                unsafe { *addrlen = 0 };
            }
            None => {}
        }
        Ok(n as isize)
    }
}

entry! {
    fn rrecvmsg(socket: c_int, msg: *mut msghdr, flags: c_int) -> isize {
        super::args::non_null(msg)?;
        // SAFETY: non-NULL; the caller's msghdr and its iovec array.
        let (segs, name, namelen) = unsafe {
            let m = &*msg;
            (rsocket::iov::segs(m.msg_iov, m.msg_iovlen as i32)?, m.msg_name, m.msg_namelen)
        };
        let (n, src) = rsocket::recv(socket, segs, flags)?;
        // SAFETY: as above; msg_name is NULL or writable for msg_namelen bytes.
        unsafe {
            let m = &mut *msg;
            match src {
                Some(a) if !name.is_null() => {
                    let mut l = namelen;
                    addr_out(name.cast(), &mut l, &a)?;
                    m.msg_namelen = l;
                }
                _ => m.msg_namelen = 0,
            }
            m.msg_controllen = 0;
            m.msg_flags = 0;
        }
        Ok(n as isize)
    }
}

entry! {
    fn rsend(socket: c_int, buf: *const c_void, len: usize, flags: c_int) -> isize {
        buf_ok(buf, len)?;
        // SAFETY: the caller's buffer (NULL only when empty: checked above).
        unsafe { rsocket::send_one(socket, buf.cast(), len, flags) }.map(|n| n as isize)
    }
}

entry! {
    fn rsendto(socket: c_int, buf: *const c_void, len: usize, flags: c_int, dest_addr: *const sockaddr, addrlen: socklen_t) -> isize {
        let dest = if dest_addr.is_null() {
            None
        } else {
            // SAFETY: the caller's address of addrlen bytes.
            Some(unsafe { addr_in(dest_addr, addrlen) }?)
        };
        rsocket::send(socket, one(buf, len)?, flags, dest.as_deref()).map(|n| n as isize)
    }
}

entry! {
    fn rsendmsg(socket: c_int, msg: *const msghdr, flags: c_int) -> isize {
        super::args::non_null(msg)?;
        // SAFETY: non-NULL; the caller's msghdr, iovecs and optional name.
        let (segs, dest) = unsafe {
            let m = &*msg;
            let dest = if m.msg_name.is_null() || m.msg_namelen == 0 {
                None
            } else {
                Some(addr_in(m.msg_name as *const sockaddr, m.msg_namelen)?)
            };
            (rsocket::iov::segs(m.msg_iov, m.msg_iovlen as i32)?, dest)
        };
        rsocket::send(socket, segs, flags, dest.as_deref()).map(|n| n as isize)
    }
}

entry! {
    fn rread(socket: c_int, buf: *mut c_void, count: usize) -> isize {
        buf_ok(buf, count)?;
        // SAFETY: the caller's buffer (NULL only when empty: checked above).
        unsafe { rsocket::recv_one(socket, buf.cast(), count, 0) }.map(|n| n as isize)
    }
}

entry! {
    fn rreadv(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize {
        // SAFETY: the caller's iovec array of iovcnt entries.
        let segs = unsafe { rsocket::iov::segs(iov, iovcnt) }?;
        rsocket::recv(socket, segs, 0).map(|r| r.0 as isize)
    }
}

entry! {
    fn rwrite(socket: c_int, buf: *const c_void, count: usize) -> isize {
        buf_ok(buf, count)?;
        // SAFETY: the caller's buffer (NULL only when empty: checked above).
        unsafe { rsocket::send_one(socket, buf.cast(), count, 0) }.map(|n| n as isize)
    }
}

entry! {
    fn rwritev(socket: c_int, iov: *const iovec, iovcnt: c_int) -> isize {
        // SAFETY: the caller's iovec array of iovcnt entries.
        let segs = unsafe { rsocket::iov::segs(iov, iovcnt) }?;
        rsocket::send(socket, segs, 0, None).map(|n| n as isize)
    }
}

entry! {
    fn rgetpeername(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
        super::args::non_null(addr)?;
        super::args::non_null(addrlen)?;
        let a = rsocket::name(socket, true)?;
        // SAFETY: the caller's address buffer.
        unsafe { addr_out(addr, addrlen, &a) }.map(|()| 0)
    }
}

entry! {
    fn rgetsockname(socket: c_int, addr: *mut sockaddr, addrlen: *mut socklen_t) -> c_int {
        super::args::non_null(addr)?;
        super::args::non_null(addrlen)?;
        let a = rsocket::name(socket, false)?;
        // SAFETY: the caller's address buffer.
        unsafe { addr_out(addr, addrlen, &a) }.map(|()| 0)
    }
}

entry! {
    fn rsetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *const c_void, optlen: socklen_t) -> c_int {
        if optval.is_null() && optlen > 0 {
            return Err(Errno(libc::EFAULT));
        }
        let val = if optlen == 0 {
            Vec::new()
        } else {
            // SAFETY: the caller's option value of optlen bytes.
            unsafe { std::slice::from_raw_parts(optval as *const u8, optlen as usize) }.to_vec()
        };
        rsocket::setsockopt(socket, level, optname, &val).map(|()| 0)
    }
}

entry! {
    fn rgetsockopt(socket: c_int, level: c_int, optname: c_int, optval: *mut c_void, optlen: *mut socklen_t) -> c_int {
        super::args::non_null(optval)?;
        super::args::non_null(optlen)?;
        let v = rsocket::getsockopt(socket, level, optname)?;
        // SAFETY: the caller's buffer of *optlen bytes.
        unsafe {
            let room = (*optlen as usize).min(v.len());
            std::ptr::copy_nonoverlapping(v.as_ptr(), optval as *mut u8, room);
            *optlen = room as socklen_t;
        }
        Ok(0)
    }
}

entry! {
    // Variadic in C; on x86-64 the one optional argument arrives like a third
    // named one (stable Rust cannot define C-variadic functions).
    fn rfcntl(socket: c_int, cmd: c_int, arg: c_long) -> c_int {
        rsocket::fcntl(socket, cmd, arg as i64)
    }
}

entry! {
    fn riomap(socket: c_int, buf: *mut c_void, len: usize, prot: c_int, flags: c_int, offset: off_t) -> off_t {
        rsocket::riomap(socket, buf as *mut u8, len, prot, flags, offset)
    }
}

entry! {
    fn riounmap(socket: c_int, buf: *mut c_void, len: usize) -> c_int {
        rsocket::riounmap(socket, buf as *mut u8, len).map(|()| 0)
    }
}

entry! {
    fn riowrite(socket: c_int, buf: *const c_void, count: usize, offset: off_t, flags: c_int) -> usize {
        rsocket::riowrite(socket, one(buf, count)?, offset, flags)
    }
}

entry! {
    fn rpoll(fds: *mut pollfd, nfds: nfds_t, timeout: c_int) -> c_int {
        if nfds == 0 {
            return rsocket::poll::rpoll(&mut [], timeout);
        }
        if fds.is_null() {
            return Err(Errno(libc::EFAULT));
        }
        // SAFETY: the caller's array of nfds pollfds.
        let v = unsafe { std::slice::from_raw_parts_mut(fds, nfds as usize) };
        rsocket::poll::rpoll(v, timeout)
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
        // SAFETY: the caller's sets and timeout, as select(2) takes them.
        unsafe { rsocket::poll::rselect(nfds, readfds, writefds, exceptfds, timeout) }
    }
}

entry! {
    fn repoll_create(flags: c_int) -> c_int {
        rsocket::epoll::create(flags)
    }
}

entry! {
    fn repoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int {
        // SAFETY: the caller's event (NULL allowed for EPOLL_CTL_DEL).
        unsafe { rsocket::epoll::ctl(epfd, op, fd, event) }
    }
}

entry! {
    fn repoll_wait(epfd: c_int, events: *mut libc::epoll_event, maxevents: c_int, timeout: c_int) -> c_int {
        // SAFETY: the caller's array of maxevents entries.
        unsafe { rsocket::epoll::wait(epfd, events, maxevents, timeout) }
    }
}
