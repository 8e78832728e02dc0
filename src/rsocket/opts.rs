//! Socket options (rsocket.md §6) and rfcntl: what rsetsockopt /
//! rgetsockopt / rfcntl accept on a stream rsocket. Datagram rsockets share
//! the SOL_RDMA part and pass the rest to their UDP socket (dgram.rs).

use super::cm;
use super::config::*;
use super::stream::{Phase, St};
use super::wire::{scale_decode, scale_encode};
use crate::sys::{Errno, Result};
use rdma_abi::cma::*;

pub const SOL_RDMA: i32 = 0x10000;
pub const RDMA_SQSIZE: i32 = 0;
pub const RDMA_RQSIZE: i32 = 1;
pub const RDMA_INLINE: i32 = 2;
pub const RDMA_IOMAPSIZE: i32 = 3;
pub const RDMA_ROUTE: i32 = 4;
/// sizeof(struct ibv_path_data).
pub const PATH_DATA_LEN: usize = 72;

#[derive(Clone, Debug)]
pub struct Opts {
    pub sq_size: u32,
    pub rq_size: u32,
    pub sq_inline: u32,
    /// The inline size was asked for (configuration or RDMA_INLINE).
    pub inline_asked: bool,
    pub sbuf_size: usize,
    pub rbuf_size: usize,
    pub iomap_size: u32,
    pub route: Option<[u8; PATH_DATA_LEN]>,
    pub keepalive: bool,
    pub keepidle: u32,
    pub keepintvl: u32,
    pub keepcnt: u32,
    pub nodelay: bool,
    pub reuseaddr: bool,
    pub oobinline: bool,
    pub linger: (i32, i32),
    pub v6only: Option<bool>,
    pub tos: u8,
    /// SO_RCVTIMEO / SO_SNDTIMEO (None: wait forever).
    pub rcvtimeo: Option<std::time::Duration>,
    pub sndtimeo: Option<std::time::Duration>,
}

fn keepalive_default() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_keepalive_time")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .filter(|v: &u32| *v > 0)
        .unwrap_or(7200)
}

impl Default for Opts {
    fn default() -> Opts {
        let c = get_config();
        Opts {
            sq_size: c.sqsize_default,
            rq_size: c.rqsize_default,
            sq_inline: c.inline_default,
            inline_asked: c.inline_configured,
            sbuf_size: c.wmem_default,
            rbuf_size: c.mem_default.max(4096),
            iomap_size: c.iomap_size,
            route: None,
            keepalive: false,
            keepidle: keepalive_default(),
            keepintvl: 75,
            keepcnt: 9,
            nodelay: false,
            reuseaddr: false,
            oobinline: false,
            linger: (0, 0),
            v6only: None,
            tos: 0,
            rcvtimeo: None,
            sndtimeo: None,
        }
    }
}

/// An `int` option value.
pub fn int(val: &[u8]) -> Result<i32> {
    if val.len() < 4 {
        return Err(Errno::EINVAL);
    }
    Ok(i32::from_ne_bytes([val[0], val[1], val[2], val[3]]))
}

pub fn int_out(v: i32) -> Vec<u8> {
    v.to_ne_bytes().to_vec()
}

/// SOL_RDMA options, shared by both kinds (only before the rsocket connects).
pub fn set_rdma(o: &mut Opts, name: i32, val: &[u8]) -> Result<()> {
    match name {
        RDMA_SQSIZE => o.sq_size = (int(val)? as u32).clamp(1, RS_QP_MAX_SIZE),
        RDMA_RQSIZE => o.rq_size = (int(val)? as u32).clamp(1, RS_QP_MAX_SIZE),
        RDMA_INLINE => {
            o.sq_inline = (int(val)? as u32).min(RS_QP_MAX_SIZE);
            o.inline_asked = true;
        }
        RDMA_IOMAPSIZE => {
            let v = (int(val)?.max(0) as u32).min(0x7F00) as u16;
            o.iomap_size = scale_decode(scale_encode(v)) as u32;
        }
        RDMA_ROUTE => {
            if val.len() < PATH_DATA_LEN || !val.len().is_multiple_of(PATH_DATA_LEN) {
                return Err(Errno::EINVAL);
            }
            let mut p = [0u8; PATH_DATA_LEN];
            p.copy_from_slice(&val[..PATH_DATA_LEN]);
            o.route = Some(p);
        }
        _ => return Err(Errno::ENOTSUP),
    }
    Ok(())
}

pub fn get_rdma(o: &Opts, name: i32) -> Result<Vec<u8>> {
    Ok(match name {
        RDMA_SQSIZE => int_out(o.sq_size as i32),
        RDMA_RQSIZE => int_out(o.rq_size as i32),
        RDMA_INLINE => int_out(o.sq_inline as i32),
        RDMA_IOMAPSIZE => int_out(o.iomap_size as i32),
        RDMA_ROUTE => o.route.ok_or(Errno::EINVAL)?.to_vec(),
        _ => return Err(Errno::ENOTSUP),
    })
}

