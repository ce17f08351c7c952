//! The persistency model: which bytes may survive a crash at a given point.
//!
//! Following Px86 (Raad et al., POPL'20), per *unit* (a 64-byte line, or an 8-byte
//! word in [`Model::Word`]) the persisted state after a crash is a prefix of the
//! unit's store history since the durable base; different units persist
//! independently. The shortest allowed prefix is the *durable bound*:
//!
//! * `clwb` / `clflushopt` of a line by thread T makes the line's stores so far
//!   durable once T issues a later fence;
//! * `clflush` makes them durable at once (it is ordered with stores);
//! * a non-temporal store becomes durable at the next fence of its thread;
//! * a fence of another thread does nothing for T's flushes.
//!
//! [`Model::Eadr`] puts the caches in the persistence domain: a crash leaves a prefix
//! of the global store order, at least up to every thread's last fence.
//!
//! A [`CrashState`] holds, for one crash point, the *in-flight* units (those with
//! stores beyond their durable bound), a template image (the base with every durable
//! store applied), and materialises the image of any [`Cut`].

use std::collections::{BTreeMap, HashMap};

use super::event::{Event, EventKind, FlushOp};
use super::trace::Trace;

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

/// One unit whose persisted prefix is not fixed at this crash point.
#[derive(Clone, Debug)]
pub struct InFlight {
    /// Line index (offset / 64), word index (offset / 8), or 0 for the eADR order.
    pub unit: u64,
    /// Indices into the trace's events of the unit's stores, in order.
    pub stores: Vec<usize>,
    /// Stores guaranteed durable (the shortest allowed prefix).
    pub durable: usize,
}

impl InFlight {
    /// Number of allowed prefixes: `stores - durable + 1`.
    pub fn choices(&self) -> usize {
        self.stores.len() - self.durable + 1
    }
}

/// A choice of persisted prefix length for every in-flight unit, in the order of
/// [`CrashState::in_flight`]; each within `durable..=stores.len()`.
pub type Cut = Vec<usize>;

/// The crash images possible at one crash point.
#[derive(Clone, Debug)]
pub struct CrashState<'t> {
    trace: &'t Trace,
    model: Model,
    point: usize,
    in_flight: Vec<InFlight>,
    template: Vec<u8>,
}

fn apply(image: &mut [u8], event: &Event) {
    if let EventKind::Store {
        offset, len, value, ..
    } = event.kind
    {
        let start = offset as usize;
        let n = len as usize;
        if let Some(dst) = image.get_mut(start..start + n) {
            dst.copy_from_slice(&value[..n]);
        }
    }
}

