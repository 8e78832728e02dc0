//! Where a remote QP lives.
//!
//! Resolution order for `(dgid, qpn)`:
//! 1. the context's peer table: endpoints given by the CM hook (`add_peer`), and for UD
//!    traffic only, endpoints learnt from received UD datagrams (`learn_ud_peer`);
//! 2. the host registry: a directory (`/dev/shm/softverbs-<uid>`, else
//!    `/tmp/softverbs-<uid>`) where every QP number is claimed with an exclusive file
//!    `qpn-XXXXXX` holding its context port. With the port, the IP comes from `dgid`
//!    (global routing) or is 127.0.0.1 (LID routing): this lets verbs-only programs
//!    (perftest, qperf without rdma_cm) run on one host or across network namespaces of
//!    one host without the CM.
//!
//! The same directory makes QP numbers and LIDs host-unique (`lid-XXXX`) and lists
//! multicast members (`mc-<gid>/<port>-<qpn>`). Files of dead processes are reclaimed.

use crate::core::device::gid_to_ip;
use crate::sys::random_u32;
use std::fs;
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::OnceLock;

/// A claimed registry file, removed on drop.
pub struct RegFile {
    path: PathBuf,
}

impl Drop for RegFile {
    fn drop(&mut self) {
        let _ = fs::remove_file(&self.path);
    }
}

/// The user's registry directory (also where `core::window` keeps the windows).
pub fn registry_dir() -> Option<&'static PathBuf> {
    dir()
}

fn dir() -> Option<&'static PathBuf> {
    static DIR: OnceLock<Option<PathBuf>> = OnceLock::new();
    DIR.get_or_init(|| {
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        for base in ["/dev/shm", "/tmp"] {
            let d = PathBuf::from(format!("{base}/softverbs-{uid}"));
            let _ = fs::create_dir(&d);
            if let Ok(md) = fs::symlink_metadata(&d) {
                use std::os::unix::fs::MetadataExt;
                if md.is_dir() && md.uid() == uid {
                    use std::os::unix::fs::PermissionsExt;
                    let _ = fs::set_permissions(&d, fs::Permissions::from_mode(0o700));
                    return Some(d);
                }
            }
        }
        None
    })
    .as_ref()
}

fn pid() -> u32 {
    std::process::id()
}

pub fn alive(pid: u32) -> bool {
    // SAFETY: kill with signal 0 only checks for existence.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

/// Parses "port pid".
fn parse(s: &str) -> Option<(u16, u32)> {
    let mut it = s.split_whitespace();
    let port = it.next()?.parse().ok()?;
    let pid = it.next()?.parse().ok()?;
    Some((port, pid))
}

/// Claims `path` exclusively with content "port pid"; reclaims a dead owner's file.
fn claim(path: PathBuf, port: u16) -> Option<RegFile> {
    for _ in 0..2 {
        match fs::OpenOptions::new().write(true).create_new(true).open(&path) {
            Ok(mut f) => {
                let _ = writeln!(f, "{port} {}", pid());
                return Some(RegFile { path });
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                let stale = fs::read_to_string(&path)
                    .ok()
                    .and_then(|s| parse(&s))
                    .map(|(_, p)| !alive(p))
                    .unwrap_or(false);
                if !stale {
                    return None;
                }
                let _ = fs::remove_file(&path);
            }
            Err(_) => return None,
        }
    }
    None
}

fn read_port(path: PathBuf) -> Option<u16> {
    let (port, p) = parse(&fs::read_to_string(path).ok()?)?;
    alive(p).then_some(port)
}

/// A fresh host-unique QP number (never 0, 1 or 0xFFFFFF), registered for `port`.
pub fn alloc_qpn(port: u16) -> (u32, Option<RegFile>) {
    for _ in 0..64 {
        let qpn = random_u32() & 0x00ff_ffff;
        if qpn < 2 || qpn == 0x00ff_ffff {
            continue;
        }
        match dir() {
            Some(d) => {
                if let Some(f) = claim(d.join(format!("qpn-{qpn:06x}")), port) {
                    return (qpn, Some(f));
                }
            }
            None => return (qpn, None),
        }
    }
    (random_u32() % 0x00ff_fffd + 2, None)
}

/// A host-unique unicast LID for a new context.
pub fn alloc_lid() -> (u16, Option<RegFile>) {
    for _ in 0..64 {
        let lid = (random_u32() % 0xbffe + 1) as u16;
        match dir() {
            Some(d) => {
                if let Some(f) = claim(d.join(format!("lid-{lid:04x}")), 0) {
                    return (lid, Some(f));
                }
            }
            None => return (lid, None),
        }
    }
    ((random_u32() % 0xbffe + 1) as u16, None)
}

/// The context port that owns `qpn` on this host.
pub fn registry_port(qpn: u32) -> Option<u16> {
    read_port(dir()?.join(format!("qpn-{qpn:06x}")))
}

fn hex(gid: &[u8; 16]) -> String {
    gid.iter().map(|b| format!("{b:02x}")).collect()
}

/// Adds `(port, qpn)` to multicast group `mgid`.
pub fn mcast_join(mgid: &[u8; 16], port: u16, qpn: u32) -> Option<RegFile> {
    let d = dir()?.join(format!("mc-{}", hex(mgid)));
    let _ = fs::create_dir(&d);
    claim(d.join(format!("{port}-{qpn:06x}")), port)
}

/// Members `(port, qpn)` of multicast group `mgid` on this host.
pub fn mcast_members(mgid: &[u8; 16]) -> Vec<(u16, u32)> {
    let Some(d) = dir() else { return Vec::new() };
    let d = d.join(format!("mc-{}", hex(mgid)));
    let mut out = Vec::new();
    if let Ok(rd) = fs::read_dir(&d) {
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some((p, q)) = name.split_once('-') else { continue };
            let (Ok(port), Ok(qpn)) = (p.parse::<u16>(), u32::from_str_radix(q, 16)) else { continue };
            if read_port(e.path()).is_some() {
                out.push((port, qpn));
            }
        }
    }
    out
}

