//! The smoke test of the `persist_cost` example: `--quick --json` ends with one JSON
//! object holding the durable section's figures (`durable.drain_us.{t1,t8}`,
//! `durable.drains_per_sec.{t1,t8}`, `durable.device_flushes_per_drain.t8`, the same
//! under `durable.old`, and both sync strategies under `durable.pieces`), positive
//! numbers where they must be, and the two durable targets computed as booleans.
//!
//! The example's binary comes from the same build when it is there and newer than
//! its sources (CI's `cargo run --example persist_cost` made it); otherwise the test
//! builds it (`cargo build --example persist_cost`).

mod example_bin;

use std::path::Path;
use std::process::Command;

use example_bin::example_binary;

use serde_json::Value;

/// The figures the issue names, as paths into the JSON object.
const REQUIRED: &[&str] = &[
    "durable.drain_us.t1",
    "durable.drain_us.t8",
    "durable.drains_per_sec.t1",
    "durable.drains_per_sec.t8",
    "durable.device_flushes_per_drain.t8",
    "durable.old.drain_us.t1",
    "durable.old.drain_us.t8",
    "durable.old.drains_per_sec.t1",
    "durable.old.drains_per_sec.t8",
    "durable.old.device_flushes_per_drain.t8",
    "durable.pieces.msync.drain_us.t1_r2",
    "durable.pieces.msync.drain_us.t1_r16",
    "durable.pieces.msync.drain_us.t8",
    "durable.pieces.fdatasync.drain_us.t1_r2",
    "durable.pieces.fdatasync.drain_us.t1_r16",
    "durable.pieces.fdatasync.drain_us.t8",
];

/// The targets, computed (booleans), never asserted by the example.
const TARGETS: &[&str] = &[
    "met_targets.durable_drains_per_sec_t8_ge_4x_t1",
    "met_targets.durable_device_flushes_per_drain_t8_le_0_3",
];

fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

#[test]
fn a_quick_run_reports_the_durable_figures() {
    let bin = example_binary(
        "persist_cost",
        &[
            "examples/persist_cost.rs",
            "examples/persist_cost",
            "benches/common/mod.rs",
        ],
    );
    // An ordinary directory for the durable pool (tempfile's default is /tmp, which
    // may be tmpfs: the figures are then not durable ones, but the names are there).
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).expect("temporary directory");
    let fast = Path::new("/dev/shm");
    let fast = if fast.is_dir() { fast } else { dir.path() };
    let out = Command::new(&bin)
        .args(["--quick", "--json", "--dir"])
        .arg(fast)
        .arg("--durable-dir")
        .arg(dir.path())
        // The durable section measures msync mode; forced DAX would measure nothing.
        .env_remove("PMKIT_FORCE_DAX")
        .output()
        .expect("run persist_cost");
    let (v, last) = example_bin::last_json("persist_cost", &out);
    for name in REQUIRED {
        let x = lookup(&v, name).unwrap_or_else(|| panic!("{name} missing:\n{last}"));
        assert!(
            x.as_f64().is_some_and(|f| f.is_finite() && f > 0.0),
            "{name} = {x}"
        );
    }
    // 8 threads' device flushes per drain: a finite fraction (0 would mean no sync).
    let f = lookup(&v, "durable.device_flushes_per_drain.t8").and_then(Value::as_f64);
    assert!(f.is_some_and(|f| f > 0.0 && f <= 1.0), "{f:?}");
    for name in TARGETS {
        let x = lookup(&v, name).unwrap_or_else(|| panic!("{name} missing:\n{last}"));
        assert!(x.is_boolean(), "{name} = {x}");
    }
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .expect("list the durable directory")
        .collect();
    assert!(left.is_empty(), "pool files left behind: {left:?}");
}
