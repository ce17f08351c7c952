//! The interface both storage engines implement: a Raft log that is also an MVCC
//! key-value state machine.
//!
//! Every mutation is a Raft entry appended at `last_index() + 1`; its index is the
//! version's timestamp. Reads name a timestamp (normally the applied index) and see
//! the greatest version at or below it. A follower that must discard a suffix calls
//! [`Store::truncate_after`], which appends a rollback record. Appends become durable
//! in groups ([`StoreOptions::group`] records, an explicit [`Store::sync`], or the
//! optional timer); what is durable is always a prefix of what was appended.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::storage::error::Result;

/// What an entry does to the key-value state.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op<'a> {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        key: &'a [u8],
        /// The new value.
        value: &'a [u8],
    },
    /// Deletes `key` (a tombstone version).
    Delete {
        /// The key.
        key: &'a [u8],
    },
    /// Changes nothing (a new leader's first entry).
    Noop,
}

/// An entry read back from the log (owned).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum OwnedOp {
    /// Sets `key` to `value`.
    Put {
        /// The key.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
        /// The value.
        #[serde(with = "serde_bytes")]
        value: Vec<u8>,
    },
    /// Deletes `key`.
    Delete {
        /// The key.
        #[serde(with = "serde_bytes")]
        key: Vec<u8>,
    },
    /// Changes nothing.
    Noop,
}

impl OwnedOp {
    /// Borrows it as an [`Op`] (to append it elsewhere).
    pub fn as_op(&self) -> Op<'_> {
        match self {
            OwnedOp::Put { key, value } => Op::Put { key, value },
            OwnedOp::Delete { key } => Op::Delete { key },
            OwnedOp::Noop => Op::Noop,
        }
    }
}

/// A Raft entry as the store holds it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LogEntry {
    /// Its index.
    pub index: u64,
    /// Its term.
    pub term: u64,
    /// What it does.
    pub op: OwnedOp,
}

/// The Raft hard state: the current term and the vote cast in it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HardState {
    /// Current term (at most 2^48 - 1).
    pub term: u64,
    /// The node voted for in `term` (node ids below 65535).
    pub vote: Option<u16>,
}

impl HardState {
    /// The largest term that fits the packed form.
    pub const MAX_TERM: u64 = (1 << 48) - 1;

    /// Packs into one word (term in the high 48 bits, vote + 1 in the low 16), so it
    /// is published with one failure-atomic 8-byte store.
    pub fn pack(self) -> Result<u64> {
        if self.term > Self::MAX_TERM || self.vote == Some(u16::MAX) {
            return Err(crate::storage::error::StoreError::Invalid(format!(
                "hard state {self:?} does not fit (term < 2^48, vote < 65535)"
            )));
        }
        Ok((self.term << 16) | self.vote.map_or(0, |v| u64::from(v) + 1))
    }

    /// The largest term a store may hold when it is opened: a term above it is
    /// refused as implausible. Terms grow by one per election, so a real cluster
    /// never comes near it; it leaves 2^32 elections of room below
    /// [`HardState::MAX_TERM`], so a node that opens never dies at its next
    /// election because the term no longer fits.
    pub const MAX_OPEN_TERM: u64 = Self::MAX_TERM - (1 << 32);

    /// Checks a hard state read from media before a node starts on it: its term
    /// is at most [`HardState::MAX_OPEN_TERM`] and its vote is a node id
    /// (below 65535). `source` names where it was read, for the error.
    pub fn check_plausible(self, source: &str) -> Result<HardState> {
        if self.term > Self::MAX_OPEN_TERM || self.vote == Some(u16::MAX) {
            return Err(crate::storage::error::StoreError::Corrupt(format!(
                "{source}: implausible hard state (term {}, vote {:?}): terms above {} are refused, as no cluster holds that many elections",
                self.term,
                self.vote,
                Self::MAX_OPEN_TERM
            )));
        }
        Ok(self)
    }

    /// The inverse of [`HardState::pack`].
    pub fn unpack(w: u64) -> HardState {
        let v = (w & 0xffff) as u16;
        HardState {
            term: w >> 16,
            vote: v.checked_sub(1),
        }
    }
}

/// The largest log index a store may hold when a node opens it: above it, the
/// store is refused as implausible ([`check_plausible`]). No log reaches 2^62
/// entries, and a bound far below `u64::MAX` leaves the core's index arithmetic
/// (the next index, a window's end) room that no damaged index can overflow.
pub const MAX_OPEN_INDEX: u64 = 1 << 62;

