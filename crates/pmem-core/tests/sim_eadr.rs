//! The crash simulator's proof of eADR: under [`Model::Eadr`] the harness gives
//! the code under test a pool in the `CpuCache` domain, so it elides its flushes
//! (the trace holds none), and the crash images (prefixes of the global store
//! order) must still recover. The proof is not vacuous: the same model catches a
//! publication ordered before its data and a missing last fence, and the line
//! (ADR) model catches the very same flush-less code.

use pmem_core::sim::selftest::mutation;
use pmem_core::sim::selftest::reference::{Mutant, LIST_SITES, UNDO_SITES};
use pmem_core::sim::{lint, lint_model, CrashInfo, CrashTest, EventKind, LintKind, Model, Trace};
use pmem_core::{DomainSource, PPtr, PersistenceDomain, Pool, PoolOptions};

/// The data word and, two lines further, the flag that publishes it.
fn slots(pool: &Pool) -> (PPtr<u64>, PPtr<u64>) {
    let at = pool.heap().start;
    (PPtr::from_offset(at), PPtr::from_offset(at + 128))
}

/// How the publication is written.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Publish {
    /// Data, persist, flag, persist: correct on any platform.
    DataFirst,
    /// Flag first, then data (each persisted): a bug under every model.
    FlagFirst,
    /// Data, flag, and only then a persist of both: correct on eADR only.
    DataFirstOneBarrier,
    /// Data, persist, flag, and no last persist: the flag may still be in the store
    /// buffer when the operation reports success.
    NoLastFence,
}

fn publish(pool: &mut Pool, how: Publish) -> Result<(), String> {
    let e = |e: pmem_core::PoolError| e.to_string();
    let (data, flag) = slots(pool);
    match how {
        Publish::DataFirst | Publish::NoLastFence => {
            pool.write(data, &42u64).map_err(e)?;
            pool.persist_ptr(data).map_err(e)?;
            pool.write(flag, &1u64).map_err(e)?;
            if how == Publish::DataFirst {
                pool.persist_ptr(flag).map_err(e)?;
            }
        }
        Publish::FlagFirst => {
            pool.write(flag, &1u64).map_err(e)?;
            pool.persist_ptr(flag).map_err(e)?;
            pool.write(data, &42u64).map_err(e)?;
            pool.persist_ptr(data).map_err(e)?;
        }
        Publish::DataFirstOneBarrier => {
            pool.write(data, &42u64).map_err(e)?;
            pool.write(flag, &1u64).map_err(e)?;
            pool.flush(data.offset(), 8).map_err(e)?;
            pool.flush(flag.offset(), 8).map_err(e)?;
            pool.drain().map_err(e)?;
        }
    }
    Ok(())
}

fn test(model: Model, deny_lints: bool) -> CrashTest {
    CrashTest::new(PoolOptions::new("eadr", 16 * 1024))
        .model(model)
        .deny_correctness_lints(deny_lints)
}

fn run(t: CrashTest, how: Publish) -> Result<u64, String> {
    t.run(
        |_| Ok(()),
        |mut pool, sim| sim.op(0, || publish(&mut pool, how)),
        |pool: Pool| {
            let (data, flag) = slots(&pool);
            Ok((
                pool.read(data).map_err(|e| e.to_string())?,
                pool.read(flag).map_err(|e| e.to_string())?,
            ))
        },
        |&(data, flag): &(u64, u64), info: &CrashInfo| {
            if flag == 1 && data != 42 {
                Err(format!("flag published before its data ({data})"))
            } else if info.completed_ops == 1 && (flag, data) != (1, 42) {
                Err(format!("a completed publication was lost: {flag} {data}"))
            } else {
                Ok(())
            }
        },
    )
    .map(|r| r.images_checked)
    .map_err(|f| f.to_string())
}

fn record(t: &CrashTest, how: Publish) -> Trace {
    t.record(
        |_| Ok(()),
        |mut pool, sim| sim.op(0, || publish(&mut pool, how)),
    )
    .expect("record")
}

fn flushes(trace: &Trace) -> usize {
    let n = trace.events.iter();
    n.filter(|e| matches!(e.kind, EventKind::Flush { .. }))
        .count()
}

fn fences(trace: &Trace) -> usize {
    let n = trace.events.iter();
    n.filter(|e| e.kind == EventKind::Fence).count()
}

