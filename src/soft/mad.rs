//! The IB CM protocol as MADs: the message layer the soft CM needs to talk to
//! the Linux kernel's rdma_cm over RoCEv2 (kernel rxe), where CM messages
//! travel as 256-byte MADs on QP1 (`shared/reference/roce.md` §6-§8).
//!
//! This module only converts bytes to typed messages and back; it keeps no
//! state and does no I/O, so the CM state machine above it can be tested
//! without a network and the byte layout can be checked against captures of
//! what the kernel really sent (`mad_tests.rs`).
//!
//! Conventions, as in the IBA specification:
//! - everything is big-endian;
//! - a message offset is relative to the CM message, i.e. MAD offset − 24;
//! - a bit field "byte B, bits b..b+w−1" numbers bit 0 as the byte's most
//!   significant bit, so "byte 43 bits 0-4" is `byte43 >> 3`.
//!
//! [`decode`] never panics: anything that is not a 256-byte CM Send MAD of a
//! known attribute is a [`MadError`]. Reserved bits are ignored on decode and
//! sent as zero, which is what the kernel sends, so a captured kernel MAD
//! re-encodes byte for byte. [`encode`] truncates every field to its width
//! rather than letting an out-of-range value spill into its neighbour.

use std::net::Ipv4Addr;

/// Every MAD on QP1 is exactly this long (UD payload without GRH).
pub const MAD_LEN: usize = 256;
/// The common MAD header in front of the CM message.
pub const MAD_HDR_LEN: usize = 24;
/// The CM message after the header.
pub const CM_MSG_LEN: usize = MAD_LEN - MAD_HDR_LEN;
/// MAD base version: always 1.
pub const BASE_VERSION: u8 = 1;
/// Management class of the communication manager.
pub const CM_CLASS: u8 = 0x07;
/// The CM class version Linux speaks (and requires).
pub const CM_CLASS_VERSION: u8 = 2;
/// The only method the kernel's CM agent registers: every CM message is a Send.
pub const METHOD_SEND: u8 = 0x03;
/// The Q_Key of QP1: every MAD carries it in its DETH, both ways.
pub const GSI_QKEY: u32 = 0x8001_0000;

/// Attribute IDs: which CM message a MAD carries.
pub mod attr {
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    pub const REQ: u16 = 0x0010;
    pub const MRA: u16 = 0x0011;
    pub const REJ: u16 = 0x0012;
    pub const REP: u16 = 0x0013;
    pub const RTU: u16 = 0x0014;
    pub const DREQ: u16 = 0x0015;
    pub const DREP: u16 = 0x0016;
    pub const SIDR_REQ: u16 = 0x0017;
    pub const SIDR_REP: u16 = 0x0018;
    pub const LAP: u16 = 0x0019;
    pub const APR: u16 = 0x001A;

    /// A short name for logs and traces; "?" for anything else.
    pub fn name(id: u16) -> &'static str {
        match id {
            CLASS_PORT_INFO => "ClassPortInfo",
            REQ => "REQ",
            MRA => "MRA",
            REJ => "REJ",
            REP => "REP",
            RTU => "RTU",
            DREQ => "DREQ",
            DREP => "DREP",
            SIDR_REQ => "SIDR_REQ",
            SIDR_REP => "SIDR_REP",
            LAP => "LAP",
            APR => "APR",
            _ => "?",
        }
    }
}

/// Which message an MRA acknowledges or a REJ refuses (`Mra::msg_mraed`,
/// `Rej::msg_rejected`).
pub mod msg_kind {
    pub const REQ: u8 = 0;
    pub const REP: u8 = 1;
    pub const OTHER: u8 = 2;
}

/// REQ transport service types (`Req::transport_type`).
pub mod transport {
    pub const RC: u8 = 0;
    pub const UC: u8 = 1;
    pub const XRC: u8 = 3;
}

/// REJ reasons (IBA names). rdma_cm surfaces the reason as the `REJECTED`
/// event's status, so the soft CM must send the one the kernel would.
pub mod rej_reason {
    pub const NO_QP: u16 = 1;
    pub const NO_EEC: u16 = 2;
    pub const NO_RESOURCES: u16 = 3;
    /// ARI = the sender's CA GUID.
    pub const TIMEOUT: u16 = 4;
    pub const UNSUPPORTED: u16 = 5;
    pub const INVALID_COMM_ID: u16 = 6;
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// No listener for the service ID (the kernel's answer to a REQ nobody listens for).
    pub const INVALID_SERVICE_ID: u16 = 8;
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    pub const STALE_CONN: u16 = 10;
    pub const RDC_NOT_EXIST: u16 = 11;
    /// ARI = the rejecter's GID (path resolution towards the REQ's GID failed).
    pub const INVALID_GID: u16 = 12;
    pub const INVALID_LID: u16 = 13;
    pub const INVALID_SL: u16 = 14;
    pub const INVALID_TRAFFIC_CLASS: u16 = 15;
    pub const INVALID_HOP_LIMIT: u16 = 16;
    pub const INVALID_PACKET_RATE: u16 = 17;
    pub const INVALID_ALT_GID: u16 = 18;
    pub const INVALID_ALT_LID: u16 = 19;
    pub const INVALID_ALT_SL: u16 = 20;
    pub const INVALID_ALT_TRAFFIC_CLASS: u16 = 21;
    pub const INVALID_ALT_HOP_LIMIT: u16 = 22;
    pub const INVALID_ALT_PACKET_RATE: u16 = 23;
    pub const PORT_CM_REDIRECT: u16 = 24;
    pub const PORT_REDIRECT: u16 = 25;
    pub const INVALID_MTU: u16 = 26;
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// rdma_reject, or rdma_cm refusing a REQ it routed to a listener.
    pub const CONSUMER_DEFINED: u16 = 28;
    pub const INVALID_RNR_RETRY: u16 = 29;
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    pub const INVALID_CLASS_VERSION: u16 = 31;
    pub const INVALID_FLOW_LABEL: u16 = 32;
    pub const INVALID_ALT_FLOW_LABEL: u16 = 33;
    pub const VENDOR_OPTION_NOT_SUPPORTED: u16 = 35;
}

