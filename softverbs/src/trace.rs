//! The verbs trace: `RDMACM_RS_TRACE`, the same switch and sinks as librdmacm's CM trace
//! (`src/trace.rs` of the root crate). Unset or `0`: off; `1` or `stderr`: standard error;
//! anything else is a file path opened with `O_APPEND`. Every line is written with one
//! `write`, so our lines and librdmacm's interleave whole in one file. Times are
//! milliseconds since the process started, computed as librdmacm does (one clock). Format:
//!
//! ```text
//! softverbs[PID]   12.345ms ibv_reg_mr(pd 0x…, addr 0x…, len 4096, access LOCAL_WRITE) = 0x… lkey 0x1 rkey 0x1 (3us)
//! ```
//!
//! Off costs one load of an initialised `LazyLock` per call: no clock read, no
//! allocation, no formatting. The exports opt in through the `trace` clause of `export!` /
//! `op!` (`ffi/entry.rs`); the closures there build the text only when tracing.

use crate::sys::Errno;
use rdma_abi::verbs::*;
use std::fmt::Write as _;
use std::time::Instant;

/// Start time of a call, taken only when tracing.
#[inline]
pub fn start() -> Option<Instant> {
    common::trace::start()
}

/// What a trace closure produces: the call text, text after the result, or nothing.
pub struct Line {
    pub call: String,
    pub after: String,
}
pub trait IntoLine {
    fn into_line(self) -> Option<Line>;
}
impl IntoLine for String {
    fn into_line(self) -> Option<Line> {
        Some(Line { call: self, after: String::new() })
    }
}
impl IntoLine for (String, String) {
    fn into_line(self) -> Option<Line> {
        Some(Line { call: self.0, after: self.1 })
    }
}
impl<T: IntoLine> IntoLine for Option<T> {
    fn into_line(self) -> Option<Line> {
        self.and_then(IntoLine::into_line)
    }
}

/// How a C return value is shown after ` = `.
pub trait Ret {
    fn show(&self) -> String;
}
impl Ret for i32 {
    fn show(&self) -> String {
        self.to_string()
    }
}
impl Ret for isize {
    fn show(&self) -> String {
        self.to_string()
    }
}
impl Ret for u32 {
    fn show(&self) -> String {
        self.to_string()
    }
}
impl<T> Ret for *mut T {
    fn show(&self) -> String {
        if self.is_null() { "NULL".into() } else { format!("{:p}", *self) }
    }
}
impl<T> Ret for *const T {
    fn show(&self) -> String {
        (*self as *mut T).show()
    }
}
impl Ret for () {
    fn show(&self) -> String {
        String::new()
    }
}

/// The error of a body's outcome (a panic is reported as EIO, like the C convention).
pub fn err_of<T>(t0: Option<Instant>, r: &std::thread::Result<crate::sys::Result<T>>) -> Option<Errno> {
    t0?;
    match r {
        Ok(Ok(_)) => None,
        Ok(Err(e)) => Some(*e),
        Err(_) => Some(Errno::EIO),
    }
}

/// Runs `f` (which reads state before the call) behind a panic boundary.
pub fn before<T>(t0: Option<Instant>, f: impl FnOnce() -> T) -> Option<T> {
    t0?;
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).ok()
}

/// Writes the line of one finished call; errno is preserved.
pub fn finish<R: Ret, L: IntoLine>(t0: Instant, ret: &R, err: Option<Errno>, line: impl FnOnce(&R) -> L) {
    let saved = common::errno::get_errno();
    let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        let Some(l) = line(ret).into_line() else { return };
        let mut s = l.call;
        let r = ret.show();
        if !r.is_empty() {
            let _ = write!(s, " = {r}");
        }
        if let Some(e) = err {
            let _ = write!(s, " errno {} ({})", e.0, std::io::Error::from_raw_os_error(e.0));
        }
        s.push_str(&l.after);
        write_line(t0, &s);
    }));
    common::errno::set_errno(Errno(saved));
}

fn write_line(t0: Instant, text: &str) {
    common::trace::write_line("softverbs", t0, text);
}

/// A line that is not a call (a transport event), when tracing.
pub fn note(text: &str) {
    if let Some(t0) = start() {
        write_line(t0, text);
    }
}

// ---- names ----

fn flags(v: u32, names: &[(u32, &str)]) -> String {
    let mut s = String::new();
    let mut rest = v;
    for (bit, n) in names {
        if v & bit != 0 {
            if !s.is_empty() {
                s.push('|');
            }
            s.push_str(n);
            rest &= !bit;
        }
    }
    if rest != 0 {
        if !s.is_empty() {
            s.push('|');
        }
        let _ = write!(s, "{rest:#x}");
    }
    if s.is_empty() {
        s.push('0');
    }
    s
}

