//! The persistency model: which bytes may survive a crash at a given point.
//!
//! Following Px86 (Raad et al., POPL'20), per *unit* (a 64-byte line, or an 8-byte
//! word in [`Model::Word`]) the persisted state after a crash is a downward-closed
//! part of the unit's store history since the durable base; different units persist
//! independently. The history is ordered except inside a *group*: the word stores one
//! write call made to one unit (a `memcpy` promises no order among them; a
//! [`crate::Pool::write_words_ordered`] call makes each word its own group). So a
//! unit keeps its first groups whole plus any subset of the next group. The part
//! that survives every crash is the *durable bound*:
//!
//! * `clwb` / `clflushopt` of a line by thread T makes the line's stores so far
//!   durable once T issues a later fence or locked read-modify-write;
//! * `clflush` makes them durable at once (it is ordered with stores);
//! * a non-temporal store is a unit of its own (it bypasses the cache, so it is not
//!   ordered with the cached stores to its line) and becomes durable at the next
//!   fence of its thread;
//! * a fence of another thread does nothing for T's flushes.
//!
//! [`Model::Eadr`] puts the caches in the persistence domain: a crash leaves a prefix
//! of the global order of write calls (plus any subset of the next call's stores), at
//! least up to every thread's last fence. Non-temporal stores still wait for a fence.
//!
//! A [`CrashState`] holds, for one crash point, the *in-flight* units (those with
//! stores beyond their durable bound), the lines the trace touched with the durable
//! stores applied (a sparse template), and materialises the image of any [`Cut`].
//!
//! Known limits: a group is split into chunks of at most [`MAX_GROUP`] stores that
//! persist in address order among themselves (only eADR's global unit can hold a
//! larger group: a line has 8 words); where a non-temporal store and a cached store
//! both persist and overlap, the one later in program order wins.

use std::collections::{BTreeMap, HashMap};

use super::event::{Event, EventKind, FlushOp};
use super::trace::Trace;

/// Largest group of mutually unordered stores a unit enumerates (2^8 - 1 subsets).
pub const MAX_GROUP: usize = 8;

const LINE: usize = 64;

/// The persistency model used to derive crash images.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Model {
    /// Each 64-byte line persists a prefix of its own stores (Px86).
    #[default]
    Line,
    /// Each aligned 8-byte word persists a prefix of its own stores: only aligned
    /// 8-byte stores are failure-atomic, and the words of a line tear independently.
    Word,
    /// eADR: caches are persistent; a crash leaves a prefix of the global store order.
    Eadr,
}

/// A deliberately broken variant of the model, for the simulator's self-test: each
/// must make at least one litmus test fail. [`ModelMutant::None`] is the real model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ModelMutant {
    /// The model as specified.
    #[default]
    None,
    /// Stores to one line persist in any order (each unit's history is one group).
    SameLineUnordered,
    /// Different lines persist in program order (one global prefix beyond the durable
    /// bounds).
    DifferentLinesOrdered,
    /// `clflush` treated as `clwb`: it waits for a fence.
    ClflushAsClwb,
    /// Any thread's fence completes every thread's flushes.
    ForeignFenceOrders,
    /// A locked read-modify-write is not a fence.
    RmwNotFence,
    /// The line model tears words (as [`Model::Word`]).
    WordTearingInLine,
    /// eADR keeps any subset of the global order, not a prefix.
    EadrNotPrefix,
    /// The stores of one write call persist in address order (the old assumption).
    WriteInAddressOrder,
    /// Non-temporal stores are part of their line's ordered history.
    NtInLineHistory,
    /// A fence also completes flushes issued after it (fence-before-flush counts).
    FenceCountsLaterFlushes,
}

impl ModelMutant {
    /// Every broken variant.
    pub const ALL: [ModelMutant; 10] = [
        ModelMutant::SameLineUnordered,
        ModelMutant::DifferentLinesOrdered,
        ModelMutant::ClflushAsClwb,
        ModelMutant::ForeignFenceOrders,
        ModelMutant::RmwNotFence,
        ModelMutant::WordTearingInLine,
        ModelMutant::EadrNotPrefix,
        ModelMutant::WriteInAddressOrder,
        ModelMutant::NtInLineHistory,
        ModelMutant::FenceCountsLaterFlushes,
    ];
}