/// SIDR_REP status values (`SidrRep::status`).
pub mod sidr_status {
    pub const OK: u8 = 0;
    /// No listener for the service ID (what the kernel answers then).
    pub const NO_LISTENER: u8 = 1;
    /// The consumer rejected (rdma_reject on a UD id).
    pub const REJECTED: u8 = 2;
    pub const NO_QP: u8 = 3;
    pub const REDIRECT: u8 = 4;
    pub const BAD_VERSION: u8 = 5;
}

/// Why a MAD was not decoded. The CM drops such MADs silently, as the kernel does.
#[derive(Debug, PartialEq, Eq, Clone, Copy)]
pub enum MadError {
    /// Not exactly [`MAD_LEN`] bytes.
    Length,
    /// Base version not 1, class not CM, or class version not 2.
    Version,
    /// Not a Send (the kernel's CM agent takes nothing else).
    Method,
    /// An unknown attribute, or LAP/APR/ClassPortInfo, which rdma_cm never uses on RoCE.
    Attr,
}

impl std::fmt::Display for MadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MadError::Length => "MAD is not 256 bytes",
            MadError::Version => "not a CM class version 2 MAD",
            MadError::Method => "CM MAD method is not Send",
            MadError::Attr => "unsupported CM attribute",
        })
    }
}

impl std::error::Error for MadError {}

/// The common 24-byte MAD header (bytes 18-19 are reserved and not kept).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MadHdr {
    pub base_version: u8,
    pub mgmt_class: u8,
    pub class_version: u8,
    pub method: u8,
    pub status: u16,
    pub class_specific: u16,
    /// Matched by the MAD layer for responses; the CM itself matches only on
    /// comm IDs. REQ/REP/RTU share the REQ's TID, DREP echoes the DREQ's,
    /// REJ/MRA/SIDR_REP echo the TID of what they answer.
    pub tid: u64,
    pub attr_id: u16,
    /// ECE `attr_mod` in REQ/REP/SIDR_REP, else 0.
    pub attr_mod: u32,
}

impl MadHdr {
    /// The header of a CM Send: what [`encode`] writes.
    pub fn cm(tid: u64, attr_id: u16, attr_mod: u32) -> MadHdr {
        MadHdr {
            base_version: BASE_VERSION,
            mgmt_class: CM_CLASS,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            status: 0,
            class_specific: 0,
            tid,
            attr_id,
            attr_mod,
        }
    }

    /// Reads the header of any MAD (any class or method), e.g. to log what was
    /// dropped; `None` if shorter than a header.
    pub fn read(b: &[u8]) -> Option<MadHdr> {
        let b = b.get(..MAD_HDR_LEN)?;
        let r = Rd(b);
        Some(MadHdr {
            base_version: r.u8(0),
            mgmt_class: r.u8(1),
            class_version: r.u8(2),
            method: r.u8(3),
            status: r.u16(4),
            class_specific: r.u16(6),
            tid: r.u64(8),
            attr_id: r.u16(16),
            attr_mod: r.u32(20),
        })
    }

    /// Writes the header into the first 24 bytes of `mad` (reserved bytes 18-19 zero).
    pub fn write(&self, mad: &mut [u8; MAD_LEN]) {
        let mut w = Wr(&mut mad[..MAD_HDR_LEN]);
        w.u8(0, self.base_version);
        w.u8(1, self.mgmt_class);
        w.u8(2, self.class_version);
        w.u8(3, self.method);
        w.u16(4, self.status);
        w.u16(6, self.class_specific);
        w.u64(8, self.tid);
        w.u16(16, self.attr_id);
        w.u16(18, 0);
        w.u32(20, self.attr_mod);
    }
}

