//! The `RDMACM_RS_TRACE` sink both libraries write to. Unset or `0`: off; `1`
//! or `stderr`: standard error; anything else is a file path opened with
//! `O_APPEND`. Each line is one `write(2)`, so librdmacm's and softverbs' lines
//! interleave whole in one file; times are milliseconds since the process
//! started, so both libraries share one clock.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::LazyLock;
use std::time::Instant;

enum Sink {
    Off,
    Stderr,
    File(File),
}

static SINK: LazyLock<Sink> = LazyLock::new(|| match std::env::var("RDMACM_RS_TRACE") {
    Err(_) => Sink::Off,
    Ok(v) if v.is_empty() || v == "0" => Sink::Off,
    Ok(v) if v == "1" || v == "stderr" => Sink::Stderr,
    Ok(path) => match OpenOptions::new().create(true).append(true).open(&path) {
        Ok(f) => Sink::File(f),
        Err(_) => Sink::Stderr,
    },
});

static EPOCH: LazyLock<Instant> = LazyLock::new(process_start);

/// The clock's zero: the process's start (`/proc/self/stat` start time read against
/// `CLOCK_BOOTTIME`, 10 ms ticks); the first traced call if that cannot be read.
fn process_start() -> Instant {
    let first = Instant::now();
    let epoch = || -> Option<Instant> {
        let stat = std::fs::read_to_string("/proc/self/stat").ok()?;
        let rest = &stat[stat.rfind(')')? + 1..];
        let ticks: u64 = rest.split_whitespace().nth(19)?.parse().ok()?;
        // SAFETY: plain sysconf query.
        let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
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

/// Whether tracing is on (the environment is read once, at the first call).
#[inline]
pub fn on() -> bool {
    !matches!(*SINK, Sink::Off)
}

/// Start time of a call, taken only when tracing.
#[inline]
pub fn start() -> Option<Instant> {
    if on() {
        LazyLock::force(&EPOCH);
        Some(Instant::now())
    } else {
        None
    }
}

/// Writes `who[PID]  T ms text (Nus)`, timed from `t0`.
pub fn write_line(who: &str, t0: Instant, text: &str) {
    let now = Instant::now();
    let msg = format!(
        "{}[{}] {:>10.3}ms {} ({}us)\n",
        who,
        std::process::id(),
        now.duration_since(*EPOCH).as_secs_f64() * 1e3,
        text,
        now.duration_since(t0).as_micros()
    );
    match &*SINK {
        Sink::Off => {}
        Sink::Stderr => {
            let _ = std::io::stderr().write_all(msg.as_bytes());
        }
        Sink::File(f) => {
            let _ = (&*f).write_all(msg.as_bytes());
        }
    }
}
