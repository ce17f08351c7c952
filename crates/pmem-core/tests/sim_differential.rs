//! Differential test of the crash-image enumerator against a brute-force reference
//! on small random traces. The reference decides durability store by store from the
//! definitions (a store is guaranteed durable iff a `clflush` of its line follows it,
//! or a `clwb`/`clflushopt` of its line by thread T follows it and a fence by T
//! follows that, or it is a non-temporal store followed by a fence of its thread),
//! then tries every prefix combination, and compares image sets exactly.

use std::collections::BTreeSet;
use std::panic::Location;

use pmem_core::sim::{Budget, CrashState, Event, EventKind, FlushOp, Model, Trace};
use proptest::prelude::*;

const LINES: u64 = 2;
const POOL: usize = (LINES * 64) as usize;

#[derive(Clone, Debug)]
enum Op {
    Store {
        word: u64,
        value: u8,
        nt: bool,
        thread: u16,
    },
    Wide {
        word: u64,
        value: u8,
        thread: u16,
    },
    Flush {
        line: u64,
        op: FlushOp,
        thread: u16,
    },
    Fence {
        thread: u16,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let thread = 0u16..2;
    prop_oneof![
        4 => (0..LINES * 8, 1u8..4, proptest::bool::weighted(0.15), thread.clone())
            .prop_map(|(word, value, nt, thread)| Op::Store { word, value, nt, thread }),
        1 => (0..LINES * 8 - 1, 1u8..4, thread.clone()).prop_map(|(word, value, thread)| Op::Wide { word, value, thread }),
        3 => (0..LINES, prop_oneof![Just(FlushOp::Clwb), Just(FlushOp::ClflushOpt), Just(FlushOp::Clflush)], thread.clone())
            .prop_map(|(line, op, thread)| Op::Flush { line, op, thread }),
        2 => thread.prop_map(|thread| Op::Fence { thread }),
    ]
}

fn event(kind: EventKind, thread: u16) -> Event {
    Event {
        kind,
        thread,
        loc: Location::caller(),
    }
}

fn store(offset: u64, bytes: &[u8], nt: bool, thread: u16) -> Event {
    let mut value = [0u8; 8];
    value[..bytes.len()].copy_from_slice(bytes);
    event(
        EventKind::Store {
            offset,
            len: bytes.len() as u8,
            value,
            nt,
        },
        thread,
    )
}

/// Builds a trace; a wide store spans two words (split as the recorder splits it).
fn trace(ops: &[Op]) -> Trace {
    let mut events = Vec::new();
    for o in ops {
        match *o {
            Op::Store {
                word,
                value,
                nt,
                thread,
            } => events.push(store(word * 8, &[value; 8], nt, thread)),
            Op::Wide {
                word,
                value,
                thread,
            } => {
                // 12 bytes from the middle of `word`: 4 + 8 bytes, two word stores.
                events.push(store(word * 8 + 4, &[value; 4], false, thread));
                events.push(store(word * 8 + 8, &[value; 8], false, thread));
            }
            Op::Flush { line, op, thread } => events.push(event(
                EventKind::Flush {
                    line: line * 64,
                    op,
                },
                thread,
            )),
            Op::Fence { thread } => events.push(event(EventKind::Fence, thread)),
        }
    }
    Trace {
        base: vec![0u8; POOL],
        events,
        overflowed: false,
    }
}

fn guaranteed(events: &[Event], i: usize) -> bool {
    let (line, nt) = match events[i].kind {
        EventKind::Store { offset, nt, .. } => (offset / 64, nt),
        _ => return false,
    };
    let t = events[i].thread;
    let fence_after = |j: usize| {
        events[j + 1..]
            .iter()
            .any(|e| e.kind == EventKind::Fence && e.thread == t)
    };
    if nt && fence_after(i) {
        return true;
    }
    events
        .iter()
        .enumerate()
        .skip(i + 1)
        .any(|(j, e)| match e.kind {
            EventKind::Flush { line: l, op } if l / 64 == line => {
                op == FlushOp::Clflush
                    || events[j + 1..]
                        .iter()
                        .any(|f| f.kind == EventKind::Fence && f.thread == e.thread)
            }
            _ => false,
        })
}

/// The reference: per unit, the shortest allowed prefix is one past the last
/// guaranteed store; every combination of prefixes gives an image.
fn reference_images(trace: &Trace, model: Model) -> BTreeSet<Vec<u8>> {
    let ev = &trace.events;
    let unit_of = |e: &Event| match (model, &e.kind) {
        (Model::Word, EventKind::Store { offset, .. }) => Some(offset / 8),
        (_, EventKind::Store { offset, .. }) => Some(offset / 64),
        _ => None,
    };
    // Units and their store indices.
    let mut units: Vec<(u64, Vec<usize>)> = Vec::new();
    for (i, e) in ev.iter().enumerate() {
        if let Some(u) = unit_of(e) {
            match units.iter_mut().find(|(x, _)| *x == u) {
                Some((_, v)) => v.push(i),
                None => units.push((u, vec![i])),
            }
        }
    }
    let min: Vec<usize> = match model {
        Model::Eadr => unreachable!(),
        _ => units
            .iter()
            .map(|(_, stores)| {
                // In word mode a line flush covers the word's stores the same way.
                stores
                    .iter()
                    .rposition(|&i| guaranteed(ev, i))
                    .map_or(0, |p| p + 1)
            })
            .collect(),
    };
    let mut out = BTreeSet::new();
    let mut cut = min.clone();
    loop {
        let mut image = trace.base.clone();
        for ((_, stores), &p) in units.iter().zip(&cut) {
            for &i in &stores[..p] {
                if let EventKind::Store {
                    offset, len, value, ..
                } = ev[i].kind
                {
                    image[offset as usize..offset as usize + len as usize]
                        .copy_from_slice(&value[..len as usize]);
                }
            }
        }
        out.insert(image);
        let mut k = 0;
        while k < cut.len() {
            if cut[k] < units[k].1.len() {
                cut[k] += 1;
                break;
            }
            cut[k] = min[k];
            k += 1;
        }
        if k == cut.len() {
            return out;
        }
    }
}

/// eADR reference: prefixes of the global store order that include every store a
/// thread issued before one of its fences.
fn reference_eadr(trace: &Trace) -> BTreeSet<Vec<u8>> {
    let ev = &trace.events;
    let stores: Vec<usize> = (0..ev.len())
        .filter(|&i| matches!(ev[i].kind, EventKind::Store { .. }))
        .collect();
    let min = stores
        .iter()
        .enumerate()
        .filter(|&(_, &i)| {
            ev[i + 1..]
                .iter()
                .any(|f| f.kind == EventKind::Fence && f.thread == ev[i].thread)
        })
        .map(|(p, _)| p + 1)
        .max()
        .unwrap_or(0);
    (min..=stores.len())
        .map(|n| {
            let mut image = trace.base.clone();
            for &i in &stores[..n] {
                if let EventKind::Store {
                    offset, len, value, ..
                } = ev[i].kind
                {
                    image[offset as usize..offset as usize + len as usize]
                        .copy_from_slice(&value[..len as usize]);
                }
            }
            image
        })
        .collect()
}

fn enumerated(trace: &Trace, point: usize, model: Model) -> BTreeSet<Vec<u8>> {
    let state = CrashState::new(trace, point, model);
    let sel = state.select(&Budget {
        exhaustive_up_to: u64::MAX,
        ..Budget::default()
    });
    assert!(sel.exhaustive);
    assert_eq!(
        sel.cuts.len() as u128,
        state.count(),
        "exhaustive selection has exactly count cuts"
    );
    sel.cuts.iter().map(|c| state.materialize(c)).collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn enumerator_matches_brute_force(ops in proptest::collection::vec(op(), 0..10), cut_at in 0usize..12) {
        let full = trace(&ops);
        let k = cut_at.min(full.events.len());
        let prefix = Trace { events: full.events[..k].to_vec(), ..full.clone() };
        for model in [Model::Line, Model::Word] {
            prop_assert_eq!(enumerated(&full, k, model), reference_images(&prefix, model), "model {:?}", model);
        }
        prop_assert_eq!(enumerated(&full, k, Model::Eadr), reference_eadr(&prefix));
    }

    #[test]
    fn sampled_selection_stays_within_the_allowed_set(ops in proptest::collection::vec(op(), 0..14), seed in any::<u64>()) {
        let t = trace(&ops);
        for model in [Model::Line, Model::Word] {
            let state = CrashState::new(&t, t.events.len(), model);
            let allowed = reference_images(&t, model);
            let sel = state.select(&Budget { exhaustive_up_to: 3, k: 1, random: 5, seed });
            prop_assert!(sel.cuts.contains(&state.minimal()));
            prop_assert!(sel.cuts.contains(&state.maximal()));
            for c in &sel.cuts {
                prop_assert!(allowed.contains(&state.materialize(c)));
            }
        }
    }
}
