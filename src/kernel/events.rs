//! Kernel events as rdma_get_cm_event reads them from a channel's rdma_cm
//! file (`source`): each is translated (kernel-abi.md §5) after the
//! library-side work upstream does there (queries, device attach, the active
//! side's RTR/RTS/RTU, multicast attach), then handed to the caller when its
//! id is on the channel being read, else queued on the id's channel (an id
//! migrated meanwhile).

use super::abi::*;
use super::convert;
use super::kid::{self, Gids, KId, Mc, Owner};
use super::ucma::Ucma;
use crate::cm::channel::Take;
use crate::cm::event::Param;
use crate::cm::{Channel, IdBox, IdCore, Pending};
use crate::sys::{Errno, Result};
use crate::verbs::ibv_attach_mcast;
use rdma_abi::cma::*;
use rdma_abi::verbs::*;
use std::sync::Arc;

/// Where an event read from `u` by a reader of `ch` goes.
pub fn dispatch(u: &Arc<Ucma>, ev: &rdma_ucm_event_resp, ch: &Arc<Channel>) -> Take {
    let routed = match kid::lookup(ev.uid) {
        Some(Owner::Id(k)) => on_id_event(u, &k, ev),
        Some(Owner::Mc(k, mc)) => on_mc_event(&k, &mc, ev),
        None => {
            // The owner is gone: a request's new kernel id has nobody to take it.
            if ev.event == RDMA_CM_EVENT_CONNECT_REQUEST {
                let _ = u.destroy_id(ev.id);
            }
            None
        }
    };
    let Some((k, p)) = routed else { return Take::Again };
    match k.route(p, ch) {
        Ok(Some(p)) => Take::Here(p),
        Ok(None) => Take::Again,
        Err(p) => {
            // The owner was destroyed meanwhile.
            p.discard();
            Take::Again
        }
    }
}

/// An event and the id whose channel it goes to.
type Routed = Option<(Arc<KId>, Pending)>;

/// An event with the kernel's connection parameters (private data copied).
fn conn_pending(core: &Arc<IdCore>, ev: &rdma_ucm_event_resp, event: u32, status: i32) -> Pending {
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
    let mut p = core.pending(event, status, param);
    p.private = c.private_data[..c.private_data_len as usize].to_vec();
    p
}

/// An event with the kernel's datagram parameters (address handle, QPN, qkey).
fn ud_pending(core: &Arc<IdCore>, ev: &rdma_ucm_event_resp, event: u32, status: i32) -> Pending {
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
    let mut p = core.pending(event, status, param);
    p.private = d.private_data[..(d.private_data_len as usize).min(256)].to_vec();
    p.ud = true;
    p
}

/// Parameters by the id's QP type, as upstream copies them.
fn by_type(core: &Arc<IdCore>, ev: &rdma_ucm_event_resp, event: u32, status: i32) -> Pending {
    if kid::is_ud(core) {
        ud_pending(core, ev, event, status)
    } else {
        conn_pending(core, ev, event, status)
    }
}

fn on_id_event(u: &Arc<Ucma>, k: &Arc<KId>, ev: &rdma_ucm_event_resp) -> Routed {
    let status = ev.status as i32;
    let core = &k.core;
    match ev.event {
        RDMA_CM_EVENT_ADDR_RESOLVED => {
            let p = match k.with_handle(|u, h, st| k.query_addr(u, h, st, Gids::IbTransport)) {
                Ok(()) => core.pending(RDMA_CM_EVENT_ADDR_RESOLVED, status, Param::zeroed()),
                Err(e) => core.pending(RDMA_CM_EVENT_ADDR_ERROR, -e.0, Param::zeroed()),
            };
            Some((k.clone(), p))
        }
        RDMA_CM_EVENT_ROUTE_RESOLVED => {
            let p = match k.with_handle(|u, h, st| k.query_path(u, h, st)) {
                Ok(()) => core.pending(RDMA_CM_EVENT_ROUTE_RESOLVED, status, Param::zeroed()),
                Err(e) => core.pending(RDMA_CM_EVENT_ROUTE_ERROR, -e.0, Param::zeroed()),
            };
            Some((k.clone(), p))
        }
        RDMA_CM_EVENT_CONNECT_REQUEST => on_request(u, k, ev),
        RDMA_CM_EVENT_CONNECT_RESPONSE => on_response(k, ev),
        RDMA_CM_EVENT_REJECTED | RDMA_CM_EVENT_DISCONNECTED => {
            if k.st().connect_error {
                return None; // the failed reply was reported as CONNECT_ERROR already
            }
            if ev.event == RDMA_CM_EVENT_REJECTED {
                let _ = k.qp_to(IBV_QPS_ERR);
            }
            Some((k.clone(), by_type(core, ev, ev.event, status)))
        }
        e => Some((k.clone(), by_type(core, ev, e, status))),
    }
}

