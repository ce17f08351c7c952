//! Crash suite of `PVec`: sequences of push, pop, set, insert, remove, extend,
//! truncate, clear and reserve, each one transaction, crashed wherever the durable
//! set can change (and again during recovery, by the harness). After each crash,
//! reopening the heap must give the `std::Vec` model after the completed
//! operations (or with the one in flight applied whole), and the allocator must
//! hold exactly the vector's blocks (header, array, each string): nothing leaked,
//! nothing referenced that is free. Vectors start empty, so growth (a copy into a
//! fresh array) happens inside the sequences.

use pmem_collections::{Container, Element, HeapOptions, PHeap, PMutex, PString, PVec};
use pmem_core::sim::{Budget, CrashInfo, CrashTest, Model};
use pmem_core::tx::{LogMode, TxGeometry};
use pmem_core::Pool;
use proptest::prelude::*;

/// An operation with its index already valid for the model's length.
#[derive(Clone, Debug)]
enum Op {
    Push(u8),
    Pop,
    Set(u64, u8),
    Insert(u64, u8),
    Remove(u64),
    Extend(Vec<u8>),
    Truncate(u64),
    Clear,
    Reserve(u64),
}

/// What a raw operation becomes at length `len` (indices folded into range; an
/// operation with no valid index on an empty vector becomes a push).
fn fold(raw: &RawOp, len: u64) -> Op {
    let at = |i: u8, n: u64| u64::from(i) % n.max(1);
    match *raw {
        RawOp::Set(i, v) if len > 0 => Op::Set(at(i, len), v),
        RawOp::Remove(i) if len > 0 => Op::Remove(at(i, len)),
        RawOp::Set(_, v) | RawOp::Push(v) => Op::Push(v),
        RawOp::Remove(_) => Op::Pop,
        RawOp::Pop => Op::Pop,
        RawOp::Insert(i, v) => Op::Insert(at(i, len + 1), v),
        RawOp::Extend(n, v) => Op::Extend((0..n).map(|k| v.wrapping_add(k)).collect()),
        RawOp::Truncate(i) => Op::Truncate(at(i, len + 1)),
        RawOp::Clear => Op::Clear,
        RawOp::Reserve(n) => Op::Reserve(u64::from(n)),
    }
}

#[derive(Clone, Copy, Debug)]
enum RawOp {
    Push(u8),
    Pop,
    Set(u8, u8),
    Insert(u8, u8),
    Remove(u8),
    Extend(u8, u8),
    Truncate(u8),
    Clear,
    Reserve(u8),
}

/// The element types under test: how a small number becomes an element.
trait Subject: Element {
    type Model: Clone + PartialEq + std::fmt::Debug;
    fn model(v: u8) -> Self::Model;
    fn arg(m: &Self::Model) -> &Self::Arg;
    fn out(o: Self::Out) -> Self::Model;
}

impl Subject for u64 {
    type Model = u64;
    fn model(v: u8) -> u64 {
        u64::from(v) * 0x0101_0101_0101_0101
    }
    fn arg(m: &u64) -> &u64 {
        m
    }
    fn out(o: u64) -> u64 {
        o
    }
}

impl Subject for PString {
    type Model = String;
    /// Lengths 0 to 40: empty strings (no block) and blocks of one and two pages.
    fn model(v: u8) -> String {
        if v == 0 {
            String::new()
        } else {
            format!("{v}:{}", "é".repeat(usize::from(v % 20)))
        }
    }
    fn arg(m: &String) -> &str {
        m
    }
    fn out(o: String) -> String {
        o
    }
}

fn apply<M: Clone>(m: &mut Vec<M>, op: &Op, f: impl Fn(u8) -> M) -> Option<M> {
    match op {
        Op::Push(v) => m.push(f(*v)),
        Op::Pop => return m.pop(),
        Op::Set(i, v) => return Some(std::mem::replace(&mut m[*i as usize], f(*v))),
        Op::Insert(i, v) => m.insert(*i as usize, f(*v)),
        Op::Remove(i) => return Some(m.remove(*i as usize)),
        Op::Extend(vs) => m.extend(vs.iter().map(|&v| f(v))),
        Op::Truncate(n) => m.truncate(*n as usize),
        Op::Clear => m.clear(),
        Op::Reserve(_) => {}
    }
    None
}

/// The concrete operations of `raw` and the models after each prefix.
fn plan<T: Subject>(raw: &[RawOp]) -> (Vec<Op>, Vec<Vec<T::Model>>) {
    let mut m = Vec::new();
    let mut models = vec![m.clone()];
    let mut ops = Vec::new();
    for r in raw {
        let op = fold(r, m.len() as u64);
        apply(&mut m, &op, T::model);
        ops.push(op);
        models.push(m.clone());
    }
    (ops, models)
}