/// Checks what a node is about to start on, as read from media, for plausibility:
/// the last log index at most [`MAX_OPEN_INDEX`], the applied index at most the
/// last, and the hard state's term and vote ([`HardState::check_plausible`]). The
/// Raft core checks how they fit together (no entry's term above the current
/// term). Reads only.
pub fn check_plausible(store: &dyn Store) -> Result<()> {
    let (last, applied) = (store.last_index(), store.applied());
    if last > MAX_OPEN_INDEX || applied > last {
        return Err(crate::storage::error::StoreError::Corrupt(format!(
            "implausible log: last index {last}, applied index {applied} (a log holds at most {MAX_OPEN_INDEX} entries, applied ones among them)"
        )));
    }
    store.hard_state().check_plausible("the hard state")?;
    Ok(())
}

/// The live records of a snapshot, streamed.
pub type SnapshotStream<'a> = Box<dyn Iterator<Item = Result<SnapshotItem>> + 'a>;

/// A version as [`Store::latest`] reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Version {
    /// The Raft index that wrote it.
    pub index: u64,
    /// The value, or `None` for a tombstone.
    pub value: Option<Vec<u8>>,
}

/// One live record of a snapshot.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotItem {
    /// The key.
    #[serde(with = "serde_bytes")]
    pub key: Vec<u8>,
    /// Its value at the snapshot's index.
    #[serde(with = "serde_bytes")]
    pub value: Vec<u8>,
    /// The index that wrote the value.
    pub index: u64,
}

/// Where a snapshot stands in the Raft log.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SnapshotMeta {
    /// The last index the snapshot includes.
    pub index: u64,
    /// That index's term.
    pub term: u64,
}

impl SnapshotMeta {
    /// Checks that `item` belongs in this snapshot (written at or below its index).
    pub fn check_item(&self, item: &SnapshotItem) -> Result<()> {
        if item.index > self.index {
            return Err(crate::storage::error::StoreError::Invalid(format!(
                "snapshot item at index {} above the snapshot's index {}",
                item.index, self.index
            )));
        }
        Ok(())
    }
}

/// What one compaction did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CompactStats {
    /// Pages (list) or bytes (WAL) examined.
    pub examined: u64,
    /// Pages (list) or bytes (WAL) given back.
    pub freed: u64,
    /// Live records rewritten.
    pub records_kept: u64,
    /// Records dropped (superseded, deleted, rolled back, rollback records).
    pub records_dropped: u64,
    /// The longest time a reader or writer was held up by compaction.
    pub max_pause: Duration,
    /// Wall time of the whole compaction.
    pub total: Duration,
}

/// How much of its space a store uses: what a replica decides compaction and
/// out-of-memory refusals from. Cheap to ask (no scan).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreUsage {
    /// Bytes the store can hold in all (the list: its pages), or `None` when only the
    /// file system bounds it (the WAL).
    pub capacity: Option<u64>,
    /// Bytes holding records, live or dead (the list: its used pages, whole; the WAL:
    /// the current log generation, buffered bytes included).
    pub used: u64,
    /// Bytes still free for appends (the list: its free pages and the room left in
    /// the tail page), or `None` when unbounded. A record needs contiguous room, so
    /// not every free byte can take one: treat it as an upper bound.
    pub free: Option<u64>,
    /// Versions the DRAM index holds (all keys and indexes, tombstones included).
    pub versions: u64,
}

impl StoreUsage {
    /// `used / capacity` in `0.0..=1.0`, or `None` when the capacity is unbounded.
    pub fn fill(&self) -> Option<f64> {
        self.capacity
            .filter(|&c| c > 0)
            .map(|c| (self.used as f64 / c as f64).min(1.0))
    }
}

/// Tunables shared by the engines.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreOptions {
    /// Appends per durability group: every `group`-th append syncs (the thesis's k).
    pub group: u32,
    /// A background thread also syncs pending appends this often (`None`: no timer).
    pub sync_interval: Option<Duration>,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            group: 10,
            sync_interval: None,
        }
    }
}

/// A storage engine for the replicated map.
pub trait Store: Send + Sync {
    /// The engine's name (`list` or `wal`).
    fn engine(&self) -> &'static str;

    /// The most key + value bytes one entry carries in a single record (the list:
    /// what fits a page). Larger entries may still be stored: see [`Store::fits`].
    fn max_payload(&self) -> usize;

    /// Whether an entry with a key of `key_len` bytes and a value of `value_len`
    /// bytes can be stored (the list stores values larger than a page in
    /// fragments). A replicated service checks it before proposing.
    fn fits(&self, key_len: usize, value_len: usize) -> bool {
        key_len.saturating_add(value_len) <= self.max_payload()
    }

