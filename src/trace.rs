//! `RDMACM_RS_TRACE`: logs every librdmacm call with its result, errno and
//! duration. Unset or `0`: off; `1` or `stderr`: standard error; anything else
//! is a file path, opened for append. The sink and clock are shared with
//! softverbs' verbs trace (`common::trace`); our lines say `rdmacm-rs[PID]`.

use std::time::Instant;

pub fn enabled() -> bool {
    common::trace::on()
}

/// Start time of a call, taken only when tracing.
pub fn start() -> Option<Instant> {
    common::trace::start()
}

/// Writes one trace line; `line` is built only when tracing is on.
pub fn emit(t0: Option<Instant>, line: impl FnOnce() -> String) {
    if let Some(t0) = t0 {
        common::trace::write_line("rdmacm-rs", t0, &line());
    }
}
