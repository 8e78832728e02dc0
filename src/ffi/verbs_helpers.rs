//! The rdma_verbs.h helpers (rdma_post_send(3), rdma_get_send_comp(3), …) as
//! real functions, in this project's own version node RDMACM_RS_1.0: C
//! programs use the header's static inline copies, while Rust, Python or Go
//! callers, which cannot call a static inline, link these.

use crate::cm::IdBox;
use crate::sys::{Errno, Result};
use crate::verbs::{ibv_ack_cq_events, ibv_dereg_mr, ibv_get_cq_event, ibv_reg_mr, verr};
use rdma_abi::cma::*;
use rdma_abi::verbs::*;
use std::ffi::{c_int, c_void};

/// The verbs objects of an id, read once (the application owns them).
struct Objs {
    qp: *mut ibv_qp,
    srq: *mut ibv_srq,
    pd: *mut ibv_pd,
}

fn objs(id: *mut rdma_cm_id) -> Result<Objs> {
    IdBox::lookup(id)?.with_public(|p| Objs { qp: p.qp, srq: p.srq, pd: p.pd })
}

/// A verbs call that returns an errno value (0 = success).
fn reg(id: *mut rdma_cm_id, addr: *mut c_void, length: usize, access: u32) -> Result<*mut ibv_mr> {
    let o = objs(id)?;
    // SAFETY: the id's PD (or NULL, which libibverbs rejects) and the caller's buffer.
    let mr = unsafe { ibv_reg_mr(o.pd, addr, length, access as c_int) };
    if mr.is_null() {
        return Err(Errno::last());
    }
    Ok(mr.cast())
}

entry! {
    fn rdma_reg_msgs(id: *mut rdma_cm_id, addr: *mut c_void, length: usize) -> *mut ibv_mr {
        reg(id, addr, length, IBV_ACCESS_LOCAL_WRITE)
    }
}

entry! {
    fn rdma_reg_read(id: *mut rdma_cm_id, addr: *mut c_void, length: usize) -> *mut ibv_mr {
        reg(id, addr, length, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ)
    }
}

entry! {
    fn rdma_reg_write(id: *mut rdma_cm_id, addr: *mut c_void, length: usize) -> *mut ibv_mr {
        reg(id, addr, length, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE)
    }
}

entry! {
    fn rdma_dereg_mr(mr: *mut ibv_mr) -> c_int {
        super::args::non_null(mr)?;
        // SAFETY: an MR from rdma_reg_*/ibv_reg_mr, per the man page.
        verr(unsafe { ibv_dereg_mr(mr.cast()) }).map(|()| 0)
    }
}

fn post_recv(id: *mut rdma_cm_id, context: *mut c_void, sgl: *mut ibv_sge, nsge: c_int) -> Result<c_int> {
    let o = objs(id)?;
    let mut wr = ibv_recv_wr { wr_id: context as u64, next: std::ptr::null_mut(), sg_list: sgl, num_sge: nsge };
    let mut bad = std::ptr::null_mut();
    // SAFETY: the id's SRQ or QP, created by verbs, whose context carries the
    // provider's ops; the work request lives across the call.
    unsafe {
        if !o.srq.is_null() {
            let f = (*(*o.srq).context).ops.post_srq_recv.ok_or(Errno::ENOSYS)?;
            verr(f(o.srq, &mut wr, &mut bad)).map(|()| 0)
        } else {
            super::args::non_null(o.qp)?;
            let f = (*(*o.qp).context).ops.post_recv.ok_or(Errno::ENOSYS)?;
            verr(f(o.qp, &mut wr, &mut bad)).map(|()| 0)
        }
    }
}

/// Posts one send-queue work request built by `fill`.
fn post_send(
    id: *mut rdma_cm_id,
    context: *mut c_void,
    sgl: *mut ibv_sge,
    nsge: c_int,
    flags: c_int,
    fill: impl FnOnce(&mut ibv_send_wr),
) -> Result<c_int> {
    let o = objs(id)?;
    super::args::non_null(o.qp)?;
    // SAFETY: all-zero is a valid ibv_send_wr (NULL pointers, zero fields).
    let mut wr: ibv_send_wr = unsafe { std::mem::zeroed() };
    wr.wr_id = context as u64;
    wr.sg_list = sgl;
    wr.num_sge = nsge;
    wr.send_flags = flags as u32;
    fill(&mut wr);
    let mut bad = std::ptr::null_mut();
    // SAFETY: the id's QP, created by verbs; the request lives across the call.
    unsafe {
        let f = (*(*o.qp).context).ops.post_send.ok_or(Errno::ENOSYS)?;
        verr(f(o.qp, &mut wr, &mut bad)).map(|()| 0)
    }
}

fn sge(addr: *mut c_void, length: usize, mr: *mut ibv_mr) -> ibv_sge {
    // SAFETY: mr is NULL (inline data) or an MR the caller registered.
    let lkey = if mr.is_null() { 0 } else { unsafe { (*mr).lkey } };
    ibv_sge { addr: addr as u64, length: length as u32, lkey }
}

entry! {
    fn rdma_post_recvv(id: *mut rdma_cm_id, context: *mut c_void, sgl: *mut ibv_sge, nsge: c_int) -> c_int {
        post_recv(id, context, sgl, nsge)
    }
}

entry! {
    fn rdma_post_sendv(id: *mut rdma_cm_id, context: *mut c_void, sgl: *mut ibv_sge, nsge: c_int, flags: c_int) -> c_int {
        post_send(id, context, sgl, nsge, flags, |wr| wr.opcode = IBV_WR_SEND)
    }
}

