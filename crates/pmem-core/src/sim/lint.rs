//! Lints from one pass over a trace, after Witcher and Mumak.
//!
//! Correctness:
//! * **missing flush**: a thread fenced after storing to a line, the fence ordered
//!   other flushes (so it was meant as a persist barrier), but that line was never
//!   flushed in between; reported at the store.
//! * **missing fence**: at the end of an operation (or of the trace), a flush whose
//!   thread issued no fence after it; reported at the flush.
//! * **not durable at operation end**: at the end of an operation (or of the trace),
//!   a line stored during it that was never flushed afterwards; reported at the
//!   store.
//!
//! Under [`Model::Eadr`] ([`lint_model`]) the caches are persistent, so no line
//! needs a flush: **missing flush** never fires, and **not durable at operation
//! end** means a store its thread did not fence by the end of the operation (a
//! store still in the store buffer is not yet persistent, even on eADR). Missing
//! fences after non-temporal stores, and the performance lints, are as above.
//!
//! Performance:
//! * **redundant flush**: a flush of a line with no store since its last flush (a
//!   clean or already-flushed line);
//! * **empty fence**: a fence with nothing pending for its thread (a locked
//!   read-modify-write is a fence too, for the lints as for the model, but is never
//!   reported empty).
//!
//! Each lint is reported once per source location, with a count. Lines inside a
//! range declared with `SimDomain::volatile_range` are exempt from the correctness
//! lints; so are stores the code declares covered by a durable log (`LogCovered`,
//! until stored again) and flushes it declares deliberately unfenced
//! (`DeferFlushes`): a lazy commit's writes in place, which recovery replays.

use std::collections::{BTreeMap, HashMap};

use super::event::{EventKind, FlushOp, Loc};
use super::model::Model;
use super::trace::Trace;

/// What a lint reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LintKind {
    /// A store not flushed before a persist barrier of its thread.
    MissingFlush,
    /// A flush never followed by a fence of its thread.
    MissingFence,
    /// A line stored during an operation and not flushed by its end.
    NotDurableAtOpEnd,
    /// A flush of a clean or already-flushed line.
    RedundantFlush,
    /// A fence with nothing pending.
    EmptyFence,
}

impl LintKind {
    /// Whether the lint points at a durability bug (not just wasted work).
    pub fn is_correctness(self) -> bool {
        matches!(
            self,
            LintKind::MissingFlush | LintKind::MissingFence | LintKind::NotDurableAtOpEnd
        )
    }
}

/// One lint, deduplicated by source location.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Lint {
    /// What.
    pub kind: LintKind,
    /// Where (the store, flush or fence the lint is about).
    pub loc: Loc,
    /// How many times it fired at that location.
    pub count: usize,
    /// An example: the line concerned, and the operation if any.
    pub example: String,
}

impl std::fmt::Display for Lint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} at {}:{}:{} ({}x; e.g. {})",
            self.kind,
            self.loc.file(),
            self.loc.line(),
            self.loc.column(),
            self.count,
            self.example
        )
    }
}

#[derive(Default)]
struct LineState {
    /// Last store not yet flushed: its location.
    unflushed: Option<Loc>,
    /// The line was stored (by the current op) at all.
    stored_in_op: bool,
    /// Its stores are covered by a durable log (`LogCovered`): flushing it later is
    /// not redundant, leaving it unflushed is not a bug.
    covered: bool,
}

/// Runs every lint over the trace, for the line (ADR) model: [`lint_model`] with
/// [`Model::Line`].
pub fn lint(trace: &Trace) -> Vec<Lint> {
    lint_model(trace, Model::Line)
}