/// One path of a REQ (44 bytes: primary at message offset 52, alternate at 96).
/// On RoCE the "LIDs" are permissive (0xFFFF) and the GIDs carry the IPs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Path {
    pub local_lid: u16,
    pub remote_lid: u16,
    /// The REQ sender's GID (`::ffff:a.b.c.d` for IPv4).
    pub local_gid: [u8; 16],
    pub remote_gid: [u8; 16],
    /// 20 bits; the kernel sends [`flow_label`] of the rdma_cm ports.
    pub flow_label: u32,
    /// 6 bits; 0 means "the port's current rate".
    pub packet_rate: u8,
    pub traffic_class: u8,
    pub hop_limit: u8,
    /// 4 bits.
    pub sl: u8,
    /// Set means hop limit ≤ 1; the kernel sends 0 on RoCE.
    pub subnet_local: bool,
    /// 5 bits, IBA timeout encoding (4.096 µs · 2^t).
    pub local_ack_timeout: u8,
}

/// Connection request (attribute 0x10).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Req {
    pub local_comm_id: u32,
    /// 24 bits (ECE).
    pub vendor_id: u32,
    pub service_id: u64,
    pub local_ca_guid: u64,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    pub responder_resources: u8,
    /// 24 bits.
    pub local_eecn: u32,
    pub initiator_depth: u8,
    /// 24 bits.
    pub remote_eecn: u32,
    /// 5 bits.
    pub remote_cm_response_timeout: u8,
    /// 2 bits: [`transport`].
    pub transport_type: u8,
    pub e2e_flow_control: bool,
    /// 24 bits: the PSN the REQ *sender* will receive first.
    pub starting_psn: u32,
    /// 5 bits.
    pub local_cm_response_timeout: u8,
    /// 3 bits.
    pub retry_count: u8,
    pub pkey: u16,
    /// 4 bits (1 = 256 … 5 = 4096).
    pub path_mtu: u8,
    pub rdc_exists: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    /// 4 bits.
    pub max_cm_retries: u8,
    pub srq: bool,
    /// 3 bits.
    pub ext_transport_type: u8,
    pub primary: Path,
    /// All zero when absent (the kernel checks the alternate local LID ≠ 0).
    pub alternate: Path,
    pub sap_supported: bool,
    /// rdma_cm: [`cma::CmaHdr`] then 56 bytes of user data.
    pub private_data: [u8; 92],
}

/// Connection reply (attribute 0x13).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub local_qkey: u32,
    /// 24 bits.
    pub local_qpn: u32,
    /// 24 bits (ECE), sent split across message bytes 15, 19 and 23.
    pub vendor_id: u32,
    /// 24 bits (XRC: the QPN).
    pub local_eecn: u32,
    /// 24 bits: the PSN the REP sender will receive first.
    pub starting_psn: u32,
    pub responder_resources: u8,
    pub initiator_depth: u8,
    /// 5 bits (rxe: 15).
    pub target_ack_delay: u8,
    /// 2 bits.
    pub failover_accepted: u8,
    pub e2e_flow_control: bool,
    /// 3 bits.
    pub rnr_retry_count: u8,
    pub srq: bool,
    pub local_ca_guid: u64,
    pub private_data: [u8; 196],
}

/// Ready to use (attribute 0x14).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rtu {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; 224],
}

/// Disconnect request (attribute 0x15).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dreq {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 24 bits: the *receiver's* QPN (the kernel ignores a DREQ naming another).
    pub remote_qpn: u32,
    pub private_data: [u8; 220],
}

/// Disconnect reply (attribute 0x16).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Drep {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    pub private_data: [u8; 224],
}

/// Message receipt acknowledgement (attribute 0x11): "still working on it".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mra {
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits: [`msg_kind`].
    pub msg_mraed: u8,
    /// 5 bits, extends the peer's wait by [`cm_timeout_ms`] of it.
    pub service_timeout: u8,
    pub private_data: [u8; 222],
}

/// Reject (attribute 0x12).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rej {
    /// 0 when the rejecter has no connection yet (no listener).
    pub local_comm_id: u32,
    pub remote_comm_id: u32,
    /// 2 bits: [`msg_kind`].
    pub msg_rejected: u8,
    /// 7 bits: how much of `ari` is meaningful.
    pub ari_len: u8,
    /// [`rej_reason`].
    pub reason: u16,
    /// Additional rejection information (e.g. a GID or CA GUID).
    pub ari: [u8; 72],
    pub private_data: [u8; 148],
}

/// Service ID resolution request (attribute 0x17): rdma_cm's UD "connect".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidrReq {
    pub request_id: u32,
    pub pkey: u16,
    pub service_id: u64,
    /// rdma_cm: [`cma::CmaHdr`] then 180 bytes of user data.
    pub private_data: [u8; 216],
}

/// Service ID resolution reply (attribute 0x18).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SidrRep {
    pub request_id: u32,
    /// [`sidr_status`].
    pub status: u8,
    pub add_info_len: u8,
    /// 24 bits (ECE): bits 23-8 at message bytes 6-7, bits 7-0 at byte 11.
    pub vendor_id: u32,
    /// 24 bits.
    pub qpn: u32,
    pub service_id: u64,
    pub qkey: u32,
    pub info: [u8; 72],
    pub private_data: [u8; 136],
}

