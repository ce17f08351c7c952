//! Forged peers (some seeds): messages no correct node sends, injected at random
//! steps into running nodes, as a process that got past the transport's Hello
//! would send them.
//!
//! Two families:
//!
//! - **Invalid** messages, with fields out of range or inconsistent: huge terms
//!   and indexes, garbage or empty configuration entries, keys longer than RESP
//!   takes, bogus snapshot metadata, entries that do not follow on. Every one must
//!   fail [`Message::validate`]. Half of them are refused there, as the node's
//!   transport does; the other half are handed to the replica all the same (a
//!   driver without a transport), whose core must refuse them too: the target's
//!   term, last index and commit index are checked unchanged.
//! - **Plausible** ones, whose fields are in range but whose content only the
//!   receiver's state can judge: a stranger's (an id no configuration ever names)
//!   vote requests, `TimeoutNow`s, answers, and leader messages of a past term, all
//!   refused by the core's membership check (the target's term is checked
//!   unchanged); and members' answers about ticks not yet reached or entries never
//!   appended (a heartbeat echo of a future tick, an acknowledgement above the
//!   leader's last index), which the core must ignore: the run's safety checks and
//!   the lease check say whether it did.
//!
//! A stranger's leader message in a current term is not sent: a node that heard
//! from no leader for an election timeout follows a leader it does not know (it
//! may have missed the configuration that added it), so such a message is
//! indistinguishable from a real one; keeping impostors out is the transport
//! authentication's job.
//!
//! Drawn from a generator of its own, so every other fault of a seed stays where
//! it was; the seeds without forgery run exactly as before.

use raft_nvm::raft::{
    Command, Entry, Membership, Message, MessageBody, MessageLimits, RaftCore, Role,
    SnapshotResume, MAX_INDEX, MAX_TERM, MEMBERSHIP_KEY,
};
use raft_nvm::{SnapshotItem, SnapshotMeta};

use super::rng::{seeded, Rng};

/// Forgery in one seed.
pub struct Forger {
    /// Whether this seed forges at all.
    pub on: bool,
    /// Per mille per step.
    rate: u32,
    rng: Rng,
}

/// A forged message, and whether it is one of the invalid family.
pub struct Forged {
    pub msg: Message,
    pub invalid: bool,
    /// What was forged, for the event log.
    pub what: &'static str,
}

impl Forger {
    /// Forgery for `seed`: on in about a fifth of the seeds.
    pub fn new(seed: u64) -> Forger {
        let mut rng = seeded(seed ^ 0x666f_7267_6564_7065);
        let on = rng.chance(200);
        let rate = rng.pick(&[20u32, 50, 150]);
        Forger { on, rate, rng }
    }

    /// Whether to forge a message at this step.
    pub fn now(&mut self) -> bool {
        self.on && self.rng.chance(self.rate)
    }

    /// One of `among`.
    pub fn pick(&mut self, among: &[u16]) -> u16 {
        self.rng.pick(among)
    }

    /// Whether an invalid message goes past the simulated transport (to test the
    /// core's own check).
    pub fn bypass_transport(&mut self) -> bool {
        self.rng.chance(500)
    }