/// One unit whose persisted part is not fixed at this crash point.
#[derive(Clone, Debug)]
pub struct InFlight {
    /// Line index (offset / 64), word index (offset / 8), or 0 for the eADR order.
    pub unit: u64,
    /// A non-temporal store's own unit (its `unit` is the line or word it stores to).
    pub nt: bool,
    /// Indices into the trace's events of the unit's stores, in program order.
    pub stores: Vec<usize>,
    /// Start (index into `stores`) of each group, ascending, the first 0.
    pub groups: Vec<usize>,
    /// Stores guaranteed durable (a group boundary).
    pub durable: usize,
    /// Allowed states beyond the durable bound (saturating).
    choices: usize,
}

impl InFlight {
    fn new(unit: u64, nt: bool, stores: Vec<usize>, groups: Vec<usize>, durable: usize) -> Self {
        let mut u = InFlight {
            unit,
            nt,
            stores,
            groups,
            durable,
            choices: 1,
        };
        u.choices = u.groups_after_durable().fold(1usize, |acc, (s, e)| {
            acc.saturating_add((1usize << (e - s)) - 1)
        });
        u
    }

    /// Number of allowed states: 1 (nothing beyond the durable bound) plus, for each
    /// group beyond it, its non-empty subsets.
    pub fn choices(&self) -> usize {
        self.choices
    }

    /// The largest cut value (everything persisted); a cut value lies in
    /// `durable..=max()`.
    pub fn max(&self) -> usize {
        self.durable + self.choices - 1
    }

    /// Groups (start, end) beyond the durable bound.
    fn groups_after_durable(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        let n = self.stores.len();
        self.groups
            .iter()
            .enumerate()
            .map(move |(i, &s)| (s, self.groups.get(i + 1).copied().unwrap_or(n)))
            .filter(move |&(s, _)| s >= self.durable)
    }

    /// Indices into `stores` that persist beyond the durable bound in state `cut`.
    pub fn persisted(&self, cut: usize) -> Vec<usize> {
        let mut state = cut.clamp(self.durable, self.max()) - self.durable;
        let mut out = Vec::new();
        for (s, e) in self.groups_after_durable() {
            if state == 0 {
                break;
            }
            let subsets = (1usize << (e - s)) - 1;
            if state <= subsets {
                // `state` is the subset mask; the last one is the whole group.
                out.extend((s..e).filter(|&i| state & (1 << (i - s)) != 0));
                break;
            }
            out.extend(s..e);
            state -= subsets;
        }
        out
    }

    /// The cut value that keeps exactly the first `n` stores (in program order; at
    /// least the durable ones): "a moment in time" for this unit.
    pub fn prefix(&self, n: usize) -> usize {
        let n = n.clamp(self.durable, self.stores.len());
        let mut state = 0usize;
        for (s, e) in self.groups_after_durable() {
            if n >= e {
                state += (1usize << (e - s)) - 1;
            } else {
                if n > s {
                    state += (1usize << (n - s)) - 1;
                }
                break;
            }
        }
        self.durable + state
    }

    /// The first store (index into `stores`) lost in state `cut`, if any.
    pub fn first_lost(&self, cut: usize) -> Option<usize> {
        let kept = self.persisted(cut);
        (self.durable..self.stores.len()).find(|i| !kept.contains(i))
    }
}

/// A choice of state for every in-flight unit, in the order of
/// [`CrashState::in_flight`]; each within `durable..=max()` of its unit (for units
/// whose groups are single stores, the number of stores kept).
pub type Cut = Vec<usize>;

/// The crash images possible at one crash point.
#[derive(Clone, Debug)]
pub struct CrashState<'t> {
    trace: &'t Trace,
    model: Model,
    point: usize,
    in_flight: Vec<InFlight>,
    /// Every line a store before the point touched, with the durable stores applied.
    template: BTreeMap<usize, [u8; LINE]>,
    /// Non-temporal units may overlap cached ones: apply in program order.
    replay: Option<Vec<usize>>,
}

