//! Differential test of the crash-image enumerator against a brute-force reference
//! on small random traces. The reference is written differently from the model: it
//! tries *every subset* of the stores and keeps those the rules allow, store by
//! store:
//! * a store is guaranteed durable iff a `clflush` of its line follows it, or a
//!   `clwb`/`clflushopt` of its line by thread T follows it and a fence or locked RMW
//!   by T follows that, or it is a non-temporal store followed by a fence (or locked
//!   RMW) of its thread; guaranteed stores are in every subset;
//! * a cached store may persist only with every earlier cached store of its unit
//!   (line, word, or for eADR the whole order) that belongs to another write call
//!   (the stores of one call are unordered among themselves);
//! * non-temporal stores are constrained by nothing else.
//!
//! It applies the kept stores in program order, and compares the image sets exactly.

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
    /// Three word stores to one line in one write call.
    Multi {
        line: u64,
        value: u8,
        thread: u16,
    },
    Rmw {
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
        2 => thread.clone().prop_map(|thread| Op::Fence { thread }),
        1 => (0..LINES, 1u8..4, thread.clone()).prop_map(|(line, value, thread)| Op::Multi { line, value, thread }),
        1 => thread.prop_map(|thread| Op::Rmw { thread }),
    ]
}

fn event(kind: EventKind, thread: u16) -> Event {
    Event {
        kind,
        thread,
        loc: Location::caller(),
    }
}

fn store(offset: u64, bytes: &[u8], nt: bool, thread: u16, group: u32) -> Event {
    let mut value = [0u8; 8];
    value[..bytes.len()].copy_from_slice(bytes);
    event(
        EventKind::Store {
            offset,
            len: bytes.len() as u8,
            value,
            nt,
            group,
        },
        thread,
    )
}

/// Most stores a trace keeps (the reference tries every subset).
const MAX_STORES: usize = 12;

/// Builds a trace; each op is one write call (its own group). Stores beyond
/// [`MAX_STORES`] are dropped.
fn trace(ops: &[Op]) -> Trace {
    let mut events = Vec::new();
    for (g, o) in ops.iter().enumerate() {
        let g = g as u32;
        match *o {
            Op::Store {
                word,
                value,
                nt,
                thread,
            } => events.push(store(word * 8, &[value; 8], nt, thread, g)),
            Op::Wide {
                word,
                value,
                thread,
            } => {
                // 12 bytes from the middle of `word`: 4 + 8 bytes, two word stores.
                events.push(store(word * 8 + 4, &[value; 4], false, thread, g));
                events.push(store(word * 8 + 8, &[value; 8], false, thread, g));
            }
            Op::Multi {
                line,
                value,
                thread,
            } => {
                for w in [0u64, 3, 5] {
                    events.push(store(
                        line * 64 + w * 8,
                        &[value + w as u8; 8],
                        false,
                        thread,
                        g,
                    ));
                }
            }
            Op::Flush { line, op, thread } => events.push(event(
                EventKind::Flush {
                    line: line * 64,
                    op,
                },
                thread,
            )),
            Op::Fence { thread } => events.push(event(EventKind::Fence, thread)),
            Op::Rmw { thread } => events.push(event(EventKind::LockedRmw { offset: 0 }, thread)),
        }
    }
    let mut stores = 0;
    events.retain(|e| {
        let is_store = matches!(e.kind, EventKind::Store { .. });
        stores += usize::from(is_store);
        !is_store || stores <= MAX_STORES
    });
    Trace {
        base: vec![0u8; POOL].into(),
        events,
        overflowed: false,
    }
}

fn is_fence(e: &Event, thread: u16) -> bool {
    e.thread == thread && matches!(e.kind, EventKind::Fence | EventKind::LockedRmw { .. })
}

fn guaranteed(events: &[Event], i: usize) -> bool {
    let (line, nt) = match events[i].kind {
        EventKind::Store { offset, nt, .. } => (offset / 64, nt),
        _ => return false,
    };
    let t = events[i].thread;
    if nt {
        return events[i + 1..].iter().any(|e| is_fence(e, t));
    }
    events
        .iter()
        .enumerate()
        .skip(i + 1)
        .any(|(j, e)| match e.kind {
            EventKind::Flush { line: l, op } if l / 64 == line => {
                op == FlushOp::Clflush || events[j + 1..].iter().any(|f| is_fence(f, e.thread))
            }
            _ => false,
        })
}

/// The reference: every subset of the stores the rules allow, as images.
fn reference_images(trace: &Trace, model: Model) -> BTreeSet<Vec<u8>> {
    let ev = &trace.events;
    let stores: Vec<usize> = (0..ev.len())
        .filter(|&i| matches!(ev[i].kind, EventKind::Store { .. }))
        .collect();
    let info = |i: usize| match ev[i].kind {
        EventKind::Store {
            offset, nt, group, ..
        } => (offset, nt, group),
        _ => unreachable!("stores only"),
    };
    // Whether store `a` must persist before store `b` may.
    let ordered = |a: usize, b: usize| {
        let ((oa, nta, ga), (ob, ntb, gb)) = (info(a), info(b));
        if a >= b || nta || ntb || ga == gb {
            return false;
        }
        match model {
            Model::Line => oa / 64 == ob / 64,
            Model::Word => oa / 8 == ob / 8,
            Model::Eadr => true,
        }
    };
    let eadr_guaranteed = |i: usize| {
        // eADR: a cached store is durable once its thread fenced after it.
        let (_, nt, _) = info(i);
        if nt {
            guaranteed(ev, i)
        } else {
            ev[i + 1..].iter().any(|e| is_fence(e, ev[i].thread))
        }
    };
    let mut out = BTreeSet::new();
    for mask in 0u32..(1 << stores.len()) {
        let kept = |k: usize| mask & (1 << k) != 0;
        let ok = stores.iter().enumerate().all(|(k, &i)| {
            let must = match model {
                Model::Eadr => eadr_guaranteed(i),
                _ => guaranteed(ev, i),
            };
            (kept(k) || !must)
                && (!kept(k)
                    || stores
                        .iter()
                        .enumerate()
                        .all(|(k2, &j)| kept(k2) || !ordered(j, i)))
        });
        if !ok {
            continue;
        }
        let mut image = trace.base.to_vec();
        for (k, &i) in stores.iter().enumerate() {
            if let (
                true,
                EventKind::Store {
                    offset, len, value, ..
                },
            ) = (kept(k), &ev[i].kind)
            {
                let (o, n) = (*offset as usize, *len as usize);
                image[o..o + n].copy_from_slice(&value[..n]);
            }
        }
        out.insert(image);
    }
    out
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
        for model in [Model::Line, Model::Word, Model::Eadr] {
            prop_assert_eq!(enumerated(&full, k, model), reference_images(&prefix, model), "model {:?}", model);
        }
    }

    #[test]
    fn sampled_selection_stays_within_the_allowed_set(ops in proptest::collection::vec(op(), 0..14), seed in any::<u64>()) {
        let t = trace(&ops);
        for model in [Model::Line, Model::Word, Model::Eadr] {
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
