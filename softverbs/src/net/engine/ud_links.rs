//! Same-host datagram links: UD frames to a context of this network namespace travel
//! through the shared-memory rings of a unix stream opened to it at the first datagram
//! (its `Hello` carries `F_DATAGRAMS` and, in `aux`, the opener's port), so a busy-polling
//! receiver takes them without a system call on either side, as it takes an RC peer's
//! frames. Datagrams keep their semantics: one sent while the receiver has not read the
//! last goes by UDP instead of waiting (and may be dropped there, as a datagram may), so
//! order between the two paths is not kept, which UD does not promise.

use super::{local, Engine, Role, TcpLink};
use crate::core::registry::lock;
use crate::net::frame::{Header, Op, F_DATAGRAMS};
use crate::net::Link;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::{Arc, Weak};

/// Destinations with a datagram link, per context: each holds 2 MiB of rings, so a
/// context sending to many others uses UDP beyond these.
const MAX_UD_LINKS: usize = 16;

impl Engine {
    /// Sends a UD frame through the ring of the datagram link to `addr` (opened now if
    /// `addr` is a context of this namespace). False: send it by UDP.
    pub(super) fn send_by_ring(&self, addr: SocketAddr, frame: &[u8]) -> bool {
        // One link per context: a peer learnt from a datagram link (127.0.0.1) and the same
        // peer named by its AH or by UDP (::1, ::ffff:127.0.0.1) share it.
        let ip = addr.ip().to_canonical();
        let addr = SocketAddr::new(if ip.is_loopback() { IpAddr::V4(Ipv4Addr::LOCALHOST) } else { ip }, addr.port());
        let link = {
            let mut links = lock(&self.ud_links);
            match links.get(&addr) {
                Some(None) => return false,
                Some(Some(l)) if !l.is_dead() => l.clone(),
                _ => {
                    let open = if links.len() < MAX_UD_LINKS { self.open_ud_link(addr) } else { None };
                    links.insert(addr, open.clone());
                    match open {
                        Some(l) => l,
                        None => return false,
                    }
                }
            }
        };
        // Only into an empty ring: while the receiver has not read the last datagram, the
        // sender pays UDP's cost, which paces it. A ring takes datagrams faster than a
        // receiver consumes them (and reposts its receives); a burst it delivered at once
        // would be dropped for want of posted receives, where over UDP a sender no
        // faster than the receiver loses none.
        if link.backlog() || link.ring.get().is_none_or(|r| r.unread() > 0) {
            return false;
        }
        link.send_parts(&[frame]);
        true
    }

    /// A datagram link to the context at `addr`: only over rings (a plain unix stream
    /// would cost what a UDP send costs and could not drop).
    fn open_ud_link(&self, addr: SocketAddr) -> Option<Arc<TcpLink>> {
        let fd = local::connect(&addr)?;
        let rings = local::offer_rings(&fd).ok()??;
        let link = self.register(fd, Role::Outbound(Weak::new()), false, Some(local::endpoint(addr.port())), false, Some(rings)).ok()?;
        let mut hello = Header::new(Op::Hello);
        hello.flags = F_DATAGRAMS;
        hello.aux = u64::from(self.port);
        link.send(hello.frame(&[]));
        Some(link)
    }
}