fn apply_to_line(lines: &mut BTreeMap<usize, [u8; LINE]>, event: &Event) {
    if let EventKind::Store {
        offset, len, value, ..
    } = event.kind
    {
        let o = offset as usize;
        if let Some(line) = lines.get_mut(&(o / LINE)) {
            let at = o % LINE;
            let n = (len as usize).min(LINE - at);
            line[at..at + n].copy_from_slice(&value[..n]);
        }
    }
}

impl<'t> CrashState<'t> {
    /// The state after the first `point` events of `trace` (clamped to its length).
    pub fn new(trace: &'t Trace, point: usize, model: Model) -> CrashState<'t> {
        Self::with_mutant(trace, point, model, ModelMutant::None)
    }

    /// As [`CrashState::new`], under a deliberately broken model (the simulator's
    /// self-test: see [`ModelMutant`]).
    pub fn with_mutant(
        trace: &'t Trace,
        point: usize,
        model: Model,
        mutant: ModelMutant,
    ) -> CrashState<'t> {
        let point = point.min(trace.events.len());
        let events = &trace.events[..point];
        let mut units = match model {
            Model::Line | Model::Word => unit_histories(events, model, mutant),
            Model::Eadr => eadr_history(events, mutant),
        };
        if mutant == ModelMutant::DifferentLinesOrdered && model != Model::Eadr {
            units = merge_units(units);
        }
        let mut template: BTreeMap<usize, [u8; LINE]> = BTreeMap::new();
        for e in events {
            if let EventKind::Store { offset, len, .. } = e.kind {
                let first = offset as usize / LINE;
                let last = (offset as usize + len as usize - 1) / LINE;
                for line in first..=last {
                    template.entry(line).or_insert_with(|| {
                        let mut l = [0u8; LINE];
                        if let Some(src) = trace.base.get(line * LINE..line * LINE + LINE) {
                            l.copy_from_slice(src);
                        }
                        l
                    });
                }
            }
        }
        let has_nt = units.iter().any(|u| u.nt);
        let mut durable_stores: Vec<usize> = units
            .iter()
            .flat_map(|u| u.stores[..u.durable].iter().copied())
            .collect();
        durable_stores.sort_unstable();
        for &i in &durable_stores {
            apply_to_line(&mut template, &trace.events[i]);
        }
        let in_flight: Vec<InFlight> = units
            .into_iter()
            .filter(|u| u.durable < u.stores.len())
            .collect();
        let replay = (has_nt && !in_flight.is_empty()).then_some(durable_stores);
        CrashState {
            trace,
            model,
            point,
            in_flight,
            template,
            replay,
        }
    }

    /// The crash point (number of events that happened).
    pub fn point(&self) -> usize {
        self.point
    }

    /// The model in use.
    pub fn model(&self) -> Model {
        self.model
    }

