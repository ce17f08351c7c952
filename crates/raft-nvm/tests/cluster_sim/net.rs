//! The simulated network between the nodes: a randomised delivery queue.
//!
//! Every message gets a delivery time (a short random delay, sometimes a long one),
//! so messages are reordered; some are lost, some duplicated. Links can be cut in one
//! direction or both (partitions) and healed. A cut or a lost message is noticed when
//! it would have been delivered; a lost snapshot chunk is reported to its sender then,
//! as a broken connection would be. Snapshot chunks travel as a stream: one
//! snapshot's chunks are delivered in order (each later than the one before).

use std::collections::BTreeSet;

use raft_nvm::raft::{Message, MessageBody};

use super::rng::Rng;

/// The fault rates of a run (per mille of messages).
#[derive(Clone, Debug)]
pub struct Faults {
    /// Messages lost.
    pub loss: u32,
    /// Messages delivered twice.
    pub dup: u32,
    /// Messages delayed long (up to `long_delay` steps).
    pub slow: u32,
    /// The usual delay bound, in steps.
    pub delay: u64,
    /// The long delay bound, in steps.
    pub long_delay: u64,
}

impl Faults {
    /// A reliable network with short delays (for settling).
    pub fn calm() -> Faults {
        Faults {
            loss: 0,
            dup: 0,
            slow: 0,
            delay: 2,
            long_delay: 2,
        }
    }
}

/// A message on its way.
#[derive(Clone, Debug)]
pub struct Flight {
    /// When it arrives.
    pub at: u64,
    seq: u64,
    /// Lost on the way (noticed at `at`).
    pub lost: bool,
    /// The sender's incarnation, for a snapshot stream (its driver hears of the
    /// stream's fate only while it lives).
    pub epoch: Option<u64>,
    /// The message.
    pub msg: Message,
}

/// The network.
#[derive(Debug)]
pub struct Net {
    queue: Vec<Flight>,
    seq: u64,
    /// Cut links `(from, to)`.
    blocked: BTreeSet<(u16, u16)>,
    /// The current fault rates.
    pub faults: Faults,
    /// Messages sent, lost, duplicated.
    pub sent: u64,
    pub lost: u64,
    pub duplicated: u64,
}

impl Net {
    /// A network with `faults`.
    pub fn new(faults: Faults) -> Net {
        Net {
            queue: Vec::new(),
            seq: 0,
            blocked: BTreeSet::new(),
            faults,
            sent: 0,
            lost: 0,
            duplicated: 0,
        }
    }

    fn delay(&self, rng: &mut Rng) -> u64 {
        if rng.chance(self.faults.slow) {
            rng.range(1, self.faults.long_delay.max(1))
        } else {
            rng.range(1, self.faults.delay.max(1))
        }
    }

    fn push(&mut self, at: u64, lost: bool, epoch: Option<u64>, msg: Message) {
        self.seq += 1;
        self.queue.push(Flight {
            at,
            seq: self.seq,
            lost,
            epoch,
            msg,
        });
    }

    /// Sends `msg` at `now`.
    pub fn send(&mut self, now: u64, msg: Message, rng: &mut Rng) {
        self.sent += 1;
        let lost = rng.chance(self.faults.loss);
        self.lost += u64::from(lost);
        if rng.chance(self.faults.dup) {
            self.duplicated += 1;
            let at = now + self.delay(rng);
            self.push(at, false, None, msg.clone());
        }
        let at = now + self.delay(rng);
        self.push(at, lost, None, msg);
    }

    /// Sends the chunks of one snapshot as an ordered stream from the sender's
    /// incarnation `epoch`.
    pub fn send_stream(&mut self, now: u64, msgs: Vec<Message>, epoch: u64, rng: &mut Rng) {
        let first = now + self.delay(rng);
        for (at, msg) in (first..).zip(msgs) {
            self.sent += 1;
            let lost = rng.chance(self.faults.loss / 2);
            self.lost += u64::from(lost);
            self.push(at, lost, Some(epoch), msg);
        }
    }

    /// The messages due at `now`, in a random order.
    pub fn due(&mut self, now: u64, rng: &mut Rng) -> Vec<Flight> {
        let (mut due, rest): (Vec<Flight>, Vec<Flight>) = std::mem::take(&mut self.queue)
            .into_iter()
            .partition(|f| f.at <= now);
        self.queue = rest;
        // Deterministic base order, then shuffled; snapshot chunks keep their order.
        due.sort_by_key(|f| (f.at, f.seq));
        let (mut chunks, mut others): (Vec<Flight>, Vec<Flight>) = due
            .into_iter()
            .partition(|f| matches!(f.msg.body, MessageBody::SnapshotChunk { .. }));
        rng.shuffle(&mut others);
        others.append(&mut chunks);
        others
    }

    /// Whether the link `from -> to` is cut.
    pub fn blocked(&self, from: u16, to: u16) -> bool {
        self.blocked.contains(&(from, to))
    }

    /// Cuts `from -> to`.
    pub fn cut(&mut self, from: u16, to: u16) {
        self.blocked.insert((from, to));
    }

    /// Cuts every link between the two groups, both ways.
    pub fn split(&mut self, a: &[u16], b: &[u16]) {
        for &x in a {
            for &y in b {
                self.cut(x, y);
                self.cut(y, x);
            }
        }
    }

    /// Heals every link.
    pub fn heal(&mut self) {
        self.blocked.clear();
    }

    /// Whether any link is cut.
    pub fn partitioned(&self) -> bool {
        !self.blocked.is_empty()
    }

    /// The cut links, for the event log.
    pub fn describe(&self) -> String {
        let links: Vec<String> = self
            .blocked
            .iter()
            .map(|(a, b)| format!("{a}->{b}"))
            .collect();
        format!("cut {}", links.join(" "))
    }

    /// Drops every message to `node` (it crashed: its sockets are gone); returns the
    /// snapshot streams that broke, as `(sender, its incarnation)`.
    pub fn purge_to(&mut self, node: u16) -> Vec<(u16, u64)> {
        let mut broken = Vec::new();
        self.queue.retain(|f| {
            if f.msg.to != node {
                return true;
            }
            if let Some(epoch) = f.epoch {
                if !broken.contains(&(f.msg.from, epoch)) {
                    broken.push((f.msg.from, epoch));
                }
            }
            false
        });
        broken
    }
}
