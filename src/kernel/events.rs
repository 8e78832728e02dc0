//! Kernel events as rdma_get_cm_event reads them from a channel's rdma_cm
//! file (`source`): each is translated (kernel-abi.md §5) after the
//! library-side work upstream does there (queries, device attach, the active
//! side's RTR/RTS/RTU, multicast attach), then handed to the caller when its
//! id is on the channel being read, else queued on the id's channel (an id
//! migrated meanwhile).

use super::abi::*;
use super::convert;
use super::kid::{self, Gids, Mc, Owner};
use super::ucma::Ucma;
use crate::cm::channel::Take;
use crate::cm::event::Param;
use crate::cm::{Channel, Head, IdBox, IdCore, Slot};
use crate::sys::Result;
use crate::verbs::ibv_attach_mcast;
use rdma_abi::cma::*;
use rdma_abi::verbs::*;
use std::sync::Arc;

/// Where an event read from `u` by a reader of `ch` goes. The owner's
/// kernel state stays locked from the check that it is alive to the hand-over
/// (teardown takes the same lock, so destroy also waits for an event handed
/// out here, and none is posted after it).
pub fn dispatch(u: &Arc<Ucma>, ev: &rdma_ucm_event_resp, ch: &Arc<Channel>, slot: &mut Option<Slot>) -> Take {
    let (k, mc) = match kid::lookup(ev.uid) {
        Some(Owner::Id(k)) => (k, None),
        Some(Owner::Mc(k, mc)) => (k, Some(mc)),
        None => return gone(u, ev),
    };
    let mut kst = kid::st(&k);
    if kst.st.dead {
        return gone(u, ev);
    }
    let r = match mc {
        Some(mc) => on_mc_event(&k, &mc, ev),
        None => on_id_event(u, &k, &mut kst, ev),
    };
    let Some((h, private)) = r else { return Take::Again };
    // The id's channel cannot change meanwhile: rdma_migrate_id moves the
    // kernel id (under the kernel state lock held here) before the channel.
    let t = match k.deliver_or_post(h, private, ch, slot) {
        Some(e) => Take::Delivered(e),
        None => Take::Again,
    };
    drop(kst);
    t
}

/// An event whose owner is gone: a request's new kernel id has nobody to take it.
fn gone(u: &Ucma, ev: &rdma_ucm_event_resp) -> Take {
    if ev.event == RDMA_CM_EVENT_CONNECT_REQUEST {
        let _ = u.destroy_id(ev.id);
    }
    Take::Again
}

/// An event for the owner's channel and its private data (None: nothing to report).
type Routed<'a> = Option<(Head, &'a [u8])>;

/// An event with the kernel's connection parameters (private data copied).
#[inline(never)]
fn conn_head<'a>(core: &Arc<IdCore>, ev: &'a rdma_ucm_event_resp, event: u32, status: i32) -> (Head, &'a [u8]) {
    // SAFETY: both union members are plain data; `conn` is the one the kernel
    // fills for connected ids.
    let c = unsafe { &ev.param.conn };
    let mut param = Param::zeroed();
    param.0.conn = rdma_conn_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        responder_resources: c.responder_resources,
        initiator_depth: c.initiator_depth,
        flow_control: c.flow_control,
        retry_count: c.retry_count,
        rnr_retry_count: c.rnr_retry_count,
        srq: c.srq,
        qp_num: c.qp_num,
    };
    (core.head(event, status, param), &c.private_data[..c.private_data_len as usize])
}

/// An event with the kernel's datagram parameters (address handle, QPN, qkey).
#[inline(never)]
fn ud_head<'a>(core: &Arc<IdCore>, ev: &'a rdma_ucm_event_resp, event: u32, status: i32) -> (Head, &'a [u8]) {
    // SAFETY: both union members are plain data; `ud` is the one the kernel
    // fills for UD ids and multicast.
    let d = unsafe { &ev.param.ud };
    let mut param = Param::zeroed();
    param.0.ud = rdma_ud_param {
        private_data: std::ptr::null(),
        private_data_len: 0,
        ah_attr: convert::ah_attr(&d.ah_attr),
        qp_num: d.qp_num,
        qkey: d.qkey,
    };
    let mut h = core.head(event, status, param);
    h.ud = true;
    (h, &d.private_data[..(d.private_data_len as usize).min(256)])
}

