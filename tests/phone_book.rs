//! The README's phone book survives `kill -9`: the `phone_book` example (built by
//! the same `cargo test`) kills its writer child mid-write and finds every
//! acknowledged entry again.

use std::path::PathBuf;
use std::process::Command;

fn example() -> PathBuf {
    // target/<profile>/deps/<test>-<hash> → target/<profile>/examples/phone_book
    let exe = std::env::current_exe().expect("test binary path");
    let profile = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target/<profile>");
    profile.join("examples").join("phone_book")
}

#[test]
fn every_acknowledged_entry_survives_kill_9() {
    let dir = tempfile::tempdir().expect("dir");
    let out = Command::new(example())
        .args(["--entries", "150", "--dir"])
        .arg(dir.path())
        .output()
        .expect("run the phone_book example (built by cargo test)");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{text}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("| 150 | 150 | 0 |"), "{text}");
}