impl<'t> CrashState<'t> {
    /// The state after the first `point` events of `trace` (clamped to its length).
    pub fn new(trace: &'t Trace, point: usize, model: Model) -> CrashState<'t> {
        let point = point.min(trace.events.len());
        let events = &trace.events[..point];
        let (histories, durable) = match model {
            Model::Line | Model::Word => unit_histories(events, model),
            Model::Eadr => eadr_history(events),
        };
        let mut template = trace.base.clone();
        let mut in_flight = Vec::new();
        for (unit, stores) in histories {
            let d = durable.get(&unit).copied().unwrap_or(0).min(stores.len());
            for &i in &stores[..d] {
                apply(&mut template, &trace.events[i]);
            }
            if d < stores.len() {
                in_flight.push(InFlight {
                    unit,
                    stores,
                    durable: d,
                });
            }
        }
        CrashState {
            trace,
            model,
            point,
            in_flight,
            template,
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

    /// The units whose persisted prefix is open.
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
        self.in_flight.iter().map(|u| u.stores.len()).collect()
    }

    /// The image of `cut`. Prefix lengths outside a unit's allowed range are clamped.
    pub fn materialize(&self, cut: &[usize]) -> Vec<u8> {
        let mut image = self.template.clone();
        self.materialize_into(cut, &mut image);
        image
    }

    /// Writes the image of `cut` into `image` (which must hold the template: use
    /// [`CrashState::template`] to reset it between cuts).
    pub fn materialize_into(&self, cut: &[usize], image: &mut [u8]) {
        for (u, &p) in self.in_flight.iter().zip(cut) {
            let p = p.clamp(u.durable, u.stores.len());
            for &i in &u.stores[u.durable..p] {
                apply(image, &self.trace.events[i]);
            }
        }
    }

    /// The base with every durable store applied.
    pub fn template(&self) -> &[u8] {
        &self.template
    }

    /// Human-readable deviations of `cut` from "everything persisted": which units
    /// kept how many of their stores, and the first store each lost (with its source
    /// location).
    pub fn describe(&self, cut: &[usize]) -> Vec<String> {
        let unit_name = |u: u64| match self.model {
            Model::Line => format!("line {:#x}", u * 64),
            Model::Word => format!("word {:#x}", u * 8),
            Model::Eadr => "global store order".to_owned(),
        };
        self.in_flight
            .iter()
            .zip(cut)
            .filter(|(u, &p)| p < u.stores.len())
            .map(|(u, &p)| {
                let lost = &self.trace.events[u.stores[p]];
                format!(
                    "{}: kept {} of {} stores ({} were durable); first lost: {}",
                    unit_name(u.unit),
                    p,
                    u.stores.len(),
                    u.durable,
                    lost
                )
            })
            .collect()
    }
}

type Histories = (BTreeMap<u64, Vec<usize>>, HashMap<u64, usize>);

/// Store histories and durable bounds per line or word (Px86 with flush marks).
fn unit_histories(events: &[Event], model: Model) -> Histories {
    let unit_of = |offset: u64| {
        if model == Model::Word {
            offset / 8
        } else {
            offset / 64
        }
    };
    let mut hist: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    let mut durable: HashMap<u64, usize> = HashMap::new();
    // Per thread: (unit, store count) made durable by that thread's next fence.
    let mut pending: HashMap<u16, Vec<(u64, usize)>> = HashMap::new();
    let raise = |durable: &mut HashMap<u64, usize>, u: u64, c: usize| {
        let d = durable.entry(u).or_insert(0);
        *d = (*d).max(c);
    };
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            EventKind::Store { offset, nt, .. } => {
                let u = unit_of(offset);
                let h = hist.entry(u).or_default();
                h.push(i);
                if nt {
                    pending.entry(e.thread).or_default().push((u, h.len()));
                }
            }
            EventKind::Flush { line, op } => {
                let units: Vec<u64> = match model {
                    Model::Word => (line / 8..line / 8 + 8).collect(),
                    _ => vec![line / 64],
                };
                for u in units {
                    let c = hist.get(&u).map_or(0, Vec::len);
                    if c == 0 {
                        continue;
                    }
                    if op == FlushOp::Clflush {
                        raise(&mut durable, u, c);
                    } else {
                        pending.entry(e.thread).or_default().push((u, c));
                    }
                }
            }
            EventKind::Fence => {
                if let Some(list) = pending.get_mut(&e.thread) {
                    for (u, c) in list.drain(..) {
                        raise(&mut durable, u, c);
                    }
                }
            }
            _ => {}
        }
    }
    (hist, durable)
}

/// eADR: one history, the global store order; durable up to the last store each
/// thread issued before its last fence.
fn eadr_history(events: &[Event]) -> Histories {
    let mut stores = Vec::new();
    // Per thread: number of global stores up to its last store before its last fence.
    let mut last_store_pos: HashMap<u16, usize> = HashMap::new();
    let mut fenced: HashMap<u16, usize> = HashMap::new();
    for (i, e) in events.iter().enumerate() {
        match e.kind {
            EventKind::Store { .. } => {
                stores.push(i);
                last_store_pos.insert(e.thread, stores.len());
            }
            EventKind::Fence => {
                if let Some(&p) = last_store_pos.get(&e.thread) {
                    fenced.insert(e.thread, p);
                }
            }
            _ => {}
        }
    }
    let d = fenced.values().copied().max().unwrap_or(0);
    let mut hist = BTreeMap::new();
    let mut durable = HashMap::new();
    if !stores.is_empty() {
        hist.insert(0, stores);
        durable.insert(0, d);
    }
    (hist, durable)
}