/// Parameters by the id's QP type, as upstream copies them.
fn by_type<'a>(core: &Arc<IdCore>, ev: &'a rdma_ucm_event_resp, event: u32, status: i32) -> (Head, &'a [u8]) {
    if kid::is_ud(core) {
        ud_head(core, ev, event, status)
    } else {
        conn_head(core, ev, event, status)
    }
}

/// An event without parameters.
fn plain(core: &Arc<IdCore>, event: u32, status: i32) -> (Head, &'static [u8]) {
    (core.head(event, status, Param::zeroed()), &[])
}

fn on_id_event<'a>(u: &Arc<Ucma>, k: &Arc<IdCore>, slot: &mut kid::KSlot, ev: &'a rdma_ucm_event_resp) -> Routed<'a> {
    let status = ev.status as i32;
    match ev.event {
        RDMA_CM_EVENT_ADDR_RESOLVED => Some(
            match kid::on_handle(slot, |u, h, st| kid::query_addr(k, u, h, st, Gids::IbTransport)) {
                Ok(()) => plain(k, RDMA_CM_EVENT_ADDR_RESOLVED, status),
                Err(e) => plain(k, RDMA_CM_EVENT_ADDR_ERROR, -e.0),
            },
        ),
        RDMA_CM_EVENT_ROUTE_RESOLVED => Some(match kid::on_handle(slot, |u, h, st| kid::query_path(k, u, h, st)) {
            Ok(()) => plain(k, RDMA_CM_EVENT_ROUTE_RESOLVED, status),
            Err(e) => plain(k, RDMA_CM_EVENT_ROUTE_ERROR, -e.0),
        }),
        RDMA_CM_EVENT_CONNECT_REQUEST => on_request(u, k, ev),
        RDMA_CM_EVENT_CONNECT_RESPONSE => on_response(k, slot, ev),
        RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_DISCONNECTED => {
            if slot.st.connect_error {
                return None; // the failed reply was reported as CONNECT_ERROR already
            }
            if ev.event == RDMA_CM_EVENT_REJECTED {
                let _ = kid::qp_to(k, IBV_QPS_ERR);
            }
            Some(by_type(k, ev, ev.event, status))
        }
        e => Some(by_type(k, ev, e, status)),
    }
}

/// CONNECT_REQUEST: the kernel made a new id (`ev.id`); it becomes a new
/// core id with the listener's channel, context and port space, reported on
/// the listener's channel. Its own events start once it is accepted.
fn on_request<'a>(u: &Arc<Ucma>, l: &Arc<IdCore>, ev: &'a rdma_ucm_event_resp) -> Routed<'a> {
    let Ok((ch, ctx, ps, qpt)) = l.with_public(|p| (p.channel, p.context, p.ps, p.qp_type)) else {
        let _ = u.destroy_id(ev.id);
        return None;
    };
    let (ptr, core) = match IdBox::create_core(ch, ctx, ps, Some(qpt)) {
        Ok(p) => p,
        Err(_) => {
            let _ = u.destroy_id(ev.id);
            return None;
        }
    };
    // From here the new id owns the kernel id: destroying it destroys both.
    let setup = || -> Result<()> {
        // The new kernel id is on the file the request came from.
        kid::adopt(&core, ev.id, u.clone())?;
        let c = &core;
        if l.is_sync() {
            IdBox::migrate(ptr, std::ptr::null_mut())?;
        }
        let ud = qpt == IBV_QPT_UD;
        kid::with_handle(c, |u, h, st| {
            kid::query_addr(c, u, h, st, Gids::Yes)?;
            kid::query_path(c, u, h, st)?;
            if !ud {
                // SAFETY: plain data; `conn` is what the kernel fills for RC requests.
                let p = unsafe { &ev.param.conn };
                let d = st.dev;
                st.initiator_depth = d.map_or(p.initiator_depth, |d| p.initiator_depth.min(d.max_initiator_depth));
                st.responder_resources =
                    d.map_or(p.responder_resources, |d| p.responder_resources.min(d.max_responder_resources));
            }
            Ok(())
        })?;
        core.state().set_remote_ece(ibv_ece { vendor_id: ev.ece.vendor_id, options: ev.ece.attr_mod, comp_mask: 0 });
        Ok(())
    };
    if setup().is_err() {
        let _ = IdBox::destroy(ptr);
        return None;
    }
    let (mut h, private) = by_type(l, ev, RDMA_CM_EVENT_CONNECT_REQUEST, ev.status as i32);
    h.id = crate::cm::event::IdPtr(ptr);
    h.listen_id = l.ptr();
    Some((h, private))
}

