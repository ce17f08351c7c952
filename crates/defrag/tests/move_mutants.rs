//! Mutation suite of the move protocols: with any one flush or fence of Espresso
//! or SFCCD removed, or FFCCD's reached-bitmap recovery or settling broken, the
//! concurrent crash suite must fail. A binary of its own,
//! since a removed site is process-wide (`mutation` feature).

#![cfg(feature = "mutation")]

mod concurrent;
use concurrent::*;

use pmem_core::sim::Model;
use pmem_defrag::Protocol;

#[test]
fn every_flush_and_fence_of_espresso_and_sfccd_is_needed() {
    use pmem_defrag::Site;
    let mut survived = Vec::new();
    // `DEFRAG_SITE=<name>` runs one (debugging a survivor).
    let only = std::env::var("DEFRAG_SITE").ok();
    for site in pmem_defrag::SITES {
        if only.as_ref().is_some_and(|o| *o != format!("{site:?}")) {
            continue;
        }
        let protocol = match site {
            Site::EspressoCopyFlush
            | Site::EspressoCopyFence
            | Site::EspressoForwardFlush
            | Site::EspressoForwardFence => Protocol::Espresso,
            _ => Protocol::Sfccd,
        };
        pmem_defrag::remove_site(Some(site));
        let r = crash_test(protocol, Model::Line);
        pmem_defrag::remove_site(None);
        match r {
            Ok(images) => {
                eprintln!("{site:?}: survived ({images} images)");
                survived.push(site);
            }
            Err(e) => eprintln!("{site:?}: caught: {}", e.lines().next().unwrap_or_default()),
        }
    }
    assert!(survived.is_empty(), "mutants not caught: {survived:?}");
}

/// FFCCD on ADR with the reached bitmap: recovery that trusts every granule (a
/// copy that never reached the media kept), recovery that copies every granule
/// again (the program's durable writes to a copy overwritten: SFCCD's flaw),
/// settling that clears the flags without flushing, and recovery that clears the
/// flags without flushing what it copied must each be caught.
///
/// Flagging the plans without a fence survives, and must: since planning runs in
/// slices ([`pmem_defrag::planning`]), the plans are flagged while still *pending*, and
/// the commit transaction that clears the pending word fences before the
/// defragmenter's first move; a crash before that commit undoes the whole chain,
/// flags and the barrier's moves included. The test checks it still survives, so
/// a change that makes that fence matter again is noticed.
#[test]
fn the_reached_bitmap_recovery_and_settling_are_needed() {
    let mut survived = Vec::new();
    for mutant in pmem_defrag::REACHED_MUTANTS {
        pmem_defrag::set_reached_mutant(Some(mutant));
        // The equivalent mutant survives the whole run, which is the longest of
        // this suite: by default it gets fewer cuts per crash point (every
        // crash point is still visited); `PMKIT_DEEP=1` gives it the full budget.
        let budget = if mutant == pmem_defrag::ReachedMutant::FlagWithoutFence
            && std::env::var_os("PMKIT_DEEP").is_none()
        {
            pmem_core::sim::Budget {
                exhaustive_up_to: 64,
                k: 1,
                random: 8,
                ..pmem_core::sim::Budget::from_env()
            }
        } else {
            pmem_core::sim::Budget::from_env()
        };
        let r = crash_test_on(
            Protocol::Ffccd,
            Platform::ReachedBitmap,
            Model::Line,
            budget,
        );
        pmem_defrag::set_reached_mutant(None);
        match r {
            Ok(images) => {
                eprintln!("{mutant:?}: survived ({images} images)");
                survived.push(mutant);
            }
            Err(e) => eprintln!(
                "{mutant:?}: caught: {}",
                e.lines().next().unwrap_or_default()
            ),
        }
    }
    assert_eq!(
        survived,
        [pmem_defrag::ReachedMutant::FlagWithoutFence],
        "mutants not caught (FlagWithoutFence is equivalent: see above)"
    );
}
