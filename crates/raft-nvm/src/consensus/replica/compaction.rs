//! When a replica compacts its store: a policy over the store's fill and an
//! estimate of its dead fraction, with at most one compaction in flight.
//!
//! The replica only decides; its driver runs [`Store::compact`] (the networked node
//! on a blocking thread, beside the event loop: the list's compaction runs
//! concurrently with appends and reads) and reports the outcome.

use crate::storage::error::StoreError;
use crate::storage::store::{CompactStats, Store, StoreUsage};

use super::Replica;

/// When a replica asks for a compaction of its store.
///
/// A store whose [`StoreUsage::capacity`] is bounded (the list) is compacted once it
/// is at least [`CompactionPolicy::min_fill`] full **and** an estimated
/// [`CompactionPolicy::min_dead`] of what it uses is dead; at
/// [`CompactionPolicy::emergency_fill`], or when a write was refused for lack of
/// space, whatever the estimate. A store without a capacity (the WAL, bounded by
/// its file system) is left to its own options (`WalOptions::snapshot_every`).
///
/// The dead fraction is estimated the way a tracing collector paces its cycles:
/// what the last compaction left is taken as live, everything written since as
/// possibly dead — `(used - used_after_last) / used` (1 before the first run). An
/// overwrite workload is then compacted about when it should; an insert-only one,
/// where the estimate is too high, is compacted each time its use grew by a
/// `min_dead / (1 - min_dead)` share since the last run (a third, by default), so
/// useless runs stay few. Whatever the reason, a run follows the last one only
/// once something new may be reclaimable: [`CompactionPolicy::check_every`]
/// entries appended (deletes, overwrites) or the use grown by 1/64 of the
/// capacity. The look itself (two lock acquisitions) happens after every
/// [`crate::consensus::replica::Replica::process`].
#[derive(Clone, Debug, PartialEq)]
pub struct CompactionPolicy {
    /// Whether the replica asks for compactions at all (`false`: only explicit
    /// [`Store::compact`] calls and the engine's own timers compact).
    pub enabled: bool,
    /// The least fill (`used / capacity`) at which an ordinary compaction runs.
    pub min_fill: f64,
    /// The least estimated dead fraction of the used space for an ordinary run.
    pub min_dead: f64,
    /// The fill at which a compaction runs whatever the dead estimate (before the
    /// pool is full: the list's compaction needs free pages to copy the live
    /// records into).
    pub emergency_fill: f64,
    /// Entries appended since the last run after which another may run even if
    /// the store's use did not grow by 1/64 of its capacity (deletes and
    /// overwrites make space reclaimable without growing it much).
    pub check_every: u64,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        CompactionPolicy {
            enabled: true,
            min_fill: 0.5,
            min_dead: 0.25,
            emergency_fill: 0.85,
            check_every: 64,
        }
    }
}

impl CompactionPolicy {
    /// A policy that never asks for a compaction.
    pub fn disabled() -> CompactionPolicy {
        CompactionPolicy {
            enabled: false,
            ..CompactionPolicy::default()
        }
    }
}

/// The default [`crate::consensus::replica::ReplicaConfig::write_reserve`]: 5% of the store's
/// capacity (and at least four of its largest entries).
pub const DEFAULT_WRITE_RESERVE: f64 = 0.05;

/// Counters of the compactions a replica asked for (shown by `INFO`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactionCounts {
    /// Compactions that completed.
    pub runs: u64,
    /// Of those, emergency runs (high fill, or a write refused for lack of space).
    pub emergency: u64,
    /// Compactions that failed (logged; the replica goes on).
    pub failed: u64,
    /// Pages (list) or bytes (WAL) given back, in all.
    pub freed: u64,
    /// Writes refused because the store is full.
    pub oom_refusals: u64,
    /// Appends that found the store full (their entries were dropped: a leader's
    /// writes refused, a follower's entries sent again later).
    pub full_appends: u64,
    /// The longest time the last completed compaction held up a reader or writer,
    /// in microseconds ([`CompactStats::max_pause`]; 0 before the first).
    pub last_pause_us: u64,
    /// The wall time of the last completed compaction, in microseconds
    /// ([`CompactStats::total`]; 0 before the first).
    pub last_duration_us: u64,
}

/// When to compact, decided: a [`CompactionPolicy`], its feedback (what the last
/// run left) and whether a run is in flight. A replica keeps one; so does any
/// other driver of a [`Store`] that wants the same pacing (openraft-list's purge).
///
/// Ask [`Compactor::due`]; when it says yes, run [`Store::compact`] (or
/// [`Store::compact_to`]) and report the outcome to [`Compactor::finished`].
#[derive(Debug)]
pub struct Compactor {
    policy: CompactionPolicy,
    /// A compaction was asked for and not reported yet.
    in_flight: bool,
    /// The one in flight is an emergency run.
    in_flight_emergency: bool,
    /// A write was refused for lack of space: the next run is an emergency one.
    urgent: bool,
    /// The store's last index when the last run ended.
    index_after: u64,
    /// Used bytes the last compaction left (taken as live).
    live_after: u64,
    pub(crate) counts: CompactionCounts,
}

