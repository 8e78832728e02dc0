//! UD multicast over RoCEv2, as rxe does it: group G (IPv4) is MGID `::ffff:G`; a packet to
//! the group goes to IP destination G, UDP 4791, BTH DestQP 0xFFFFFF, DETH Q_Key = the
//! group's (rdma_cm's 0x01234567); every attached UD QP whose state, P_Key and Q_Key match
//! gets a copy.
//!
//! **Receive.** The endpoint's sockets are bound to unicast addresses, which never see
//! datagrams sent to G. So each group some QP of the process attached (`ibv_attach_mcast`
//! of `::ffff:G`, G multicast) gets one more socket, bound to `G:4791` with `SO_REUSEADDR`
//! (every process of the host that joins G binds it too, and the kernel gives each socket a
//! copy), `IP_MULTICAST_ALL` off, and `IP_ADD_MEMBERSHIP` of G on the interface of each
//! non-loopback address of the endpoint (an IGMP join, as rdma_cm's `ip_mc_inc_group`).
//! One socket serves every QP of the process attached to G, in any context sharing the
//! endpoint: the members are listed here (weakly; a QP destroyed while attached drops out
//! on the next attach, detach or arrival) and the socket closes, leaving the group, with
//! the last member.
//!
//! The group sockets sit in one epoll set of their own, [`Groups::epfd`]; each context's
//! engine waits on that set with one token (the endpoint's sockets are shared the same way),
//! so groups come and go without touching the engines. An arrival is checked like a unicast
//! one (decodes, P_Key 0xFFFF, an ICRC some IPv4 ID satisfies with destination G), must be
//! a UD SEND to QPN 0xFFFFFF, and goes to each member through `ud::on_datagram`, which
//! applies the QP's state, Q_Key and membership checks. One from an address of the
//! endpoint was sent in this namespace (looped back, or back through another interface on
//! the same link) and is ignored: its members here had the registry's copy.
//!
//! **Send.** A UD send to QPN 0xFFFFFF whose MGID is `::ffff:G` leaves, when the context
//! has a RoCEv2 endpoint on the AH's source address, from that address's (unconnected,
//! `IP_PMTUDISC_DO`) socket to `G:4791`, so with IP ID 0 and an ICRC computed with
//! destination G and the socket's port (4791, or the process's own where another process
//! owns 4791, see `share`; `Endpoint::send_ud`). The endpoint's sockets get `IP_MULTICAST_IF` = their
//! address, `IP_MULTICAST_TTL` 64 (rxe's hop limit for a multicast AH) and
//! `IP_MULTICAST_LOOP` off: members on this host (in the sender's namespace) keep getting
//! their copy from the host-local registry path (`ud::transmit`), exactly once, and not the
//! sender's own QP with `IBV_QP_CREATE_BLOCK_SELF_MCAST_LB`. The stream wire (no endpoint)
//! is unchanged: host-local only.

