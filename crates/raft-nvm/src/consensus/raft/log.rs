//! The core's view of the log: the index/term facts of the whole log plus an in-DRAM
//! window of recent entries (the store holds the log itself). It also tracks what
//! was handed to the driver (stable), what the store made durable, and what is
//! committed and handed out for applying.

use std::collections::VecDeque;

use super::message::{Command, Entry};

/// One position of the window: its term, and its command while the core has it
/// (entries recovered on restart are known by term only).
///
/// The command is boxed: most slots hold none (the store has it), and a restart
/// restores one slot per entry above the applied index, so a slot is kept at 16
/// bytes rather than the size of the largest command.
#[derive(Clone, Debug)]
struct Slot {
    term: u64,
    cmd: Option<Box<Command>>,
}

// What the box is for.
const _: () = assert!(std::mem::size_of::<Slot>() == 16);

/// Why a follower rejected or could not take entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum AppendOutcome {
    /// The log now matches the leader's up to this index; `cut`: a conflicting
    /// suffix above that index was discarded first.
    Matched {
        /// The index the log matches the leader's up to.
        upto: u64,
        /// The suffix above this index was discarded.
        cut: Option<u64>,
    },
    /// No match at `prev_index`.
    Rejected,
}

/// The log facts and the window of recent entries.
#[derive(Debug)]
pub(crate) struct RaftLog {
    /// The index just before the window.
    offset: u64,
    /// Its term, if known.
    offset_term: Option<u64>,
    /// Entries `offset + 1 ..= last`.
    slots: VecDeque<Slot>,
    /// The highest index known committed.
    pub(crate) committed: u64,
    /// The highest index handed out for applying.
    pub(crate) applied: u64,
    /// The highest index handed to the driver for appending.
    stable: u64,
    /// The highest index the store made durable (never above `stable`).
    pub(crate) durable: u64,
    /// A truncation not yet handed to the driver.
    pending_truncate: Option<u64>,
    /// How many entries the window keeps at least once applied.
    window: usize,
}

impl RaftLog {
    /// An empty log.
    #[cfg(test)]
    pub(crate) fn new(window: usize) -> RaftLog {
        RaftLog::restore(window, 0, Some(0), Vec::new(), 0)
    }

    /// A log whose first `floor` entries are applied, followed by entries of
    /// `tail_terms` (known by term only: the store holds their commands), of which
    /// everything up to `durable` is durable.
    pub(crate) fn restore(
        window: usize,
        floor: u64,
        floor_term: Option<u64>,
        tail_terms: Vec<u64>,
        durable: u64,
    ) -> RaftLog {
        let slots: VecDeque<Slot> = tail_terms
            .into_iter()
            .map(|term| Slot { term, cmd: None })
            .collect();
        let last = floor + slots.len() as u64;
        RaftLog {
            offset: floor,
            offset_term: floor_term,
            slots,
            committed: floor,
            applied: floor,
            stable: last,
            durable: durable.min(last),
            pending_truncate: None,
            window,
        }
    }

    /// The last index.
    pub(crate) fn last_index(&self) -> u64 {
        self.offset + self.slots.len() as u64
    }

    /// The last term (0 for an empty log).
    pub(crate) fn last_term(&self) -> u64 {
        match self.slots.back() {
            Some(s) => s.term,
            None => self.offset_term.unwrap_or(0),
        }
    }

    /// The index just before the window.
    #[cfg(test)]
    pub(crate) fn offset(&self) -> u64 {
        self.offset
    }

    /// The term of `index`, if the core knows it.
    pub(crate) fn term(&self, index: u64) -> Option<u64> {
        if index == 0 {
            return Some(0);
        }
        if index == self.offset {
            return self.offset_term;
        }
        if index < self.offset {
            return None;
        }
        let pos = usize::try_from(index - self.offset - 1).ok()?;
        self.slots.get(pos).map(|s| s.term)
    }

    fn slot(&self, index: u64) -> Option<&Slot> {
        if index <= self.offset {
            return None;
        }
        let pos = usize::try_from(index - self.offset - 1).ok()?;
        self.slots.get(pos)
    }

    /// A copy of entry `index`, if the window holds its command.
    fn entry(&self, index: u64) -> Option<Entry> {
        let slot = self.slot(index)?;
        let cmd = Command::clone(slot.cmd.as_deref()?);
        Some(Entry {
            index,
            term: slot.term,
            cmd,
        })
    }

    /// Appends a leader's own entry; returns its index.
    pub(crate) fn append(&mut self, term: u64, cmd: Command) -> u64 {
        self.slots.push_back(Slot {
            term,
            cmd: Some(Box::new(cmd)),
        });
        self.last_index()
    }