    /// The trace this state was derived from.
    pub fn trace(&self) -> &'t Trace {
        self.trace
    }

    /// The units whose persisted part is open.
    pub fn in_flight(&self) -> &[InFlight] {
        &self.in_flight
    }

    /// Exact number of distinct cuts (an upper bound on distinct images),
    /// saturating at `u128::MAX`.
    pub fn count(&self) -> u128 {
        self.in_flight
            .iter()
            .fold(1u128, |acc, u| acc.saturating_mul(u.choices() as u128))
    }

    /// The cut in which nothing more than the durable bound persisted.
    pub fn minimal(&self) -> Cut {
        self.in_flight.iter().map(|u| u.durable).collect()
    }

    /// The cut in which everything persisted.
    pub fn maximal(&self) -> Cut {
        self.in_flight.iter().map(InFlight::max).collect()
    }

    /// The lines the image of `cut` differs from the base in (every line a store
    /// touched, whether or not its bytes changed), sorted by line index.
    pub fn image_lines(&self, cut: &[usize]) -> BTreeMap<usize, [u8; LINE]> {
        let mut chosen: Vec<usize> = self
            .in_flight
            .iter()
            .zip(cut)
            .flat_map(|(u, &c)| u.persisted(c).into_iter().map(|i| u.stores[i]))
            .collect();
        chosen.sort_unstable();
        match &self.replay {
            None => {
                let mut lines = self.template.clone();
                for &i in &chosen {
                    apply_to_line(&mut lines, &self.trace.events[i]);
                }
                lines
            }
            Some(durable) => {
                // Rebuild the touched lines from the base, in program order.
                let mut lines = self.template.clone();
                for (line, bytes) in lines.iter_mut() {
                    if let Some(src) = self.trace.base.get(line * LINE..line * LINE + LINE) {
                        bytes.copy_from_slice(src);
                    }
                }
                let mut all: Vec<usize> = durable.iter().chain(&chosen).copied().collect();
                all.sort_unstable();
                for &i in &all {
                    apply_to_line(&mut lines, &self.trace.events[i]);
                }
                lines
            }
        }
    }

    /// The whole image of `cut`. Cut values outside a unit's range are clamped.
    pub fn materialize(&self, cut: &[usize]) -> Vec<u8> {
        let mut image = self.trace.base.to_vec();
        for (line, bytes) in self.image_lines(cut) {
            if let Some(dst) = image.get_mut(line * LINE..line * LINE + LINE) {
                dst.copy_from_slice(&bytes);
            }
        }
        image
    }

    /// Human-readable deviations of `cut` from "everything persisted": which units
    /// kept how many of their stores, and the first store each lost (with its source
    /// location).
    pub fn describe(&self, cut: &[usize]) -> Vec<String> {
        let unit_name = |u: &InFlight| {
            let nt = if u.nt { " (non-temporal store)" } else { "" };
            match self.model {
                Model::Word => format!("word {:#x}{nt}", u.unit * 8),
                Model::Eadr if !u.nt => "global store order".to_owned(),
                _ if self.model == Model::Eadr || u.nt => {
                    let off = self.trace.events[u.stores[0]].line().unwrap_or(0) * 64;
                    format!("line {off:#x}{nt}")
                }
                _ => format!("line {:#x}", u.unit * 64),
            }
        };
        self.in_flight
            .iter()
            .zip(cut)
            .filter_map(|(u, &c)| {
                let lost = u.first_lost(c)?;
                Some(format!(
                    "{}: kept {} of {} stores ({} were durable); first lost: {}",
                    unit_name(u),
                    u.durable + u.persisted(c).len(),
                    u.stores.len(),
                    u.durable,
                    self.trace.events[u.stores[lost]]
                ))
            })
            .collect()
    }
}

/// Splits a history into groups: consecutive stores with the same write group form
/// one, capped at [`MAX_GROUP`] stores.
fn group_starts(events: &[Event], stores: &[usize], mutant: ModelMutant) -> Vec<usize> {
    let group_of = |i: usize| match events[i].kind {
        EventKind::Store { group, .. } => group,
        _ => u32::MAX,
    };
    let mut starts = Vec::new();
    let mut size = 0;
    for (k, &i) in stores.iter().enumerate() {
        let joins = k > 0
            && size < MAX_GROUP
            && match mutant {
                ModelMutant::WriteInAddressOrder => false,
                ModelMutant::SameLineUnordered => true,
                _ => group_of(i) == group_of(stores[k - 1]),
            };
        if joins {
            size += 1;
        } else {
            starts.push(k);
            size = 1;
        }
    }
    starts
}

/// The durable bound rounded down to a group boundary (a flush always lands between
/// write calls, so this only matters for mutants that merge groups).
fn durable_at_boundary(groups: &[usize], n: usize, d: usize) -> usize {
    if d >= n {
        return n;
    }
    groups
        .iter()
        .copied()
        .filter(|&s| s <= d)
        .max()
        .unwrap_or(0)
}