/// Why a compaction was asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// Fill and dead estimate over the policy's thresholds.
    Policy,
    /// High fill, or a refused write.
    Emergency,
}

impl Compactor {
    /// A compactor following `policy`, with no run behind it yet.
    pub fn new(policy: CompactionPolicy) -> Compactor {
        Compactor {
            policy,
            in_flight: false,
            in_flight_emergency: false,
            urgent: false,
            index_after: 0,
            live_after: 0,
            counts: CompactionCounts::default(),
        }
    }

    /// `writes` were refused for lack of space: look (and compact) at once.
    pub fn refused(&mut self, writes: u64) {
        self.counts.oom_refusals += writes;
        self.urgent = true;
    }

    /// An append found the store full: look (and compact) at once.
    pub fn append_failed(&mut self) {
        self.counts.full_appends += 1;
        self.urgent = true;
    }

    /// Whether a compaction should start now; if so, it is in flight until
    /// [`Compactor::finished`].
    pub fn due(&mut self, store: &dyn Store) -> Option<Reason> {
        if !self.policy.enabled || self.in_flight {
            return None;
        }
        let usage = store.usage();
        let (capacity, fill) = (usage.capacity?, usage.fill()?);
        let grown = usage.used.saturating_sub(self.live_after) >= capacity / 64;
        let appended = store.last_index().saturating_sub(self.index_after);
        if !grown && appended < self.policy.check_every {
            // Nothing new to reclaim since the last run.
            return None;
        }
        let reason = if self.urgent || fill >= self.policy.emergency_fill {
            Reason::Emergency
        } else if fill >= self.policy.min_fill && self.dead(&usage) >= self.policy.min_dead {
            Reason::Policy
        } else {
            return None;
        };
        tracing::debug!(
            ?reason,
            fill,
            dead = self.dead(&usage),
            used = usage.used,
            "compaction due"
        );
        self.in_flight = true;
        self.urgent = false;
        self.in_flight_emergency = reason == Reason::Emergency;
        Some(reason)
    }

    /// The estimated dead fraction of the used space.
    fn dead(&self, usage: &StoreUsage) -> f64 {
        if usage.used == 0 {
            return 0.0;
        }
        usage.used.saturating_sub(self.live_after) as f64 / usage.used as f64
    }

    /// The compaction asked for by [`Compactor::due`] ended with `result`; `store`
    /// is the store now, and `id` names its owner in the log line.
    pub fn finished(
        &mut self,
        id: u16,
        result: &Result<CompactStats, StoreError>,
        store: &dyn Store,
    ) {
        let emergency = std::mem::take(&mut self.in_flight_emergency);
        self.in_flight = false;
        let usage = store.usage();
        self.index_after = store.last_index();
        match result {
            Ok(stats) => {
                self.counts.runs += 1;
                self.counts.emergency += u64::from(emergency);
                self.counts.freed += stats.freed;
                self.counts.last_pause_us = duration_us(stats.max_pause);
                self.counts.last_duration_us = duration_us(stats.total);
                self.live_after = usage.used;
                tracing::info!(
                    id,
                    emergency,
                    freed = stats.freed,
                    kept = stats.records_kept,
                    dropped = stats.records_dropped,
                    max_pause_us = stats.max_pause.as_micros() as u64,
                    ms = stats.total.as_secs_f64() * 1e3,
                    fill = usage.fill().unwrap_or(0.0),
                    "compaction"
                );
            }
            Err(e) => {
                self.counts.failed += 1;
                tracing::error!(id, emergency, error = %e, "compaction failed");
            }
        }
    }

    /// Whether a compaction is in flight.
    pub fn in_flight(&self) -> bool {
        self.in_flight
    }

    /// The counts of the compactions asked for and their outcomes.
    pub fn counts(&self) -> CompactionCounts {
        self.counts
    }
}

/// `d` in whole microseconds (saturating).
fn duration_us(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Replica {
    /// Whether a compaction asked for by [`Output::compact`](crate::consensus::replica::Output::compact) is running.
    pub fn compaction_in_flight(&self) -> bool {
        self.compactor.in_flight()
    }

    /// The compaction [`Output::compact`](crate::consensus::replica::Output::compact) asked for ended with `result`.
    pub fn report_compaction(&mut self, result: &Result<CompactStats, StoreError>) {
        self.compactor
            .finished(self.core.id(), result, &*self.store);
    }

    /// Runs the compaction [`Output::compact`](crate::consensus::replica::Output::compact) asked for on this thread and reports
    /// it (for drivers without threads of their own, such as simulations).
    pub fn compact_now(&mut self) -> Result<CompactStats, StoreError> {
        let result = self.store.compact();
        self.report_compaction(&result);
        result
    }

    /// What the compactions this replica asked for did, and how many writes it
    /// refused for lack of space.
    pub fn compaction_counts(&self) -> CompactionCounts {
        self.compactor.counts
    }
}
