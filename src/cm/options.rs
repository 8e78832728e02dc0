//! `rdma_set_option`: argument checks and the values kept per id until a
//! backend applies them.

use crate::sys::{Errno, Result};
use rdma_abi::cma::*;

/// `struct ibv_path_data` is 72 bytes; IB_PATH takes an array of them.
const PATH_DATA_SIZE: usize = 72;

#[derive(Clone, Default, Debug, PartialEq, Eq)]
pub struct Options {
    pub tos: Option<u8>,
    pub reuseaddr: Option<bool>,
    pub afonly: Option<bool>,
    pub ack_timeout: Option<u8>,
    /// Raw `ibv_path_data` records given with RDMA_OPTION_IB_PATH.
    /// Behind one thin pointer (a boxed slice is two words): options are
    /// part of every id's allocation, and few ids set this one.
    pub ib_path: Option<Box<Vec<u8>>>,
}

/// One option as parsed from (level, optname, optval bytes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Opt {
    Tos(u8),
    ReuseAddr(bool),
    AfOnly(bool),
    AckTimeout(u8),
    IbPath(Vec<u8>),
}

fn int_of(v: &[u8]) -> Result<i32> {
    let a: [u8; 4] = v.try_into().map_err(|_| Errno::EINVAL)?;
    Ok(i32::from_ne_bytes(a))
}

fn u8_of(v: &[u8]) -> Result<u8> {
    match v {
        [b] => Ok(*b),
        _ => Err(Errno::EINVAL),
    }
}

/// Parses an option the way the kernel checks it: unknown level or name is
/// ENOSYS, a wrong length EINVAL.
pub fn parse(level: i32, optname: i32, val: &[u8]) -> Result<Opt> {
    match (level, optname) {
        (RDMA_OPTION_ID, RDMA_OPTION_ID_TOS) => Ok(Opt::Tos(u8_of(val)?)),
        (RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR) => Ok(Opt::ReuseAddr(int_of(val)? != 0)),
        (RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY) => Ok(Opt::AfOnly(int_of(val)? != 0)),
        (RDMA_OPTION_ID, RDMA_OPTION_ID_ACK_TIMEOUT) => Ok(Opt::AckTimeout(u8_of(val)?)),
        (RDMA_OPTION_IB, RDMA_OPTION_IB_PATH) => {
            if val.is_empty() || !val.len().is_multiple_of(PATH_DATA_SIZE) {
                return Err(Errno::EINVAL);
            }
            Ok(Opt::IbPath(val.to_vec()))
        }
        _ => Err(Errno::ENOSYS),
    }
}

impl Options {
    /// Records an option. REUSEADDR and AFONLY only make sense before bind.
    pub fn apply(&mut self, opt: Opt, bound: bool) -> Result<()> {
        match opt {
            Opt::Tos(v) => self.tos = Some(v),
            Opt::ReuseAddr(v) | Opt::AfOnly(v) if bound => {
                let _ = v;
                return Err(Errno::EINVAL);
            }
            Opt::ReuseAddr(v) => self.reuseaddr = Some(v),
            Opt::AfOnly(v) => self.afonly = Some(v),
            Opt::AckTimeout(v) => self.ack_timeout = Some(v),
            Opt::IbPath(v) => self.ib_path = Some(Box::new(v)),
        }
        Ok(())
    }

    /// Puts back the one field `opt` sets as it was in `before` (a value the
    /// backend refused), leaving the others as they are now.
    pub fn restore(&mut self, opt: &Opt, before: &Options) {
        match opt {
            Opt::Tos(_) => self.tos = before.tos,
            Opt::ReuseAddr(_) => self.reuseaddr = before.reuseaddr,
            Opt::AfOnly(_) => self.afonly = before.afonly,
            Opt::AckTimeout(_) => self.ack_timeout = before.ack_timeout,
            Opt::IbPath(_) => self.ib_path = before.ib_path.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_and_names() {
        assert_eq!(parse(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &[5]), Ok(Opt::Tos(5)));
        assert_eq!(parse(RDMA_OPTION_ID, RDMA_OPTION_ID_TOS, &[5, 0]), Err(Errno::EINVAL));
        assert_eq!(parse(RDMA_OPTION_ID, RDMA_OPTION_ID_REUSEADDR, &1i32.to_ne_bytes()), Ok(Opt::ReuseAddr(true)));
        assert_eq!(parse(RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &[1]), Err(Errno::EINVAL));
        assert_eq!(parse(RDMA_OPTION_ID, 99, &[1]), Err(Errno::ENOSYS));
        assert_eq!(parse(7, 0, &[1]), Err(Errno::ENOSYS));
        assert_eq!(parse(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &[0; 71]), Err(Errno::EINVAL));
        assert!(parse(RDMA_OPTION_IB, RDMA_OPTION_IB_PATH, &[0; 144]).is_ok());
    }

    #[test]
    fn reuseaddr_after_bind_is_refused() {
        let mut o = Options::default();
        assert_eq!(o.apply(Opt::ReuseAddr(true), true), Err(Errno::EINVAL));
        assert_eq!(o.apply(Opt::ReuseAddr(true), false), Ok(()));
        assert_eq!(o.reuseaddr, Some(true));
    }
}
