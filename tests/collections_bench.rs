//! The smoke test of the `collections_bench` example: `--quick --json` runs every
//! workload (pmkit's containers, std's, PMDK's table when libpmemobj is installed,
//! the concurrent map on two threads, the durable child process) at 10 k elements,
//! and its last line is one JSON object holding every figure the issue names
//! (`examples/collections_bench/names.rs`), numbers where they must be, the targets
//! computed as booleans.
//!
//! The example is built by `cargo build --example collections_bench` in this
//! test's profile (a no-op when the `cargo test` build made it already).

#[path = "../examples/collections_bench/names.rs"]
mod names;

use std::path::Path;
use std::process::Command;

use serde_json::Value;

/// The example's binary of this build's profile, built (or found up to date).
fn example_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/examples/collections_bench
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the target profile directory");
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "--example", "collections_bench"]);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let status = build.status().expect("run cargo build");
    assert!(
        status.success(),
        "cargo build --example collections_bench failed"
    );
    let bin = profile_dir.join("examples").join("collections_bench");
    assert!(bin.exists(), "{} not built", bin.display());
    bin
}

#[test]
fn a_quick_run_reports_every_figure() {
    let bin = example_binary();
    let dir = tempfile::tempdir().expect("temporary directory");
    // The forced-DAX pools on tmpfs where there is one (as the example's default).
    let fast = Path::new("/dev/shm");
    let fast = if fast.is_dir() { fast } else { dir.path() };
    let out = Command::new(&bin)
        .args(["--quick", "--json", "--dir"])
        .arg(fast)
        .arg("--durable-dir")
        .arg(dir.path())
        .output()
        .expect("run collections_bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "collections_bench failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("some output");
    let v: Value = serde_json::from_str(last).expect("the last line is JSON");
    let pmdk = !v["pmdk"].is_null();
    for name in names::REQUIRED {
        let x = names::lookup(&v, name).unwrap_or_else(|| panic!("{name} missing:\n{last}"));
        if name.starts_with("met_targets.") {
            // null only when its peer is absent (the PMDK share).
            assert!(
                x.is_boolean() || (x.is_null() && !pmdk && name.contains("pmdk")),
                "{name} = {x}"
            );
        } else if name.contains("pmdk") && !pmdk {
            assert!(x.is_null(), "{name} = {x} without PMDK");
        } else {
            assert!(
                x.as_f64().is_some_and(|f| f.is_finite() && f > 0.0),
                "{name} = {x}"
            );
        }
    }
    assert_eq!(v["quick"], Value::Bool(true));
    assert_eq!(v["elements"]["maps"], 10_000);
    // Pool files are removed, also the durable child's.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list the durable directory")
        .collect();
    assert!(left.is_empty(), "pool files left behind: {left:?}");
}
