//! Upstream's AF_IB probe (kernel-abi.md, ucma_init step 3): once per
//! process, before its first channel gets its rdma_cm file, a synchronous
//! RDMA_PS_IB id is bound to the AF_IB wildcard with the IP/TCP service id
//! and destroyed. A kernel that refuses it has no AF_IB support; AF_IB
//! addresses then get EINVAL (`ffi::args::addr_len`), as upstream's
//! `ucma_addrlen` gives them.
//!
//! Like upstream's, the probe runs the library's create, bind and destroy
//! paths once during the first `rdma_create_event_channel`.

use crate::trace;
use rdma_abi::cma::{rdma_cm_id, sockaddr_ib, AF_IB, RDMA_IB_IP_PS_MASK, RDMA_IB_IP_PS_TCP, RDMA_PS_IB};
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicU8, Ordering};

const UNKNOWN: u8 = 0;
const PROBING: u8 = 1;
const YES: u8 = 2;
const NO: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);

/// The AF_IB wildcard with the IP/TCP service id, as a `sockaddr_ib`'s bytes.
fn wildcard() -> [u8; size_of::<sockaddr_ib>()] {
    let mut a = [0u8; size_of::<sockaddr_ib>()];
    let mut put = |at: usize, b: &[u8]| a[at..at + b.len()].copy_from_slice(b);
    put(offset_of!(sockaddr_ib, sib_family), &(AF_IB as u16).to_ne_bytes());
    put(offset_of!(sockaddr_ib, sib_sid), &RDMA_IB_IP_PS_TCP.to_be_bytes());
    put(offset_of!(sockaddr_ib, sib_sid_mask), &RDMA_IB_IP_PS_MASK.to_be_bytes());
    a
}

/// Runs the probe if no thread has. The probe's own channel comes back here
/// while it runs and goes on without waiting.
pub fn probe_once() {
    if STATE.compare_exchange(UNKNOWN, PROBING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return;
    }
    let t0 = trace::start();
    let yes = probe();
    STATE.store(if yes { YES } else { NO }, Ordering::Release);
    trace::emit(t0, || format!("  AF_IB probe: {}", if yes { "supported" } else { "not supported" }));
}

fn probe() -> bool {
    let mut id: *mut rdma_cm_id = std::ptr::null_mut();
    let sa = wildcard();
    // SAFETY: the library's own exported calls, as upstream's probe makes
    // them: a synchronous id (NULL channel) in a local slot, bound to an
    // address of the length AF_IB names, destroyed once.
    unsafe {
        if crate::ffi::id::rdma_create_id(std::ptr::null_mut(), &mut id, std::ptr::null_mut(), RDMA_PS_IB) != 0 {
            return false;
        }
        let ok = crate::ffi::addr::rdma_bind_addr(id, sa.as_ptr() as *mut libc::sockaddr) == 0;
        crate::ffi::id::rdma_destroy_id(id);
        ok
    }
}

/// Whether AF_IB addresses may go to the kernel: not once the probe found
/// no support (while it runs, its own bind must pass).
pub fn supported() -> bool {
    STATE.load(Ordering::Acquire) != NO
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn af_ib_is_refused_only_after_a_failed_probe() {
        let before = STATE.swap(NO, Ordering::AcqRel);
        let no = supported();
        STATE.store(PROBING, Ordering::Release);
        let probing = supported();
        STATE.store(YES, Ordering::Release);
        let yes = supported();
        STATE.store(before, Ordering::Release);
        assert!(!no, "AF_IB without support");
        assert!(probing, "the probe's own bind");
        assert!(yes, "AF_IB with support");
    }
}