    /// A forged message for node `to`, whose core is `core`; `members` are the ids
    /// a sender may claim (the cluster's nodes).
    pub fn forge(&mut self, to: u16, core: &RaftCore, members: &[u16]) -> Forged {
        let others: Vec<u16> = members.iter().copied().filter(|&m| m != to).collect();
        let from = self.rng.pick(&others);
        let (term, last, commit) = (core.term(), core.last_index(), core.commit_index());
        let last_term = core.term_at(last).unwrap_or(0);
        let huge_term = self.rng.pick(&[u64::MAX, MAX_TERM + 1, 1 << 60]);
        let huge_index = self.rng.pick(&[u64::MAX, MAX_INDEX + 1, u64::MAX - 1]);
        let invalid = |msg, what| Forged {
            msg,
            invalid: true,
            what,
        };
        let msg = |from, term, body| Message {
            from,
            to,
            term,
            body,
        };
        let append = |entries: Vec<Entry>| MessageBody::AppendEntries {
            prev_index: last,
            prev_term: last_term,
            entries,
            commit,
        };
        let entry = |cmd| Entry {
            index: last + 1,
            term,
            cmd,
        };
        match self.rng.below(14) {
            0 => {
                let body = match self.rng.below(5) {
                    0 => MessageBody::Heartbeat {
                        commit,
                        ctx: None,
                        sent: 0,
                    },
                    1 => append(Vec::new()),
                    2 => MessageBody::RequestVote {
                        last_index: last,
                        last_term,
                        transfer: self.rng.chance(500),
                    },
                    3 => MessageBody::PreVote {
                        last_index: last,
                        last_term,
                    },
                    _ => MessageBody::TimeoutNow,
                };
                invalid(msg(from, huge_term, body), "huge term")
            }
            1 => {
                let body = match self.rng.below(6) {
                    0 => MessageBody::AppendEntries {
                        prev_index: huge_index,
                        prev_term: last_term,
                        entries: Vec::new(),
                        commit,
                    },
                    1 => MessageBody::AppendEntries {
                        prev_index: last,
                        prev_term: last_term,
                        entries: Vec::new(),
                        commit: huge_index,
                    },
                    2 => MessageBody::Heartbeat {
                        commit: huge_index,
                        ctx: None,
                        sent: 0,
                    },
                    3 => MessageBody::AppendResp {
                        success: self.rng.chance(500),
                        index: huge_index,
                        hint: huge_index,
                    },
                    4 => MessageBody::SnapshotAck {
                        success: true,
                        index: huge_index,
                        resume: None,
                    },
                    _ => MessageBody::ReadIndexResp {
                        ctx: self.rng.next_u64(),
                        index: Some(huge_index),
                    },
                };
                invalid(msg(from, term, body), "huge index")
            }
            2 => {
                let mut data = match self.rng.below(3) {
                    0 => Vec::new(),
                    1 => (0..self.rng.range(1, 40))
                        .map(|_| self.rng.next_u64() as u8)
                        .collect(),
                    _ => Membership::new([], [from]).encode(),
                };
                if Membership::decode(&data).is_ok_and(|m| !m.voters.is_empty()) {
                    // Random bytes that happen to be a configuration would be a
                    // plausible entry, not garbage.
                    data.clear();
                }
                let body = append(vec![entry(Command::Config { data })]);
                invalid(msg(from, term, body), "bad configuration entry")
            }
            3 => {
                let key = vec![b'k'; self.rng.pick(&[65_536usize, 70_000])];
                let cmd = match self.rng.below(3) {
                    0 => Command::Put {
                        key,
                        value: b"v".to_vec(),
                    },
                    1 => Command::Delete { key },
                    _ => Command::Cas {
                        key,
                        expected: None,
                        new: b"v".to_vec(),
                    },
                };
                invalid(msg(from, term, append(vec![entry(cmd)])), "oversized key")
            }
            4 => {
                // A reserved key written directly, or entries that do not follow on.
                let body = if self.rng.chance(500) {
                    append(vec![entry(Command::Put {
                        key: MEMBERSHIP_KEY.to_vec(),
                        value: b"junk".to_vec(),
                    })])
                } else {
                    let mut e = entry(Command::Noop);
                    e.index = last + self.rng.range(2, 5);
                    append(vec![e])
                };
                invalid(msg(from, term, body), "bad entries")
            }
            5 => {
                let (meta, items) = match self.rng.below(4) {
                    0 => (
                        SnapshotMeta {
                            index: huge_index,
                            term,
                        },
                        Vec::new(),
                    ),
                    1 => (
                        SnapshotMeta {
                            index: last + 5,
                            term: term + 1,
                        },
                        Vec::new(),
                    ),
                    2 => (
                        SnapshotMeta {
                            index: last + 5,
                            term,
                        },
                        vec![SnapshotItem {
                            key: b"a".to_vec(),
                            value: b"x".to_vec(),
                            index: last + 6,
                        }],
                    ),
                    _ => (
                        SnapshotMeta {
                            index: last + 5,
                            term,
                        },
                        vec![SnapshotItem {
                            key: MEMBERSHIP_KEY.to_vec(),
                            value: b"\xff\xff".to_vec(),
                            index: last + 1,
                        }],
                    ),
                };
                let body = MessageBody::SnapshotChunk {
                    meta,
                    seq: 0,
                    items,
                    done: true,
                };
                invalid(msg(from, term, body), "bogus snapshot")
            }
            6 => {
                let meta = SnapshotMeta {
                    index: huge_index,
                    term: huge_term,
                };
                let resume = SnapshotResume { meta, seq: 1 };
                let body = if self.rng.chance(500) {
                    MessageBody::SnapshotProgress { resume }
                } else {
                    MessageBody::SnapshotAck {
                        success: false,
                        index: last,
                        resume: Some(resume),
                    }
                };
                invalid(msg(from, term, body), "bogus snapshot resume")
            }
            7..=10 => {
                // A stranger: an id no configuration ever names.
                let stranger = self.rng.range(100, 200) as u16;
                let (t, body) = match self.rng.below(7) {
                    0 => (
                        term + 1,
                        MessageBody::RequestVote {
                            last_index: last + 100,
                            last_term: term,
                            transfer: true,
                        },
                    ),
                    1 => (
                        term + 1,
                        MessageBody::PreVote {
                            last_index: last + 100,
                            last_term: term,
                        },
                    ),
                    2 => (term, MessageBody::TimeoutNow),
                    3 => (
                        term,
                        MessageBody::AppendResp {
                            success: true,
                            index: last,
                            hint: last,
                        },
                    ),
                    4 => (
                        term,
                        MessageBody::HeartbeatResp {
                            ctx: None,
                            sent: core.ticks(),
                        },
                    ),
                    5 => (
                        term,
                        MessageBody::ReadIndex {
                            ctx: self.rng.next_u64(),
                        },
                    ),
                    _ if term == 0 => (term, MessageBody::TimeoutNow),
                    _ => (
                        // A leader's message of a past term.
                        term - 1,
                        MessageBody::SnapshotChunk {
                            meta: SnapshotMeta {
                                index: last + 100,
                                term: term - 1,
                            },
                            seq: 0,
                            items: Vec::new(),
                            done: true,
                        },
                    ),
                };
                Forged {
                    msg: msg(stranger, t, body),
                    invalid: false,
                    what: "stranger",
                }
            }
            _ => {
                // A member's answer about what never was.
                let body = if core.role() == Role::Leader && self.rng.chance(500) {
                    MessageBody::HeartbeatResp {
                        ctx: None,
                        sent: core.ticks() + self.rng.range(1, 1 << 20),
                    }
                } else {
                    MessageBody::AppendResp {
                        success: true,
                        index: last + self.rng.range(1, 1000),
                        hint: 0,
                    }
                };
                Forged {
                    msg: msg(from, term, body),
                    invalid: false,
                    what: "answer about what never was",
                }
            }
        }
    }
}

/// The limits the transport applies.
pub fn limits() -> MessageLimits {
    MessageLimits::default()
}