/// A decoded CM message. The variants are of similar size (≈ 230 bytes
/// each), so none is boxed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CmMsg {
    Req(Req),
    Mra(Mra),
    Rej(Rej),
    Rep(Rep),
    Rtu(Rtu),
    Dreq(Dreq),
    Drep(Drep),
    SidrReq(SidrReq),
    SidrRep(SidrRep),
}

impl CmMsg {
    /// The attribute ID the message travels under.
    pub fn attr_id(&self) -> u16 {
        match self {
            CmMsg::Req(_) => attr::REQ,
            CmMsg::Mra(_) => attr::MRA,
            CmMsg::Rej(_) => attr::REJ,
            CmMsg::Rep(_) => attr::REP,
            CmMsg::Rtu(_) => attr::RTU,
            CmMsg::Dreq(_) => attr::DREQ,
            CmMsg::Drep(_) => attr::DREP,
            CmMsg::SidrReq(_) => attr::SIDR_REQ,
            CmMsg::SidrRep(_) => attr::SIDR_REP,
        }
    }

    /// The message's name for logs ("REQ", "SIDR_REP", …).
    pub fn name(&self) -> &'static str {
        attr::name(self.attr_id())
    }

    /// The private data field, whole (its length is fixed per message type).
    pub fn private_data(&self) -> &[u8] {
        match self {
            CmMsg::Req(m) => &m.private_data,
            CmMsg::Mra(m) => &m.private_data,
            CmMsg::Rej(m) => &m.private_data,
            CmMsg::Rep(m) => &m.private_data,
            CmMsg::Rtu(m) => &m.private_data,
            CmMsg::Dreq(m) => &m.private_data,
            CmMsg::Drep(m) => &m.private_data,
            CmMsg::SidrReq(m) => &m.private_data,
            CmMsg::SidrRep(m) => &m.private_data,
        }
    }
}

/// Decodes a 256-byte CM MAD into its header and message. Never panics on
/// any input: the length is checked first and every later offset is fixed
/// and inside the 256 bytes.
pub fn decode(mad: &[u8]) -> Result<(MadHdr, CmMsg), MadError> {
    if mad.len() != MAD_LEN {
        return Err(MadError::Length);
    }
    let hdr = MadHdr::read(mad).ok_or(MadError::Length)?;
    if hdr.base_version != BASE_VERSION || hdr.mgmt_class != CM_CLASS || hdr.class_version != CM_CLASS_VERSION {
        return Err(MadError::Version);
    }
    if hdr.method != METHOD_SEND {
        return Err(MadError::Method);
    }
    let r = Rd(&mad[MAD_HDR_LEN..]);
    let msg = match hdr.attr_id {
        attr::REQ => CmMsg::Req(Req::read(&r)),
        attr::MRA => CmMsg::Mra(Mra::read(&r)),
        attr::REJ => CmMsg::Rej(Rej::read(&r)),
        attr::REP => CmMsg::Rep(Rep::read(&r)),
        attr::RTU => CmMsg::Rtu(Rtu::read(&r)),
        attr::DREQ => CmMsg::Dreq(Dreq::read(&r)),
        attr::DREP => CmMsg::Drep(Drep::read(&r)),
        attr::SIDR_REQ => CmMsg::SidrReq(SidrReq::read(&r)),
        attr::SIDR_REP => CmMsg::SidrRep(SidrRep::read(&r)),
        _ => return Err(MadError::Attr),
    };
    Ok((hdr, msg))
}

/// Encodes a CM message as a 256-byte MAD: base version 1, class CM, class
/// version 2, method Send, status 0, the given TID and attribute modifier.
/// Fields are truncated to their widths; reserved bits are zero.
pub fn encode(tid: u64, attr_mod: u32, msg: &CmMsg) -> [u8; MAD_LEN] {
    let mut mad = [0u8; MAD_LEN];
    MadHdr::cm(tid, msg.attr_id(), attr_mod).write(&mut mad);
    let mut w = Wr(&mut mad[MAD_HDR_LEN..]);
    match msg {
        CmMsg::Req(m) => m.write(&mut w),
        CmMsg::Mra(m) => m.write(&mut w),
        CmMsg::Rej(m) => m.write(&mut w),
        CmMsg::Rep(m) => m.write(&mut w),
        CmMsg::Rtu(m) => m.write(&mut w),
        CmMsg::Dreq(m) => m.write(&mut w),
        CmMsg::Drep(m) => m.write(&mut w),
        CmMsg::SidrReq(m) => m.write(&mut w),
        CmMsg::SidrRep(m) => m.write(&mut w),
    }
    mad
}

/// The IPv4-mapped GID (`::ffff:a.b.c.d`) RoCEv2 uses for an IPv4 address.
pub fn gid_of_v4(ip: Ipv4Addr) -> [u8; 16] {
    ip.to_ipv6_mapped().octets()
}

