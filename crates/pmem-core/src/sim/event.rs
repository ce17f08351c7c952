//! The events a simulated pool records: stores, flushes, fences, and the markers a
//! test puts around operations.

use std::fmt;
use std::panic::Location;

/// Where an event came from: the caller of the pool method (`#[track_caller]`).
pub type Loc = &'static Location<'static>;

/// Which flush instruction a flush event models.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FlushOp {
    /// `clwb`: durable at a later fence of the same thread.
    Clwb,
    /// `clflushopt`: durable at a later fence of the same thread.
    ClflushOpt,
    /// `clflush`: ordered, durable once issued.
    Clflush,
}

impl FlushOp {
    /// Whether the flush waits for a fence.
    pub fn needs_fence(self) -> bool {
        !matches!(self, FlushOp::Clflush)
    }
}

/// One recorded event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EventKind {
    /// A store of `len` bytes (1..=8) at `offset`, all inside one aligned 8-byte word.
    /// A wider write is recorded as one such store per word it touches, all with the
    /// same `group`: neither `memcpy` nor the compiler promises an order among them,
    /// so the stores of one group to one cache line persist as any subset (on top of
    /// the line's earlier history). Stores issued one word at a time through an
    /// ordering API ([`crate::Pool::write_words_ordered`]) each get a group of their own.
    Store {
        /// Pool offset.
        offset: u64,
        /// Bytes stored (1..=8).
        len: u8,
        /// The bytes, in the first `len` positions.
        value: [u8; 8],
        /// A non-temporal store (durable at the next fence of the same thread; not
        /// ordered with the cached stores to its line).
        nt: bool,
        /// The write call (or raw-write scan) the store belongs to; stores of one
        /// group are unordered among themselves.
        group: u32,
    },
    /// A flush of the cache line starting at `line` (a pool offset, 64-aligned).
    Flush {
        /// Line start offset.
        line: u64,
        /// Instruction modelled.
        op: FlushOp,
    },
    /// A store fence (`sfence` or `mfence`).
    Fence,
    /// A locked read-modify-write (CAS, swap, fetch-op, or a `SeqCst` store, which x86
    /// compiles to `xchg`) of the word at `offset`: a fence of the issuing thread. Its
    /// store, if it changed the word, is recorded just after it (the thread's earlier
    /// flushes complete before a locked instruction's store).
    LockedRmw {
        /// Pool offset of the word.
        offset: u64,
    },
    /// Start of operation `n` of the workload (operation numbers are unique in a
    /// trace; several threads may have operations in flight at once).
    OpBegin(u32),
    /// End of operation `n`.
    OpEnd(u32),
    /// A labelled point the code under test marked (a possible crash point).
    Label(&'static str),
    /// A range the code declares volatile: exempt from the durability lints.
    Volatile {
        /// Start offset.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// The range's stores so far are recovered from a log the code has already made
    /// durable (a lazy commit's entry): the durability lints do not expect them
    /// flushed until they are stored again.
    LogCovered {
        /// Start offset.
        offset: u64,
        /// Length.
        len: u64,
    },
    /// The issuing thread leaves its pending flushes unfenced on purpose (a log
    /// recovers what they write; a later checkpoint fences them): the lints do not
    /// expect a fence for them.
    DeferFlushes,
    /// The write call just before it (the stores of `group`) was a *relocation*
    /// into `[offset, offset + len)`: the FFCCD paper's `relocate` instruction,
    /// whose arrival at the media the reached bitmap tracks
    /// ([`crate::Pool::relocate_bytes_shared`]). Recorded only while the domain
    /// emulates the bitmap ([`crate::sim::SimDomain::emulate_reached_bitmap`]).
    Relocate {
        /// Start offset.
        offset: u64,
        /// Length.
        len: u64,
        /// The write call's store group.
        group: u32,
    },
    /// A new, empty reached bitmap: relocations before it no longer count (the
    /// paper creates one per compacting phase; [`crate::Pool::reset_reached`]).
    ReachedReset,
}

/// An event, the thread that issued it, and the source location of the call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    /// What happened.
    pub kind: EventKind,
    /// Small per-process thread number (0, 1, ...).
    pub thread: u16,
    /// The caller's source location.
    pub loc: Loc,
}

impl EventKind {
    /// Whether the event orders the issuing thread's earlier flushes and
    /// non-temporal stores (a fence or a locked read-modify-write).
    pub fn is_fence(&self) -> bool {
        matches!(self, EventKind::Fence | EventKind::LockedRmw { .. })
    }
}

impl Event {
    /// The store's word index (offset / 8), for store events.
    pub fn word(&self) -> Option<u64> {
        match self.kind {
            EventKind::Store { offset, .. } => Some(offset / 8),
            _ => None,
        }
    }

    /// The cache line (offset / 64) a store or flush touches.
    pub fn line(&self) -> Option<u64> {
        match self.kind {
            EventKind::Store { offset, .. } => Some(offset / 64),
            EventKind::Flush { line, .. } => Some(line / 64),
            _ => None,
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.kind {
            EventKind::Store {
                offset,
                len,
                value,
                nt,
                group,
            } => write!(
                f,
                "{}store {:#x}+{} = {:02x?} [write {}]",
                if *nt { "nt-" } else { "" },
                offset,
                len,
                &value[..*len as usize],
                group
            )?,
            EventKind::Flush { line, op } => write!(f, "{op:?} line {line:#x}")?,
            EventKind::Fence => write!(f, "fence")?,
            EventKind::LockedRmw { offset } => write!(f, "locked rmw {offset:#x} (fence)")?,
            EventKind::OpBegin(n) => write!(f, "begin op {n}")?,
            EventKind::OpEnd(n) => write!(f, "end op {n}")?,
            EventKind::Label(l) => write!(f, "label {l:?}")?,
            EventKind::Volatile { offset, len } => write!(f, "volatile {offset:#x}+{len}")?,
            EventKind::LogCovered { offset, len } => write!(f, "log-covered {offset:#x}+{len}")?,
            EventKind::DeferFlushes => write!(f, "flushes deferred")?,
            EventKind::Relocate { offset, len, group } => {
                write!(f, "relocation {offset:#x}+{len} [write {group}]")?
            }
            EventKind::ReachedReset => write!(f, "reached bitmap reset")?,
        }
        write!(
            f,
            " (thread {}, {}:{})",
            self.thread,
            self.loc.file(),
            self.loc.line()
        )
    }
}

/// Splits `[offset, offset + bytes.len())` into word-local chunks, in address order.
pub(crate) fn word_chunks(offset: u64, bytes: &[u8]) -> impl Iterator<Item = (u64, &[u8])> {
    let mut off = offset;
    let mut rest = bytes;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let room = (8 - off % 8) as usize;
        let n = room.min(rest.len());
        let (head, tail) = rest.split_at(n);
        let item = (off, head);
        off += n as u64;
        rest = tail;
        Some(item)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_split_at_word_boundaries() {
        let data: Vec<u8> = (0..20).collect();
        let v: Vec<(u64, usize)> = word_chunks(5, &data).map(|(o, b)| (o, b.len())).collect();
        assert_eq!(v, vec![(5, 3), (8, 8), (16, 8), (24, 1)]);
        assert_eq!(word_chunks(8, &[1; 8]).count(), 1);
        assert_eq!(word_chunks(8, &[]).count(), 0);
    }
}
