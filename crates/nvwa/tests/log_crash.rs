//! Crash suite of the allocation log: a sequence of appends (one or two records)
//! and in-place rewrites (a free's exclude bit), each followed by the fence the
//! allocator will issue, crashed wherever the durable set can change under the
//! line and the word model. After each crash the scan must give the records of
//! the completed operations, with the one in flight applied whole or not at all
//! (a two-record append may not be half there once its fence returned; before it,
//! either half may be missing, which the allocator's recovery will handle) — and
//! a log written without its flushes must fail the same check.

use nvwa::log::AllocLog;
use nvwa::record::{excluded, Record};
use pmem_core::sim::{CrashInfo, CrashTest, Model};
use pmem_core::{Pool, PoolOptions};

const BASE: u64 = 8192;
const CAPACITY: u64 = 64;

#[derive(Clone, Copy, Debug)]
enum Op {
    /// Append one record for the object at this offset.
    One(u64),
    /// Append a publish intent and its record in one call.
    Two(u64),
    /// Exclude the record at this position.
    Exclude(u64),
}

const SCRIPT: [Op; 8] = [
    Op::One(0),
    Op::Two(64),
    Op::One(128),
    Op::Exclude(0),
    Op::One(192),
    Op::Two(256),
    Op::Exclude(3),
    Op::One(320),
];

fn obj(offset: u64, pending: bool) -> u64 {
    Record::Obj {
        offset,
        len: 64,
        exclude: false,
        pending,
    }
    .encode()
    .unwrap_or(0)
}

fn words(op: Op) -> Vec<u64> {
    match op {
        Op::One(o) => vec![obj(o, false)],
        Op::Two(o) => vec![
            Record::Pub { slot: 4096 + o / 8 }.encode().unwrap_or(0),
            obj(o, true),
        ],
        Op::Exclude(_) => Vec::new(),
    }
}

/// The log's words after `ops`, by position.
fn model(ops: &[Op]) -> Vec<(u64, u64)> {
    let mut log: Vec<u64> = Vec::new();
    for &op in ops {
        match op {
            Op::Exclude(p) => log[p as usize] = excluded(log[p as usize]),
            _ => log.extend(words(op)),
        }
    }
    log.into_iter()
        .enumerate()
        .map(|(p, w)| (p as u64, w))
        .collect()
}

fn run(model_kind: Model, flush: bool) -> Result<u64, String> {
    CrashTest::new(PoolOptions::new("log", 64 * 1024))
        .model(model_kind)
        .deny_correctness_lints(flush)
        .run(
            |_| Ok(()),
            |pool, sim| {
                let log = AllocLog::empty(BASE, CAPACITY);
                let mut tail = 0u64;
                for (i, &op) in SCRIPT.iter().enumerate() {
                    sim.op(i as u32, || -> Result<(), String> {
                        match op {
                            Op::Exclude(p) => {
                                let w = log.word(&pool, p).map_err(|e| e.to_string())?;
                                if flush {
                                    // SAFETY: the test's own log, one thread.
                                    unsafe { log.rewrite(&pool, p, excluded(w)) }
                                        .map_err(|e| e.to_string())?;
                                } else {
                                    raw_store(&pool, BASE + p * 8, &[excluded(w)])?;
                                }
                            }
                            _ => {
                                let w = words(op);
                                if flush {
                                    log.append(&pool, &w).map_err(|e| e.to_string())?;
                                } else {
                                    raw_store(&pool, BASE + tail * 8, &w)?;
                                }
                                tail += w.len() as u64;
                            }
                        }
                        pool.drain().map_err(|e| e.to_string())
                    })?;
                }
                Ok(())
            },
            |pool| {
                let (_, records) =
                    AllocLog::scan(&pool, BASE, CAPACITY).map_err(|e| e.to_string())?;
                Ok(records
                    .into_iter()
                    .map(|(p, r)| (p, r.encode().unwrap_or(0)))
                    .collect::<Vec<_>>())
            },
            |got: &Vec<(u64, u64)>, crash: &CrashInfo| {
                let done = crash.completed_ops as usize;
                // Before its fence, either word of a two-record append may be
                // missing (the allocator's recovery drops such a half).
                if let (false, Some(&Op::Two(o))) = (crash.in_flight.is_empty(), SCRIPT.get(done)) {
                    let before = model(&SCRIPT[..done]);
                    let tail = before.len() as u64;
                    let w = words(Op::Two(o));
                    for half in [(tail, w[0]), (tail + 1, w[1])] {
                        let mut partial = before.clone();
                        partial.push(half);
                        if *got == partial {
                            return Ok(());
                        }
                    }
                }
                crash.expect_model(got, |n| model(&SCRIPT[..n as usize]))
            },
        )
        .map(|r| r.images_checked)
        .map_err(|f| f.to_string())
}

/// The log's stores without a flush (the broken variant).
fn raw_store(pool: &Pool, offset: u64, words: &[u64]) -> Result<(), String> {
    // SAFETY: the test's own log area, one thread.
    unsafe { pool.write_words_ordered_shared(offset, words) }.map_err(|e| e.to_string())
}

#[test]
fn the_log_survives_every_crash() {
    for m in [Model::Line, Model::Word] {
        let images = run(m, true).unwrap_or_else(|e| panic!("{m:?}: {e}"));
        assert!(images >= 10, "{m:?}: {images} images");
    }
}

#[test]
fn a_log_without_its_flushes_is_caught() {
    assert!(
        run(Model::Line, false).is_err(),
        "unflushed appends must be lost somewhere"
    );
}
