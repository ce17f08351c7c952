//! Write admission: a client request taken ([`Replica::request`]), refused
//! before it is proposed when this node does not lead, the write is too large for
//! a message or would eat into the write reserve (`-OOM`); then answered once
//! its entry commits, or failed when its entry is cut away.

use crate::consensus::machine::MachineCall;
use crate::consensus::raft::{Command, RaftError, Role};
use crate::consensus::service::{KvReply, KvRequest};

use super::{Output, PendingWrite, ReadOf, Replica, MAX_MESSAGE_BYTES, RECORD_OVERHEAD};

impl Replica {
    /// The leader's client address, if known. A node removed from the cluster
    /// hears from no leader any more: it names a voter of its last configuration
    /// instead, so that clients still talking to it move on.
    pub(super) fn leader_addr(&self) -> Option<String> {
        if let Some(addr) = self
            .core
            .leader()
            .and_then(|l| self.client_addrs.get(&l).cloned())
        {
            return Some(addr);
        }
        let m = self.core.membership();
        if m.contains(self.core.id()) {
            return None;
        }
        m.voters
            .iter()
            .find_map(|v| self.client_addrs.get(v).cloned())
    }

    /// Takes a client request identified by `token`. Returns the reply at once when
    /// there is one (not the leader, a rejected request, `INFO`); otherwise the reply
    /// comes out of a later [`Replica::process`].
    pub fn request(&mut self, token: u64, req: KvRequest) -> Option<KvReply> {
        if let KvRequest::Info = req {
            return Some(KvReply::Info(self.status().info_text()));
        }
        if let KvRequest::ShowMembership = req {
            return Some(KvReply::Info(self.status().membership_text()));
        }
        if let KvRequest::TransferLeader { to } = req {
            return Some(self.transfer_leadership(to));
        }
        if self.core.role() != Role::Leader {
            let read = match req {
                KvRequest::Get { key } => Some(ReadOf::Key(key)),
                KvRequest::Machine(MachineCall::Read(query)) if self.machine.is_some() => {
                    Some(ReadOf::Query(query))
                }
                _ => None,
            };
            return match read {
                // A learner serves reads itself, through the leader's read index.
                Some(what) if self.serves_reads_as_learner() => self.read(token, what),
                _ => Some(KvReply::NotLeader {
                    leader: self.leader_addr(),
                }),
            };
        }
        if let Some(reason) = self.oversized(&req) {
            return Some(KvReply::Rejected(reason));
        }
        if let KvRequest::Set { key, .. } | KvRequest::Delete { key } | KvRequest::Cas { key, .. } =
            &req
        {
            if crate::consensus::raft::is_reserved_key(key) {
                return Some(KvReply::Rejected(
                    "keys starting with \\x00raft-nvm/ are the cluster's own (its configuration); they cannot be written".to_string(),
                ));
            }
        }
        if matches!(req, KvRequest::Machine(_)) && self.machine.is_none() {
            return Some(KvReply::Rejected(
                "this node runs no state machine".to_string(),
            ));
        }
        let need = match &req {
            KvRequest::Set { key, value } => Some((key.len() + value.len(), false)),
            KvRequest::Cas { key, new, .. } => Some((key.len() + new.len(), false)),
            KvRequest::Delete { key } => Some((key.len(), true)),
            KvRequest::Machine(MachineCall::Write(data)) => Some((data.len(), false)),
            KvRequest::ChangeMembership(_) => {
                Some((crate::consensus::raft::MEMBERSHIP_KEY.len() + 256, false))
            }
            KvRequest::Get { .. }
            | KvRequest::Info
            | KvRequest::Machine(_)
            | KvRequest::TransferLeader { .. }
            | KvRequest::ShowMembership => None,
        };
        if let Some((payload, delete)) = need {
            // A record's header and alignment: an upper bound for both engines.
            let bytes = self.charge(payload as u64 + RECORD_OVERHEAD);
            if let Some(reason) = self.no_room(bytes, delete) {
                self.compactor.refused(1);
                return Some(KvReply::OutOfMemory(reason));
            }
            self.unappended += bytes;
        }
        let cmd = match req {
            KvRequest::Get { key } => return self.read(token, ReadOf::Key(key)),
            KvRequest::Machine(MachineCall::Read(query)) => {
                return self.read(token, ReadOf::Query(query))
            }
            KvRequest::Machine(MachineCall::Write(data)) => Command::Machine { data },
            KvRequest::Set { key, value } => Command::Put { key, value },
            KvRequest::Delete { key } => Command::Delete { key },
            KvRequest::Cas { key, expected, new } => Command::Cas { key, expected, new },
            // Answered above; never left pending (its client would wait forever).
            KvRequest::Info => return Some(KvReply::Info(self.status().info_text())),
            KvRequest::TransferLeader { to } => return Some(self.transfer_leadership(to)),
            KvRequest::ChangeMembership(change) => {
                return self.change_membership(token, change);
            }
            KvRequest::ShowMembership => {
                return Some(KvReply::Info(self.status().membership_text()))
            }
        };
        match self.core.propose(cmd) {
            Ok(index) => {
                self.await_commit(index, token);
                None
            }
            // Leadership is moving: no leader to name yet (`TRYAGAIN`).
            Err(RaftError::Transferring { .. }) => Some(KvReply::NotLeader { leader: None }),
            Err(_) => Some(KvReply::NotLeader {
                leader: self.leader_addr(),
            }),
        }
    }

