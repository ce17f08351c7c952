//! Log reads: the entries a lagging follower needs that the leader's DRAM window
//! no longer holds, read back from the store in order, a budget of them per
//! [`Replica::process`] ([`ReplicaConfig::log_read_budget`]) so the first
//! messages leave before the rest are read.

use crate::consensus::raft::{Entry, LogRead};

use super::{Output, Replica, ReplicaError};

impl Replica {
    /// Serves queued log reads in order while `budget` (entries) lasts.
    pub(super) fn serve_log_reads(
        &mut self,
        budget: &mut u64,
        out: &mut Output,
    ) -> Result<(), ReplicaError> {
        while *budget > 0 {
            let Some(read) = self.log_reads.pop_front() else {
                break;
            };
            let served = self.serve_log_read(read)?;
            out.entries_from_store += served;
            *budget = budget.saturating_sub(served.max(1));
        }
        Ok(())
    }

    /// Reads entries the leader's window no longer holds back from the store and
    /// hands them to the core for a lagging follower (or reports them compacted);
    /// returns how many it sent.
    pub(super) fn serve_log_read(&mut self, read: LogRead) -> Result<u64, ReplicaError> {
        if !self.core.log_read_is_current(&read) {
            // The core would ignore the answer: do not read the store for it.
            return Ok(0);
        }
        let prev_term = match read.from.checked_sub(1) {
            Some(0) => Some(0),
            Some(prev) => self.store.term_at(prev),
            None => None,
        };
        let wanted = (read.last + 1).saturating_sub(read.from);
        let mut entries = Vec::with_capacity(usize::try_from(wanted).unwrap_or(0));
        for index in read.from..=read.last {
            match self.store.entry(index)? {
                Some(e) => entries.push(Entry::from(e)),
                None => break,
            }
        }
        match prev_term {
            Some(prev_term) if entries.len() as u64 == wanted => {
                let sent = entries.len() as u64;
                self.core.send_stored_entries(read, prev_term, entries)?;
                return Ok(sent);
            }
            _ => {
                tracing::debug!(
                    to = read.to,
                    from = read.from,
                    last = read.last,
                    found = entries.len(),
                    prev_known = prev_term.is_some(),
                    "entries a follower needs are compacted away"
                );
                self.core.report_entries_unavailable(read);
            }
        }
        Ok(0)
    }
}
