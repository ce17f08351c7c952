//! Mutation suite of healing beside running transactions: with the healed word's
//! flush or the pass's fence removed, the CAS made a plain store, or the object
//! locks ignored, the two-mutator crash suite must fail, except for two mutants
//! that are equivalent by construction (see [`EQUIVALENT`]); the test checks they
//! still survive, so a change that makes them matter is noticed. A binary of its
//! own, since a removed site is process-wide (`mutation` feature).

#![cfg(feature = "mutation")]

mod two_mutators;
use two_mutators::*;

use pmem_core::sim::Model;
use pmem_defrag::{Protocol, Site};

/// Mutants no crash can tell apart from the program:
/// * `HealFence`: the pass's last fence. The next persistent step on the same
///   thread is the first plan's release, a transaction whose log write fences
///   (completing this thread's flushes of healed words) before its commit frees
///   any relocation page; the fence only makes the pass durable on its own.
/// * `HealCas`: the CAS as a plain store. The healer holds the word's item
///   locked, so no transaction changes the word between its load and the swap;
///   the CAS states the invariant (and fails loudly, as a revisit, if it broke).
const EQUIVALENT: [Site; 2] = [Site::HealFence, Site::HealCas];

#[test]
fn every_healing_site_is_needed() {
    let mut survived = Vec::new();
    for site in pmem_defrag::HEAL_SITES {
        pmem_defrag::remove_site(Some(site));
        let mut caught = None;
        'search: for model in [Model::Line, Model::Word] {
            for rollback in [true, false] {
                if let Err(e) = crash_test(Protocol::Espresso, model, rollback) {
                    caught = Some(e);
                    break 'search;
                }
            }
        }
        pmem_defrag::remove_site(None);
        match caught {
            Some(e) => eprintln!("{site:?}: caught: {}", e.lines().next().unwrap_or_default()),
            None => {
                eprintln!("{site:?}: survived");
                survived.push(site);
            }
        }
    }
    assert_eq!(survived, EQUIVALENT, "mutants not caught");
}
