//! Pure helpers: enum-to-string, rate conversions, sysfs access, and the copies from the
//! kernel's uverbs structs (layouts of `<rdma/ib_user_verbs.h>` / `<rdma/ib_user_sa.h>`,
//! read by byte offset; the C tests check those offsets against the headers).

use crate::sys::Errno;
use libc::{c_char, c_int, c_void};
use rdma_abi::verbs::*;
use std::ffi::CStr;

macro_rules! cstrs {
    ($($s:literal),* $(,)?) => { [$(concat!($s, "\0")),*] };
}

const NODE_TYPES: [&str; 8] = cstrs!(
    "unknown", "InfiniBand channel adapter", "InfiniBand switch", "InfiniBand router", "iWARP NIC", "usNIC", "usNIC UDP", "unspecified"
);
const PORT_STATES: [&str; 6] = cstrs!("PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED", "PORT_ACTIVE", "PORT_ACTIVE_DEFER");
const EVENTS: [&str; 20] = cstrs!(
    "CQ error",
    "local work queue catastrophic error",
    "invalid request local work queue error",
    "local access violation work queue error",
    "communication established",
    "send queue drained",
    "path migrated",
    "path migration request error",
    "local catastrophic error",
    "port active",
    "port error",
    "LID change",
    "P_Key change",
    "SM change",
    "SRQ catastrophic error",
    "SRQ limit reached",
    "last WQE reached",
    "client reregistration",
    "GID table change",
    "WQ fatal"
);
const WC_STATUS: [&str; 24] = cstrs!(
    "success",
    "local length error",
    "local QP operation error",
    "local EE context operation error",
    "local protection error",
    "Work Request Flushed Error",
    "memory management operation error",
    "bad response error",
    "local access error",
    "remote invalid request error",
    "remote access error",
    "remote operation error",
    "transport retry counter exceeded",
    "RNR retry counter exceeded",
    "local RDD violation error",
    "remote invalid RD request",
    "aborted error",
    "invalid EE context number",
    "invalid EE context state",
    "fatal error",
    "response timeout error",
    "general error",
    "TM error",
    "TM software rendezvous"
);

fn pick(table: &[&'static str], i: i64, other: &'static str) -> *const c_char {
    let s = if i >= 0 && (i as usize) < table.len() { table[i as usize] } else { other };
    s.as_ptr().cast()
}

export! {
    value(std::ptr::null()) fn ibv_node_type_str(node_type: ibv_node_type) -> *const c_char {
        Ok(pick(&NODE_TYPES, node_type as i64 + 1, "unknown\0"))
    }
}
export! {
    value(std::ptr::null()) fn ibv_port_state_str(port_state: ibv_port_state) -> *const c_char {
        Ok(pick(&PORT_STATES, port_state as i64, "(invalid state)\0"))
    }
}
export! {
    value(std::ptr::null()) fn ibv_event_type_str(event: ibv_event_type) -> *const c_char {
        Ok(pick(&EVENTS, event as i64, "unknown\0"))
    }
}
export! {
    value(std::ptr::null()) fn ibv_wc_status_str(status: ibv_wc_status) -> *const c_char {
        Ok(pick(&WC_STATUS, status as i64, "unknown\0"))
    }
}

/// (enum ibv_rate, multiple of 2.5 Gb/s, Mb/s)
const RATES: [(ibv_rate, c_int, c_int); 23] = [
    (IBV_RATE_2_5_GBPS, 1, 2500),
    (IBV_RATE_5_GBPS, 2, 5000),
    (IBV_RATE_10_GBPS, 4, 10000),
    (IBV_RATE_20_GBPS, 8, 20000),
    (IBV_RATE_30_GBPS, 12, 30000),
    (IBV_RATE_40_GBPS, 16, 40000),
    (IBV_RATE_60_GBPS, 24, 60000),
    (IBV_RATE_80_GBPS, 32, 80000),
    (IBV_RATE_120_GBPS, 48, 120000),
    (IBV_RATE_14_GBPS, -1, 14062),
    (IBV_RATE_56_GBPS, -1, 56250),
    (IBV_RATE_112_GBPS, -1, 112500),
    (IBV_RATE_168_GBPS, -1, 168750),
    (IBV_RATE_25_GBPS, -1, 25781),
    (IBV_RATE_100_GBPS, -1, 103125),
    (IBV_RATE_200_GBPS, -1, 206250),
    (IBV_RATE_300_GBPS, -1, 309375),
    (IBV_RATE_28_GBPS, -1, 28125),
    (IBV_RATE_50_GBPS, -1, 53125),
    (IBV_RATE_400_GBPS, -1, 425000),
    (IBV_RATE_600_GBPS, -1, 637500),
    (IBV_RATE_800_GBPS, -1, 850000),
    (IBV_RATE_1200_GBPS, -1, 1275000),
];

export! {
    value(-1) fn ibv_rate_to_mult(rate: ibv_rate) -> c_int {
        Ok(RATES.iter().find(|r| r.0 == rate && r.1 > 0).map(|r| r.1).unwrap_or(-1))
    }
}
export! {
    value(IBV_RATE_MAX) fn mult_to_ibv_rate(mult: c_int) -> ibv_rate {
        Ok(RATES.iter().find(|r| r.1 == mult && mult > 0).map(|r| r.0).unwrap_or(IBV_RATE_MAX))
    }
}
export! {
    value(-1) fn ibv_rate_to_mbps(rate: ibv_rate) -> c_int {
        Ok(RATES.iter().find(|r| r.0 == rate).map(|r| r.2).unwrap_or(-1))
    }
}
export! {
    value(IBV_RATE_MAX) fn mbps_to_ibv_rate(mbps: c_int) -> ibv_rate {
        Ok(RATES.iter().find(|r| r.2 == mbps).map(|r| r.0).unwrap_or(IBV_RATE_MAX))
    }
}

export! {
    value(std::ptr::null()) fn ibv_get_sysfs_path() -> *const c_char {
        Ok(c"/sys".as_ptr())
    }
}

export! {
    /// Reads `dir/file` into `buf` (NUL-terminated, trailing newline removed); returns the
    /// number of bytes read or -1.
    minus1 fn ibv_read_sysfs_file(dir: *const c_char, file: *const c_char, buf: *mut c_char, size: usize) -> c_int {
        if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
            return Err(Errno::EINVAL);
        }
        // SAFETY: NUL-terminated strings from the caller (checked for NULL).
        let (d, f) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
        let path = std::path::Path::new(std::ffi::OsStr::from_encoded_bytes_unchecked_safe(d.to_bytes()))
            .join(std::ffi::OsStr::from_encoded_bytes_unchecked_safe(f.to_bytes()));
        let data = std::fs::read(path).map_err(Errno::from)?;
        let n = data.len().min(size - 1);
        // SAFETY: buf holds `size` bytes; we write n + 1 <= size.
        unsafe {
            std::ptr::copy_nonoverlapping(data.as_ptr(), buf as *mut u8, n);
            *buf.add(n) = 0;
            if n > 0 && *buf.add(n - 1) == b'\n' as c_char {
                *buf.add(n - 1) = 0;
            }
        }
        Ok(n as c_int)
    }
}