/// Runs `op` on `v`, checking what it returns against the model's answer.
fn exec<T: Subject>(
    v: &mut PVec<T>,
    heap: &PHeap,
    op: &Op,
    want: Option<T::Model>,
) -> Result<(), String> {
    let e = |e: pmem_collections::Error| e.to_string();
    let got = match op {
        Op::Push(x) => v.push(heap, T::arg(&T::model(*x))).map(|()| None),
        Op::Pop => v.pop(heap).map(|o| o.map(T::out)),
        Op::Set(i, x) => v
            .set(heap, *i, T::arg(&T::model(*x)))
            .map(|o| Some(T::out(o))),
        Op::Insert(i, x) => v.insert(heap, *i, T::arg(&T::model(*x))).map(|()| None),
        Op::Remove(i) => v.remove(heap, *i).map(|o| Some(T::out(o))),
        Op::Extend(xs) => {
            let ms: Vec<T::Model> = xs.iter().map(|&x| T::model(x)).collect();
            v.extend(heap, ms.iter().map(T::arg)).map(|()| None)
        }
        Op::Truncate(n) => v.truncate(heap, *n).map(|()| None),
        Op::Clear => v.clear(heap).map(|()| None),
        Op::Reserve(n) => v.reserve(heap, *n).map(|()| None),
    }
    .map_err(e)?;
    if got != want {
        return Err(format!("{op:?} returned {got:?}, the model {want:?}"));
    }
    Ok(())
}

/// A small log, so the lazy ring fills and checkpoints happen within a sequence,
/// and a big shift in place would overflow it (it is not done in place).
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

fn heap_options(mode: LogMode) -> HeapOptions {
    HeapOptions {
        geometry: geometry(),
        page_size: 64,
        mode,
    }
}

/// How the vector's transactions commit: the heap's exclusive mode, or shared
/// (undo on a lane) behind a `PMutex`.
#[derive(Clone, Copy, Debug)]
enum Way {
    Exclusive(LogMode),
    Mutex,
}

fn recover<T: Subject>(pool: Pool, way: Way) -> Result<Vec<T::Model>, String> {
    let heap = PHeap::open(pool).map_err(|e| format!("open: {e}"))?;
    let e = |e: pmem_collections::Error| e.to_string();
    let (items, blocks) = match way {
        Way::Exclusive(_) => {
            let v: PVec<T> = heap.root("v").map_err(e)?;
            (v.to_vec(&heap).map_err(e)?, v.blocks(&heap).map_err(e)?)
        }
        Way::Mutex => {
            let m: PMutex<PVec<T>> = heap.root("v").map_err(e)?;
            let items = m.lock().to_vec(&heap).map_err(e)?;
            (items, m.blocks(&heap).map_err(e)?)
        }
    };
    let live = heap.live_blocks().map_err(e)?;
    if live != blocks {
        return Err(format!(
            "allocator holds {live:x?}, the vector references {blocks:x?}"
        ));
    }
    Ok(items.into_iter().map(T::out).collect())
}

fn run<T: Subject>(raw: &[RawOp], way: Way, model: Model) -> Result<(), String> {
    let (ops, models) = plan::<T>(raw);
    let mode = match way {
        Way::Exclusive(m) => m,
        Way::Mutex => LogMode::Lazy,
    };
    CrashTest::new(PHeap::pool_options("vec", 256 * 1024))
        .model(model)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let e = |e: pmem_collections::Error| e.to_string();
                let heap = PHeap::create_with(pool, heap_options(mode)).map_err(e)?;
                let mut shadow: Vec<T::Model> = Vec::new();
                let mut step = |v: &mut PVec<T>, n: usize, op: &Op| {
                    let want = apply(&mut shadow, op, T::model);
                    sim.op(n as u32, || exec(v, &heap, op, want))
                };
                match way {
                    Way::Exclusive(_) => {
                        let mut v: PVec<T> = heap.root("v").map_err(e)?;
                        sim.mark_durable();
                        for (n, op) in ops.iter().enumerate() {
                            step(&mut v, n, op)?;
                        }
                    }
                    Way::Mutex => {
                        let m: PMutex<PVec<T>> = heap.root("v").map_err(e)?;
                        sim.mark_durable();
                        for (n, op) in ops.iter().enumerate() {
                            step(&mut m.lock(), n, op)?;
                        }
                    }
                }
                Ok(())
            },
            |pool| recover::<T>(pool, way),
            |got: &Vec<T::Model>, crash: &CrashInfo| {
                crash.expect_model(got, |n| models[n as usize].clone())
            },
        )
        .map(|_| ())
        .map_err(|f| f.to_string())
}

