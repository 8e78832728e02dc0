//! Enhanced Connection Establishment (ECE) for ids whose QP the library
//! made (rdma_create_qp), as upstream does it: the QP's ECE (ibv_query_ece)
//! becomes the id's local ECE, sent in REQ/REP (CONNECT/ACCEPT carry it); a
//! QP made for a CONNECT_REQUEST takes the peer's options (ibv_set_ece), and
//! the active side applies the REP's before RTR. Providers without ECE (rxe,
//! siw, softverbs, the dummy verbs) answer EOPNOTSUPP, which is ignored, so
//! for them the local ECE of an id with a library QP is zero, whatever
//! rdma_set_local_ece said before (c-examples/dev_ece, round "early"). The
//! verbs are looked up at run time (libibverbs IBVERBS_1.10): a libibverbs
//! without them is "no ECE" too. Both backends' CMs carry what `carried` says.

use crate::cm::id::IdState;
use crate::cm::IdCore;
use crate::sys::{Errno, Result};
use rdma_abi::verbs::{ibv_ece, ibv_qp};
use std::ffi::{c_int, CStr};
use std::sync::OnceLock;

type EceFn = unsafe extern "C" fn(*mut ibv_qp, *mut ibv_ece) -> c_int;

fn lookup(name: &CStr, slot: &'static OnceLock<Option<EceFn>>) -> Option<EceFn> {
    *slot.get_or_init(|| {
        // SAFETY: dlsym with a NUL-terminated name; the result is checked.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
        // SAFETY: libibverbs' ibv_query_ece/ibv_set_ece have exactly this signature.
        (!f.is_null()).then(|| unsafe { std::mem::transmute::<*mut libc::c_void, EceFn>(f) })
    })
}

/// Calls an ECE verb; 0 or a positive errno (EOPNOTSUPP when absent).
fn call(name: &CStr, slot: &'static OnceLock<Option<EceFn>>, qp: *mut ibv_qp, ece: &mut ibv_ece) -> i32 {
    let Some(f) = lookup(name, slot) else { return libc::EOPNOTSUPP };
    // SAFETY: a live QP of the id (the caller holds it) and a writable ibv_ece.
    let r = unsafe { f(qp, ece) };
    match r {
        0 => 0,
        -1 => Errno::last().0,
        r => r.abs(),
    }
}

static QUERY: OnceLock<Option<EceFn>> = OnceLock::new();
static SET: OnceLock<Option<EceFn>> = OnceLock::new();

/// Looks both verbs up (the first QP then finds them ready).
pub fn resolve() {
    lookup(c"ibv_query_ece", &QUERY);
    lookup(c"ibv_set_ece", &SET);
}

fn query(qp: *mut ibv_qp, ece: &mut ibv_ece) -> i32 {
    call(c"ibv_query_ece", &QUERY, qp, ece)
}

fn set(qp: *mut ibv_qp, ece: &mut ibv_ece) -> i32 {
    call(c"ibv_set_ece", &SET, qp, ece)
}

fn ok_or_unsupported(e: i32) -> Result<()> {
    if e == 0 || e == libc::EOPNOTSUPP {
        Ok(())
    } else {
        Err(Errno(e))
    }
}

/// The ECE a REQ (`rep` false) or a REP carries, as (vendor, options): a REQ
/// our own; a REP the REQ's vendor with our options (upstream's rdma_accept).
pub fn carried(st: &IdState, rep: bool) -> (u32, u32) {
    let (local, remote) = (st.local_ece(), st.remote_ece());
    (if rep { remote.vendor_id } else { local.vendor_id }, local.options)
}

/// rdma_create_qp (upstream init_ece): the new QP's ECE is the id's local
/// one; for an id from a CONNECT_REQUEST whose peer sent ECE, the peer's
/// options are applied (none when the vendors differ).
pub fn on_create_qp(core: &IdCore, qp: *mut ibv_qp) -> Result<()> {
    let mut ece = ibv_ece::default();
    ok_or_unsupported(query(qp, &mut ece))?;
    let remote = {
        let mut st = core.state();
        st.set_local_ece(ibv_ece { vendor_id: ece.vendor_id, options: ece.options, comp_mask: 0 });
        st.remote_ece()
    };
    if remote.vendor_id == 0 {
        return Ok(()); // no peer ECE (an active id, or a peer without ECE)
    }
    let mut e = if remote.vendor_id != ece.vendor_id {
        ibv_ece { vendor_id: ece.vendor_id, options: 0, comp_mask: 0 }
    } else {
        ibv_ece { vendor_id: remote.vendor_id, options: remote.options, comp_mask: 0 }
    };
    ok_or_unsupported(set(qp, &mut e))
}

/// CONNECT_RESPONSE on an id with a QP (upstream ucma_process_conn_resp_ece):
/// the REP's ECE goes on the QP before RTR. `local` is the id's local ECE;
/// returns the options to keep as the local ones once established. The
/// caller holds the id's lock (the QP stays alive).
pub fn on_response(local: ibv_ece, qp: *mut ibv_qp, peer_vendor: u32, peer_options: u32) -> Result<u32> {
    let mut e = ibv_ece { vendor_id: peer_vendor, options: peer_options, comp_mask: 0 };
    if peer_vendor == 0 {
        // The peer (or its kernel) does not do ECE: clear ours.
        e = ibv_ece { vendor_id: local.vendor_id, options: 0, comp_mask: 0 };
    } else if peer_vendor != local.vendor_id {
        // A REP answers with the REQ's vendor: anything else is broken.
        return Err(Errno::EINVAL);
    }
    ok_or_unsupported(set(qp, &mut e))?;
    Ok(e.options)
}

#[cfg(test)]
mod tests {
    use crate::cm::id::IdState;
    use rdma_abi::verbs::ibv_ece;

    #[test]
    fn a_req_carries_our_ece_and_a_rep_the_reqs_vendor_with_our_options() {
        let e = |v, o| ibv_ece { vendor_id: v, options: o, comp_mask: 0 };
        let ch = crate::cm::Channel::new().expect("a channel");
        let mut st = IdState { channel: ch, private_channel: None, alive: true, options: Default::default(), extra: None };
        assert_eq!(super::carried(&st, false), (0, 0));
        st.set_local_ece(e(0x15b3, 3));
        assert_eq!(super::carried(&st, false), (0x15b3, 3));
        assert_eq!(super::carried(&st, true), (0, 3), "no REQ vendor: none in the REP");
        st.set_remote_ece(e(0x1234, 5));
        assert_eq!(super::carried(&st, true), (0x1234, 3));
        assert_eq!(super::carried(&st, false), (0x15b3, 3));
    }
}
