//! The smoke test of the `collections_bench` example: `--quick --json` runs every
//! workload (pmkit's containers, std's, PMDK's table when libpmemobj is installed,
//! the concurrent map on two threads, the durable child process) at 10 k elements,
//! and its last line is one JSON object holding every figure the issue names
//! (`examples/collections_bench/names.rs`), numbers where they must be, the targets
//! computed as booleans.
//!
//! The example's binary comes from the same build when it is there and newer than
//! every file of the example (CI's `cargo run --example collections_bench` made
//! it); otherwise the test builds it (`cargo build --example collections_bench`,
//! default features: a build with other features would rebuild the workspace).

#[path = "../examples/collections_bench/names.rs"]
mod names;

use std::path::Path;
use std::process::Command;
use std::time::SystemTime;

use serde_json::Value;

/// When `p` was last modified (`None`: it is not there).
fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The example's binary of this build's profile, built if missing or older than
/// one of the example's sources.
fn example_binary() -> std::path::PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/examples/collections_bench
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the target profile directory");
    let bin = profile_dir.join("examples").join("collections_bench");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/collections_bench");
    let newest_source = std::fs::read_dir(&src)
        .expect("the example's sources")
        .filter_map(|e| e.ok().and_then(|e| modified(&e.path())))
        .max();
    if modified(&bin).is_none_or(|b| newest_source.is_some_and(|s| s > b)) {
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
    }
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