/// Every kind of operation, with two growths (8 -> 16 -> 32 slots of u64; 4 ->
/// 8 -> 16 strings) and a truncate that frees strings.
fn scripted() -> Vec<RawOp> {
    use RawOp::*;
    vec![
        Push(1),
        Extend(6, 10),
        Push(2), // u64: the array grows (8 -> 16)
        Insert(0, 3),
        Set(4, 4),
        Remove(2),
        Pop,
        Extend(10, 30), // u64: grows again
        Truncate(5),
        Reserve(40),
        Insert(3, 5),
        Clear,
        Push(6),
    ]
}

/// Whether to explore more (`PMKIT_DEEP=1`): every way in both models, more
/// random cases.
fn deep() -> bool {
    std::env::var_os("PMKIT_DEEP").is_some_and(|v| v != "0")
}

/// The ways and models of a scripted run: `quick` in CI, all pairs when deep.
fn configs(quick: &[(Way, Model)]) -> Vec<(Way, Model)> {
    if !deep() {
        return quick.to_vec();
    }
    let ways = [
        Way::Exclusive(LogMode::Lazy),
        Way::Exclusive(LogMode::Undo),
        Way::Exclusive(LogMode::Redo),
        Way::Mutex,
    ];
    ways.iter()
        .flat_map(|&w| [(w, Model::Line), (w, Model::Word)])
        .collect()
}

#[test]
fn every_operation_of_a_vec_of_u64_survives_every_crash() {
    for (way, model) in configs(&[
        (Way::Exclusive(LogMode::Lazy), Model::Line),
        (Way::Exclusive(LogMode::Undo), Model::Word),
        (Way::Mutex, Model::Word),
    ]) {
        run::<u64>(&scripted(), way, model).unwrap_or_else(|e| panic!("{way:?} {model:?}: {e}"));
    }
}

#[test]
fn every_operation_of_a_vec_of_strings_survives_every_crash() {
    // Behind a mutex (undo on lanes) in the random cases; every pair when deep.
    for (way, model) in configs(&[(Way::Exclusive(LogMode::Lazy), Model::Line)]) {
        run::<PString>(&scripted(), way, model)
            .unwrap_or_else(|e| panic!("{way:?} {model:?}: {e}"));
    }
}

/// Elements of 768 bytes: an insert or a removal near the front of six of them
/// shifts more than 4 KiB, so it rebuilds into a fresh array (a bulk undo
/// transaction) instead of logging the shift.
#[test]
fn shifts_too_big_for_the_log_rebuild_atomically() {
    type Big = [u64; 96];
    let raw = {
        use RawOp::*;
        // Insert at 0 of 6 and remove at 0 of 7 shift 5 KiB and 4.5 KiB.
        vec![Extend(6, 1), Insert(0, 9), Remove(0)]
    };
    let (ops, models) = plan_big(&raw);
    let check = |way: Way, model: Model| -> Result<(), String> {
        let mode = match way {
            Way::Exclusive(m) => m,
            Way::Mutex => LogMode::Lazy,
        };
        CrashTest::new(PHeap::pool_options("vec-big", 256 * 1024))
            .model(model)
            .budget(big_budget())
            .run(
                |_| Ok(()),
                |pool, sim| {
                    let e = |e: pmem_collections::Error| e.to_string();
                    let heap = PHeap::create_with(pool, heap_options(mode)).map_err(e)?;
                    let mut v: PVec<Big> = heap.root("v").map_err(e)?;
                    sim.mark_durable();
                    for (n, op) in ops.iter().enumerate() {
                        sim.op(n as u32, || exec_big(&mut v, &heap, op).map_err(e))?;
                    }
                    Ok(())
                },
                |pool| {
                    let heap = PHeap::open(pool).map_err(|e| e.to_string())?;
                    let v: PVec<Big> = heap.root("v").map_err(|e| e.to_string())?;
                    let live = heap.live_blocks().map_err(|e| e.to_string())?;
                    let blocks = v.blocks(&heap).map_err(|e| e.to_string())?;
                    if live != blocks {
                        return Err(format!("leak: {live:x?} vs {blocks:x?}"));
                    }
                    let all = v.to_vec(&heap).map_err(|e| e.to_string())?;
                    Ok(all.iter().map(|b| b[0]).collect::<Vec<u64>>())
                },
                |got: &Vec<u64>, crash: &CrashInfo| {
                    crash.expect_model(got, |n| models[n as usize].clone())
                },
            )
            .map(|_| ())
            .map_err(|f| f.to_string())
    };
    for (way, model) in configs(&[(Way::Exclusive(LogMode::Lazy), Model::Line)]) {
        check(way, model).unwrap_or_else(|e| panic!("{way:?} {model:?}: {e}"));
    }
}