use super::icrc::solve_id_v4;
use super::packet::{self, ROCE_PORT};
use crate::core::registry::{lock, try_lock};
use crate::net::frame::F_MCAST;
use crate::qp::{ud, Qp};
use crate::sys::{cerr, owned};
use std::net::{Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// An endpoint's multicast groups.
pub struct Groups {
    /// The epoll set of the group sockets (token: the group address as a u32).
    pub epfd: OwnedFd,
    /// The endpoint's addresses; the non-loopback ones are the interfaces groups are
    /// joined on.
    own: Vec<Ipv4Addr>,
    ifaces: Vec<Ipv4Addr>,
    groups: Mutex<Vec<Group>>,
    rx: Mutex<Vec<u8>>,
}

struct Group {
    addr: Ipv4Addr,
    sock: Arc<OwnedFd>,
    /// Attached QPs (qpn, QP).
    members: Vec<(u32, Weak<Qp>)>,
}

/// The IPv4 group of a RoCEv2 multicast GID (`::ffff:G`, G multicast).
pub fn group_of(gid: &[u8; 16]) -> Option<Ipv4Addr> {
    super::v4_of_gid(gid).filter(|a| a.is_multicast())
}

fn setopt<T>(fd: i32, level: i32, name: i32, val: &T) -> bool {
    // SAFETY: passes a live value of its own size.
    unsafe { libc::setsockopt(fd, level, name, (val as *const T).cast(), std::mem::size_of::<T>() as libc::socklen_t) == 0 }
}

fn in_addr(a: Ipv4Addr) -> libc::in_addr {
    libc::in_addr { s_addr: u32::from(a).to_be() }
}

/// Multicast send options of an endpoint socket bound to `ip` (see the module doc); again
/// when the socket is replaced (`Endpoint::try_own`).
pub fn sender_opts(fd: i32, ip: Ipv4Addr) {
    let m = libc::ip_mreqn { imr_multiaddr: in_addr(Ipv4Addr::UNSPECIFIED), imr_address: in_addr(ip), imr_ifindex: 0 };
    setopt(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_IF, &m);
    setopt(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_TTL, &64i32);
    setopt(fd, libc::IPPROTO_IP, libc::IP_MULTICAST_LOOP, &0i32);
}

/// A socket bound to `g:4791` that joined `g` on each of `ifaces` (None if it could not
/// bind or joined nowhere).
fn group_socket(g: Ipv4Addr, ifaces: &[Ipv4Addr]) -> Option<OwnedFd> {
    // SAFETY: plain socket syscall; checked by `owned`.
    let fd = owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC, 0) }).ok()?;
    let s = fd.as_raw_fd();
    setopt(s, libc::SOL_SOCKET, libc::SO_REUSEADDR, &1i32);
    setopt(s, libc::SOL_SOCKET, libc::SO_RCVBUF, &(4i32 << 20));
    setopt(s, libc::IPPROTO_IP, libc::IP_MULTICAST_ALL, &0i32);
    let (ss, len) = crate::net::addr::to_storage(&SocketAddr::from((g, ROCE_PORT)), false)?;
    // SAFETY: ss holds a valid sockaddr of len bytes.
    if cerr(unsafe { libc::bind(s, &ss as *const _ as *const libc::sockaddr, len) }).is_err() {
        crate::trace::note(&format!("RoCEv2 multicast: {g}:{ROCE_PORT} not bound ({}): no RoCEv2 copies for that group", std::io::Error::last_os_error()));
        return None;
    }
    let mut joined = false;
    for &a in ifaces {
        let m = libc::ip_mreqn { imr_multiaddr: in_addr(g), imr_address: in_addr(a), imr_ifindex: 0 };
        if setopt(s, libc::IPPROTO_IP, libc::IP_ADD_MEMBERSHIP, &m) {
            joined = true;
        } else if std::io::Error::last_os_error().raw_os_error() != Some(libc::EADDRINUSE) {
            // EADDRINUSE: an earlier address of the same interface joined already.
            crate::trace::note(&format!("RoCEv2 multicast: join of {g} on {a} failed ({})", std::io::Error::last_os_error()));
        }
    }
    joined.then_some(fd)
}

/// Whether `qp` still is a live QP (destroy takes it out of its context's table).
fn live(qpn: u32, w: &Weak<Qp>) -> Option<Arc<Qp>> {
    let qp = w.upgrade()?;
    qp.ctx.find_qp(qpn).filter(|q| Arc::ptr_eq(q, &qp))
}

