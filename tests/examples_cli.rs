//! The examples' front doors: every example answers `--help` with its usage (exit
//! 0, and nothing made in the working directory: `tour --help` once created a pool
//! named `--help`) and rejects an unknown flag with clap's message (exit 2); and
//! an example's logs sent to a pipe carry no ANSI colour codes.
//!
//! [`EXAMPLES`] must name every example under `examples/` (a `.rs` file, or a
//! directory with a `main.rs`; `common`, `raft_common` and `persist_cost/` are
//! modules of examples): a new example fails the first test until it is listed.
//!
//! The binaries are those of the same build (`cargo test` builds every example
//! first); a missing or stale one is built (see `example_bin`).

#[allow(dead_code)]
mod example_bin;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Every example, by name.
const EXAMPLES: &[&str] = &[
    "amf_bench",
    "collections_bench",
    "counter",
    "crash_selftest",
    "defrag_repro",
    "nvwa_bench",
    "openraft_bench",
    "openraft_kv",
    "persist_cost",
    "phone_book",
    "raft_bench",
    "raft_cluster",
    "raft_node",
    "raft_reconfig",
    "store_bench",
    "tour",
    "tx_bench",
    "wafa_wear",
];

/// Examples built only with a feature of the package (`[[example]]
/// required-features`), with whether this build has it.
const FEATURE_GATED: &[(&str, bool)] = &[("crash_selftest", cfg!(feature = "sim"))];

/// The package's root directory.
fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The examples found under `examples/`: `NAME.rs` files and `NAME/` directories
/// holding a `main.rs`.
fn examples_on_disk() -> BTreeSet<String> {
    let dir = root().join("examples");
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter_map(|p| {
            let name = p.file_stem()?.to_str()?.to_owned();
            let is_example = if p.is_dir() {
                p.join("main.rs").is_file()
            } else {
                p.extension().is_some_and(|x| x == "rs")
            };
            is_example.then_some(name)
        })
        .collect()
}

/// The example's binary, or `None` when this build leaves it out (a feature it
/// needs is off).
fn binary(name: &str) -> Option<PathBuf> {
    if FEATURE_GATED.iter().any(|&(n, on)| n == name && !on) {
        return None;
    }
    let own = if root().join("examples").join(name).is_dir() {
        format!("examples/{name}")
    } else {
        format!("examples/{name}.rs")
    };
    // Over-inclusive on purpose: a shared module newer than the binary rebuilds it.
    let sources = [
        own.as_str(),
        "examples/common",
        "examples/raft_common",
        "benches/common",
    ];
    Some(example_bin::example_binary(name, &sources))
}

