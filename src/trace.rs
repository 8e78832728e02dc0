//! `RDMACM_RS_TRACE`: logs every librdmacm call with its result, errno and
//! duration. Unset or `0`: off; `1` or `stderr`: standard error; anything else
//! is a file path, opened for append.

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

static EPOCH: LazyLock<Instant> = LazyLock::new(Instant::now);

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