impl Groups {
    /// The groups of an endpoint with sockets `socks`; sets their multicast send options.
    pub fn new(socks: &[(Ipv4Addr, OwnedFd)]) -> Option<Groups> {
        for (ip, fd) in socks {
            sender_opts(fd.as_raw_fd(), *ip);
        }
        // SAFETY: plain syscall; checked by `owned`.
        let epfd = owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) }).ok()?;
        Some(Groups {
            epfd,
            own: socks.iter().map(|(a, _)| *a).collect(),
            ifaces: socks.iter().map(|(a, _)| *a).filter(|a| !a.is_loopback()).collect(),
            groups: Mutex::new(Vec::new()),
            rx: Mutex::new(vec![0u8; 65536]),
        })
    }

    /// Drops members whose QP is gone, and groups left without members (with `lock` held).
    fn prune(&self, groups: &mut Vec<Group>) {
        for g in groups.iter_mut() {
            g.members.retain(|(q, w)| live(*q, w).is_some());
        }
        groups.retain(|g| !g.members.is_empty());
    }

    /// `qp` attached `gid` (`ud::attach`, after it listed the group in the QP's state).
    /// The caller holds no QP lock.
    pub fn attach(&self, qp: &Qp, gid: &[u8; 16]) {
        let Some(g) = group_of(gid) else { return };
        if self.ifaces.is_empty() {
            return;
        }
        let mut groups = lock(&self.groups);
        self.prune(&mut groups);
        if let Some(e) = groups.iter_mut().find(|e| e.addr == g) {
            if !e.members.iter().any(|(q, w)| *q == qp.qpn && w.ptr_eq(&qp.me)) {
                e.members.push((qp.qpn, qp.me.clone()));
            }
            return;
        }
        let Some(sock) = group_socket(g, &self.ifaces) else { return };
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: u32::from(g) as u64 };
        // SAFETY: ev is a live epoll_event; both fds are ours.
        if unsafe { libc::epoll_ctl(self.epfd.as_raw_fd(), libc::EPOLL_CTL_ADD, sock.as_raw_fd(), &mut ev) } != 0 {
            return;
        }
        groups.push(Group { addr: g, sock: Arc::new(sock), members: vec![(qp.qpn, qp.me.clone())] });
    }

    /// `qp` detached `gid`; the group's socket closes (leaving the group) with its last member.
    pub fn detach(&self, qp: &Qp, gid: &[u8; 16]) {
        let Some(g) = group_of(gid) else { return };
        let mut groups = lock(&self.groups);
        if let Some(e) = groups.iter_mut().find(|e| e.addr == g) {
            e.members.retain(|(q, w)| !(*q == qp.qpn && w.ptr_eq(&qp.me)));
        }
        self.prune(&mut groups);
    }

    /// Receives what waits on the group sockets. `wait`: the progress thread (may wait for
    /// the receive lock); a polling thread skips it when busy.
    pub fn on_readable(&self, wait: bool, dropped: &AtomicU64) -> bool {
        let g = if wait { Some(lock(&self.rx)) } else { try_lock(&self.rx) };
        let Some(mut buf) = g else { return false };
        let mut evs = [libc::epoll_event { events: 0, u64: 0 }; 16];
        // SAFETY: evs is a live buffer of 16 entries; timeout 0 never blocks.
        let n = unsafe { libc::epoll_wait(self.epfd.as_raw_fd(), evs.as_mut_ptr(), 16, 0) };
        let mut any = false;
        for ev in &evs[..n.max(0) as usize] {
            let addr = Ipv4Addr::from(ev.u64 as u32);
            let found = lock(&self.groups).iter().find(|e| e.addr == addr).map(|e| (e.sock.clone(), e.members.clone()));
            let Some((sock, members)) = found else { continue };
            for _ in 0..256 {
                // SAFETY: sockaddr_in is plain data.
                let mut from: libc::sockaddr_in = unsafe { std::mem::zeroed() };
                let mut flen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
                // SAFETY: buf and from are live and sized as passed.
                let n = unsafe { libc::recvfrom(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), libc::MSG_DONTWAIT, &mut from as *mut _ as *mut libc::sockaddr, &mut flen) };
                if n < 0 {
                    break;
                }
                any = true;
                let src = Ipv4Addr::from(u32::from_be(from.sin_addr.s_addr));
                let sport = u16::from_be(from.sin_port);
                if self.own.contains(&src) {
                    // Sent in this namespace (by this or another process of ours), looped
                    // back or back through another interface on the same link: the members
                    // here had their registry copy.
                    continue;
                }
                if !on_datagram(addr, src, sport, &buf[..n as usize], &members) {
                    dropped.fetch_add(1, Ordering::Relaxed);
                }
            }
            if members.iter().any(|(q, w)| live(*q, w).is_none()) {
                // A member was destroyed without detaching: the group may be left now.
                self.prune(&mut lock(&self.groups));
            }
        }
        any
    }
}

