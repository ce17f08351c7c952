//! Answering a node this one does not know yet.
//!
//! Every Hello carries the dialler's Raft address (`reply_to`). When a node that is
//! not among the peers dials in (a learner started with the founders' addresses
//! hears from a leader that joined after it), its address is remembered here, and
//! the first message this node sends it adopts it as a *guest* peer at that
//! address. Without this, the learner's answers had nowhere to go until it read
//! the configuration entry naming the leader, which only its answers would bring.
//!
//! Both tables are bounded, so dialling in under many ids (possible without a
//! cluster secret) costs a node a few entries, not a writer per id: at most
//! [`HEARD_MAX`] remembered addresses (the oldest forgotten first) and
//! [`GUESTS_MAX`] guest peers at a time. A guest stays a peer until the node
//! removes it (a configuration change that does not name it) or adds it as a
//! member, whose configured address then replaces the announced one.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::net::SocketAddr;
use std::sync::{Mutex, PoisonError};

/// The most addresses remembered from Hellos of nodes that are not peers.
pub const HEARD_MAX: usize = 64;

/// The most guest peers at a time.
pub const GUESTS_MAX: usize = 8;

/// Where a Hello says to reply: its `reply_to`, with an unspecified IP replaced by
/// the connection's source IP; `None` for port 0 (nowhere to dial).
pub fn reply_address(reply_to: SocketAddr, remote: SocketAddr) -> Option<SocketAddr> {
    if reply_to.port() == 0 {
        return None;
    }
    if reply_to.ip().is_unspecified() {
        return Some(SocketAddr::new(remote.ip(), reply_to.port()));
    }
    Some(reply_to)
}

#[derive(Debug, Default)]
struct Tables {
    heard: BTreeMap<u16, SocketAddr>,
    /// `heard`'s ids, oldest first.
    order: VecDeque<u16>,
    guests: BTreeSet<u16>,
}

/// The addresses heard from unknown diallers, and which peers are guests.
#[derive(Debug, Default)]
pub struct DialBack {
    tables: Mutex<Tables>,
}

impl DialBack {
    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.tables.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Remembers that node `id` listens at `addr` (its latest Hello wins).
    pub fn heard(&self, id: u16, addr: SocketAddr) {
        let mut t = self.tables();
        if t.heard.insert(id, addr).is_none() {
            t.order.push_back(id);
            while t.order.len() > HEARD_MAX {
                if let Some(old) = t.order.pop_front() {
                    t.heard.remove(&old);
                }
            }
        }
    }

    /// Makes `id` a guest if an address was heard from it and there is room for
    /// another guest (checked and taken in one hold, so the bound is exact), and
    /// returns that address; the caller then adds the peer, or calls
    /// [`DialBack::forget_guest`] if it cannot.
    pub fn adopt(&self, id: u16) -> Option<SocketAddr> {
        let mut t = self.tables();
        if t.guests.len() >= GUESTS_MAX {
            return None;
        }
        let addr = t.heard.get(&id).copied()?;
        t.guests.insert(id);
        Some(addr)
    }

    /// `id` is no longer a guest (removed, or made a member); returns whether it
    /// was one.
    pub fn forget_guest(&self, id: u16) -> bool {
        self.tables().guests.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    #[test]
    fn an_unspecified_ip_is_the_connection_s_and_port_zero_is_nowhere() {
        let remote = SocketAddr::from(([10, 1, 2, 3], 40000));
        assert_eq!(
            reply_address(SocketAddr::from(([0, 0, 0, 0], 7000)), remote),
            Some(SocketAddr::from(([10, 1, 2, 3], 7000)))
        );
        assert_eq!(reply_address(at(7000), remote), Some(at(7000)));
        assert_eq!(reply_address(at(0), remote), None);
    }

    #[test]
    fn both_tables_are_bounded() {
        let d = DialBack::default();
        for id in 0..(HEARD_MAX as u16 + 10) {
            d.heard(id, at(1000 + id));
        }
        // The oldest ten were forgotten; the rest are there, latest address kept.
        assert_eq!(d.adopt(0), None);
        assert_eq!(d.adopt(9), None);
        assert_eq!(d.adopt(10), Some(at(1010)));
        assert!(d.forget_guest(10));
        d.heard(10, at(9));
        assert_eq!(d.adopt(10), Some(at(9)));
        for id in 11..(10 + GUESTS_MAX as u16) {
            assert_eq!(d.adopt(id), Some(at(1000 + id)));
        }
        // No room for another guest until one goes.
        let next = 10 + GUESTS_MAX as u16;
        assert_eq!(d.adopt(next), None);
        assert!(d.forget_guest(10));
        assert!(!d.forget_guest(10));
        assert_eq!(d.adopt(next), Some(at(1000 + next)));
    }
}
