//! `RDMACM_RS_TRACE`: logs every librdmacm call with its result, errno and
//! duration. Unset or `0`: off; `1` or `stderr`: standard error; anything else
//! is a file path, opened for append. Times are milliseconds since the process started
//! (the same clock as the verbs trace of softverbs, which uses the same switch).

use std::fs::OpenOptions;
use std::io::Write;
use std::sync::{LazyLock, Mutex};
use std::time::Instant;

enum Sink {
    Off,
    Stderr,
    File(Mutex<std::fs::File>),
}

static SINK: LazyLock<Sink> = LazyLock::new(|| match std::env::var("RDMACM_RS_TRACE") {
    Err(_) => Sink::Off,
    Ok(v) if v.is_empty() || v == "0" => Sink::Off,
    Ok(v) if v == "1" || v == "stderr" => Sink::Stderr,
    Ok(path) => match OpenOptions::new().create(true).append(true).open(&path) {
        Ok(f) => Sink::File(Mutex::new(f)),
        Err(_) => Sink::Stderr,
    },
});

static EPOCH: LazyLock<Instant> = LazyLock::new(process_start);

/// The clock's zero: the process's start (`/proc/self/stat` start time read against
/// `CLOCK_BOOTTIME`, 10 ms ticks), so librdmacm's and softverbs' traces, computing it the
/// same way, share one clock; the first traced call if that cannot be read.
fn process_start() -> Instant {
    let first = Instant::now();
    let epoch = || -> Option<Instant> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
        // SAFETY: plain sysconf query.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        // Read both clocks back to back: the epoch is then the same in both libraries.
        // SAFETY: valid out-pointer.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
        let now = Instant::now();
        if hz <= 0 || rc != 0 {
            return None;
        }
        let boot_ns = ts.tv_sec as u128 * 1_000_000_000 + ts.tv_nsec as u128;
        let start_ns = ticks as u128 * 1_000_000_000 / hz as u128;
        now.checked_sub(std::time::Duration::from_nanos(boot_ns.checked_sub(start_ns)? as u64))
    };
    epoch().unwrap_or(first)
}

pub fn enabled() -> bool {
    !matches!(*SINK, Sink::Off)
}

/// Start time of a call, taken only when tracing.
pub fn start() -> Option<Instant> {
    if enabled() {
        LazyLock::force(&EPOCH);
        Some(Instant::now())
    } else {
        None
    }
}

/// Writes one trace line; `line` is built only when tracing is on.
pub fn emit(t0: Option<Instant>, line: impl FnOnce() -> String) {
    let Some(t0) = t0 else { return };
    let now = Instant::now();
    let msg = format!(
        "rdmacm-rs[{}] {:>10.3}ms {} ({}us)\n",
        std::process::id(),
        now.duration_since(*EPOCH).as_secs_f64() * 1e3,
        line(),
        now.duration_since(t0).as_micros()
    );
    match &*SINK {
        Sink::Off => {}
        Sink::Stderr => {
            let _ = std::io::stderr().write_all(msg.as_bytes());
        }
        Sink::File(f) => {
            let _ = crate::cm::registry::lock(f).write_all(msg.as_bytes());
        }
    }
}