/// Runs every lint over the trace, as `model` defines durability: under
/// [`Model::Eadr`] a store needs a fence of its thread, not a flush.
pub fn lint_model(trace: &Trace, model: Model) -> Vec<Lint> {
    let eadr = model == Model::Eadr;
    let mut found: BTreeMap<(LintKind, &'static str, u32, u32), Lint> = BTreeMap::new();
    let mut report = |kind: LintKind, loc: Loc, example: String| {
        found
            .entry((kind, loc.file(), loc.line(), loc.column()))
            .and_modify(|l| l.count += 1)
            .or_insert(Lint {
                kind,
                loc,
                count: 1,
                example,
            });
    };
    let mut volatile: Vec<(u64, u64)> = Vec::new();
    let is_volatile = |volatile: &[(u64, u64)], line: u64| {
        volatile
            .iter()
            .any(|&(o, l)| line * 64 < o + l && o < line * 64 + 64)
    };
    let mut lines: HashMap<u64, LineState> = HashMap::new();
    // Per thread: flushes awaiting a fence (line, location), and NT stores likewise.
    let mut pending: HashMap<u16, Vec<(u64, Loc)>> = HashMap::new();
    // Per thread: lines it stored since its last fence and no flush covered since
    // (any thread's flush of the line covers the stores made before it), with the
    // location of its last such store. Per thread, so that another thread's store
    // after this thread's flush is not this thread's missing flush.
    let mut stored_since_fence: HashMap<u16, HashMap<u64, Loc>> = HashMap::new();
    // eADR: per thread, lines it stored (cached) since its last fence, with the
    // location of its last such store: not yet persistent.
    let mut unfenced: HashMap<u16, BTreeMap<u64, Loc>> = HashMap::new();
    let mut op: Option<u32> = None;

    let end_of_op = |lines: &mut HashMap<u64, LineState>,
                     pending: &mut HashMap<u16, Vec<(u64, Loc)>>,
                     unfenced: &mut HashMap<u16, BTreeMap<u64, Loc>>,
                     volatile: &[(u64, u64)],
                     op: Option<u32>,
                     report: &mut dyn FnMut(LintKind, Loc, String)| {
        let what = op.map_or("the end of the trace".to_owned(), |n| {
            format!("the end of op {n}")
        });
        for stored in unfenced.values_mut() {
            for (line, loc) in std::mem::take(stored) {
                if !is_volatile(volatile, line) {
                    report(
                        LintKind::NotDurableAtOpEnd,
                        loc,
                        format!("line {:#x} stored and not fenced by {what}", line * 64),
                    );
                }
            }
        }
        for list in pending.values_mut() {
            for (line, loc) in list.drain(..) {
                if !is_volatile(volatile, line) {
                    report(
                        LintKind::MissingFence,
                        loc,
                        format!("line {:#x} at {what}", line * 64),
                    );
                }
            }
        }
        for (line, st) in lines.iter_mut() {
            if st.stored_in_op && !is_volatile(volatile, *line) {
                if let Some(loc) = st.unflushed {
                    report(
                        LintKind::NotDurableAtOpEnd,
                        loc,
                        format!("line {:#x} at {what}", line * 64),
                    );
                }
            }
            st.stored_in_op = false;
        }
    };

    for e in &trace.events {
        match &e.kind {
            EventKind::Store { offset, nt, .. } => {
                let line = offset / 64;
                if *nt {
                    pending.entry(e.thread).or_default().push((line, e.loc));
                } else if eadr {
                    // Persistent once fenced: no flush to wait for, so the line is
                    // never "unflushed" and a later flush of it is redundant.
                    unfenced.entry(e.thread).or_default().insert(line, e.loc);
                } else {
                    let st = lines.entry(line).or_default();
                    st.unflushed = Some(e.loc);
                    st.stored_in_op = true;
                    st.covered = false;
                    stored_since_fence
                        .entry(e.thread)
                        .or_default()
                        .insert(line, e.loc);
                }
            }
            EventKind::Flush { line, op: flush_op } => {
                let line = line / 64;
                let st = lines.entry(line).or_default();
                let covered = std::mem::take(&mut st.covered);
                for stored in stored_since_fence.values_mut() {
                    stored.remove(&line);
                }
                if st.unflushed.is_none() && !covered {
                    report(
                        LintKind::RedundantFlush,
                        e.loc,
                        format!("line {:#x}", line * 64),
                    );
                } else {
                    st.unflushed = None;
                    if *flush_op != FlushOp::Clflush {
                        pending.entry(e.thread).or_default().push((line, e.loc));
                    }
                }
            }
            kind if kind.is_fence() => {
                let list = pending.entry(e.thread).or_default();
                let stored = stored_since_fence.entry(e.thread).or_default();
                let had_unfenced = unfenced
                    .get_mut(&e.thread)
                    .is_some_and(|u| !std::mem::take(u).is_empty());
                // A locked RMW is a fence by side effect, not one written to drain.
                if list.is_empty() && !had_unfenced && *kind == EventKind::Fence {
                    report(LintKind::EmptyFence, e.loc, "nothing pending".to_owned());
                }
                if !list.is_empty() {
                    // A persist barrier: lines this thread stored and left unflushed
                    // are probably missing their flush.
                    for (&line, &loc) in stored.iter() {
                        if !is_volatile(&volatile, line) {
                            report(
                                LintKind::MissingFlush,
                                loc,
                                format!("line {:#x}", line * 64),
                            );
                        }
                    }
                }
                list.clear();
                stored.clear();
            }
            EventKind::OpBegin(n) => op = Some(*n),
            EventKind::OpEnd(_) => {
                end_of_op(
                    &mut lines,
                    &mut pending,
                    &mut unfenced,
                    &volatile,
                    op,
                    &mut report,
                );
                op = None;
            }
            EventKind::Volatile { offset, len } => volatile.push((*offset, *len)),
            EventKind::LogCovered { offset, len } => {
                for line in offset / 64..(offset + len).div_ceil(64) {
                    let st = lines.entry(line).or_default();
                    if st.unflushed.take().is_some() {
                        st.covered = true;
                    }
                    st.stored_in_op = false;
                    if let Some(s) = stored_since_fence.get_mut(&e.thread) {
                        s.remove(&line);
                    }
                    if let Some(u) = unfenced.get_mut(&e.thread) {
                        u.remove(&line);
                    }
                }
            }
            EventKind::DeferFlushes => {
                if let Some(list) = pending.get_mut(&e.thread) {
                    list.clear();
                }
                // On eADR the deferred "flushes" are the stores left unfenced.
                if let Some(u) = unfenced.get_mut(&e.thread) {
                    u.clear();
                }
            }
            EventKind::Label(_)
            | EventKind::Fence
            | EventKind::LockedRmw { .. }
            | EventKind::Relocate { .. }
            | EventKind::ReachedReset => {}
        }
    }
    end_of_op(
        &mut lines,
        &mut pending,
        &mut unfenced,
        &volatile,
        op,
        &mut report,
    );
    found.into_values().collect()
}