fn name(v: u32, names: &[&str]) -> String {
    names.get(v as usize).filter(|n| !n.is_empty()).map(|n| n.to_string()).unwrap_or_else(|| v.to_string())
}

pub fn access(v: u32) -> String {
    flags(
        v,
        &[
            (IBV_ACCESS_LOCAL_WRITE, "LOCAL_WRITE"),
            (IBV_ACCESS_REMOTE_WRITE, "REMOTE_WRITE"),
            (IBV_ACCESS_REMOTE_READ, "REMOTE_READ"),
            (IBV_ACCESS_REMOTE_ATOMIC, "REMOTE_ATOMIC"),
            (IBV_ACCESS_MW_BIND, "MW_BIND"),
            (IBV_ACCESS_ZERO_BASED, "ZERO_BASED"),
            (IBV_ACCESS_ON_DEMAND, "ON_DEMAND"),
            (IBV_ACCESS_HUGETLB, "HUGETLB"),
            (IBV_ACCESS_RELAXED_ORDERING, "RELAXED_ORDERING"),
        ],
    )
}

pub fn send_flags(v: u32) -> String {
    flags(
        v,
        &[
            (IBV_SEND_FENCE, "FENCE"),
            (IBV_SEND_SIGNALED, "SIGNALED"),
            (IBV_SEND_SOLICITED, "SOLICITED"),
            (IBV_SEND_INLINE, "INLINE"),
            (IBV_SEND_IP_CSUM, "IP_CSUM"),
        ],
    )
}