/// One datagram to group `g` from `src:sport`: checked, then a copy for each member.
/// False if it fails the checks.
fn on_datagram(g: Ipv4Addr, src: Ipv4Addr, sport: u16, data: &[u8], members: &[(u32, Weak<Qp>)]) -> bool {
    let Some((h, payload)) = packet::decode(data).ok().filter(|(h, _)| h.bth.pkey & 0x7fff == 0x7fff) else { return false };
    let Some(d) = h.deth else { return false };
    if h.bth.opcode >> 5 != 3 || h.bth.dqpn != ud::MCAST_QPN {
        return false;
    }
    if solve_id_v4(src, g, sport, ROCE_PORT, data).is_none() {
        return false;
    }
    let mut f = super::ud_frame(&h, d, src, g, payload.len());
    f.flags |= F_MCAST;
    for (qpn, w) in members {
        if let Some(qp) = live(*qpn, w) {
            f.dst_qpn = *qpn;
            ud::on_datagram(&qp.ctx, &f, payload, None);
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn groups_are_v4_mapped_multicast_gids() {
        let g = |s: &str| s.parse::<std::net::Ipv6Addr>().unwrap().octets();
        assert_eq!(group_of(&g("::ffff:239.1.1.1")), Some(Ipv4Addr::new(239, 1, 1, 1)));
        assert_eq!(group_of(&g("::ffff:224.0.0.251")), Some(Ipv4Addr::new(224, 0, 0, 251)));
        assert_eq!(group_of(&g("::ffff:10.0.0.1")), None);
        assert_eq!(group_of(&g("ff0e::ffff:ef01:0101")), None, "IPv6 groups: no RoCEv2 (rdma_cm says ENOTSUPP)");
    }

    /// What `Endpoint::send_ud` puts in a UD datagram from `src` to `dst`, ID 0.
    fn ud_bytes(src: Ipv4Addr, dst: Ipv4Addr, dqpn: u32, payload: &[u8]) -> Vec<u8> {
        let bth = packet::Bth { opcode: packet::op::UD_SEND_ONLY, pkey: 0xffff, dqpn, ..packet::Bth::default() };
        let hd = packet::Headers { bth, deth: Some(packet::Deth { qkey: 0x0123_4567, src_qp: 0x123 }), ..packet::Headers::default() };
        let mut out = Vec::new();
        packet::encode_headers(&hd, payload.len(), &mut out);
        out.extend_from_slice(payload);
        out.resize(out.len() + packet::pad_len(payload.len()), 0);
        let ip = super::super::icrc::Ipv4Udp { src, dst, id: 0, df: true, sport: ROCE_PORT, dport: ROCE_PORT };
        let crc = super::super::icrc::icrc_v4(&ip, &[&out]);
        out.extend_from_slice(&crc.to_le_bytes());
        out
    }

    /// A datagram to a group passes the receive checks with destination G in its ICRC,
    /// and only with DestQP 0xFFFFFF.
    #[test]
    fn a_group_packet_passes_the_checks() {
        let src = Ipv4Addr::new(10, 89, 0, 1);
        let g = Ipv4Addr::new(239, 1, 1, 1);
        let bytes = ud_bytes(src, g, ud::MCAST_QPN, b"hello");
        assert!(on_datagram(g, src, ROCE_PORT, &bytes, &[]));
        assert!(!on_datagram(Ipv4Addr::new(239, 1, 1, 2), src, ROCE_PORT, &bytes, &[]), "ICRC with another destination");
        let bytes = ud_bytes(src, g, 0x456, b"hello");
        assert!(!on_datagram(g, src, ROCE_PORT, &bytes, &[]), "a unicast QPN in a group packet");
    }
}