#[test]
fn the_eadr_harness_elides_flushes_and_keeps_fences() {
    let eadr = record(&test(Model::Eadr, true), Publish::DataFirst);
    assert_eq!(flushes(&eadr), 0, "flushes recorded under eADR");
    assert_eq!(fences(&eadr), 2);
    let line = record(&test(Model::Line, true), Publish::DataFirst);
    assert_eq!(flushes(&line), 2, "the line model keeps the flushes");
    // The pool itself says so.
    let t = test(Model::Eadr, true);
    t.record(
        |pool| {
            assert_eq!(pool.persistence_domain(), PersistenceDomain::CpuCache);
            assert_eq!(pool.domain_source(), &DomainSource::Simulated);
            assert!(pool.domain_effective());
            Ok(())
        },
        |_, _| Ok(()),
    )
    .expect("record");
}

#[test]
fn correct_publications_survive_every_eadr_crash_without_flushes() {
    for how in [Publish::DataFirst, Publish::DataFirstOneBarrier] {
        let images = run(test(Model::Eadr, true), how).unwrap_or_else(|e| panic!("{how:?}: {e}"));
        assert!(images >= 2, "{how:?}: {images} images");
    }
}

#[test]
fn eliding_flushes_on_adr_is_caught_by_the_line_model() {
    // The same flush-less code (domain CpuCache requested) under the line model:
    // stores sit in the cache, the data line may be lost while the flag's is not.
    let t = CrashTest::new(
        PoolOptions::new("eadr", 16 * 1024).persistence_domain(PersistenceDomain::CpuCache),
    )
    .model(Model::Line)
    .deny_correctness_lints(false);
    let e = run(t, Publish::DataFirst).expect_err("no flushes on ADR must fail");
    assert!(e.contains("lost") || e.contains("before its data"), "{e}");
    // And the ADR lints see the missing flushes in the eADR trace.
    let trace = record(&test(Model::Eadr, false), Publish::DataFirst);
    assert!(lint(&trace)
        .iter()
        .any(|l| l.kind == LintKind::MissingFlush || l.kind == LintKind::NotDurableAtOpEnd));
    assert!(lint_model(&trace, Model::Eadr)
        .iter()
        .all(|l| !l.kind.is_correctness()));
}

#[test]
fn a_flag_published_before_its_data_is_caught_under_eadr() {
    let e = run(test(Model::Eadr, false), Publish::FlagFirst).expect_err("reordered publication");
    assert!(e.contains("flag published before its data"), "{e}");
}

#[test]
fn a_missing_last_fence_is_caught_under_eadr() {
    // By the checker alone (lints off): the flag can be lost after the operation
    // reported success...
    let e = run(test(Model::Eadr, false), Publish::NoLastFence).expect_err("unfenced flag");
    assert!(e.contains("completed publication was lost"), "{e}");
    // ...and by the eADR lint.
    let trace = record(&test(Model::Eadr, false), Publish::NoLastFence);
    let lints = lint_model(&trace, Model::Eadr);
    assert!(
        lints.iter().any(|l| l.kind == LintKind::NotDurableAtOpEnd),
        "{lints:?}"
    );
}

/// The simulator's reference list and undo log under eADR with flushes elided:
/// they pass; removing a flush changes nothing (there is none to remove); removing
/// the last fence of an operation is caught.
#[test]
fn reference_structures_under_eadr_need_only_their_last_fence() {
    type Check = fn(Model, Mutant, bool) -> Result<pmem_core::sim::Report, String>;
    let structures: [(&[&str], Check); 2] = [
        (LIST_SITES, mutation::check_list),
        (UNDO_SITES, mutation::check_undo),
    ];
    for (sites, check) in structures {
        let r = check(Model::Eadr, Mutant::NONE, true).expect("unmutated");
        assert!(r.images_checked > 0);
        let last = sites.len() - 1;
        assert!(sites[last].contains("fence"), "{}", sites[last]);
        for (site, name) in sites.iter().enumerate() {
            let result = check(Model::Eadr, Mutant(Some(site)), true);
            if name.contains("flush") {
                assert!(result.is_ok(), "{name}: {result:?}");
            }
            if site == last {
                assert!(result.is_err(), "{name}: the last fence is needed on eADR");
            }
        }
    }
}