/// The IPv4 address of an IPv4-mapped GID; `None` for any other GID.
pub fn v4_of_gid(g: &[u8; 16]) -> Option<Ipv4Addr> {
    if g[..10].iter().all(|&b| b == 0) && g[10] == 0xFF && g[11] == 0xFF {
        Some(Ipv4Addr::new(g[12], g[13], g[14], g[15]))
    } else {
        None
    }
}

/// The flow label the kernel's rdma_cm puts in its REQ's primary path, from
/// the active side's source port and the destination (service) port; a peer
/// that mimics the kernel sends the same.
pub fn flow_label(sport: u16, dport: u16) -> u32 {
    (u32::from(sport) * 31 + u32::from(dport)) & 0xF_FFFF
}

/// Milliseconds of a CM timeout field `t` (5 bits): `1 << max(t − 8, 0)`,
/// the kernel's rounding of 4.096 µs · 2^t. Values above 31 do not fit the
/// field and count as 31.
pub fn cm_timeout_ms(t: u8) -> u64 {
    1u64 << t.min(31).saturating_sub(8)
}

/// rdma_cm on top of the IB CM: service IDs and the address header in
/// REQ/SIDR_REQ private data (roce.md §8).
pub mod cma {
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// RDMA_PS_TCP: RC ids.
    pub const PS_TCP: u16 = 0x0106;
    /// RDMA_PS_UDP: UD ids.
    pub const PS_UDP: u16 = 0x0111;
    /// RDMA_PS_IB: RC or UD.
    pub const PS_IB: u16 = 0x013F;
    /// RDMA_PS_IPOIB.
    pub const PS_IPOIB: u16 = 0x0002;

    /// The cma_hdr's length at the start of REQ and SIDR_REQ private data.
    pub const CMA_HDR_LEN: usize = 36;

    // Private-data lengths rdma_cm reports in its events: the whole field,
    // minus the cma_hdr where there is one, zero-padded whatever the peer
    // sent. A soft CM that mimics the kernel must report the same.

    /// REQ user data (`CONNECT_REQUEST`, RC).
    pub const REQ_USER_DATA_LEN: usize = 92 - CMA_HDR_LEN;
    /// SIDR_REQ user data (`CONNECT_REQUEST`, UD).
    pub const SIDR_REQ_USER_DATA_LEN: usize = 216 - CMA_HDR_LEN;
    /// REP (`CONNECT_RESPONSE` / `ESTABLISHED` on the active side).
    pub const REP_DATA_LEN: usize = 196;
    /// REJ (`REJECTED`).
    pub const REJ_DATA_LEN: usize = 148;
    /// SIDR_REP (UD `ESTABLISHED`).
    pub const SIDR_REP_DATA_LEN: usize = 136;
    /// RTU.
    pub const RTU_DATA_LEN: usize = 224;
    /// DREP.
    pub const DREP_DATA_LEN: usize = 224;
    /// DREQ.
    pub const DREQ_DATA_LEN: usize = 220;

    /// The service ID rdma_cm listens on for a port in a port space.
    pub fn service_id(ps: u16, port: u16) -> u64 {
        (u64::from(ps) << 16) | u64::from(port)
    }

    /// Port space and port of an rdma_cm service ID; `None` if it is not one
    /// (high 32 bits set, or an unknown port space), which the kernel answers
    /// with REJ 8 like a missing listener.
    pub fn split_service_id(sid: u64) -> Option<(u16, u16)> {
        if sid >> 32 != 0 {
            return None;
        }
        let ps = (sid >> 16) as u16;
        match ps {
            PS_TCP | PS_UDP | PS_IB | PS_IPOIB => Some((ps, sid as u16)),
            _ => None,
        }
    }