/// Store histories and durable bounds per line or word (Px86 with flush marks).
fn unit_histories(events: &[Event], model: Model, mutant: ModelMutant) -> Vec<InFlight> {
    let word_units = model == Model::Word || mutant == ModelMutant::WordTearingInLine;
    let unit_of = |offset: u64| if word_units { offset / 8 } else { offset / 64 };
    let mut hist: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let mut durable: HashMap<u64, usize> = HashMap::new();
    // Non-temporal stores: (unit, event index, durable).
    let mut nts: Vec<(u64, usize, bool)> = Vec::new();
    // Per thread: (unit, store count) made durable by that thread's next fence, and
    // the non-temporal stores (index into `nts`) likewise.
    let mut pending: HashMap<u16, Vec<(u64, usize)>> = HashMap::new();
    let mut pending_nt: HashMap<u16, Vec<usize>> = HashMap::new();
    // FenceCountsLaterFlushes: threads that fenced with nothing pending since.
    let mut fenced_idle: HashMap<u16, bool> = HashMap::new();
    let raise = |durable: &mut HashMap<u64, usize>, u: u64, c: usize| {
        let d = durable.entry(u).or_insert(0);
        *d = (*d).max(c);
    };
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            EventKind::Store { offset, nt, .. } => {
                let u = unit_of(offset);
                if nt && mutant != ModelMutant::NtInLineHistory {
                    pending_nt.entry(e.thread).or_default().push(nts.len());
                    nts.push((u, i, false));
                    continue;
                }
                let h = hist.entry(u).or_default();
                h.push(i);
                if nt {
                    pending.entry(e.thread).or_default().push((u, h.len()));
                }
            }
            EventKind::Flush { line, op } => {
                let units: Vec<u64> = if word_units {
                    (line / 8..line / 8 + 8).collect()
                } else {
                    vec![line / 64]
                };
                for u in units {
                    let c = hist.get(&u).map_or(0, Vec::len);
                    if c == 0 {
                        continue;
                    }
                    let immediate = (op == FlushOp::Clflush
                        && mutant != ModelMutant::ClflushAsClwb)
                        || (mutant == ModelMutant::FenceCountsLaterFlushes
                            && fenced_idle.get(&e.thread).copied().unwrap_or(false));
                    if immediate {
                        raise(&mut durable, u, c);
                    } else {
                        pending.entry(e.thread).or_default().push((u, c));
                    }
                }
            }
            ref k if k.is_fence() => {
                if mutant == ModelMutant::RmwNotFence && matches!(k, EventKind::LockedRmw { .. }) {
                    continue;
                }
                let threads: Vec<u16> = if mutant == ModelMutant::ForeignFenceOrders {
                    pending.keys().chain(pending_nt.keys()).copied().collect()
                } else {
                    vec![e.thread]
                };
                for t in threads {
                    if let Some(list) = pending.get_mut(&t) {
                        for (u, c) in list.drain(..) {
                            raise(&mut durable, u, c);
                        }
                    }
                    if let Some(list) = pending_nt.get_mut(&t) {
                        for n in list.drain(..) {
                            nts[n].2 = true;
                        }
                    }
                }
                fenced_idle.insert(e.thread, true);
            }
            _ => {}
        }
    }
    let mut out: Vec<InFlight> = hist
        .into_iter()
        .map(|(u, stores)| {
            let groups = group_starts(events, &stores, mutant);
            let d = durable.get(&u).copied().unwrap_or(0).min(stores.len());
            let d = durable_at_boundary(&groups, stores.len(), d);
            InFlight::new(u, false, stores, groups, d)
        })
        .collect();
    for (u, i, d) in nts {
        out.push(InFlight::new(u, true, vec![i], vec![0], usize::from(d)));
    }
    out
}

/// DifferentLinesOrdered: every cached unit's non-durable stores become one global
/// history in program order (durable parts stay with their units).
fn merge_units(units: Vec<InFlight>) -> Vec<InFlight> {
    let mut out = Vec::new();
    let mut merged: Vec<usize> = Vec::new();
    for u in units {
        if u.nt {
            out.push(u);
            continue;
        }
        merged.extend_from_slice(&u.stores[u.durable..]);
        let durable: Vec<usize> = u.stores[..u.durable].to_vec();
        let n = durable.len();
        out.push(InFlight::new(u.unit, false, durable, vec![0], n));
    }
    merged.sort_unstable();
    let groups = (0..merged.len()).collect();
    out.push(InFlight::new(u64::MAX, false, merged, groups, 0));
    out
}