/// The names of the files in `dir`.
fn listing(dir: &Path) -> BTreeSet<String> {
    std::fs::read_dir(dir)
        .expect("read the temporary directory")
        .map(|e| {
            e.expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[test]
fn the_list_names_every_example() {
    let listed: BTreeSet<String> = EXAMPLES.iter().map(|s| (*s).to_owned()).collect();
    let on_disk = examples_on_disk();
    assert_eq!(
        listed, on_disk,
        "EXAMPLES must list exactly the examples under examples/ (left: listed, right: on disk)"
    );
}

#[test]
fn every_example_answers_help_and_rejects_an_unknown_flag() {
    let mut failures = Vec::new();
    for &name in EXAMPLES {
        let Some(bin) = binary(name) else {
            eprintln!("{name}: skipped (built only with a feature this build lacks)");
            continue;
        };
        let cwd = tempfile::tempdir().expect("a temporary directory");
        let run = |arg: &str| {
            Command::new(&bin)
                .arg(arg)
                .current_dir(cwd.path())
                // A --help that went on to do the work would hang the test: nothing
                // may read stdin.
                .stdin(Stdio::null())
                .output()
                .unwrap_or_else(|e| panic!("run {name}: {e}"))
        };

        let help = run("--help");
        let stdout = String::from_utf8_lossy(&help.stdout);
        if help.status.code() != Some(0) || !stdout.contains("Usage") {
            failures.push(format!(
                "{name} --help: {} (want exit 0 and a usage on stdout)\nstdout: {stdout}\nstderr: {}",
                help.status,
                String::from_utf8_lossy(&help.stderr)
            ));
        }
        let made = listing(cwd.path());
        if !made.is_empty() {
            failures.push(format!(
                "{name} --help made files in its directory: {made:?}"
            ));
        }

        let bad = run("--no-such-flag");
        let stderr = String::from_utf8_lossy(&bad.stderr);
        if bad.status.code() != Some(2) || !stderr.contains("--no-such-flag") {
            failures.push(format!(
                "{name} --no-such-flag: {} (want exit 2 and the flag named on stderr)\nstderr: {stderr}",
                bad.status
            ));
        }
        let made = listing(cwd.path());
        if !made.is_empty() {
            failures.push(format!("{name} --no-such-flag made files: {made:?}"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

/// A free TCP port on loopback (`raft_cluster` puts node 1 at base + 1, so the
/// base given is one below it).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    l.local_addr().expect("its address").port()
}

/// `raft_cluster` (the cheapest example that logs as it starts) with `RUST_LOG=info`
/// and stderr a pipe: its logs are plain text. Before, they were full of colour
/// escape sequences (`raft_cluster > out.log`).
#[test]
fn logs_to_a_pipe_carry_no_colour_codes() {
    let bin = binary("raft_cluster").expect("raft_cluster needs no feature");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let (raft, client) = (free_port(), free_port());
    let mut child = Command::new(&bin)
        .args(["--nodes", "1", "--data-dir"])
        .arg(dir.path().join("cluster"))
        .args(["--raft-base", &(raft - 1).to_string()])
        .args(["--client-base", &(client - 1).to_string()])
        .env("RUST_LOG", "info")
        .env_remove("NO_COLOR")
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start raft_cluster");
    let stderr = child.stderr.take().expect("the piped stderr");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    // Collect until the node says it started (its third or so info line).
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut lines = Vec::new();
    while Instant::now() < deadline {
        match rx.recv_timeout(Duration::from_millis(200)) {
            Ok(line) => {
                let started = line.contains("node started");
                lines.push(line);
                if started {
                    break;
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    let text = lines.join("\n");
    assert!(
        lines.iter().any(|l| l.contains("INFO")),
        "raft_cluster logged no info line to its stderr:\n{text}"
    );
    assert!(
        !text.contains("\x1b["),
        "raft_cluster's logs to a pipe carry ANSI escape codes:\n{}",
        text.escape_debug()
    );
}

/// `cmd` run by `script` on a pseudo-terminal, whose output (what `cmd` wrote to
/// the terminal) is returned; `None` when `script` (util-linux) is missing.
fn on_a_terminal(cmd: &str, cwd: &Path) -> Option<String> {
    let out = Command::new("script")
        .args(["-qec", cmd, "/dev/null"])
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    assert!(
        out.status.success(),
        "script -qec {cmd:?} failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A section's progress bar goes to stderr when it is a terminal, never to stdout
/// (whose last line stays the clean `--json` line), and nowhere when stderr is a
/// pipe. `store_bench` on a few hundred keys: its bar has a step per round.
#[test]
fn progress_shows_on_a_terminal_stderr_only() {
    let bin = binary("store_bench").expect("store_bench needs no feature");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let args = "--quick --json --engines list --keys 300 --startup-keys 300 --disk disk --shm .";
    let stdout_file = dir.path().join("stdout.txt");
    let cmd = format!("'{}' {args} > stdout.txt", bin.display());
    let Some(terminal) = on_a_terminal(&cmd, dir.path()) else {
        eprintln!("skipped: no `script` (util-linux) to run store_bench on a terminal");
        return;
    };
    assert!(
        terminal.contains("store_bench") && terminal.contains("list round 1"),
        "no progress bar on the terminal's stderr:\n{}",
        terminal.escape_debug()
    );
    let stdout = std::fs::read_to_string(&stdout_file).expect("store_bench's stdout");
    assert!(
        !stdout.contains('\x1b') && !stdout.contains("list round 1"),
        "the progress bar reached stdout:\n{}",
        stdout.escape_debug()
    );
    let last = stdout.lines().last().unwrap_or_default();
    serde_json::from_str::<serde_json::Value>(last)
        .unwrap_or_else(|e| panic!("stdout's last line is not JSON ({e}): {last:?}"));

    // stderr a pipe: no bar at all.
    let piped = Command::new(&bin)
        .args(args.split(' '))
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run store_bench");
    assert!(piped.status.success(), "store_bench failed: {piped:?}");
    let stderr = String::from_utf8_lossy(&piped.stderr);
    assert!(
        stderr.is_empty(),
        "store_bench wrote to a piped stderr: {}",
        stderr.escape_debug()
    );
}