/// `OsStr` from bytes without the unsafe constructor (Unix: any bytes are valid).
trait FromBytes {
    fn from_encoded_bytes_unchecked_safe(b: &[u8]) -> &std::ffi::OsStr;
}
impl FromBytes for std::ffi::OsStr {
    fn from_encoded_bytes_unchecked_safe(b: &[u8]) -> &std::ffi::OsStr {
        use std::os::unix::ffi::OsStrExt;
        std::ffi::OsStr::from_bytes(b)
    }
}

/// Reads `N` bytes at `off` of a kernel struct.
///
/// # Safety
/// `p` must point to a struct at least `off + N` bytes long.
unsafe fn rd<const N: usize>(p: *const u8, off: usize) -> [u8; N] {
    let mut a = [0u8; N];
    // SAFETY: forwarded caller guarantee.
    unsafe { std::ptr::copy_nonoverlapping(p.add(off), a.as_mut_ptr(), N) };
    a
}

/// `struct ib_uverbs_ah_attr` (32 bytes) → `ibv_ah_attr`.
///
/// # Safety
/// `k` must point to a `struct ib_uverbs_ah_attr`.
unsafe fn ah_from_kern(k: *const u8) -> ibv_ah_attr {
    // SAFETY: offsets inside the 32-byte struct (grh 0..24, dlid 24, sl 26, src_path_bits
    // 27, static_rate 28, is_global 29, port_num 30).
    unsafe {
        ibv_ah_attr {
            grh: ibv_global_route {
                dgid: ibv_gid { raw: rd::<16>(k, 0) },
                flow_label: u32::from_ne_bytes(rd(k, 16)),
                sgid_index: rd::<1>(k, 20)[0],
                hop_limit: rd::<1>(k, 21)[0],
                traffic_class: rd::<1>(k, 22)[0],
            },
            dlid: u16::from_ne_bytes(rd(k, 24)),
            sl: rd::<1>(k, 26)[0],
            src_path_bits: rd::<1>(k, 27)[0],
            static_rate: rd::<1>(k, 28)[0],
            is_global: rd::<1>(k, 29)[0],
            port_num: rd::<1>(k, 30)[0],
        }
    }
}

export! {
    void fn ibv_copy_ah_attr_from_kern(dst: *mut ibv_ah_attr, src: *const c_void) {
        if dst.is_null() || src.is_null() {
            return Ok(());
        }
        // SAFETY: src is a kernel ib_uverbs_ah_attr, dst a writable ibv_ah_attr.
        unsafe { dst.write_unaligned(ah_from_kern(src.cast())) };
        Ok(())
    }
}

