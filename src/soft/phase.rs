//! Where an id stands in the connection protocol, and the one way that changes.
//!
//! Several threads move an id: the application's calls, the engine thread
//! (messages, EOF, timers) and a connect thread. A phase read under one hold
//! of the id's lock and written under another loses whatever another thread
//! did in between (an RTU turning `DreqSent` back into `Connected`, an EOF and
//! `rdma_disconnect` both reporting DISCONNECTED). So the phase is private to
//! this module and changes only through `PhaseCell::step`, a compare-and-set
//! made under the caller's hold of the lock: of threads racing for a
//! transition exactly one wins, and only the winner sends or posts.

/// Where an id stands in the connection protocol.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Idle,
    Bound,
    /// rdma_resolve_addr is under way (the kernel CM's ADDR_QUERY): claimed
    /// at its start, so that a second call is refused instead of resolving
    /// too; ends in AddrResolved, or where it started with ADDR_ERROR.
    AddrQuery,
    AddrResolved,
    RouteResolved,
    Listening,
    /// Active: REQ (or SIDR REQ) sent, waiting for the reply.
    ReqSent,
    /// Active, no QP on the id: CONNECT_RESPONSE delivered, waiting for rdma_establish.
    ConnResponse,
    /// Passive: CONNECT_REQUEST delivered, waiting for accept/reject.
    ReqRcvd,
    /// Passive: an accept (or a SIDR reply) is under way. Claimed before its
    /// QP work so that a second accept or a reject cannot answer the same
    /// request too; never seen by a caller that does not race it.
    Answering,
    /// Passive: REP sent, waiting for the RTU.
    RepSent,
    Connected,
    /// We sent DREQ and wait for DREP.
    DreqSent,
    /// The peer sent DREQ; our rdma_disconnect answers it.
    DreqRcvd,
    Disconnected,
}

impl Phase {
    /// A connection that is up on this side, or is about to be: what a
    /// disconnect (ours or the peer's) takes down.
    pub fn is_connected(self) -> bool {
        matches!(self, Phase::Connected | Phase::RepSent | Phase::ConnResponse)
    }
}

/// An id's phase: read with `get`, changed only with `step`.
#[derive(Debug)]
pub struct PhaseCell(Phase);

impl Default for PhaseCell {
    fn default() -> Self {
        PhaseCell(Phase::Idle)
    }
}

impl PhaseCell {
    pub fn get(&self) -> Phase {
        self.0
    }

    /// Moves to `to` if `from` accepts the current phase: `Ok(old)` to the
    /// winner, `Err(current)` (unchanged) to anyone else. `&mut` means the
    /// caller holds the id's lock, so the check and the move are one step.
    pub fn step(&mut self, from: impl FnOnce(Phase) -> bool, to: Phase) -> Result<Phase, Phase> {
        let old = self.0;
        if !from(old) {
            return Err(old);
        }
        self.0 = to;
        Ok(old)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Barrier, Mutex};

    fn at(p: Phase) -> PhaseCell {
        let mut c = PhaseCell::default();
        c.step(|_| true, p).unwrap();
        c
    }

    #[test]
    fn a_step_moves_only_from_an_accepted_phase_and_says_from_where() {
        let mut c = at(Phase::RepSent);
        assert_eq!(c.step(Phase::is_connected, Phase::DreqSent), Ok(Phase::RepSent));
        assert_eq!(c.get(), Phase::DreqSent);
        // An RTU arriving now must not bring the connection back.
        assert_eq!(c.step(|p| p == Phase::RepSent, Phase::Connected), Err(Phase::DreqSent));
        assert_eq!(c.get(), Phase::DreqSent, "a refused step leaves the phase alone");
        assert_eq!(c.step(|p| p == Phase::DreqSent, Phase::Disconnected), Ok(Phase::DreqSent));
        assert_eq!(c.step(|p| p != Phase::Disconnected, Phase::Disconnected), Err(Phase::Disconnected));
    }

    #[test]
    fn of_threads_racing_for_one_transition_exactly_one_wins() {
        const THREADS: usize = 8;
        for _ in 0..50 {
            let cell = Arc::new(Mutex::new(at(Phase::Connected)));
            let go = Arc::new(Barrier::new(THREADS));
            let racers: Vec<_> = (0..THREADS)
                .map(|i| {
                    let (cell, go) = (cell.clone(), go.clone());
                    // Half take the connection down as the application would, half as the peer's EOF would.
                    let to = if i % 2 == 0 { Phase::DreqSent } else { Phase::Disconnected };
                    std::thread::spawn(move || {
                        go.wait();
                        cell.lock().unwrap().step(Phase::is_connected, to).is_ok()
                    })
                })
                .collect();
            let wins = racers.into_iter().map(|t| t.join().unwrap()).filter(|&w| w).count();
            assert_eq!(wins, 1);
        }
    }
}
