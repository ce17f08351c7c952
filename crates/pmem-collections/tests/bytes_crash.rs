//! Crash suite of `PBytes` and `PString`: sequences of appends, whole
//! replacements, truncations, clears and reserves, each one transaction, crashed
//! wherever the durable set can change (and during recovery, by the harness).
//! After each crash, reopening the heap must give the `Vec<u8>` / `String` model
//! after the completed operations (or with the one in flight applied whole), and
//! the allocator must hold exactly the string's blocks. Strings start empty, so
//! growth (a copy into a fresh block) happens inside the sequences.

use pmem_collections::{Container, HeapOptions, PBytes, PHeap, PString};
use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::tx::{LogMode, TxGeometry};
use pmem_core::Pool;
use proptest::prelude::*;

#[derive(Clone, Debug)]
enum Op {
    /// Append `n` copies of a character.
    Append(u16, char),
    /// Replace the contents with `n` copies of a character.
    Set(u16, char),
    /// Cut to the `i`-th character boundary (folded into range).
    Truncate(u8),
    Clear,
    Reserve(u16),
}

/// The model after `op`, as a `String` (a `PBytes` holds its bytes).
fn apply(m: &mut String, op: &Op) {
    match op {
        Op::Append(n, c) => m.extend(std::iter::repeat_n(*c, usize::from(*n))),
        Op::Set(n, c) => *m = std::iter::repeat_n(*c, usize::from(*n)).collect(),
        Op::Truncate(i) => m.truncate(cut(m, *i)),
        Op::Clear => m.clear(),
        Op::Reserve(_) => {}
    }
}

/// The byte index of the `i`-th character boundary of `m`, modulo their number.
fn cut(m: &str, i: u8) -> usize {
    let bounds: Vec<usize> = m.char_indices().map(|(b, _)| b).chain([m.len()]).collect();
    bounds[usize::from(i) % bounds.len()]
}

fn models(ops: &[Op]) -> Vec<String> {
    let mut m = String::new();
    let mut out = vec![m.clone()];
    for op in ops {
        apply(&mut m, op);
        out.push(m.clone());
    }
    out
}

fn geometry() -> TxGeometry {
    TxGeometry {
        lanes: 2,
        word_records: 64,
        object_records: 16,
        object_bytes: 8192,
        alloc_records: 16,
        lazy_ring_bytes: 4096,
    }
}

/// The two string types behind one interface.
trait Text: Container {
    fn append(&mut self, heap: &PHeap, s: &str) -> pmem_collections::Result<()>;
    fn set(&mut self, heap: &PHeap, s: &str) -> pmem_collections::Result<()>;
    fn truncate(&mut self, heap: &PHeap, n: u64) -> pmem_collections::Result<()>;
    fn clear(&mut self, heap: &PHeap) -> pmem_collections::Result<()>;
    fn reserve(&mut self, heap: &PHeap, n: u64) -> pmem_collections::Result<()>;
    fn read(&self, heap: &PHeap) -> pmem_collections::Result<String>;
}

impl Text for PString {
    fn append(&mut self, heap: &PHeap, s: &str) -> pmem_collections::Result<()> {
        match s.chars().next() {
            // One character through `push`, more through `push_str`.
            Some(c) if s.len() == c.len_utf8() => self.push(heap, c),
            _ => self.push_str(heap, s),
        }
    }
    fn set(&mut self, heap: &PHeap, s: &str) -> pmem_collections::Result<()> {
        PString::set(self, heap, s)
    }
    fn truncate(&mut self, heap: &PHeap, n: u64) -> pmem_collections::Result<()> {
        PString::truncate(self, heap, n)
    }
    fn clear(&mut self, heap: &PHeap) -> pmem_collections::Result<()> {
        PString::clear(self, heap)
    }
    fn reserve(&mut self, heap: &PHeap, n: u64) -> pmem_collections::Result<()> {
        PString::reserve(self, heap, n)
    }
    fn read(&self, heap: &PHeap) -> pmem_collections::Result<String> {
        self.to_string(heap)
    }
}

