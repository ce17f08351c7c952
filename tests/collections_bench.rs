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

mod example_bin;

use std::path::Path;
use std::process::Command;

use example_bin::example_binary;

use serde_json::Value;

#[test]
fn a_quick_run_reports_every_figure() {
    let bin = example_binary("collections_bench", &["examples/collections_bench"]);
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
    let (v, last) = example_bin::last_json("collections_bench", &out);
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