/// eADR: one history, the global order of cached stores; durable up to the last
/// store each thread issued before its last fence. Non-temporal stores are units of
/// their own, durable at their thread's next fence.
fn eadr_history(events: &[Event], mutant: ModelMutant) -> Vec<InFlight> {
    let mut stores = Vec::new();
    let mut nts: Vec<(u64, usize, bool)> = Vec::new();
    let mut pending_nt: HashMap<u16, Vec<usize>> = HashMap::new();
    // Per thread: number of global stores up to its last store before its last fence.
    let mut last_store_pos: HashMap<u16, usize> = HashMap::new();
    let mut fenced: HashMap<u16, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            EventKind::Store { offset, nt, .. } => {
                if nt {
                    pending_nt.entry(e.thread).or_default().push(nts.len());
                    nts.push((offset / 64, i, false));
                } else {
                    stores.push(i);
                    last_store_pos.insert(e.thread, stores.len());
                }
            }
            ref k if k.is_fence() => {
                if mutant == ModelMutant::RmwNotFence && matches!(k, EventKind::LockedRmw { .. }) {
                    continue;
                }
                if let Some(&p) = last_store_pos.get(&e.thread) {
                    fenced.insert(e.thread, p);
                }
                if let Some(list) = pending_nt.get_mut(&e.thread) {
                    for n in list.drain(..) {
                        nts[n].2 = true;
                    }
                }
            }
            _ => {}
        }
    }
    let d = fenced.values().copied().max().unwrap_or(0);
    let mut out = Vec::new();
    if mutant == ModelMutant::EadrNotPrefix {
        for (k, &i) in stores.iter().enumerate() {
            out.push(InFlight::new(
                k as u64,
                false,
                vec![i],
                vec![0],
                usize::from(k < d),
            ));
        }
    } else if !stores.is_empty() {
        let groups = group_starts(events, &stores, mutant);
        let d = durable_at_boundary(&groups, stores.len(), d);
        out.push(InFlight::new(0, false, stores, groups, d));
    }
    for (u, i, d) in nts {
        out.push(InFlight::new(u, true, vec![i], vec![0], usize::from(d)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(groups: Vec<usize>, n: usize, durable: usize) -> InFlight {
        InFlight::new(1, false, (0..n).collect(), groups, durable)
    }

    #[test]
    fn singleton_groups_are_prefixes() {
        let u = unit(vec![0, 1, 2], 3, 1);
        assert_eq!(u.choices(), 3);
        assert_eq!(u.max(), 3);
        assert_eq!(u.persisted(1), Vec::<usize>::new());
        assert_eq!(u.persisted(2), vec![1]);
        assert_eq!(u.persisted(3), vec![1, 2]);
    }

    #[test]
    fn a_group_persists_as_any_subset_then_whole() {
        // Groups {0}, {1,2}, {3}; durable 1.
        let u = unit(vec![0, 1, 3], 4, 1);
        assert_eq!(u.choices(), 1 + 3 + 1);
        let states: Vec<Vec<usize>> = (u.durable..=u.max()).map(|c| u.persisted(c)).collect();
        assert_eq!(
            states,
            vec![vec![], vec![1], vec![2], vec![1, 2], vec![1, 2, 3]]
        );
        assert_eq!(u.first_lost(3), Some(1));
        assert_eq!(u.first_lost(u.max()), None);
        for n in 1..=4 {
            assert_eq!(
                u.persisted(u.prefix(n)),
                (1..n).collect::<Vec<_>>(),
                "prefix {n}"
            );
        }
    }

    #[test]
    fn a_flush_after_a_group_makes_all_of_it_durable() {
        // One group of three stores, flushed and fenced: durable at its end.
        assert_eq!(durable_at_boundary(&[0], 3, 3), 3);
        assert_eq!(durable_at_boundary(&[0, 2], 3, 2), 2);
        assert_eq!(durable_at_boundary(&[0, 2], 3, 1), 0);
    }
}