impl Text for PBytes {
    fn append(&mut self, heap: &PHeap, s: &str) -> pmem_collections::Result<()> {
        match s.as_bytes() {
            [b] => self.push(heap, *b),
            b => self.extend_from_slice(heap, b),
        }
    }
    fn set(&mut self, heap: &PHeap, s: &str) -> pmem_collections::Result<()> {
        PBytes::set(self, heap, s.as_bytes())
    }
    fn truncate(&mut self, heap: &PHeap, n: u64) -> pmem_collections::Result<()> {
        PBytes::truncate(self, heap, n)
    }
    fn clear(&mut self, heap: &PHeap) -> pmem_collections::Result<()> {
        PBytes::clear(self, heap)
    }
    fn reserve(&mut self, heap: &PHeap, n: u64) -> pmem_collections::Result<()> {
        PBytes::reserve(self, heap, n)
    }
    fn read(&self, heap: &PHeap) -> pmem_collections::Result<String> {
        // The test writes UTF-8 only; anything else is a failure.
        String::from_utf8(self.to_vec(heap)?)
            .map_err(|_| pmem_collections::Error::NotUtf8 { offset: 0 })
    }
}

fn exec<S: Text>(s: &mut S, heap: &PHeap, shadow: &str, op: &Op) -> pmem_collections::Result<()> {
    let rep = |n: u16, c: char| std::iter::repeat_n(c, usize::from(n)).collect::<String>();
    match op {
        Op::Append(n, c) => s.append(heap, &rep(*n, *c)),
        Op::Set(n, c) => s.set(heap, &rep(*n, *c)),
        Op::Truncate(i) => s.truncate(heap, cut(shadow, *i) as u64),
        Op::Clear => s.clear(heap),
        Op::Reserve(n) => s.reserve(heap, u64::from(*n)),
    }
}

fn recover<S: Text>(pool: Pool) -> Result<String, String> {
    let e = |e: pmem_collections::Error| e.to_string();
    let heap = PHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let s: S = heap.root("s").map_err(e)?;
    let live = heap.live_blocks().map_err(e)?;
    let blocks = s.blocks(&heap).map_err(e)?;
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the string references {blocks:x?}"
        ));
    }
    s.read(&heap).map_err(e)
}

fn run<S: Text>(ops: &[Op], mode: LogMode, model: Model) -> Result<(), String> {
    let models = models(ops);
    CrashTest::new(PHeap::pool_options("bytes", 256 * 1024))
        .model(model)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let e = |e: pmem_collections::Error| e.to_string();
                let opts = HeapOptions {
                    geometry: geometry(),
                    page_size: 64,
                    mode,
                };
                let heap = PHeap::create_with(pool, opts).map_err(e)?;
                let mut s: S = heap.root("s").map_err(e)?;
                sim.mark_durable();
                let mut shadow = String::new();
                for (n, op) in ops.iter().enumerate() {
                    sim.op(n as u32, || exec(&mut s, &heap, &shadow, op).map_err(e))?;
                    apply(&mut shadow, op);
                }
                Ok(())
            },
            recover::<S>,
            |got: &String, crash: &CrashInfo| {
                crash.expect_model(got, |n| models[n as usize].clone())
            },
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

/// Growth from empty (64 -> 128 -> 256 bytes), appends in place, a replacement
/// in place and one into a fresh block, cuts, a clear and a reserve.
fn scripted() -> Vec<Op> {
    vec![
        Op::Append(1, 'a'),
        Op::Append(30, 'é'), // 61 bytes: in the first 64-byte block
        Op::Append(5, 'b'),  // grows to 128
        Op::Truncate(20),
        Op::Set(10, 'z'), // in place
        Op::Set(70, 'ß'), // 140 bytes: a fresh block
        Op::Clear,
        Op::Reserve(200),
        Op::Append(3, '→'),
    ]
}

