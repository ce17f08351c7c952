//! Mutation suite of the move protocols: with any one flush or fence of Espresso
//! or SFCCD removed, the concurrent crash suite must fail. A binary of its own,
//! since a removed site is process-wide (`mutation` feature).

#![cfg(feature = "mutation")]

mod concurrent;
use concurrent::*;

use defrag::Protocol;
use pmem_core::sim::Model;

#[test]
fn every_flush_and_fence_of_espresso_and_sfccd_is_needed() {
    use defrag::Site;
    let mut survived = Vec::new();
    // `DEFRAG_SITE=<name>` runs one (debugging a survivor).
    let only = std::env::var("DEFRAG_SITE").ok();
    for site in defrag::SITES {
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
        defrag::remove_site(Some(site));
        let r = crash_test(protocol, Model::Line);
        defrag::remove_site(None);
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
