//! rdma_create_event_channel(3), rdma_destroy_event_channel(3),
//! rdma_get_cm_event(3), rdma_ack_cm_event(3), rdma_event_str(3).

use super::args::out;
use crate::cm::{ChannelBox, EventBox};
use rdma_abi::cma::*;
use std::ffi::c_char;

entry! {
    fn rdma_create_event_channel() -> *mut rdma_event_channel {
        ChannelBox::create()
    }
}

entry! {
    fn rdma_destroy_event_channel(channel: *mut rdma_event_channel) -> () {
        ChannelBox::destroy(channel)
    }
}

entry! {
    fn rdma_get_cm_event(channel: *mut rdma_event_channel, event: *mut *mut rdma_cm_event) -> i32 {
        let ch = ChannelBox::lookup(channel)?;
        super::args::non_null(event)?;
        let ev = ch.next(crate::cm::Slot::new())?;
        if crate::trace::enabled() {
            // SAFETY: the event we just delivered.
            let e = unsafe { &*ev };
            crate::trace::emit(crate::trace::start(), || {
                format!("  event {} status {} id {:?} listen_id {:?}", event_name(e.event).trim_end_matches('\0'), e.status, e.id, e.listen_id)
            });
        }
        // SAFETY: checked non-NULL above; the caller gives a writable slot.
        unsafe { out(event, ev) }?;
        Ok(0)
    }
}

entry! {
    fn rdma_ack_cm_event(event: *mut rdma_cm_event) -> i32 {
        EventBox::ack(event).map(|()| 0)
    }
}

static EVENT_NAMES: [&str; 18] = [
    "RDMA_CM_EVENT_ADDR_RESOLVED\0",
    "RDMA_CM_EVENT_ADDR_ERROR\0",
    "RDMA_CM_EVENT_ROUTE_RESOLVED\0",
    "RDMA_CM_EVENT_ROUTE_ERROR\0",
    "RDMA_CM_EVENT_CONNECT_REQUEST\0",
    "RDMA_CM_EVENT_CONNECT_RESPONSE\0",
    "RDMA_CM_EVENT_CONNECT_ERROR\0",
    "RDMA_CM_EVENT_UNREACHABLE\0",
    "RDMA_CM_EVENT_REJECTED\0",
    "RDMA_CM_EVENT_ESTABLISHED\0",
    "RDMA_CM_EVENT_DISCONNECTED\0",
    "RDMA_CM_EVENT_DEVICE_REMOVAL\0",
    "RDMA_CM_EVENT_MULTICAST_JOIN\0",
    "RDMA_CM_EVENT_MULTICAST_ERROR\0",
    "RDMA_CM_EVENT_ADDR_CHANGE\0",
    "RDMA_CM_EVENT_TIMEWAIT_EXIT\0",
    "RDMA_CM_EVENT_ADDRINFO_RESOLVED\0",
    "RDMA_CM_EVENT_ADDRINFO_ERROR\0",
];

/// Upstream names events 0..=17 and nothing else (not even USER).
pub fn event_name(event: u32) -> &'static str {
    EVENT_NAMES.get(event as usize).copied().unwrap_or("UNKNOWN EVENT\0")
}

entry! {
    fn rdma_event_str(event: rdma_cm_event_type) -> *const c_char {
        Ok(event_name(event).as_ptr().cast())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn names() {
        assert_eq!(super::event_name(9), "RDMA_CM_EVENT_ESTABLISHED\0");
        assert_eq!(super::event_name(18), "UNKNOWN EVENT\0");
        assert_eq!(super::event_name(u32::MAX), "UNKNOWN EVENT\0");
    }
}