    /// The 36-byte header rdma_cm puts first in REQ and SIDR_REQ private data:
    /// the passive side takes the connection's addresses from it.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub struct CmaHdr {
        /// 0; the kernel rejects anything else.
        pub version: u8,
        /// 4 or 6.
        pub ip_version: u8,
        /// The active side's RDMA source port.
        pub port: u16,
        /// Active side's address.
        pub src: IpAddr,
        /// Passive side's address.
        pub dst: IpAddr,
    }

    impl CmaHdr {
        /// A version-0 header; the IP version follows `src`.
        pub fn new(port: u16, src: IpAddr, dst: IpAddr) -> CmaHdr {
            CmaHdr { version: 0, ip_version: if src.is_ipv4() { 4 } else { 6 }, port, src, dst }
        }
    }

    /// Writes `h` into the first 36 bytes of `out`. Each address takes 16
    /// bytes: an IPv4 one as 12 zero bytes then its 4 bytes (not the
    /// `::ffff:` form), as rdma_cm writes it. Panics if `out` is shorter than
    /// [`CMA_HDR_LEN`], which is a caller's bug (every private-data field
    /// that carries the header is longer).
    pub fn encode_hdr(h: &CmaHdr, out: &mut [u8]) {
        let out = &mut out[..CMA_HDR_LEN];
        out[0] = h.version;
        out[1] = h.ip_version << 4;
        out[2..4].copy_from_slice(&h.port.to_be_bytes());
        out[4..20].copy_from_slice(&addr16(h.src));
        out[20..36].copy_from_slice(&addr16(h.dst));
    }

    fn addr16(a: IpAddr) -> [u8; 16] {
        match a {
            IpAddr::V4(v4) => {
                let mut b = [0u8; 16];
                b[12..].copy_from_slice(&v4.octets());
                b
            }
            IpAddr::V6(v6) => v6.octets(),
        }
    }

    /// Reads a cma_hdr; `None` if `b` is short, the version is not 0, or the
    /// IP version (high nibble of byte 1) is neither 4 nor 6 — the cases the
    /// kernel's passive side refuses. Like the kernel, an IPv4 address is
    /// the last 4 of its 16 bytes; the 12 before are not looked at.
    pub fn decode_hdr(b: &[u8]) -> Option<CmaHdr> {
        let b = b.get(..CMA_HDR_LEN)?;
        if b[0] != 0 {
            return None;
        }
        let ip_version = b[1] >> 4;
        let addr = |o: usize| -> Option<IpAddr> {
            match ip_version {
                4 => Some(IpAddr::V4(Ipv4Addr::new(b[o + 12], b[o + 13], b[o + 14], b[o + 15]))),
                6 => {
                    let mut a = [0u8; 16];
                    a.copy_from_slice(&b[o..o + 16]);
                    Some(IpAddr::V6(Ipv6Addr::from(a)))
                }
                _ => None,
            }
        };
        Some(CmaHdr { version: 0, ip_version, port: u16::from_be_bytes([b[2], b[3]]), src: addr(4)?, dst: addr(20)? })
    }

    /// REQ private data: the header then `user` (at most 56 bytes, else `None`).
    pub fn req_private_data(h: &CmaHdr, user: &[u8]) -> Option<[u8; 92]> {
        with_hdr(h, user)
    }

    /// SIDR_REQ private data: the header then `user` (at most 180 bytes, else `None`).
    pub fn sidr_req_private_data(h: &CmaHdr, user: &[u8]) -> Option<[u8; 216]> {
        with_hdr(h, user)
    }

    fn with_hdr<const N: usize>(h: &CmaHdr, user: &[u8]) -> Option<[u8; N]> {
        if user.len() > N - CMA_HDR_LEN {
            return None;
        }
        let mut pd = [0u8; N];
        encode_hdr(h, &mut pd);
        pd[CMA_HDR_LEN..CMA_HDR_LEN + user.len()].copy_from_slice(user);
        Some(pd)
    }
}

// ---------------------------------------------------------------------------
// Byte access. Every caller passes a fixed offset inside the 232-byte message
// (or the 24-byte header), so indexing cannot fail once decode has checked
// the MAD's length.

/// Reads big-endian fields and IBA bit fields from a message.
struct Rd<'a>(&'a [u8]);

impl Rd<'_> {
    fn u8(&self, o: usize) -> u8 {
        self.0[o]
    }
    fn u16(&self, o: usize) -> u16 {
        u16::from_be_bytes([self.0[o], self.0[o + 1]])
    }
    fn u24(&self, o: usize) -> u32 {
        u32::from_be_bytes([0, self.0[o], self.0[o + 1], self.0[o + 2]])
    }
    fn u32(&self, o: usize) -> u32 {
        u32::from_be_bytes(self.arr(o))
    }
    fn u64(&self, o: usize) -> u64 {
        u64::from_be_bytes(self.arr(o))
    }
    /// `width` bits of byte `o` starting at IBA bit `bit` (0 = MSB).
    fn bits(&self, o: usize, bit: u32, width: u32) -> u8 {
        (self.0[o] >> (8 - bit - width)) & mask(width)
    }
    fn flag(&self, o: usize, bit: u32) -> bool {
        self.bits(o, bit, 1) != 0
    }
    fn arr<const N: usize>(&self, o: usize) -> [u8; N] {
        let mut a = [0u8; N];
        a.copy_from_slice(&self.0[o..o + N]);
        a
    }
}

/// Writes big-endian fields and IBA bit fields into a message, truncating
/// each value to its field.
struct Wr<'a>(&'a mut [u8]);

impl Wr<'_> {
    fn u8(&mut self, o: usize, v: u8) {
        self.0[o] = v;
    }
    fn u16(&mut self, o: usize, v: u16) {
        self.0[o..o + 2].copy_from_slice(&v.to_be_bytes());
    }
    fn u24(&mut self, o: usize, v: u32) {
        self.0[o..o + 3].copy_from_slice(&v.to_be_bytes()[1..]);
    }
    fn u32(&mut self, o: usize, v: u32) {
        self.0[o..o + 4].copy_from_slice(&v.to_be_bytes());
    }
    fn u64(&mut self, o: usize, v: u64) {
        self.0[o..o + 8].copy_from_slice(&v.to_be_bytes());
    }
    fn bits(&mut self, o: usize, bit: u32, width: u32, v: u8) {
        let shift = 8 - bit - width;
        let m = mask(width) << shift;
        self.0[o] = (self.0[o] & !m) | ((v << shift) & m);
    }
    fn flag(&mut self, o: usize, bit: u32, v: bool) {
        self.bits(o, bit, 1, u8::from(v));
    }
    fn bytes(&mut self, o: usize, v: &[u8]) {
        self.0[o..o + v.len()].copy_from_slice(v);
    }
}

