//! Px86 litmus tests: the reachable crash images of each small program equal the
//! hand-derived allowed set (see `pmem_core::sim::selftest::litmus`).

use pmem_core::sim::selftest::litmus;

#[test]
fn every_litmus_test_matches_its_allowed_set() {
    let results = litmus::run_all().expect("litmus programs run");
    assert!(results.len() >= 30, "at least thirty litmus tests");
    let cases = litmus::cases();
    assert!(
        cases.iter().filter(|c| c.threads >= 2).count() >= 5,
        "five with two threads"
    );
    assert!(
        cases.iter().any(|c| c.crash_at.is_some()),
        "crash points mid-program"
    );
    let failed: Vec<String> = results
        .iter()
        .filter(|r| !r.passed())
        .map(|r| {
            format!(
                "{}: reachable {:?}, allowed {:?}",
                r.name, r.reachable, r.allowed
            )
        })
        .collect();
    assert!(failed.is_empty(), "litmus failures:\n{}", failed.join("\n"));
}

#[test]
fn litmus_sets_are_not_trivial() {
    // Each kind of claim is exercised: some tests forbid outcomes, some allow all.
    let results = litmus::run_all().expect("litmus programs run");
    assert!(results.iter().any(|r| r.allowed.len() == 1));
    assert!(results.iter().any(|r| r.allowed.len() == 4));
    let forbid_some = results.iter().filter(|r| {
        let width = r.allowed.iter().next().map_or(0, Vec::len);
        (r.allowed.len() as u32) < 2u32.pow(width as u32)
    });
    assert!(forbid_some.count() >= 5);
}

/// Every deliberately broken model fails at least one litmus test, and each
/// mutant's failures are reported by name.
#[test]
fn every_model_mutant_fails_a_litmus_test() {
    let results = litmus::model_mutants().expect("litmus programs run");
    assert!(results.len() >= 8, "at least eight model mutants");
    let survivors: Vec<String> = results
        .iter()
        .filter(|m| !m.caught())
        .map(|m| format!("{:?}", m.mutant))
        .collect();
    assert!(
        survivors.is_empty(),
        "model mutants no litmus test catches: {survivors:?}"
    );
}