    /// Discards the entries above `after`.
    fn truncate(&mut self, after: u64) {
        let keep = usize::try_from(after.saturating_sub(self.offset)).unwrap_or(usize::MAX);
        self.slots.truncate(keep);
        self.pending_truncate = Some(self.pending_truncate.map_or(after, |t| t.min(after)));
        self.stable = self.stable.min(after);
        self.durable = self.durable.min(after);
    }

    /// The driver could not write what was handed out above `kept` (the store is
    /// full): those entries are forgotten, as a crash forgets unsynced ones. The
    /// commit index drops to `kept` if it was above (it is volatile; nothing above
    /// `kept` was applied). With `retruncate`, the store still holds an older suffix
    /// above `kept` (its rollback record did not fit): the truncation is handed out
    /// again with the next entries.
    pub(crate) fn abandon_after(&mut self, kept: u64, retruncate: bool) {
        let kept = kept.max(self.applied);
        let keep = usize::try_from(kept.saturating_sub(self.offset)).unwrap_or(usize::MAX);
        self.slots.truncate(keep);
        self.stable = self.stable.min(kept);
        self.durable = self.durable.min(kept);
        self.committed = self.committed.min(kept);
        if retruncate {
            self.pending_truncate = Some(self.pending_truncate.map_or(kept, |t| t.min(kept)));
        }
    }

    /// A follower takes `entries` after `prev_index`/`prev_term`: entries already
    /// present with the same term are kept, a conflicting suffix is discarded (never
    /// a committed entry: those match by Raft's log matching), the rest appended.
    pub(crate) fn maybe_append(
        &mut self,
        prev_index: u64,
        prev_term: u64,
        entries: Vec<Entry>,
    ) -> AppendOutcome {
        if prev_index > self.last_index() {
            return AppendOutcome::Rejected;
        }
        // Committed entries match the leader's; their terms may be unknown here.
        if prev_index > self.committed && self.term(prev_index) != Some(prev_term) {
            return AppendOutcome::Rejected;
        }
        // `prev_index` is a peer's number (bounded by `Message::validate` and by
        // the check above): no `+` that could overflow on it all the same.
        let matched = prev_index.saturating_add(entries.len() as u64);
        let mut cut = None;
        for e in entries {
            if e.index <= self.committed {
                continue;
            }
            if e.index <= self.last_index() {
                if self.term(e.index) == Some(e.term) {
                    if let Ok(pos) = usize::try_from(e.index - self.offset - 1) {
                        if let Some(slot) = self.slots.get_mut(pos) {
                            if slot.cmd.is_none() {
                                slot.cmd = Some(Box::new(e.cmd));
                            }
                        }
                    }
                    continue;
                }
                tracing::debug!(index = e.index, "log conflict: rolling back the suffix");
                self.truncate(e.index - 1);
                cut = Some(e.index - 1);
            }
            self.slots.push_back(Slot {
                term: e.term,
                cmd: Some(Box::new(e.cmd)),
            });
        }
        AppendOutcome::Matched { upto: matched, cut }
    }

    /// Up to `max` entries from `from`, with the term of `from - 1`; `None` when the
    /// window no longer has one of them (the follower needs a snapshot). Returns the
    /// index of the first entry the core does not have in the error case.
    pub(crate) fn entries_from(&self, from: u64, max: usize) -> Result<(u64, Vec<Entry>), u64> {
        let prev_term = self.term(from - 1).ok_or(from - 1)?;
        let end = self.last_index().min(from + max as u64 - 1);
        let mut out = Vec::new();
        for index in from..=end {
            out.push(self.entry(index).ok_or(index)?);
        }
        Ok((prev_term, out))
    }

    /// Raises the commit index (never above the last index).
    pub(crate) fn commit_to(&mut self, index: u64) -> bool {
        let index = index.min(self.last_index());
        if index > self.committed {
            self.committed = index;
            true
        } else {
            false
        }
    }

    /// The store made everything it was given up to `durable` durable.
    pub(crate) fn on_persisted(&mut self, durable: u64) -> bool {
        let d = durable.min(self.stable);
        if d > self.durable {
            self.durable = d;
            true
        } else {
            false
        }
    }

    /// Whether there is something to hand to the driver for appending.
    pub(crate) fn has_unstable(&self) -> bool {
        self.pending_truncate.is_some() || self.stable < self.last_index()
    }

    /// Hands out the pending truncation and the entries not yet given to the driver:
    /// copies if `keep_commands`, else the commands themselves (the window then
    /// knows those entries by term only, and the store has them).
    pub(crate) fn take_unstable(&mut self, keep_commands: bool) -> (Option<u64>, Vec<Entry>) {
        let truncate = self.pending_truncate.take();
        let out = if keep_commands {
            (self.stable + 1..=self.last_index())
                .filter_map(|index| self.entry(index))
                .collect()
        } else {
            let from =
                usize::try_from(self.stable.saturating_sub(self.offset)).unwrap_or(usize::MAX);
            let first = self.offset + 1;
            self.slots
                .iter_mut()
                .enumerate()
                .skip(from)
                .filter_map(|(pos, slot)| {
                    Some(Entry {
                        index: first + pos as u64,
                        term: slot.term,
                        cmd: *slot.cmd.take()?,
                    })
                })
                .collect()
        };
        self.stable = self.last_index();
        (truncate, out)
    }

