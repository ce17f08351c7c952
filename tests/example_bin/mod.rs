//! The binary of an example, for the smoke tests that run one: the same build's
//! when it is there and newer than every source of the example (CI's `cargo run
//! --example NAME` made it), otherwise built now (`cargo build --example NAME`,
//! default features: a build with other features would rebuild the workspace).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

/// When `p` was last modified (`None`: it is not there).
fn modified(p: &Path) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

/// The files of `sources` (paths relative to the package root; a directory stands
/// for the files directly in it), each with its modification time.
fn newest(sources: &[&str]) -> Option<SystemTime> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    sources
        .iter()
        .flat_map(|s| {
            let p = root.join(s);
            match std::fs::read_dir(&p) {
                Ok(dir) => dir.filter_map(|e| e.ok().map(|e| e.path())).collect(),
                Err(_) => vec![p],
            }
        })
        .filter_map(|p| modified(&p))
        .max()
}

/// Example `name`'s binary of this build's profile, built if missing or older than
/// one of `sources`.
pub fn example_binary(name: &str, sources: &[&str]) -> PathBuf {
    let exe = std::env::current_exe().expect("the test executable's path");
    // target/<profile>/deps/<test>-<hash> → target/<profile>/examples/<name>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the target profile directory");
    let bin = profile_dir.join("examples").join(name);
    let newest_source = newest(sources);
    if modified(&bin).is_none_or(|b| newest_source.is_some_and(|s| s > b)) {
        let mut build = Command::new(env!("CARGO"));
        build.args(["build", "--example", name]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            build.arg("--release");
        }
        let status = build.status().expect("run cargo build");
        assert!(status.success(), "cargo build --example {name} failed");
    }
    assert!(bin.exists(), "{} not built", bin.display());
    bin
}

/// The last line of a successful run's standard output, parsed as JSON (the
/// `--json` line), with the line itself for messages. Panics, with the run's
/// output, if `name` failed or its last line is not JSON.
pub fn last_json(name: &str, out: &std::process::Output) -> (serde_json::Value, String) {
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name} failed: {}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("some output").to_owned();
    let v = serde_json::from_str(&last).expect("the last line is JSON");
    (v, last)
}