/// CONNECT_REQUEST: the kernel made a new id (`ev.id`); it becomes a new
/// core id with the listener's channel, context and port space, reported on
/// the listener's channel. Its own events start once it is accepted.
fn on_request(u: &Arc<Ucma>, l: &Arc<KId>, ev: &rdma_ucm_event_resp) -> Routed {
    let Ok((ch, ctx, ps, qpt)) = l.core.with_public(|p| (p.channel, p.context, p.ps, p.qp_type)) else {
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
    let setup = || -> Result<Arc<KId>> {
        // The new kernel id is on the file the request came from.
        let c = kid::adopt(&core, ev.id, u.clone());
        if l.core.is_sync() {
            IdBox::migrate(ptr, std::ptr::null_mut())?;
        }
        let ud = qpt == IBV_QPT_UD;
        c.with_handle(|u, h, st| {
            c.query_addr(u, h, st, Gids::Yes)?;
            c.query_path(u, h, st)?;
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
        core.state().remote_ece = ibv_ece { vendor_id: ev.ece.vendor_id, options: ev.ece.attr_mod, comp_mask: 0 };
        Ok(c)
    };
    if setup().is_err() {
        let _ = IdBox::destroy(ptr);
        return None;
    }
    let mut p = by_type(&l.core, ev, RDMA_CM_EVENT_CONNECT_REQUEST, ev.status as i32);
    p.id = crate::cm::event::IdPtr(ptr);
    p.listen_id = l.core.ptr();
    Some((l.clone(), p))
}

/// CONNECT_RESPONSE (IB/RoCE active side): with a library-driven QP, move it
/// to RTR and RTS, send the RTU and report ESTABLISHED; without one, report
/// the response (the application calls rdma_establish).
fn on_response(k: &Arc<KId>, ev: &rdma_ucm_event_resp) -> Routed {
    let core = &k.core;
    core.state().remote_ece = ibv_ece { vendor_id: ev.ece.vendor_id, options: ev.ece.attr_mod, comp_mask: 0 };
    let has_qp = core.with_public(|p| !p.qp.is_null()).unwrap_or(false);
    if !has_qp {
        return Some((k.clone(), conn_pending(core, ev, RDMA_CM_EVENT_CONNECT_RESPONSE, ev.status as i32)));
    }
    let r = k.with_handle(|u, h, st| {
        let local = core.state().local_ece;
        let options = core.with_public(|p| {
            if p.qp.is_null() {
                return Err(Errno::EINVAL);
            }
            super::ece::on_response(local, p.qp, ev.ece.vendor_id, ev.ece.attr_mod)
        })??;
        super::to_rts(u, k, h, st)?;
        u.accept(h, 0, &rdma_ucm_conn_param::default(), rdma_ucm_ece::default())?;
        Ok(options)
    });
    let p = match r {
        Ok(options) => {
            core.state().local_ece.options = options;
            conn_pending(core, ev, RDMA_CM_EVENT_ESTABLISHED, 0)
        }
        Err(e) => {
            let _ = k.qp_to(IBV_QPS_ERR);
            k.st().connect_error = true;
            core.pending(RDMA_CM_EVENT_CONNECT_ERROR, -e.0, Param::zeroed())
        }
    };
    Some((k.clone(), p))
}

/// MULTICAST_JOIN/ERROR: the membership's group goes on the id's QP (unless
/// send-only); the application gets its join context back as private_data.
fn on_mc_event(k: &Arc<KId>, mc: &Arc<Mc>, ev: &rdma_ucm_event_resp) -> Routed {
    let core = &k.core;
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
    let mut p = ud_pending(core, ev, event, status);
    p.private = Vec::new();
    p.param.0.ud.private_data = mc.context as *const libc::c_void;
    p.param.0.ud.private_data_len = 0;
    Some((k.clone(), p))
}