/// A rebuild writes ~100 fresh lines, whose k = 2 subsets are many; those lines
/// matter only as a whole (the pointer swap publishes them), so single deviations
/// are the cuts to try (the default budget when deep).
fn big_budget() -> Budget {
    if deep() {
        return Budget::from_env();
    }
    Budget {
        k: 1,
        random: 16,
        ..Budget::from_env()
    }
}

fn big(v: u8) -> [u64; 96] {
    let mut b = [u64::from(v); 96];
    b[95] = !u64::from(v);
    b
}

fn plan_big(raw: &[RawOp]) -> (Vec<Op>, Vec<Vec<u64>>) {
    let (ops, models) = plan::<u64>(raw);
    let models = models
        .into_iter()
        .map(|m| m.into_iter().map(|x| x & 0xff).collect())
        .collect();
    (ops, models)
}

fn exec_big(v: &mut PVec<[u64; 96]>, heap: &PHeap, op: &Op) -> pmem_collections::Result<()> {
    match op {
        Op::Push(x) => v.push(heap, &big(*x)),
        Op::Extend(xs) => v.extend(heap, xs.iter().map(|&x| big(x)).collect::<Vec<_>>().iter()),
        Op::Insert(i, x) => v.insert(heap, *i, &big(*x)),
        Op::Remove(i) => v.remove(heap, *i).map(|_| ()),
        Op::Set(i, x) => v.set(heap, *i, &big(*x)).map(|_| ()),
        Op::Pop => v.pop(heap).map(|_| ()),
        Op::Truncate(n) => v.truncate(heap, *n),
        Op::Clear => v.clear(heap),
        Op::Reserve(n) => v.reserve(heap, *n),
    }
}

fn raw_op() -> impl Strategy<Value = RawOp> {
    prop_oneof![
        4 => any::<u8>().prop_map(RawOp::Push),
        1 => Just(RawOp::Pop),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(i, v)| RawOp::Set(i, v)),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(i, v)| RawOp::Insert(i, v)),
        2 => any::<u8>().prop_map(RawOp::Remove),
        1 => (1u8..6, any::<u8>()).prop_map(|(n, v)| RawOp::Extend(n, v)),
        1 => any::<u8>().prop_map(RawOp::Truncate),
        1 => (0u8..20).prop_map(RawOp::Reserve),
    ]
}

fn way() -> impl Strategy<Value = Way> {
    prop_oneof![
        Just(Way::Exclusive(LogMode::Lazy)),
        Just(Way::Exclusive(LogMode::Undo)),
        Just(Way::Exclusive(LogMode::Redo)),
        Just(Way::Mutex),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: if deep() { 64 } else { 4 },
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_sequences_of_u64_survive_every_crash(
        ops in proptest::collection::vec(raw_op(), 1..14),
        way in way(),
    ) {
        run::<u64>(&ops, way, Model::Line).map_err(TestCaseError::fail)?;
    }

    #[test]
    fn random_sequences_of_strings_survive_every_crash(
        ops in proptest::collection::vec(raw_op(), 1..10),
        way in way(),
    ) {
        run::<PString>(&ops, way, Model::Word).map_err(TestCaseError::fail)?;
    }
}

/// The suite catches an operation that is not one transaction: an "insert at
/// the front" done as a push and a rotation in separate transactions leaves a
/// state that is neither before nor after it at a crash between them.
#[test]
fn an_operation_split_in_two_transactions_is_caught() {
    let err = CrashTest::new(PHeap::pool_options("vec-split", 512 * 1024))
        .run(
            |_| Ok(()),
            |pool, sim| {
                let e = |e: pmem_collections::Error| e.to_string();
                let heap = PHeap::create_with(pool, heap_options(LogMode::Undo)).map_err(e)?;
                let mut v: PVec<u64> = heap.root("v").map_err(e)?;
                v.extend(&heap, &[1, 2]).map_err(e)?;
                sim.mark_durable();
                sim.op(0, || -> Result<(), String> {
                    // Insert 9 at the front: a pop and two pushes, not one insert.
                    let last = v.pop(&heap).map_err(e)?.ok_or("empty")?;
                    v.push(&heap, &9).map_err(e)?;
                    v.set(&heap, 0, &9).map_err(e)?;
                    v.set(&heap, 1, &1).map_err(e)?;
                    v.push(&heap, &last).map_err(e)?;
                    Ok(())
                })
            },
            |pool| recover::<u64>(pool, Way::Exclusive(LogMode::Undo)),
            |got: &Vec<u64>, crash: &CrashInfo| {
                crash.expect_model(got, |n| if n == 0 { vec![1, 2] } else { vec![9, 1, 2] })
            },
        )
        .expect_err("a crash between the transactions shows a state between");
    assert!(err.message.contains("expected"), "{err}");
}
