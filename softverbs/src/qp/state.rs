//! The QP state machine: which `ibv_modify_qp` transitions are legal and which attribute
//! masks each needs or allows (the kernel's `ib_modify_qp_is_ok` rules, per QP type).
//! Pure functions, unit-tested below.

use rdma_abi::verbs::*;

/// Transport families the table distinguishes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Rc,
    Uc,
    Ud,
}

pub fn kind(qp_type: ibv_qp_type) -> Option<Kind> {
    match qp_type {
        IBV_QPT_RC => Some(Kind::Rc),
        IBV_QPT_UC => Some(Kind::Uc),
        IBV_QPT_UD => Some(Kind::Ud),
        _ => None,
    }
}

/// Every mask bit `ibv_modify_qp` knows.
pub const ALL_MASK: u32 = ((1 << 21) - 1) | IBV_QP_RATE_LIMIT;

/// (required, optional) attribute masks for `cur → next` (IBV_QP_STATE itself excluded),
/// or None if the transition is illegal.
pub fn masks(cur: ibv_qp_state, next: ibv_qp_state, k: Kind) -> Option<(u32, u32)> {
    use Kind::*;
    let none = Some((0, 0));
    if next == IBV_QPS_RESET || next == IBV_QPS_ERR {
        return match cur {
            IBV_QPS_RESET..=IBV_QPS_ERR => none,
            _ => None,
        };
    }
    match (cur, next) {
        (IBV_QPS_RESET, IBV_QPS_INIT) => Some(match k {
            Ud => (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, 0),
            Uc | Rc => (IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS, 0),
        }),
        (IBV_QPS_INIT, IBV_QPS_INIT) => Some(match k {
            Ud => (0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY),
            Uc | Rc => (0, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
        }),
        (IBV_QPS_INIT, IBV_QPS_RTR) => Some(match k {
            Ud => (0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
            Uc => (
                IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
            ),
            Rc => (
                IBV_QP_AV
                    | IBV_QP_PATH_MTU
                    | IBV_QP_DEST_QPN
                    | IBV_QP_RQ_PSN
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_MIN_RNR_TIMER,
                IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX,
            ),
        }),
        (IBV_QPS_RTR, IBV_QPS_RTS) => Some(match k {
            Ud => (IBV_QP_SQ_PSN, IBV_QP_CUR_STATE | IBV_QP_QKEY),
            Uc => (
                IBV_QP_SQ_PSN,
                IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE,
            ),
            Rc => (
                IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC,
                IBV_QP_CUR_STATE
                    | IBV_QP_ALT_PATH
                    | IBV_QP_ACCESS_FLAGS
                    | IBV_QP_MIN_RNR_TIMER
                    | IBV_QP_PATH_MIG_STATE,
            ),
        }),
        (IBV_QPS_RTS, IBV_QPS_RTS) | (IBV_QPS_SQD, IBV_QPS_RTS) => Some(match k {
            Ud => (0, IBV_QP_CUR_STATE | IBV_QP_QKEY),
            Uc => (0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE),
            Rc => (
                0,
                IBV_QP_CUR_STATE
                    | IBV_QP_ACCESS_FLAGS
                    | IBV_QP_ALT_PATH
                    | IBV_QP_PATH_MIG_STATE
                    | IBV_QP_MIN_RNR_TIMER,
            ),
        }),
        (IBV_QPS_RTS, IBV_QPS_SQD) => Some((0, IBV_QP_EN_SQD_ASYNC_NOTIFY)),
        (IBV_QPS_SQD, IBV_QPS_SQD) => Some(match k {
            Ud => (0, IBV_QP_PKEY_INDEX | IBV_QP_QKEY),
            Uc => (0, IBV_QP_AV | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PATH_MIG_STATE),
            Rc => (
                0,
                IBV_QP_PORT
                    | IBV_QP_AV
                    | IBV_QP_TIMEOUT
                    | IBV_QP_RETRY_CNT
                    | IBV_QP_RNR_RETRY
                    | IBV_QP_MAX_QP_RD_ATOMIC
                    | IBV_QP_MAX_DEST_RD_ATOMIC
                    | IBV_QP_ALT_PATH
                    | IBV_QP_ACCESS_FLAGS
                    | IBV_QP_PKEY_INDEX
                    | IBV_QP_MIN_RNR_TIMER
                    | IBV_QP_PATH_MIG_STATE,
            ),
        }),
        (IBV_QPS_SQE, IBV_QPS_RTS) => Some(match k {
            Ud => (0, IBV_QP_CUR_STATE | IBV_QP_QKEY),
            Uc => (0, IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS),
            Rc => return None,
        }),
        (IBV_QPS_RTR, IBV_QPS_RTR) => None,
        _ => None,
    }
}

/// Limits the attribute values are checked against.
pub struct Limits {
    pub max_rd_atom: u8,
}

/// An `ibv_modify_qp` call `check` refuses (EINVAL for the caller).
#[derive(Debug, PartialEq, Eq)]
pub struct Invalid;

/// Validates one `ibv_modify_qp` call: the transition, the mask and the attribute values.
/// `attr.qp_state` is read only when `mask` has `IBV_QP_STATE`. Returns the new state.
pub fn check(cur: ibv_qp_state, k: Kind, attr: &ibv_qp_attr, mask: u32, lim: &Limits) -> Result<ibv_qp_state, Invalid> {
    if mask & !ALL_MASK != 0 {
        return Err(Invalid);
    }
    if mask & IBV_QP_CUR_STATE != 0 && attr.cur_qp_state != cur {
        return Err(Invalid);
    }
    let next = if mask & IBV_QP_STATE != 0 { attr.qp_state } else { cur };
    if next > IBV_QPS_ERR {
        return Err(Invalid);
    }
    let (req, opt) = masks(cur, next, k).ok_or(Invalid)?;
    let given = mask & !IBV_QP_STATE;
    if given & req != req || given & !(req | opt) != 0 {
        return Err(Invalid);
    }
    if mask & IBV_QP_PORT != 0 && attr.port_num != 1 {
        return Err(Invalid);
    }
    if mask & IBV_QP_PKEY_INDEX != 0 && attr.pkey_index != 0 {
        return Err(Invalid);
    }
    if mask & IBV_QP_PATH_MTU != 0 && !(IBV_MTU_256..=IBV_MTU_4096).contains(&attr.path_mtu) {
        return Err(Invalid);
    }
    if mask & IBV_QP_MAX_QP_RD_ATOMIC != 0 && attr.max_rd_atomic > lim.max_rd_atom {
        return Err(Invalid);
    }
    if mask & IBV_QP_MAX_DEST_RD_ATOMIC != 0 && attr.max_dest_rd_atomic > lim.max_rd_atom {
        return Err(Invalid);
    }
    if mask & IBV_QP_DEST_QPN != 0 && attr.dest_qp_num & !0x00ff_ffff != 0 {
        return Err(Invalid);
    }
    if mask & IBV_QP_RNR_RETRY != 0 && attr.rnr_retry > 7 {
        return Err(Invalid);
    }
    if mask & IBV_QP_RETRY_CNT != 0 && attr.retry_cnt > 7 {
        return Err(Invalid);
    }
    if mask & IBV_QP_MIN_RNR_TIMER != 0 && attr.min_rnr_timer > 31 {
        return Err(Invalid);
    }
    if mask & IBV_QP_ACCESS_FLAGS != 0
        && attr.qp_access_flags & !(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND) != 0
    {
        return Err(Invalid);
    }
    Ok(next)
}

/// The RNR NAK timer for an encoded `min_rnr_timer` value, in microseconds (IB spec
/// table: 0 = 655.36 ms, 1 = 0.01 ms … 31 = 491.52 ms).
pub fn rnr_timer_us(v: u8) -> u64 {
    const T: [u64; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840, 5_120, 7_680, 10_240, 15_360,
        20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840, 245_760, 327_680, 491_520,
    ];
    T[(v & 31) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attr(state: ibv_qp_state) -> ibv_qp_attr {
        // SAFETY: ibv_qp_attr is plain data.
        let mut a: ibv_qp_attr = unsafe { std::mem::zeroed() };
        a.qp_state = state;
        a.port_num = 1;
        a.path_mtu = IBV_MTU_1024;
        a
    }
    const L: Limits = Limits { max_rd_atom: 16 };

    #[test]
    fn rc_happy_path() {
        let m_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        assert_eq!(check(IBV_QPS_RESET, Kind::Rc, &attr(IBV_QPS_INIT), m_init, &L), Ok(IBV_QPS_INIT));
        let m_rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MIN_RNR_TIMER | IBV_QP_MAX_DEST_RD_ATOMIC;
        assert_eq!(check(IBV_QPS_INIT, Kind::Rc, &attr(IBV_QPS_RTR), m_rtr, &L), Ok(IBV_QPS_RTR));
        let m_rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        assert_eq!(check(IBV_QPS_RTR, Kind::Rc, &attr(IBV_QPS_RTS), m_rts, &L), Ok(IBV_QPS_RTS));
        assert_eq!(check(IBV_QPS_RTS, Kind::Rc, &attr(IBV_QPS_SQD), IBV_QP_STATE, &L), Ok(IBV_QPS_SQD));
        assert_eq!(check(IBV_QPS_SQD, Kind::Rc, &attr(IBV_QPS_RTS), IBV_QP_STATE, &L), Ok(IBV_QPS_RTS));
        assert_eq!(check(IBV_QPS_RTS, Kind::Rc, &attr(IBV_QPS_ERR), IBV_QP_STATE, &L), Ok(IBV_QPS_ERR));
        assert_eq!(check(IBV_QPS_ERR, Kind::Rc, &attr(IBV_QPS_RESET), IBV_QP_STATE, &L), Ok(IBV_QPS_RESET));
        // qperf's lone MIN_RNR_TIMER modify in RTS
        assert_eq!(check(IBV_QPS_RTS, Kind::Rc, &attr(0), IBV_QP_MIN_RNR_TIMER, &L), Ok(IBV_QPS_RTS));
    }

    #[test]
    fn rejects() {
        // missing required bits
        assert!(check(IBV_QPS_RESET, Kind::Rc, &attr(IBV_QPS_INIT), IBV_QP_STATE | IBV_QP_PORT, &L).is_err());
        // skipping a state
        assert!(check(IBV_QPS_RESET, Kind::Rc, &attr(IBV_QPS_RTS), IBV_QP_STATE, &L).is_err());
        assert!(check(IBV_QPS_INIT, Kind::Rc, &attr(IBV_QPS_RTS), IBV_QP_STATE | IBV_QP_SQ_PSN, &L).is_err());
        // extra bits not allowed
        let m = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS | IBV_QP_SQ_PSN;
        assert!(check(IBV_QPS_RESET, Kind::Rc, &attr(IBV_QPS_INIT), m, &L).is_err());
        // UD wants QKEY not ACCESS_FLAGS
        let m = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        assert!(check(IBV_QPS_RESET, Kind::Ud, &attr(IBV_QPS_INIT), m, &L).is_err());
        // bad port
        let mut a = attr(IBV_QPS_INIT);
        a.port_num = 2;
        assert!(check(IBV_QPS_RESET, Kind::Ud, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY, &L).is_err());
        // too many rd atomics
        let mut a = attr(IBV_QPS_RTS);
        a.max_rd_atomic = 17;
        let m_rts = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        assert!(check(IBV_QPS_RTR, Kind::Rc, &a, m_rts, &L).is_err());
        // unknown mask bits, bad state value, wrong CUR_STATE
        assert!(check(IBV_QPS_RESET, Kind::Rc, &attr(IBV_QPS_RESET), IBV_QP_STATE | (1 << 30), &L).is_err());
        assert!(check(IBV_QPS_RESET, Kind::Rc, &attr(9), IBV_QP_STATE, &L).is_err());
        let mut a = attr(IBV_QPS_RTS);
        a.cur_qp_state = IBV_QPS_INIT;
        assert!(check(IBV_QPS_RTS, Kind::Rc, &a, IBV_QP_STATE | IBV_QP_CUR_STATE, &L).is_err());
        // RTR -> RTR is illegal
        assert!(check(IBV_QPS_RTR, Kind::Rc, &attr(IBV_QPS_RTR), IBV_QP_STATE, &L).is_err());
    }

    #[test]
    fn ud_path() {
        let m_init = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
        assert_eq!(check(IBV_QPS_RESET, Kind::Ud, &attr(IBV_QPS_INIT), m_init, &L), Ok(IBV_QPS_INIT));
        assert_eq!(check(IBV_QPS_INIT, Kind::Ud, &attr(IBV_QPS_RTR), IBV_QP_STATE, &L), Ok(IBV_QPS_RTR));
        assert_eq!(check(IBV_QPS_RTR, Kind::Ud, &attr(IBV_QPS_RTS), IBV_QP_STATE | IBV_QP_SQ_PSN, &L), Ok(IBV_QPS_RTS));
    }

    #[test]
    fn rnr_table() {
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(rnr_timer_us(1), 10);
        assert_eq!(rnr_timer_us(31), 491_520);
    }
}
