//! Tunables (rsocket(7), "configuration files"): one integer per file under
//! `/etc/rdma/rsocket`, read once per process, upstream's defaults otherwise.
//! `RDMACM_RS_RSOCKET_CONF=/dir` reads another directory (tests).

use std::sync::LazyLock;

/// Bytes per datagram slot and the least send space a stream send waits for.
pub const RS_SNDLOWAT: usize = 2048;
/// Send work requests kept for control messages.
pub const RS_QP_CTRL_SIZE: u32 = 4;
/// Largest queue depth a stream rsocket asks for.
pub const RS_QP_MAX_SIZE: u32 = 0xFFFE;
pub const RS_QP_MIN_SIZE: u32 = 16;
/// Address resolution retries on ETIMEDOUT.
pub const RS_CONN_RETRIES: u32 = 6;
/// Entries of the target SGL (the two halves of the receive buffer).
pub const RS_SGL_SIZE: usize = 2;

#[derive(Clone, Copy, Debug)]
pub struct Config {
    pub mem_default: usize,
    pub wmem_default: usize,
    pub sqsize_default: u32,
    pub rqsize_default: u32,
    pub inline_default: u32,
    /// inline_default came from the configuration, not the built-in 64.
    pub inline_configured: bool,
    pub iomap_size: u32,
    pub polling_time_us: u64,
    pub wake_up_interval_ms: i32,
}

fn dir() -> String {
    std::env::var("RDMACM_RS_RSOCKET_CONF").unwrap_or_else(|_| "/etc/rdma/rsocket".to_string())
}

fn value(name: &str) -> Option<i64> {
    let text = std::fs::read_to_string(format!("{}/{}", dir(), name)).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

fn get(name: &str, default: i64) -> i64 {
    value(name).unwrap_or(default)
}

impl Config {
    fn load() -> Config {
        let mem = get("mem_default", 1 << 17).max(1) as usize;
        let wmem = get("wmem_default", 1 << 17);
        let wmem = if wmem < RS_SNDLOWAT as i64 { RS_SNDLOWAT << 1 } else { wmem as usize };
        let iomap = get("iomap_size", 0).clamp(0, 0x7FFF) as u32;
        Config {
            mem_default: mem,
            wmem_default: wmem,
            sqsize_default: get("sqsize_default", 384).clamp(1, u32::MAX as i64) as u32,
            rqsize_default: get("rqsize_default", 384).clamp(1, u32::MAX as i64) as u32,
            inline_default: get("inline_default", 64).clamp(0, RS_QP_MAX_SIZE as i64) as u32,
            inline_configured: value("inline_default").is_some(),
            // Rounded to what the 8-bit scale of the connection data can carry.
            iomap_size: crate::rsocket::wire::scale_decode(crate::rsocket::wire::scale_encode(iomap as u16)) as u32,
            polling_time_us: get("polling_time", 10).max(0) as u64,
            wake_up_interval_ms: get("wake_up_interval", 500).clamp(1, i32::MAX as i64) as i32,
        }
    }
}

static CONFIG: LazyLock<Config> = LazyLock::new(Config::load);

pub fn get_config() -> &'static Config {
    &CONFIG
}
