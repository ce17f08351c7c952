//! The crash simulator tests itself: Px86 litmus tests, mutation tests of two
//! reference structures, and a throughput run.
//!
//! ```text
//! cargo run --release --features sim --example crash_selftest [-- --json] [--quick]
//! ```
//!
//! Prints a table per suite and, with `--json`, a final single line of JSON with
//! `litmus_cases`, `litmus_passed`, `litmus_two_thread_cases`, `model_mutants`,
//! `model_mutants_caught` (broken variants of the model itself, each of which must
//! fail a litmus test), `mutants`, `mutants_caught`, `mutants_caught_by_checker`
//! (code mutants of the reference structures, caught by the checker alone, lints
//! off), `images_checked`, `images_per_sec`, and `images_per_sec_64mib` (the same
//! run on a 64 MiB pool). `--quick` checks 2,000 images per throughput run instead of
//! 10,000. Exits non-zero if a litmus test fails or a mutant of either kind survives.

use std::process::ExitCode;

use clap::Parser;
use pmem_core::sim::selftest::{litmus, mutation, throughput, throughput_sized};
use pmem_core::sim::Model;

/// The crash simulator tests itself: Px86 litmus tests, mutation tests of two
/// reference structures, and a throughput run.
#[derive(Parser, Debug)]
#[command(name = "crash_selftest")]
struct Args {
    /// End the output with one line of JSON holding the figures.
    #[arg(long)]
    json: bool,
    /// Check 2,000 images per throughput run instead of 10,000.
    #[arg(long)]
    quick: bool,
}

fn run(args: &Args) -> Result<bool, String> {
    println!("Px86 litmus tests (reachable crash images == hand-derived allowed set)");
    println!(
        "{:<28} {:<6} {:>9} {:>9}  claim",
        "test", "model", "allowed", "reached"
    );
    let cases = litmus::cases();
    let mut passed = 0usize;
    for case in &cases {
        let r = litmus::run(case).map_err(|e| format!("litmus {}: {e}", case.name))?;
        passed += usize::from(r.passed());
        println!(
            "{:<28} {:<6} {:>9} {:>9}  {}{}",
            case.name,
            format!("{:?}", case.model),
            r.allowed.len(),
            r.reachable.len(),
            case.claim,
            if r.passed() {
                String::new()
            } else {
                format!("  FAILED: reached {:?}", r.reachable)
            }
        );
    }
    println!("litmus: {passed} of {} passed\n", cases.len());

    println!(
        "Model mutants: broken variants of the persistency model, each must fail a litmus test"
    );
    println!("{:<26} {:<7}  litmus tests it fails", "mutant", "caught");
    let model_mutants = litmus::model_mutants().map_err(|e| format!("model mutants: {e}"))?;
    let model_caught = model_mutants.iter().filter(|m| m.caught()).count();
    for m in &model_mutants {
        let names = m.failed.join(", ");
        let names: String = names.chars().take(100).collect();
        println!(
            "{:<26} {:<7}  {names}",
            format!("{:?}", m.mutant),
            if m.caught() { "yes" } else { "NO" }
        );
    }
    println!(
        "model mutants: {model_caught} of {} caught\n",
        model_mutants.len()
    );

    println!(
        "Mutation tests: each flush or fence of the reference list and undo log removed in turn"
    );
    println!(
        "{:<6} {:<32} {:<7} {:<8}  first line of the failure",
        "model", "removed", "caught", "checker"
    );
    let mut mutants = 0usize;
    let mut caught = 0usize;
    let mut by_checker = 0usize;
    for model in [Model::Line, Model::Word] {
        for m in mutation::run_all(model)? {
            mutants += 1;
            caught += usize::from(m.caught);
            by_checker += usize::from(m.caught_by_checker);
            let how: String = m.how.chars().take(90).collect();
            println!(
                "{:<6} {:<32} {:<7} {:<8}  {how}",
                format!("{model:?}"),
                m.site,
                if m.caught { "yes" } else { "NO" },
                if m.caught_by_checker { "yes" } else { "lint" }
            );
        }
    }
    println!("mutants: {caught} of {mutants} caught ({by_checker} by the checker alone, the rest by a correctness lint)\n");

    let min_images = if args.quick { 2_000 } else { 10_000 };
    let t = throughput(min_images)?;
    println!(
        "throughput: {} crash images recovered and checked in {:.2} s = {:.0} images/s (reference list and undo log, line/word/eADR, with second crashes)",
        t.images,
        t.seconds,
        t.images_per_sec()
    );

    let t64 = throughput_sized(min_images, 64 << 20)?;
    println!(
        "throughput on a 64 MiB pool: {} images in {:.2} s = {:.0} images/s",
        t64.images,
        t64.seconds,
        t64.images_per_sec()
    );

    let ok = passed == cases.len() && caught == mutants && model_caught == model_mutants.len();
    if args.json {
        let json = serde_json::json!({
            "litmus_cases": cases.len(),
            "litmus_passed": passed,
            "litmus_two_thread_cases": cases.iter().filter(|c| c.threads >= 2).count(),
            "model_mutants": model_mutants.len(),
            "model_mutants_caught": model_caught,
            "mutants": mutants,
            "mutants_caught": caught,
            "mutants_caught_by_checker": by_checker,
            "images_checked": t.images,
            "throughput_seconds": (t.seconds * 1000.0).round() / 1000.0,
            "images_per_sec": t.images_per_sec().round(),
            "images_per_sec_64mib": t64.images_per_sec().round(),
            "quick": args.quick,
        });
        println!("{json}");
    }
    Ok(ok)
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("crash_selftest: a litmus test failed or a mutant (code or model) survived");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("crash_selftest: {e}");
            ExitCode::FAILURE
        }
    }
}