/// CONNECT_RESPONSE (IB/RoCE active side): with a library-driven QP, move it
/// to RTR and RTS, send the RTU and report ESTABLISHED; without one, report
/// the response (the application calls rdma_establish).
fn on_response<'a>(k: &Arc<IdCore>, slot: &mut kid::KSlot, ev: &'a rdma_ucm_event_resp) -> Routed<'a> {
    let remote = ibv_ece { vendor_id: ev.ece.vendor_id, options: ev.ece.attr_mod, comp_mask: 0 };
    // One hold of the id's lock: the peer's ECE kept, and applied to the QP
    // (alive while the lock is held) before RTR; None without a QP.
    let ece = k
        .with_state_public(|st, p| {
            st.set_remote_ece(remote);
            (!p.qp.is_null()).then(|| crate::ece::on_response(st.local_ece(), p.qp, remote.vendor_id, remote.options))
        })
        .ok()
        .flatten();
    let Some(ece) = ece else {
        return Some(conn_head(k, ev, RDMA_CM_EVENT_CONNECT_RESPONSE, ev.status as i32));
    };
    let r = ece.and_then(|options| {
        kid::on_handle(slot, |u, h, st| {
            super::to_rts(u, k, h, st)?;
            u.rtu(h)
        })?;
        Ok(options)
    });
    Some(match r {
        Ok(options) => {
            let mut st = k.state();
            let local = st.local_ece();
            st.set_local_ece(ibv_ece { options, ..local });
            drop(st);
            conn_head(k, ev, RDMA_CM_EVENT_ESTABLISHED, 0)
        }
        Err(e) => {
            let _ = kid::qp_to(k, IBV_QPS_ERR);
            slot.st.connect_error = true;
            plain(k, RDMA_CM_EVENT_CONNECT_ERROR, -e.0)
        }
    })
}

/// MULTICAST_JOIN/ERROR: the membership's group goes on the id's QP (unless
/// send-only); the application gets its join context back as private_data.
fn on_mc_event<'a>(k: &Arc<IdCore>, mc: &Arc<Mc>, ev: &'a rdma_ucm_event_resp) -> Routed<'a> {
    let core = k;
    let mut event = ev.event;
    let mut status = ev.status as i32;
    if event == RDMA_CM_EVENT_MULTICAST_JOIN && !mc.send_only {
        // SAFETY: plain data; `ud` is what the kernel fills for multicast.
        let a = unsafe { ev.param.ud.ah_attr };
        let (gid, lid) = (a.grh.dgid, a.dlid);
        let r = core.with_public(|p| {
            if p.qp.is_null() {
                return 0;
            }
            let g = ibv_gid { raw: gid };
            // SAFETY: the id's live QP (guarded by the id's lock), a valid gid.
            unsafe { ibv_attach_mcast(p.qp, &g, lid) }
        });
        match r {
            Ok(0) => {
                if core.with_public(|p| !p.qp.is_null()).unwrap_or(false) {
                    *crate::cm::registry::lock(&mc.attached) = Some((gid, lid));
                }
            }
            Ok(e) => {
                event = RDMA_CM_EVENT_MULTICAST_ERROR;
                status = -e.abs();
            }
            Err(_) => return None,
        }
    }
    let (mut h, _) = ud_head(core, ev, event, status);
    h.param.0.ud.private_data = mc.context as *const libc::c_void;
    h.param.0.ud.private_data_len = 0;
    Some((h, &[]))
}