#[test]
fn every_operation_of_a_string_survives_every_crash() {
    for (mode, model) in [(LogMode::Lazy, Model::Line), (LogMode::Undo, Model::Word)] {
        run::<PString>(&scripted(), mode, model)
            .unwrap_or_else(|e| panic!("{mode:?} {model:?}: {e}"));
    }
}

#[test]
fn every_operation_of_a_byte_string_survives_every_crash() {
    for (mode, model) in [(LogMode::Redo, Model::Line), (LogMode::Lazy, Model::Word)] {
        run::<PBytes>(&scripted(), mode, model)
            .unwrap_or_else(|e| panic!("{mode:?} {model:?}: {e}"));
    }
}

fn op() -> impl Strategy<Value = Op> {
    let c = prop_oneof![Just('x'), Just('é'), Just('→'), Just('🦀')];
    prop_oneof![
        4 => (1u16..40, c.clone()).prop_map(|(n, c)| Op::Append(n, c)),
        2 => (0u16..40, c).prop_map(|(n, c)| Op::Set(n, c)),
        2 => any::<u8>().prop_map(Op::Truncate),
        1 => Just(Op::Clear),
        1 => (0u16..300).prop_map(Op::Reserve),
    ]
}

fn mode() -> impl Strategy<Value = LogMode> {
    prop_oneof![
        Just(LogMode::Lazy),
        Just(LogMode::Undo),
        Just(LogMode::Redo)
    ]
}

fn deep() -> bool {
    std::env::var_os("PMKIT_DEEP").is_some_and(|v| v != "0")
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if deep() { 64 } else { 4 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_string_sequences_survive_every_crash(
        ops in proptest::collection::vec(op(), 1..8),
        mode in mode(),
    ) {
        run::<PString>(&ops, mode, Model::Line).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn random_byte_sequences_survive_every_crash(
        ops in proptest::collection::vec(op(), 1..8),
        mode in mode(),
    ) {
        run::<PBytes>(&ops, mode, Model::Word).map_err(TestCaseError::fail)?;
    }
}

/// An append of more than 4 KiB within the capacity goes to a fresh block (in
/// place it would log too much); a set of 2 KiB goes in place. Crashed
/// everywhere all the same.
#[test]
fn a_long_append_rebuilds_atomically() {
    let ops = [
        Op::Reserve(5000),
        Op::Append(10, 'a'),
        Op::Append(1100, '🦀'), // 4,400 bytes within the capacity: a fresh block
        Op::Set(1000, 'é'),     // 2,000 bytes: in place
    ];
    run::<PString>(&ops, LogMode::Lazy, Model::Line).unwrap_or_else(|e| panic!("{e}"));
}

/// The suite catches an operation that is not one transaction: a replacement
/// done as a clear and an append leaves the string empty at a crash between.
#[test]
fn an_operation_split_in_two_transactions_is_caught() {
    let err = CrashTest::new(PHeap::pool_options("bytes-split", 256 * 1024))
        .run(
            |_| Ok(()),
            |pool, sim| {
                let e = |e: pmem_collections::Error| e.to_string();
                let opts = HeapOptions {
                    geometry: geometry(),
                    page_size: 64,
                    mode: LogMode::Lazy,
                };
                let heap = PHeap::create_with(pool, opts).map_err(e)?;
                let mut s: PString = heap.root("s").map_err(e)?;
                s.push_str(&heap, "old").map_err(e)?;
                sim.mark_durable();
                sim.op(0, || -> Result<(), String> {
                    s.clear(&heap).map_err(e)?;
                    s.push_str(&heap, "new").map_err(e)
                })
            },
            recover::<PString>,
            |got: &String, crash: &CrashInfo| {
                crash.expect_model(got, |n| if n == 0 { "old".into() } else { "new".into() })
            },
        )
        .expect_err("a crash between the transactions shows an empty string");
    assert!(err.message.contains("expected"), "{err}");
}