pub fn qp_mask(v: u32) -> String {
    flags(
        v,
        &[
            (IBV_QP_STATE, "STATE"),
            (IBV_QP_CUR_STATE, "CUR_STATE"),
            (IBV_QP_EN_SQD_ASYNC_NOTIFY, "EN_SQD_ASYNC_NOTIFY"),
            (IBV_QP_ACCESS_FLAGS, "ACCESS_FLAGS"),
            (IBV_QP_PKEY_INDEX, "PKEY_INDEX"),
            (IBV_QP_PORT, "PORT"),
            (IBV_QP_QKEY, "QKEY"),
            (IBV_QP_AV, "AV"),
            (IBV_QP_PATH_MTU, "PATH_MTU"),
            (IBV_QP_TIMEOUT, "TIMEOUT"),
            (IBV_QP_RETRY_CNT, "RETRY_CNT"),
            (IBV_QP_RNR_RETRY, "RNR_RETRY"),
            (IBV_QP_RQ_PSN, "RQ_PSN"),
            (IBV_QP_MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"),
            (IBV_QP_ALT_PATH, "ALT_PATH"),
            (IBV_QP_MIN_RNR_TIMER, "MIN_RNR_TIMER"),
            (IBV_QP_SQ_PSN, "SQ_PSN"),
            (IBV_QP_MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
            (IBV_QP_PATH_MIG_STATE, "PATH_MIG_STATE"),
            (IBV_QP_CAP, "CAP"),
            (IBV_QP_DEST_QPN, "DEST_QPN"),
            (IBV_QP_RATE_LIMIT, "RATE_LIMIT"),
        ],
    )
}

pub fn qp_state(v: u32) -> String {
    name(v, &["RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR", "UNKNOWN"])
}

pub fn qp_type(v: u32) -> String {
    match v {
        IBV_QPT_RC => "RC".into(),
        IBV_QPT_UC => "UC".into(),
        IBV_QPT_UD => "UD".into(),
        IBV_QPT_RAW_PACKET => "RAW_PACKET".into(),
        IBV_QPT_XRC_SEND => "XRC_SEND".into(),
        IBV_QPT_XRC_RECV => "XRC_RECV".into(),
        _ => v.to_string(),
    }
}

pub fn wr_opcode(v: u32) -> String {
    name(
        v,
        &[
            "RDMA_WRITE",
            "RDMA_WRITE_WITH_IMM",
            "SEND",
            "SEND_WITH_IMM",
            "RDMA_READ",
            "ATOMIC_CMP_AND_SWP",
            "ATOMIC_FETCH_AND_ADD",
            "LOCAL_INV",
            "BIND_MW",
            "SEND_WITH_INV",
            "TSO",
            "DRIVER1",
            "",
            "",
            "",
            "ATOMIC_WRITE",
        ],
    )
}

pub fn wc_opcode(v: u32) -> String {
    match v {
        IBV_WC_SEND => "SEND".into(),
        IBV_WC_RDMA_WRITE => "RDMA_WRITE".into(),
        IBV_WC_RDMA_READ => "RDMA_READ".into(),
        IBV_WC_COMP_SWAP => "COMP_SWAP".into(),
        IBV_WC_FETCH_ADD => "FETCH_ADD".into(),
        IBV_WC_BIND_MW => "BIND_MW".into(),
        IBV_WC_LOCAL_INV => "LOCAL_INV".into(),
        IBV_WC_ATOMIC_WRITE => "ATOMIC_WRITE".into(),
        IBV_WC_RECV => "RECV".into(),
        IBV_WC_RECV_RDMA_WITH_IMM => "RECV_RDMA_WITH_IMM".into(),
        _ => v.to_string(),
    }
}

pub fn wc_status(v: u32) -> String {
    name(
        v,
        &[
            "SUCCESS",
            "LOC_LEN_ERR",
            "LOC_QP_OP_ERR",
            "LOC_EEC_OP_ERR",
            "LOC_PROT_ERR",
            "WR_FLUSH_ERR",
            "MW_BIND_ERR",
            "BAD_RESP_ERR",
            "LOC_ACCESS_ERR",
            "REM_INV_REQ_ERR",
            "REM_ACCESS_ERR",
            "REM_OP_ERR",
            "RETRY_EXC_ERR",
            "RNR_RETRY_EXC_ERR",
            "LOC_RDD_VIOL_ERR",
            "REM_INV_RD_REQ_ERR",
            "REM_ABORT_ERR",
            "INV_EECN_ERR",
            "INV_EEC_STATE_ERR",
            "FATAL_ERR",
            "RESP_TIMEOUT_ERR",
            "GENERAL_ERR",
            "TM_ERR",
            "TM_RNDV_INCOMPLETE",
        ],
    )
}

pub fn event_type(v: u32) -> String {
    name(
        v,
        &[
            "CQ_ERR",
            "QP_FATAL",
            "QP_REQ_ERR",
            "QP_ACCESS_ERR",
            "COMM_EST",
            "SQ_DRAINED",
            "PATH_MIG",
            "PATH_MIG_ERR",
            "DEVICE_FATAL",
            "PORT_ACTIVE",
            "PORT_ERR",
            "LID_CHANGE",
            "PKEY_CHANGE",
            "SM_CHANGE",
            "SRQ_ERR",
            "SRQ_LIMIT_REACHED",
            "QP_LAST_WQE_REACHED",
            "CLIENT_REREGISTER",
            "GID_CHANGE",
            "WQ_FATAL",
        ],
    )
}

pub fn mtu(v: u32) -> String {
    match v {
        1..=5 => (128u32 << v).to_string(),
        _ => format!("mtu#{v}"),
    }
}

pub fn gid(raw: &[u8; 16]) -> String {
    std::net::Ipv6Addr::from(*raw).to_string()
}

/// Most WRs of one post shown; the rest are counted.
pub const MAX_WRS: usize = 16;
/// SGEs read per WR to sum its length (the device allows 32).
pub const MAX_SGES: usize = 64;

/// Sum of the SGE lengths of a WR's list.
///
/// # Safety
/// `sg` must be NULL or point to `n` readable SGEs (the verbs contract of a post).
pub unsafe fn sge_len(sg: *const ibv_sge, n: i32) -> u64 {
    if sg.is_null() || n <= 0 {
        return 0;
    }
    (0..(n as usize).min(MAX_SGES))
        // SAFETY: within the caller's list.
        .map(|i| unsafe { sg.add(i).read_unaligned() }.length as u64)
        .sum()
}

/// A linked list of WRs, one `{…}` each (`show` writes the inside), the first
/// `MAX_WRS` of them and then a count of the rest.
///
/// # Safety
/// `wr` must be NULL or a valid list whose `next(w)` links are valid too.
unsafe fn wr_list<T: Copy>(mut wr: *const T, next: impl Fn(&T) -> *const T, show: impl Fn(&mut String, &T)) -> String {
    let mut s = String::new();
    let mut n = 0usize;
    while !wr.is_null() {
        // SAFETY: the application's list (caller's contract).
        let w = unsafe { wr.read_unaligned() };
        if n == MAX_WRS {
            let mut more = 0;
            let mut rest = wr;
            while !rest.is_null() {
                more += 1;
                // SAFETY: as above.
                rest = next(&unsafe { rest.read_unaligned() });
            }
            let _ = write!(s, " …{more} more");
            break;
        }
        if n > 0 {
            s.push(' ');
        }
        s.push('{');
        show(&mut s, &w);
        s.push('}');
        n += 1;
        wr = next(&w);
    }
    s
}

/// The WRs of a send list.
///
/// # Safety
/// `wr` must be NULL or the application's valid list of send WRs.
pub unsafe fn send_wrs(wr: *const ibv_send_wr) -> String {
    // SAFETY: the caller's contract.
    unsafe {
        wr_list(wr, |w| w.next, |s, w| {
            let _ = write!(
                s,
                "wr_id {:#x} {} num_sge {} len {} flags {}",
                w.wr_id,
                wr_opcode(w.opcode),
                w.num_sge,
                // SAFETY: the WR's SGE list.
                sge_len(w.sg_list, w.num_sge),
                send_flags(w.send_flags)
            );
            // SAFETY: reading the union member the opcode selects (plain data).
            match w.opcode {
                IBV_WR_RDMA_WRITE | IBV_WR_RDMA_WRITE_WITH_IMM | IBV_WR_RDMA_READ => {
                    let _ = write!(s, " raddr {:#x} rkey {:#x}", w.wr.rdma.remote_addr, w.wr.rdma.rkey);
                }
                IBV_WR_ATOMIC_CMP_AND_SWP | IBV_WR_ATOMIC_FETCH_AND_ADD => {
                    let _ = write!(s, " raddr {:#x} rkey {:#x}", w.wr.atomic.remote_addr, w.wr.atomic.rkey);
                }
                IBV_WR_SEND | IBV_WR_SEND_WITH_IMM if !w.wr.ud.ah.is_null() => {
                    let _ = write!(s, " ah {:p} remote_qpn {}", w.wr.ud.ah, w.wr.ud.remote_qpn);
                }
                _ => {}
            }
        })
    }
}

/// The WRs of a receive list.
///
/// # Safety
/// `wr` must be NULL or the application's valid list of receive WRs.
pub unsafe fn recv_wrs(wr: *const ibv_recv_wr) -> String {
    // SAFETY: the caller's contract; sge_len reads the WR's own SGE list.
    unsafe {
        wr_list(wr, |w| w.next, |s, w| {
            let _ = write!(s, "wr_id {:#x} num_sge {} len {}", w.wr_id, w.num_sge, sge_len(w.sg_list, w.num_sge));
        })
    }
}

/// Completions written by a poll.
pub fn wcs(wc: &[ibv_wc]) -> String {
    let mut s = String::new();
    for (i, w) in wc.iter().enumerate() {
        if i > 0 {
            s.push(' ');
        }
        let _ = write!(s, "{{wr_id {:#x} {} {} len {} qpn {}", w.wr_id, wc_status(w.status), wc_opcode(w.opcode), w.byte_len, w.qp_num);
        if w.status != IBV_WC_SUCCESS && w.vendor_err != 0 {
            let _ = write!(s, " vendor_err {:#x}", w.vendor_err);
        }
        if w.wc_flags & IBV_WC_WITH_IMM != 0 {
            let _ = write!(s, " imm {:#x}", u32::from_be(w.imm_data));
        }
        s.push('}');
    }
    s
}

/// The attributes a `modify_qp` mask selects (the state itself is shown by the caller).
pub fn qp_attr(a: &ibv_qp_attr, mask: u32) -> String {
    let mut s = String::new();
    let mut put = |bit: u32, f: &dyn Fn() -> String| {
        if mask & bit != 0 {
            s.push_str(", ");
            s.push_str(&f());
        }
    };
    put(IBV_QP_PKEY_INDEX, &|| format!("pkey_index {}", a.pkey_index));
    put(IBV_QP_PORT, &|| format!("port {}", a.port_num));
    put(IBV_QP_QKEY, &|| format!("qkey {:#x}", a.qkey));
    put(IBV_QP_ACCESS_FLAGS, &|| format!("access {}", access(a.qp_access_flags)));
    put(IBV_QP_AV, &|| {
        let h = &a.ah_attr;
        if h.is_global != 0 {
            // SAFETY: raw bytes of a plain-data union.
            format!("av dgid {} sgid_index {} dlid {}", gid(unsafe { &h.grh.dgid.raw }), h.grh.sgid_index, h.dlid)
        } else {
            format!("av dlid {}", h.dlid)
        }
    });
    put(IBV_QP_PATH_MTU, &|| format!("path_mtu {}", mtu(a.path_mtu)));
    put(IBV_QP_DEST_QPN, &|| format!("dest_qpn {}", a.dest_qp_num));
    put(IBV_QP_RQ_PSN, &|| format!("rq_psn {:#x}", a.rq_psn));
    put(IBV_QP_SQ_PSN, &|| format!("sq_psn {:#x}", a.sq_psn));
    put(IBV_QP_MAX_QP_RD_ATOMIC, &|| format!("max_rd_atomic {}", a.max_rd_atomic));
    put(IBV_QP_MAX_DEST_RD_ATOMIC, &|| format!("max_dest_rd_atomic {}", a.max_dest_rd_atomic));
    put(IBV_QP_MIN_RNR_TIMER, &|| format!("min_rnr_timer {}", a.min_rnr_timer));
    put(IBV_QP_TIMEOUT, &|| format!("timeout {}", a.timeout));
    put(IBV_QP_RETRY_CNT, &|| format!("retry_cnt {}", a.retry_cnt));
    put(IBV_QP_RNR_RETRY, &|| format!("rnr_retry {}", a.rnr_retry));
    put(IBV_QP_CAP, &|| format!("cap {}/{} wr {}/{} sge", a.cap.max_send_wr, a.cap.max_recv_wr, a.cap.max_send_sge, a.cap.max_recv_sge));
    s
}

pub fn cap(c: &ibv_qp_cap) -> String {
    format!(
        "send_wr {} recv_wr {} send_sge {} recv_sge {} inline {}",
        c.max_send_wr, c.max_recv_wr, c.max_send_sge, c.max_recv_sge, c.max_inline_data
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wr_lists_show_the_first_ones_and_count_the_rest() {
        // SAFETY: all-zero is a valid receive WR (NULL links and SGE list).
        let mut wrs: Vec<ibv_recv_wr> = (0..MAX_WRS + 4).map(|_| unsafe { std::mem::zeroed() }).collect();
        for (i, w) in wrs.iter_mut().enumerate() {
            w.wr_id = i as u64;
        }
        for i in 0..wrs.len() - 1 {
            wrs[i].next = &mut wrs[i + 1] as *mut ibv_recv_wr;
        }
        // SAFETY: a valid list, linked above.
        let s = unsafe { recv_wrs(&wrs[0]) };
        assert!(s.starts_with("{wr_id 0x0 num_sge 0 len 0} {wr_id 0x1 "), "{s}");
        assert_eq!(s.matches('{').count(), MAX_WRS);
        assert!(s.ends_with(" …4 more"), "{s}");
        // SAFETY: NULL is an empty list.
        assert_eq!(unsafe { send_wrs(std::ptr::null()) }, "");
    }

    #[test]
    fn names() {
        assert_eq!(access(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ), "LOCAL_WRITE|REMOTE_READ");
        assert_eq!(access(0), "0");
        assert_eq!(access(1 << 12), "0x1000");
        assert_eq!(wr_opcode(IBV_WR_RDMA_READ), "RDMA_READ");
        assert_eq!(wr_opcode(12), "12");
        assert_eq!(wc_status(IBV_WC_SUCCESS), "SUCCESS");
        assert_eq!(wc_opcode(IBV_WC_RECV), "RECV");
        assert_eq!(qp_state(IBV_QPS_RTS), "RTS");
        assert_eq!(mtu(IBV_MTU_4096), "4096");
        assert_eq!(qp_mask(IBV_QP_STATE | IBV_QP_AV), "STATE|AV");
    }

    #[test]
    fn lists() {
        let mut buf = [0u8; 64];
        let sge = ibv_sge { addr: buf.as_mut_ptr() as u64, length: 64, lkey: 1 };
        // SAFETY: plain data.
        let mut w: ibv_send_wr = unsafe { std::mem::zeroed() };
        w.wr_id = 7;
        w.sg_list = &sge as *const ibv_sge as *mut ibv_sge;
        w.num_sge = 1;
        w.opcode = IBV_WR_RDMA_WRITE;
        w.send_flags = IBV_SEND_SIGNALED;
        w.wr.rdma = ibv_send_wr_rdma { remote_addr: 0x1000, rkey: 5 };
        // SAFETY: a one-element list on the stack.
        let s = unsafe { send_wrs(&w) };
        assert_eq!(s, "{wr_id 0x7 RDMA_WRITE num_sge 1 len 64 flags SIGNALED raddr 0x1000 rkey 0x5}");
        let r = ibv_recv_wr { wr_id: 9, next: std::ptr::null_mut(), sg_list: w.sg_list, num_sge: 1 };
        // SAFETY: as above.
        assert_eq!(unsafe { recv_wrs(&r) }, "{wr_id 0x9 num_sge 1 len 64}");
    }
}