    /// Request `token`'s reply waits for entry `index` (of this term) to commit.
    pub(super) fn await_commit(&mut self, index: u64, token: u64) {
        self.writes.insert(
            index,
            PendingWrite {
                token,
                term: self.core.term(),
                outcome: None,
            },
        );
    }

    /// The space a record of `bytes` takes, counting its page's share that records
    /// of its size leave unused (a record never spans two pages: two 700-byte
    /// records do not share a 1 KiB page). The engine's largest entry stands for
    /// the page's room.
    pub(super) fn charge(&self, bytes: u64) -> u64 {
        let unit = self.store.max_payload() as u64 + RECORD_OVERHEAD;
        match unit.checked_div(bytes) {
            Some(per_unit) if per_unit > 0 => unit.div_ceil(per_unit),
            _ => bytes,
        }
    }

    /// The write reserve in bytes for a store of `capacity` (see
    /// [`ReplicaConfig::write_reserve`](crate::consensus::replica::ReplicaConfig::write_reserve)).
    pub(super) fn reserve(&self, capacity: u64) -> u64 {
        let floor = 8 * self.store.max_payload() as u64;
        ((capacity as f64 * self.write_reserve) as u64).max(floor)
    }

    /// Bytes this replica may still append before the last quarter of the reserve
    /// (`None`: unbounded). That quarter is never appended into, by leaders or
    /// followers: the list's compaction copies what it keeps into free pages, so a
    /// pool with none left could never be compacted again.
    pub(super) fn append_room(&self) -> Option<u64> {
        let usage = self.store.usage();
        let (capacity, free) = (usage.capacity?, usage.free?);
        Some(free.saturating_sub(self.reserve(capacity) / 4))
    }

    /// Why a write of `bytes` does not fit: it would leave less free than the write
    /// reserve (half of it for a delete), counting what was proposed but not yet
    /// appended.
    pub(super) fn no_room(&self, bytes: u64, delete: bool) -> Option<String> {
        let usage = self.store.usage();
        let (Some(capacity), Some(free)) = (usage.capacity, usage.free) else {
            return None;
        };
        let mut reserve = self.reserve(capacity);
        if delete {
            reserve /= 2;
        }
        let wanted = self.unappended + bytes + reserve;
        (free < wanted).then(|| {
            format!(
                "store full: {free} of {capacity} bytes free, a write needs {bytes} and {reserve} are reserved; delete keys or grow the pool"
            )
        })
    }

    /// The largest key and value one entry may hold: `max_entries_per_msg` of
    /// them must fit one replication message, well under the transport's frame
    /// limit. The same on every replica of a cluster (it is configuration), so
    /// what a state machine writes can be checked against it deterministically.
    pub(super) fn max_entry(&self) -> usize {
        MAX_MESSAGE_BYTES / self.core.config().max_entries_per_msg.max(1)
    }

    /// Why `req` cannot be stored (a key or value over the engine's limits).
    pub(super) fn oversized(&self, req: &KvRequest) -> Option<String> {
        let (key, value_len) = match req {
            KvRequest::Get { key } | KvRequest::Delete { key } => (key, 0),
            KvRequest::Set { key, value } => (key, value.len()),
            KvRequest::Cas { key, new, .. } => (key, new.len()),
            KvRequest::Machine(MachineCall::Write(data)) => {
                let max_entry = self.max_entry();
                return (data.len() > max_entry).then(|| {
                    format!(
                        "a command of {} bytes exceeds {max_entry} bytes, the largest entry a replication message carries",
                        data.len()
                    )
                });
            }
            KvRequest::Info
            | KvRequest::Machine(_)
            | KvRequest::TransferLeader { .. }
            | KvRequest::ChangeMembership(_)
            | KvRequest::ShowMembership => return None,
        };
        if key.len() > usize::from(u16::MAX) {
            return Some(format!(
                "key of {} bytes is longer than {} bytes",
                key.len(),
                u16::MAX
            ));
        }
        let per_message = self.core.config().max_entries_per_msg.max(1);
        let max_entry = self.max_entry();
        if key.len() + value_len > max_entry {
            return Some(format!(
                "key and value of {} bytes exceed {max_entry} bytes, the largest entry a replication message of {per_message} entries carries",
                key.len() + value_len
            ));
        }
        (!self.store.fits(key.len(), value_len)).then(|| {
            format!(
                "a key of {} bytes with a value of {value_len} bytes exceeds the {} engine's entry limit",
                key.len(),
                self.store.engine()
            )
        })
    }

    /// The write reserve in bytes ([`ReplicaConfig::write_reserve`](crate::consensus::replica::ReplicaConfig::write_reserve) of the
    /// store's capacity), or `None` for a store without a capacity.
    pub fn write_reserve_bytes(&self) -> Option<u64> {
        self.store.usage().capacity.map(|c| self.reserve(c))
    }

    /// Answers the writes applied up to `to`.
    pub(super) fn answer_writes(&mut self, to: u64, out: &mut Output) {
        let rest = self.writes.split_off(&(to + 1));
        for (index, w) in std::mem::replace(&mut self.writes, rest) {
            let reply = match w.outcome {
                Some(r) if self.store.term_at(index).is_none_or(|t| t == w.term) => r,
                _ => KvReply::Unavailable("the entry was replaced by a new leader's".into()),
            };
            out.replies.push((w.token, reply));
        }
    }

    /// Fails the writes whose entries a truncation discarded.
    pub(super) fn fail_writes_above(&mut self, after: u64, out: &mut Output) {
        for (_, w) in self.writes.split_off(&(after + 1)) {
            out.replies.push((
                w.token,
                KvReply::Unavailable("the entry was replaced by a new leader's".into()),
            ));
        }
    }
}