    /// Appends entry `index` (must be `last_index() + 1`) of `term`. It is durable
    /// after the next sync (at most [`StoreOptions::group`] appends later).
    fn append(&self, index: u64, term: u64, op: Op<'_>) -> Result<()>;

    /// Appends `entries` (`(index, term, op)`, the first at `last_index() + 1`, in
    /// order) as [`Store::append`] would one at a time, which is what the default
    /// does; an engine may write them with fewer system calls. On an error the
    /// entries before the failing one are appended ([`Store::last_index`] says how
    /// far it got) and the rest are not.
    fn append_batch(&self, entries: &[(u64, u64, Op<'_>)]) -> Result<()> {
        for &(index, term, op) in entries {
            self.append(index, term, op)?;
        }
        Ok(())
    }

    /// Discards the entries above `after` (appends a rollback record). Entries at or
    /// below the applied index cannot be discarded.
    fn truncate_after(&self, after: u64, term: u64) -> Result<()>;

    /// Makes every append so far durable.
    fn sync(&self) -> Result<()>;

    /// [`Store::sync`], then records the exact durable end on media (a clean
    /// stop): the next open refuses any damage up to it as corruption
    /// ([`crate::storage::error::StoreError::Corrupt`]) instead of cutting it off as a torn tail.
    /// A plain sync leaves the recorded end behind the last sync's records (the
    /// list's one-fence sync moves it to the previous sync's end; the WAL records
    /// it only here), so the records of the last sync before a crash can only be
    /// cut. Costs one more fence (list) or file replacement (WAL): for stopping,
    /// not for every sync. The default syncs.
    fn sync_clean(&self) -> Result<()> {
        self.sync()
    }

    /// Whether [`Store::sync`] waits for a device (an `msync` or `fdatasync`): then
    /// a driver with a thread to spare does better to sync there and go on
    /// appending (see the replica's `SyncBy::DriverWhenIo`, a layer above). `false`
    /// where a sync is a few cache-line flushes and a fence (persistent memory, or
    /// a pool forced to act as it), which a hand-off to another thread would only
    /// slow down.
    fn sync_waits_for_io(&self) -> bool {
        true
    }

    /// The value of `key` at timestamp `at`: the greatest version `<= at`.
    fn get(&self, key: &[u8], at: u64) -> Result<Option<Vec<u8>>>;

    /// The newest version of `key`, applied or not (for compare-and-set).
    fn latest(&self, key: &[u8]) -> Result<Option<Version>>;

    /// Tells the store that entries up to `index` are applied (committed and visible).
    fn set_applied(&self, index: u64);

    /// The applied index.
    fn applied(&self) -> u64;

    /// The last index appended.
    fn last_index(&self) -> u64;

    /// The term of the last index.
    fn last_term(&self) -> u64;

    /// The last index that is durable.
    fn durable_index(&self) -> u64;

    /// The term of `index`, while the store still knows it.
    fn term_at(&self, index: u64) -> Option<u64>;

    /// The terms of `from..=to`, or `None` if the store no longer knows one of them
    /// (what a restart reads; engines answer it under one lock).
    fn terms(&self, from: u64, to: u64) -> Option<Vec<u64>> {
        (from..=to).map(|i| self.term_at(i)).collect()
    }

    /// Entry `index`, while the store still holds it: every entry above the applied
    /// index, and applied ones until compaction drops their records or trims their
    /// metadata (then a lagging replica needs a snapshot). The store is the log: a
    /// leader re-sends from it what its DRAM window no longer holds.
    fn entry(&self, index: u64) -> Result<Option<LogEntry>>;

    /// The durable hard state.
    fn hard_state(&self) -> HardState;

    /// Makes `hs` durable before returning.
    fn set_hard_state(&self, hs: HardState) -> Result<()>;

    /// Drops versions no reader at or above the applied index can see, and rollback
    /// records whose entries are gone; gives the space back.
    fn compact(&self) -> Result<CompactStats>;

    /// [`Store::compact`] with the new compaction base at most `limit`: every
    /// entry above `limit` keeps its record (a layer above, such as openraft's
    /// purge, may still need to read applied entries back from the log). The
    /// default compacts only when `limit` is at or above the applied index (where
    /// it is [`Store::compact`]) and does nothing otherwise.
    fn compact_to(&self, limit: u64) -> Result<CompactStats> {
        if limit >= self.applied() {
            self.compact()
        } else {
            Ok(CompactStats::default())
        }
    }

    /// How much space the store uses and has left (see [`StoreUsage`]).
    fn usage(&self) -> StoreUsage;

    /// The live records at `at` (between the compaction floor and the applied index),
    /// streamed in chunks; compaction waits while the stream is alive.
    fn snapshot(&self, at: u64) -> Result<(SnapshotMeta, SnapshotStream<'_>)>;

    /// Installs a snapshot into an empty store; it is durable on return. If it fails
    /// part-way (the store is full, a write fails), nothing of it is durable but the
    /// store's DRAM state is partial: drop the store and create a fresh one.
    fn install_snapshot(
        &self,
        meta: SnapshotMeta,
        items: &mut dyn Iterator<Item = SnapshotItem>,
    ) -> Result<()>;
}
