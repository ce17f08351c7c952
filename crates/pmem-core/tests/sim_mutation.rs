//! Mutation tests: the reference structures pass; removing any single flush or
//! fence is caught (by the checker or a correctness lint), under each model where
//! the site matters.

use pmem_core::sim::selftest::mutation;
use pmem_core::sim::Model;

fn assert_all_caught(model: Model) {
    let results = mutation::run_all(model).expect("unmutated structures pass");
    assert!(results.len() >= 10, "{} mutants", results.len());
    let missed: Vec<String> = results
        .iter()
        .filter(|m| !m.caught)
        .map(|m| format!("{}: {}", m.site, m.how))
        .collect();
    assert!(
        missed.is_empty(),
        "mutants not caught:\n{}",
        missed.join("\n")
    );
}

#[test]
fn every_mutant_is_caught_in_line_mode() {
    assert_all_caught(Model::Line);
}

#[test]
fn every_mutant_is_caught_in_word_mode() {
    assert_all_caught(Model::Word);
}

#[test]
fn unmutated_structures_pass_under_eadr() {
    use pmem_core::sim::selftest::reference::Mutant;
    mutation::check_list(Model::Eadr, Mutant::NONE, true).expect("list under eADR");
    mutation::check_undo(Model::Eadr, Mutant::NONE, true).expect("undo log under eADR");
}