fn mask(width: u32) -> u8 {
    (0xFFu16 >> (8 - width)) as u8
}

// ---------------------------------------------------------------------------
// Message layouts (offsets in the CM message; roce.md §7).

impl Path {
    fn read(r: &Rd, p: usize) -> Path {
        Path {
            local_lid: r.u16(p),
            remote_lid: r.u16(p + 2),
            local_gid: r.arr(p + 4),
            remote_gid: r.arr(p + 20),
            flow_label: r.u24(p + 36) >> 4,
            packet_rate: r.bits(p + 39, 2, 6),
            traffic_class: r.u8(p + 40),
            hop_limit: r.u8(p + 41),
            sl: r.bits(p + 42, 0, 4),
            subnet_local: r.flag(p + 42, 4),
            local_ack_timeout: r.bits(p + 43, 0, 5),
        }
    }

    fn write(&self, w: &mut Wr, p: usize) {
        w.u16(p, self.local_lid);
        w.u16(p + 2, self.remote_lid);
        w.bytes(p + 4, &self.local_gid);
        w.bytes(p + 20, &self.remote_gid);
        // Flow label: the top 20 bits of bytes 36-38; the low nibble of 38
        // and the top 2 bits of 39 are reserved.
        w.u24(p + 36, (self.flow_label & 0xF_FFFF) << 4);
        w.bits(p + 39, 2, 6, self.packet_rate);
        w.u8(p + 40, self.traffic_class);
        w.u8(p + 41, self.hop_limit);
        w.bits(p + 42, 0, 4, self.sl);
        w.flag(p + 42, 4, self.subnet_local);
        w.bits(p + 43, 0, 5, self.local_ack_timeout);
    }
}

/// A message's Default is what an all-zero message decodes to, so it cannot
/// drift from the layout.
macro_rules! zero_default {
    ($($t:ty),*) => {$(
        impl Default for $t {
            fn default() -> Self {
                <$t>::read(&Rd(&[0u8; CM_MSG_LEN]))
            }
        }
    )*};
}
zero_default!(Req, Rep, Rtu, Dreq, Drep, Mra, Rej, SidrReq, SidrRep);

impl Req {
    const PRIMARY: usize = 52;
    const ALTERNATE: usize = 96;

    fn read(r: &Rd) -> Req {
        Req {
            local_comm_id: r.u32(0),
            vendor_id: r.u24(5),
            service_id: r.u64(8),
            local_ca_guid: r.u64(16),
            local_qkey: r.u32(28),
            local_qpn: r.u24(32),
            responder_resources: r.u8(35),
            local_eecn: r.u24(36),
            initiator_depth: r.u8(39),
            remote_eecn: r.u24(40),
            remote_cm_response_timeout: r.bits(43, 0, 5),
            transport_type: r.bits(43, 5, 2),
            e2e_flow_control: r.flag(43, 7),
            starting_psn: r.u24(44),
            local_cm_response_timeout: r.bits(47, 0, 5),
            retry_count: r.bits(47, 5, 3),
            pkey: r.u16(48),
            path_mtu: r.bits(50, 0, 4),
            rdc_exists: r.flag(50, 4),
            rnr_retry_count: r.bits(50, 5, 3),
            max_cm_retries: r.bits(51, 0, 4),
            srq: r.flag(51, 4),
            ext_transport_type: r.bits(51, 5, 3),
            primary: Path::read(r, Self::PRIMARY),
            alternate: Path::read(r, Self::ALTERNATE),
            sap_supported: r.flag(139, 5),
            private_data: r.arr(140),
        }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.local_comm_id);
        w.u24(5, self.vendor_id);
        w.u64(8, self.service_id);
        w.u64(16, self.local_ca_guid);
        w.u32(28, self.local_qkey);
        w.u24(32, self.local_qpn);
        w.u8(35, self.responder_resources);
        w.u24(36, self.local_eecn);
        w.u8(39, self.initiator_depth);
        w.u24(40, self.remote_eecn);
        w.bits(43, 0, 5, self.remote_cm_response_timeout);
        w.bits(43, 5, 2, self.transport_type);
        w.flag(43, 7, self.e2e_flow_control);
        w.u24(44, self.starting_psn);
        w.bits(47, 0, 5, self.local_cm_response_timeout);
        w.bits(47, 5, 3, self.retry_count);
        w.u16(48, self.pkey);
        w.bits(50, 0, 4, self.path_mtu);
        w.flag(50, 4, self.rdc_exists);
        w.bits(50, 5, 3, self.rnr_retry_count);
        w.bits(51, 0, 4, self.max_cm_retries);
        w.flag(51, 4, self.srq);
        w.bits(51, 5, 3, self.ext_transport_type);
        self.primary.write(w, Self::PRIMARY);
        // The alternate path's last byte also holds SAP supported (bit 5), so
        // the path goes first and the flag after it.
        self.alternate.write(w, Self::ALTERNATE);
        w.flag(139, 5, self.sap_supported);
        w.bytes(140, &self.private_data);
    }
}