/// Resolution steps 1 and 2 (see the module doc). `table` is the context's peer table.
pub fn resolve(table: Option<SocketAddr>, dgid: &[u8; 16], qpn: u32, is_global: bool) -> Option<SocketAddr> {
    if let Some(a) = table {
        return Some(a);
    }
    let port = registry_port(qpn)?;
    let ip = if is_global && dgid.iter().any(|&b| b != 0) {
        gid_to_ip(dgid)
    } else {
        IpAddr::V4(Ipv4Addr::LOCALHOST)
    };
    Some(crate::net::addr::with_port(ip, port, 0))
}

/// The network namespace of process `pid` ("net:[inode]"), or of the calling thread.
pub fn netns_of(pid: Option<u32>) -> String {
    let p = match pid {
        Some(p) => format!("/proc/{p}/ns/net"),
        None => "/proc/thread-self/ns/net".to_string(),
    };
    fs::read_link(p).map(|l| l.to_string_lossy().into_owned()).unwrap_or_default()
}

fn ns_key() -> String {
    netns_of(None).chars().filter(|c| c.is_ascii_digit()).collect()
}

/// RoCEv2: this process owns UDP 4791 on `ip` in its network namespace (it bound it) and
/// forwards what arrives there for the QPs of the user's other processes (`roce_owner`).
pub fn roce_claim_owner(ip: Ipv4Addr, port: u16) -> Option<RegFile> {
    let path = dir()?.join(format!("roce-{}-{ip}", ns_key()));
    // The caller just bound the port, so whoever wrote a file here no longer holds it.
    let _ = fs::remove_file(&path);
    claim(path, port)
}

/// The context port of the process that owns UDP 4791 on `ip` here, if it is one of the
/// user's soft-fabric processes (and not, say, the kernel's rdma_rxe).
pub fn roce_owner(ip: Ipv4Addr) -> Option<u16> {
    same_ns_port(dir()?.join(format!("roce-{}-{ip}", ns_key())))
}

/// A CM service (an IB service ID) this process listens on, so that the owner of 4791
/// hands it the REQs for it.
pub fn roce_claim_service(sid: u64, port: u16) -> Option<RegFile> {
    claim(dir()?.join(format!("svc-{}-{sid:016x}", ns_key())), port)
}

/// The context port of the live process of this user and network namespace that
/// listens on service `sid`, or owns `qpn` (for forwarding).
pub fn roce_service_port(sid: u64) -> Option<u16> {
    same_ns_port(dir()?.join(format!("svc-{}-{sid:016x}", ns_key())))
}

pub fn roce_qpn_port(qpn: u32) -> Option<u16> {
    same_ns_port(dir()?.join(format!("qpn-{qpn:06x}")))
}

fn same_ns_port(path: PathBuf) -> Option<u16> {
    let (port, p) = parse(&fs::read_to_string(path).ok()?)?;
    (alive(p) && netns_of(Some(p)) == netns_of(None)).then_some(port)
}
