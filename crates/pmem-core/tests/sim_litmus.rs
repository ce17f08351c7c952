//! Px86 litmus tests: the reachable crash images of each small program equal the
//! hand-derived allowed set (see `pmem_core::sim::selftest::litmus`).

use pmem_core::sim::selftest::litmus;

#[test]
fn every_litmus_test_matches_its_allowed_set() {
    let results = litmus::run_all().expect("litmus programs run");
    assert!(results.len() >= 8, "at least eight litmus tests");
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