fn id_option(st: &St, name: i32, val: &mut [u8]) -> Result<()> {
    let id = st.id.as_ref().ok_or(Errno::EBADF)?;
    // SAFETY: our id; val is a readable option buffer of its length.
    cm::check(unsafe { cm::rdma_set_option(id.raw(), RDMA_OPTION_ID, name, val.as_mut_ptr().cast(), val.len()) })
}

/// A `struct timeval` option value (None for zero: no timeout).
fn timeval(val: &[u8]) -> Result<Option<std::time::Duration>> {
    if val.len() < std::mem::size_of::<libc::timeval>() {
        return Err(Errno::EINVAL);
    }
    // SAFETY: the buffer holds a whole timeval (checked above).
    let t = unsafe { std::ptr::read_unaligned(val.as_ptr() as *const libc::timeval) };
    if t.tv_sec < 0 || !(0..1_000_000).contains(&t.tv_usec) {
        return Err(Errno(libc::EDOM));
    }
    let d = std::time::Duration::from_secs(t.tv_sec as u64) + std::time::Duration::from_micros(t.tv_usec as u64);
    Ok((!d.is_zero()).then_some(d))
}

fn timeval_out(d: Option<std::time::Duration>) -> Vec<u8> {
    let d = d.unwrap_or_default();
    let t = libc::timeval { tv_sec: d.as_secs() as libc::time_t, tv_usec: d.subsec_micros() as libc::suseconds_t };
    // SAFETY: the bytes of a live plain struct.
    unsafe { std::slice::from_raw_parts(&t as *const libc::timeval as *const u8, std::mem::size_of::<libc::timeval>()) }
        .to_vec()
}

/// Buffer sizes asked through SO_SNDBUF/SO_RCVBUF: doubled, as Linux does.
fn buf_size(v: i32) -> usize {
    ((v.max(0) as usize).saturating_mul(2)).clamp(4096, 1 << 30) & !1
}

/// rsetsockopt on a stream rsocket. Returns whether keepalive was switched
/// (the caller registers the rsocket with the keepalive service).
pub fn set_stream(st: &mut St, level: i32, name: i32, val: &[u8]) -> Result<Option<bool>> {
    let o = &mut st.opts;
    match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => {
            let v = int(val)?;
            o.reuseaddr = v != 0;
            // Upstream ignores ids that cannot take it (ENOSYS, some states).
            let _ = id_option(st, RDMA_OPTION_ID_REUSEADDR, &mut v.to_ne_bytes());
        }
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => {
            let v = int(val)?;
            if st.conn.is_none() {
                o.rbuf_size = buf_size(v);
            }
        }
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => {
            let v = int(val)?;
            if st.conn.is_none() {
                o.sbuf_size = buf_size(v);
            }
        }
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => {
            o.keepalive = int(val)? != 0;
            let on = o.keepalive;
            // Sends stamp last_send only while keepalive is on: idle counts from now.
            st.last_send = std::time::Instant::now();
            return Ok(Some(on));
        }
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            if val.len() < 8 {
                return Err(Errno::EINVAL);
            }
            o.linger = (int(&val[0..4])?, int(&val[4..8])?);
        }
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => o.oobinline = int(val)? != 0,
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => o.rcvtimeo = timeval(val)?,
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => o.sndtimeo = timeval(val)?,
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => o.nodelay = int(val)? != 0,
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => {
            int(val)?;
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => {
            let v = int(val)?;
            if v <= 0 {
                return Err(Errno::EINVAL);
            }
            o.keepidle = v as u32;
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => {
            let v = int(val)?;
            if v <= 0 {
                return Err(Errno::EINVAL);
            }
            o.keepintvl = v as u32;
        }
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => {
            let v = int(val)?;
            if v <= 0 {
                return Err(Errno::EINVAL);
            }
            o.keepcnt = v as u32;
        }
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => {}
        (libc::IPPROTO_IP, libc::IP_TOS) => {
            let v = int(val).or_else(|_| val.first().map(|b| *b as i32).ok_or(Errno::EINVAL))?;
            o.tos = v as u8;
            id_option(st, RDMA_OPTION_ID_TOS, &mut [v as u8])?;
        }
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => {
            let v = int(val)?;
            o.v6only = Some(v != 0);
            id_option(st, RDMA_OPTION_ID_AFONLY, &mut v.to_ne_bytes())?;
        }
        (SOL_RDMA, _) => {
            if !matches!(st.phase, Phase::Init | Phase::Bound | Phase::Listening) {
                return Err(Errno::EINVAL);
            }
            set_rdma(o, name, val)?;
        }
        _ => return Err(Errno::ENOTSUP),
    }
    Ok(None)
}