export! {
    void fn ibv_copy_qp_attr_from_kern(dst: *mut ibv_qp_attr, src: *const c_void) {
        if dst.is_null() || src.is_null() {
            return Ok(());
        }
        let k = src as *const u8;
        // SAFETY: k is a 144-byte struct ib_uverbs_qp_attr; dst a writable ibv_qp_attr.
        unsafe {
            let u = |o: usize| u32::from_ne_bytes(rd(k, o));
            let b = |o: usize| rd::<1>(k, o)[0];
            let mut a: ibv_qp_attr = std::mem::zeroed();
            a.qp_state = u(4);
            a.cur_qp_state = u(8);
            a.path_mtu = u(12);
            a.path_mig_state = u(16);
            a.qkey = u(20);
            a.rq_psn = u(24);
            a.sq_psn = u(28);
            a.dest_qp_num = u(32);
            a.qp_access_flags = u(36);
            a.ah_attr = ah_from_kern(k.add(40));
            a.alt_ah_attr = ah_from_kern(k.add(72));
            a.cap = ibv_qp_cap { max_send_wr: u(104), max_recv_wr: u(108), max_send_sge: u(112), max_recv_sge: u(116), max_inline_data: u(120) };
            a.pkey_index = u16::from_ne_bytes(rd(k, 124));
            a.alt_pkey_index = u16::from_ne_bytes(rd(k, 126));
            a.en_sqd_async_notify = b(128);
            a.sq_draining = b(129);
            a.max_rd_atomic = b(130);
            a.max_dest_rd_atomic = b(131);
            a.min_rnr_timer = b(132);
            a.port_num = b(133);
            a.timeout = b(134);
            a.retry_cnt = b(135);
            a.rnr_retry = b(136);
            a.alt_port_num = b(137);
            a.alt_timeout = b(138);
            dst.write_unaligned(a);
        }
        Ok(())
    }
}

export! {
    void fn ibv_copy_path_rec_from_kern(dst: *mut ibv_sa_path_rec, src: *const c_void) {
        if dst.is_null() || src.is_null() {
            return Ok(());
        }
        let k = src as *const u8;
        // SAFETY: k is a 64-byte struct ib_user_path_rec; dst a writable ibv_sa_path_rec.
        unsafe {
            let b = |o: usize| rd::<1>(k, o)[0];
            let mut p: ibv_sa_path_rec = std::mem::zeroed();
            p.dgid = ibv_gid { raw: rd(k, 0) };
            p.sgid = ibv_gid { raw: rd(k, 16) };
            p.dlid = u16::from_ne_bytes(rd(k, 32));
            p.slid = u16::from_ne_bytes(rd(k, 34));
            p.raw_traffic = i32::from_ne_bytes(rd(k, 36));
            p.flow_label = u32::from_ne_bytes(rd(k, 40));
            p.reversible = i32::from_ne_bytes(rd(k, 44));
            p.mtu = u32::from_ne_bytes(rd(k, 48)) as u8;
            p.pkey = u16::from_ne_bytes(rd(k, 52));
            p.hop_limit = b(54);
            p.traffic_class = b(55);
            p.numb_path = b(56);
            p.sl = b(57);
            p.mtu_selector = b(58);
            p.rate_selector = b(59);
            p.rate = b(60);
            p.packet_life_time_selector = b(61);
            p.packet_life_time = b(62);
            p.preference = b(63);
            dst.write_unaligned(p);
        }
        Ok(())
    }
}

export! {
    void fn ibv_copy_path_rec_to_kern(dst: *mut c_void, src: *const ibv_sa_path_rec) {
        if dst.is_null() || src.is_null() {
            return Ok(());
        }
        // SAFETY: src is a readable ibv_sa_path_rec; dst a writable 64-byte ib_user_path_rec.
        unsafe {
            let p = src.read_unaligned();
            let mut k = [0u8; 64];
            k[0..16].copy_from_slice(&p.dgid.raw);
            k[16..32].copy_from_slice(&p.sgid.raw);
            k[32..34].copy_from_slice(&p.dlid.to_ne_bytes());
            k[34..36].copy_from_slice(&p.slid.to_ne_bytes());
            k[36..40].copy_from_slice(&p.raw_traffic.to_ne_bytes());
            k[40..44].copy_from_slice(&p.flow_label.to_ne_bytes());
            k[44..48].copy_from_slice(&p.reversible.to_ne_bytes());
            k[48..52].copy_from_slice(&(p.mtu as u32).to_ne_bytes());
            k[52..54].copy_from_slice(&p.pkey.to_ne_bytes());
            k[54] = p.hop_limit;
            k[55] = p.traffic_class;
            k[56] = p.numb_path;
            k[57] = p.sl;
            k[58] = p.mtu_selector;
            k[59] = p.rate_selector;
            k[60] = p.rate;
            k[61] = p.packet_life_time_selector;
            k[62] = p.packet_life_time;
            k[63] = p.preference;
            std::ptr::copy_nonoverlapping(k.as_ptr(), dst as *mut u8, 64);
        }
        Ok(())
    }
}