    /// The index up to which entries may be applied (committed and durable here).
    fn apply_limit(&self) -> u64 {
        self.committed.min(self.durable)
    }

    /// Whether committed entries wait to be handed out.
    pub(crate) fn has_committed(&self) -> bool {
        self.apply_limit() > self.applied
    }

    /// Hands out the committed entries not yet applied (those the window holds, if
    /// `with_entries`) and the index to apply up to; then trims the window.
    pub(crate) fn take_committed(&mut self, with_entries: bool) -> (Vec<Entry>, Option<u64>) {
        let limit = self.apply_limit();
        if limit <= self.applied {
            return (Vec::new(), None);
        }
        let out = if with_entries {
            (self.applied + 1..=limit)
                .filter_map(|index| self.entry(index))
                .collect()
        } else {
            Vec::new()
        };
        self.applied = limit;
        self.trim();
        (out, Some(limit))
    }

    /// Drops the oldest entries beyond the window size (only applied ones).
    fn trim(&mut self) {
        while self.slots.len() > self.window && self.offset < self.applied {
            if let Some(s) = self.slots.pop_front() {
                self.offset += 1;
                self.offset_term = Some(s.term);
            }
        }
    }

    /// Replaces everything by a snapshot at `index`/`term`.
    pub(crate) fn install_snapshot(&mut self, index: u64, term: u64) {
        self.slots.clear();
        self.offset = index;
        self.offset_term = Some(term);
        self.committed = index;
        self.applied = index;
        self.stable = index;
        self.durable = index;
        self.pending_truncate = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn e(index: u64, term: u64) -> Entry {
        Entry {
            index,
            term,
            cmd: Command::Noop,
        }
    }

    #[test]
    fn conflicting_suffix_is_truncated_and_handed_out() {
        let mut log = RaftLog::new(100);
        assert_eq!(
            log.maybe_append(0, 0, vec![e(1, 1), e(2, 1), e(3, 1)]),
            AppendOutcome::Matched { upto: 3, cut: None }
        );
        let (t, ents) = log.take_unstable(true);
        assert_eq!((t, ents.len()), (None, 3));
        log.on_persisted(3);
        assert_eq!(log.durable, 3);
        assert_eq!(log.maybe_append(3, 2, vec![]), AppendOutcome::Rejected);
        assert_eq!(
            log.maybe_append(1, 1, vec![e(2, 2)]),
            AppendOutcome::Matched {
                upto: 2,
                cut: Some(1)
            }
        );
        assert_eq!(log.last_index(), 2);
        assert_eq!(
            log.durable, 1,
            "the rolled-back suffix is no longer durable"
        );
        let (t, ents) = log.take_unstable(true);
        assert_eq!(t, Some(1));
        assert_eq!(ents, vec![e(2, 2)]);
    }

    #[test]
    fn handing_commands_over_leaves_terms_only() {
        let mut log = RaftLog::new(100);
        assert_eq!(
            log.maybe_append(0, 0, vec![e(1, 1), e(2, 1), e(3, 2)]),
            AppendOutcome::Matched { upto: 3, cut: None }
        );
        let (_, ents) = log.take_unstable(false);
        assert_eq!(ents, vec![e(1, 1), e(2, 1), e(3, 2)]);
        assert_eq!((log.term(3), log.entry(3)), (Some(2), None));
        assert_eq!(
            log.entries_from(2, 10),
            Err(2),
            "the store must serve them now"
        );
        // A retransmission refills a command; only new entries are handed out.
        log.maybe_append(2, 1, vec![e(3, 2), e(4, 2)]);
        let (_, ents) = log.take_unstable(false);
        assert_eq!(ents, vec![e(4, 2)]);
    }

    #[test]
    fn window_trims_applied_entries_only() {
        let mut log = RaftLog::new(2);
        for _ in 0..5 {
            log.append(1, Command::Noop);
        }
        let _ = log.take_unstable(true);
        log.on_persisted(5);
        log.commit_to(4);
        let (ents, to) = log.take_committed(true);
        assert_eq!((ents.len(), to), (4, Some(4)));
        assert_eq!(log.offset(), 3);
        assert_eq!(log.entries_from(3, 10), Err(2));
        assert_eq!(
            log.entries_from(4, 10).map(|(t, v)| (t, v.len())),
            Ok((1, 2))
        );
    }
}