/// A minimal `struct tcp_info` (state and segment sizes), as upstream's preload gives.
fn tcp_info(st: &St) -> Vec<u8> {
    // SAFETY: all-zero is a valid tcp_info.
    let mut ti: libc::tcp_info = unsafe { std::mem::zeroed() };
    ti.tcpi_state = match st.phase {
        Phase::Open => 1,
        Phase::Listening => 10,
        p if p.opening() => 2,
        _ => 7,
    };
    ti.tcpi_snd_mss = 2048;
    ti.tcpi_rcv_mss = 2048;
    ti.tcpi_snd_cwnd = st.opts.sq_size;
    let p = &ti as *const libc::tcp_info as *const u8;
    // SAFETY: reading the bytes of a live plain struct.
    unsafe { std::slice::from_raw_parts(p, std::mem::size_of::<libc::tcp_info>()) }.to_vec()
}

/// The path MTU of a connected stream in bytes (TCP_MAXSEG).
fn maxseg(st: &St) -> i32 {
    let Some(id) = st.id.as_ref() else { return 2048 };
    // SAFETY: a live id; path_rec is NULL or num_paths records.
    unsafe {
        let r = (*id.raw()).route;
        if r.path_rec.is_null() || r.num_paths < 1 {
            return 2048;
        }
        let mtu = (*r.path_rec).mtu as i32;
        if (1..=5).contains(&mtu) {
            128 << mtu
        } else {
            2048
        }
    }
}

pub fn get_stream(st: &mut St, domain: i32, level: i32, name: i32) -> Result<Vec<u8>> {
    let o = &st.opts;
    Ok(match (level, name) {
        (libc::SOL_SOCKET, libc::SO_REUSEADDR) => int_out(o.reuseaddr as i32),
        (libc::SOL_SOCKET, libc::SO_KEEPALIVE) => int_out(o.keepalive as i32),
        (libc::SOL_SOCKET, libc::SO_OOBINLINE) => int_out(o.oobinline as i32),
        (libc::SOL_SOCKET, libc::SO_RCVBUF) => int_out(o.rbuf_size as i32),
        (libc::SOL_SOCKET, libc::SO_SNDBUF) => int_out(o.sbuf_size as i32),
        (libc::SOL_SOCKET, libc::SO_LINGER) => {
            let mut v = int_out(o.linger.0);
            v.extend(int_out(o.linger.1));
            v
        }
        (libc::SOL_SOCKET, libc::SO_ERROR) => int_out(std::mem::take(&mut st.err)),
        (libc::SOL_SOCKET, libc::SO_RCVTIMEO) => timeval_out(o.rcvtimeo),
        (libc::SOL_SOCKET, libc::SO_SNDTIMEO) => timeval_out(o.sndtimeo),
        (libc::SOL_SOCKET, libc::SO_TYPE) => int_out(libc::SOCK_STREAM),
        (libc::SOL_SOCKET, libc::SO_DOMAIN) => int_out(domain),
        (libc::SOL_SOCKET, libc::SO_PROTOCOL) => int_out(libc::IPPROTO_TCP),
        (libc::SOL_SOCKET, libc::SO_ACCEPTCONN) => int_out((st.phase == Phase::Listening) as i32),
        (libc::IPPROTO_TCP, libc::TCP_NODELAY) => int_out(o.nodelay as i32),
        (libc::IPPROTO_TCP, libc::TCP_MAXSEG) => int_out(maxseg(st)),
        (libc::IPPROTO_TCP, libc::TCP_KEEPIDLE) => int_out(o.keepidle as i32),
        (libc::IPPROTO_TCP, libc::TCP_KEEPINTVL) => int_out(o.keepintvl as i32),
        (libc::IPPROTO_TCP, libc::TCP_KEEPCNT) => int_out(o.keepcnt as i32),
        (libc::IPPROTO_TCP, libc::TCP_CONGESTION) => b"rdma\0".to_vec(),
        (libc::IPPROTO_TCP, libc::TCP_INFO) => tcp_info(st),
        (libc::IPPROTO_IP, libc::IP_TOS) => int_out(o.tos as i32),
        (libc::IPPROTO_IPV6, libc::IPV6_V6ONLY) => int_out(o.v6only.unwrap_or(false) as i32),
        (SOL_RDMA, _) => get_rdma(o, name)?,
        _ => return Err(Errno::ENOTSUP),
    })
}

/// rfcntl's four commands; `flags` are the rsocket's (nonblock, cloexec).
pub fn fcntl(nonblock: &mut bool, cloexec: &mut bool, cmd: i32, arg: i64) -> Result<i32> {
    match cmd {
        libc::F_GETFL => Ok(libc::O_RDWR | if *nonblock { libc::O_NONBLOCK } else { 0 }),
        libc::F_SETFL => {
            *nonblock = arg as i32 & libc::O_NONBLOCK != 0;
            Ok(0)
        }
        libc::F_GETFD => Ok(if *cloexec { libc::FD_CLOEXEC } else { 0 }),
        libc::F_SETFD => {
            *cloexec = arg as i32 & libc::FD_CLOEXEC != 0;
            Ok(0)
        }
        _ => Err(Errno::ENOTSUP),
    }
}
