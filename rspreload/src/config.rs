//! Which sockets become rsockets: `/etc/rdma/rsocket/preload_config`
//! (lines `program domain type protocol`, `#` comments, `*` wildcards;
//! the program matches as a prefix of program_invocation_short_name; no file:
//! every TCP/UDP socket), and the RS_SQ_SIZE / RS_RQ_SIZE / RS_INLINE knobs.
//! Read with raw libc calls only (this runs inside socket()).

use libc::c_int;

pub struct Rule {
    program: Option<Vec<u8>>,
    domain: Option<c_int>,
    kind: Option<c_int>,
    protocol: Option<c_int>,
}

pub struct Config {
    /// None: no config file, every INET/INET6 TCP/UDP socket is intercepted.
    pub rules: Option<Vec<Rule>>,
    pub sq_size: Option<c_int>,
    pub rq_size: Option<c_int>,
    pub inline: Option<c_int>,
}

fn env_int(name: &std::ffi::CStr) -> Option<c_int> {
    // SAFETY: getenv with a NUL-terminated name; the result is read at once.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: getenv returns a NUL-terminated string.
    let s = unsafe { std::ffi::CStr::from_ptr(p) }.to_bytes();
    std::str::from_utf8(s).ok()?.trim().parse().ok()
}

/// Reads a small file with raw syscalls (no overridden function).
fn read_file(path: &std::ffi::CStr) -> Option<Vec<u8>> {
    // SAFETY: open/read/close of a path; the buffer is ours.
    unsafe {
        let fd =
            libc::syscall(libc::SYS_openat, libc::AT_FDCWD, path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) as c_int;
        if fd < 0 {
            return None;
        }
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        loop {
            let n = libc::syscall(libc::SYS_read, fd, buf.as_mut_ptr(), buf.len());
            if n <= 0 || out.len() > 1 << 20 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        libc::syscall(libc::SYS_close, fd);
        Some(out)
    }
}

fn field<T>(w: &[u8], f: impl Fn(&[u8]) -> Option<T>) -> Option<Option<T>> {
    if w == b"*" {
        Some(None)
    } else {
        f(w).map(Some)
    }
}

fn parse(text: &[u8]) -> Vec<Rule> {
    let mut rules = Vec::new();
    for line in text.split(|&b| b == b'\n') {
        let line = line.split(|&b| b == b'#').next().unwrap_or(&[]);
        let words: Vec<&[u8]> = line.split(|b| b.is_ascii_whitespace()).filter(|w| !w.is_empty()).collect();
        if words.len() < 4 {
            continue;
        }
        let domain = field(words[1], |w| match w {
            b"INET" => Some(libc::AF_INET),
            b"INET6" => Some(libc::AF_INET6),
            b"IB" => Some(27),
            _ => None,
        });
        let kind = field(words[2], |w| match w {
            b"STREAM" => Some(libc::SOCK_STREAM),
            b"DGRAM" => Some(libc::SOCK_DGRAM),
            _ => None,
        });
        let protocol = field(words[3], |w| match w {
            b"TCP" => Some(libc::IPPROTO_TCP),
            b"UDP" => Some(libc::IPPROTO_UDP),
            _ => None,
        });
        if let (Some(domain), Some(kind), Some(protocol)) = (domain, kind, protocol) {
            let program = if words[0] == b"*" { None } else { Some(words[0].to_vec()) };
            rules.push(Rule { program, domain, kind, protocol });
        }
    }
    rules
}

fn program_name() -> Vec<u8> {
    extern "C" {
        static program_invocation_short_name: *const libc::c_char;
    }
    // SAFETY: glibc's global, set before main; a NUL-terminated string.
    unsafe {
        let p = program_invocation_short_name;
        if p.is_null() {
            return Vec::new();
        }
        std::ffi::CStr::from_ptr(p).to_bytes().to_vec()
    }
}

impl Config {
    pub fn load() -> Config {
        let rules = read_file(c"/etc/rdma/rsocket/preload_config").map(|t| parse(&t));
        Config {
            rules,
            sq_size: env_int(c"RS_SQ_SIZE"),
            rq_size: env_int(c"RS_RQ_SIZE"),
            inline: env_int(c"RS_INLINE"),
        }
    }

    /// Whether a socket(domain, kind, protocol) of this program goes to rsockets.
    pub fn allows(&self, domain: c_int, kind: c_int, protocol: c_int) -> bool {
        let protocol = match (kind, protocol) {
            (libc::SOCK_STREAM, 0) => libc::IPPROTO_TCP,
            (libc::SOCK_DGRAM, 0) => libc::IPPROTO_UDP,
            (_, p) => p,
        };
        let Some(rules) = &self.rules else { return true };
        let me = program_name();
        rules.iter().any(|r| {
            r.program.as_ref().is_none_or(|p| me.starts_with(p))
                && r.domain.is_none_or(|d| d == domain)
                && r.kind.is_none_or(|k| k == kind)
                && r.protocol.is_none_or(|p| p == protocol)
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn rules() {
        let r = super::parse(b"# comment\niperf3 INET STREAM TCP\n* INET6 * *\nbad line\n");
        assert_eq!(r.len(), 2);
        let c = super::Config { rules: Some(r), sq_size: None, rq_size: None, inline: None };
        assert!(c.allows(libc::AF_INET6, libc::SOCK_DGRAM, 0));
    }
}