impl Rep {
    fn read(r: &Rd) -> Rep {
        Rep {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            local_qkey: r.u32(8),
            local_qpn: r.u24(12),
            vendor_id: (u32::from(r.u8(15)) << 16) | (u32::from(r.u8(19)) << 8) | u32::from(r.u8(23)),
            local_eecn: r.u24(16),
            starting_psn: r.u24(20),
            responder_resources: r.u8(24),
            initiator_depth: r.u8(25),
            target_ack_delay: r.bits(26, 0, 5),
            failover_accepted: r.bits(26, 5, 2),
            e2e_flow_control: r.flag(26, 7),
            rnr_retry_count: r.bits(27, 0, 3),
            srq: r.flag(27, 3),
            local_ca_guid: r.u64(28),
            private_data: r.arr(36),
        }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.u32(8, self.local_qkey);
        w.u24(12, self.local_qpn);
        w.u8(15, (self.vendor_id >> 16) as u8);
        w.u24(16, self.local_eecn);
        w.u8(19, (self.vendor_id >> 8) as u8);
        w.u24(20, self.starting_psn);
        w.u8(23, self.vendor_id as u8);
        w.u8(24, self.responder_resources);
        w.u8(25, self.initiator_depth);
        w.bits(26, 0, 5, self.target_ack_delay);
        w.bits(26, 5, 2, self.failover_accepted);
        w.flag(26, 7, self.e2e_flow_control);
        w.bits(27, 0, 3, self.rnr_retry_count);
        w.flag(27, 3, self.srq);
        w.u64(28, self.local_ca_guid);
        w.bytes(36, &self.private_data);
    }
}

impl Rtu {
    fn read(r: &Rd) -> Rtu {
        Rtu { local_comm_id: r.u32(0), remote_comm_id: r.u32(4), private_data: r.arr(8) }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.bytes(8, &self.private_data);
    }
}

impl Dreq {
    fn read(r: &Rd) -> Dreq {
        Dreq { local_comm_id: r.u32(0), remote_comm_id: r.u32(4), remote_qpn: r.u24(8), private_data: r.arr(12) }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.u24(8, self.remote_qpn);
        w.bytes(12, &self.private_data);
    }
}

impl Drep {
    fn read(r: &Rd) -> Drep {
        Drep { local_comm_id: r.u32(0), remote_comm_id: r.u32(4), private_data: r.arr(8) }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.bytes(8, &self.private_data);
    }
}

impl Mra {
    fn read(r: &Rd) -> Mra {
        Mra {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            msg_mraed: r.bits(8, 0, 2),
            service_timeout: r.bits(9, 0, 5),
            private_data: r.arr(10),
        }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.bits(8, 0, 2, self.msg_mraed);
        w.bits(9, 0, 5, self.service_timeout);
        w.bytes(10, &self.private_data);
    }
}

impl Rej {
    fn read(r: &Rd) -> Rej {
        Rej {
            local_comm_id: r.u32(0),
            remote_comm_id: r.u32(4),
            msg_rejected: r.bits(8, 0, 2),
            ari_len: r.bits(9, 0, 7),
            reason: r.u16(10),
            ari: r.arr(12),
            private_data: r.arr(84),
        }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.local_comm_id);
        w.u32(4, self.remote_comm_id);
        w.bits(8, 0, 2, self.msg_rejected);
        w.bits(9, 0, 7, self.ari_len);
        w.u16(10, self.reason);
        w.bytes(12, &self.ari);
        w.bytes(84, &self.private_data);
    }
}

impl SidrReq {
    fn read(r: &Rd) -> SidrReq {
        SidrReq { request_id: r.u32(0), pkey: r.u16(4), service_id: r.u64(8), private_data: r.arr(16) }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.request_id);
        w.u16(4, self.pkey);
        w.u64(8, self.service_id);
        w.bytes(16, &self.private_data);
    }
}

impl SidrRep {
    fn read(r: &Rd) -> SidrRep {
        SidrRep {
            request_id: r.u32(0),
            status: r.u8(4),
            add_info_len: r.u8(5),
            vendor_id: (u32::from(r.u16(6)) << 8) | u32::from(r.u8(11)),
            qpn: r.u24(8),
            service_id: r.u64(12),
            qkey: r.u32(20),
            info: r.arr(24),
            private_data: r.arr(96),
        }
    }

    fn write(&self, w: &mut Wr) {
        w.u32(0, self.request_id);
        w.u8(4, self.status);
        w.u8(5, self.add_info_len);
        w.u16(6, (self.vendor_id >> 8) as u16);
        w.u24(8, self.qpn);
        w.u8(11, self.vendor_id as u8);
        w.u64(12, self.service_id);
        w.u32(20, self.qkey);
        w.bytes(24, &self.info);
        w.bytes(96, &self.private_data);
    }
}