entry! {
    fn rdma_post_readv(
        id: *mut rdma_cm_id, context: *mut c_void, sgl: *mut ibv_sge, nsge: c_int, flags: c_int,
        remote_addr: u64, rkey: u32,
    ) -> c_int {
        post_send(id, context, sgl, nsge, flags, |wr| {
            wr.opcode = IBV_WR_RDMA_READ;
            wr.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
        })
    }
}

entry! {
    fn rdma_post_writev(
        id: *mut rdma_cm_id, context: *mut c_void, sgl: *mut ibv_sge, nsge: c_int, flags: c_int,
        remote_addr: u64, rkey: u32,
    ) -> c_int {
        post_send(id, context, sgl, nsge, flags, |wr| {
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
        })
    }
}

entry! {
    fn rdma_post_recv(id: *mut rdma_cm_id, context: *mut c_void, addr: *mut c_void, length: usize, mr: *mut ibv_mr) -> c_int {
        super::args::non_null(mr)?;
        let mut s = sge(addr, length, mr);
        post_recv(id, context, &mut s, 1)
    }
}

entry! {
    fn rdma_post_send(
        id: *mut rdma_cm_id, context: *mut c_void, addr: *mut c_void, length: usize, mr: *mut ibv_mr, flags: c_int,
    ) -> c_int {
        let mut s = sge(addr, length, mr);
        post_send(id, context, &mut s, 1, flags, |wr| wr.opcode = IBV_WR_SEND)
    }
}

entry! {
    fn rdma_post_read(
        id: *mut rdma_cm_id, context: *mut c_void, addr: *mut c_void, length: usize, mr: *mut ibv_mr, flags: c_int,
        remote_addr: u64, rkey: u32,
    ) -> c_int {
        super::args::non_null(mr)?;
        let mut s = sge(addr, length, mr);
        post_send(id, context, &mut s, 1, flags, |wr| {
            wr.opcode = IBV_WR_RDMA_READ;
            wr.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
        })
    }
}

entry! {
    fn rdma_post_write(
        id: *mut rdma_cm_id, context: *mut c_void, addr: *mut c_void, length: usize, mr: *mut ibv_mr, flags: c_int,
        remote_addr: u64, rkey: u32,
    ) -> c_int {
        let mut s = sge(addr, length, mr);
        post_send(id, context, &mut s, 1, flags, |wr| {
            wr.opcode = IBV_WR_RDMA_WRITE;
            wr.wr.rdma = ibv_send_wr_rdma { remote_addr, rkey };
        })
    }
}

entry! {
    fn rdma_post_ud_send(
        id: *mut rdma_cm_id, context: *mut c_void, addr: *mut c_void, length: usize, mr: *mut ibv_mr, flags: c_int,
        ah: *mut ibv_ah, remote_qpn: u32,
    ) -> c_int {
        let mut s = sge(addr, length, mr);
        post_send(id, context, &mut s, 1, flags, |wr| {
            wr.opcode = IBV_WR_SEND;
            wr.wr.ud = ibv_send_wr_ud { ah, remote_qpn, remote_qkey: RDMA_UDP_QKEY };
        })
    }
}

/// rdma_get_send_comp / rdma_get_recv_comp: poll; if empty, arm and poll
/// again (a completion may have slipped in), then sleep on the channel.
fn get_comp(id: *mut rdma_cm_id, wc: *mut ibv_wc, send: bool) -> Result<c_int> {
    super::args::non_null(wc)?;
    let (cq, channel) = IdBox::lookup(id)?.with_public(|p| {
        if send {
            (p.send_cq, p.send_cq_channel)
        } else {
            (p.recv_cq, p.recv_cq_channel)
        }
    })?;
    super::args::non_null(cq)?;
    // SAFETY: the id's CQ and channel, created by verbs for this id; wc is the
    // caller's writable completion.
    unsafe {
        let ops = &(*(*cq).context).ops;
        let poll = ops.poll_cq.ok_or(Errno::ENOSYS)?;
        let arm = ops.req_notify_cq.ok_or(Errno::ENOSYS)?;
        loop {
            let n = poll(cq, 1, wc);
            if n != 0 {
                return if n < 0 { Err(Errno(n.abs())) } else { Ok(n) };
            }
            verr(arm(cq, 0))?;
            let n = poll(cq, 1, wc);
            if n != 0 {
                return if n < 0 { Err(Errno(n.abs())) } else { Ok(n) };
            }
            let mut ev_cq = std::ptr::null_mut();
            let mut ev_ctx = std::ptr::null_mut();
            if ibv_get_cq_event(channel.cast(), &mut ev_cq, &mut ev_ctx) != 0 {
                return Err(Errno::last());
            }
            if ev_cq.cast() != cq || ev_ctx != id.cast() {
                // Upstream asserts here: the CQ must be this id's own.
                return Err(Errno::EINVAL);
            }
            ibv_ack_cq_events(ev_cq, 1);
        }
    }
}

entry! {
    fn rdma_get_send_comp(id: *mut rdma_cm_id, wc: *mut ibv_wc) -> c_int {
        get_comp(id, wc, true)
    }
}

entry! {
    fn rdma_get_recv_comp(id: *mut rdma_cm_id, wc: *mut ibv_wc) -> c_int {
        get_comp(id, wc, false)
    }
}

entry! {
    fn rdma_get_local_addr(id: *mut rdma_cm_id) -> *mut libc::sockaddr {
        // SAFETY: only the address of a field is taken.
        IdBox::lookup(id)?.with_public(|p| unsafe { std::ptr::addr_of_mut!(p.route.addr.src.addr) })
    }
}

entry! {
    fn rdma_get_peer_addr(id: *mut rdma_cm_id) -> *mut libc::sockaddr {
        // SAFETY: only the address of a field is taken.
        IdBox::lookup(id)?.with_public(|p| unsafe { std::ptr::addr_of_mut!(p.route.addr.dst.addr) })
    }
}
