//! The RESP front end against the stock Redis tools: a real three-node cluster of
//! `raft_node` processes driven by `redis-cli` and `redis-benchmark`, on the
//! durable path users run.
//!
//! It proves that, through the unmodified Redis tools: `SET`, `GET`, `DEL` and
//! `INFO` work on the leader; an unknown command gets an error reply (not a hang,
//! not a crash: the node answers `PING` afterwards); a follower answers a write with
//! a `MOVED` redirection to the leader, which `redis-cli -c` follows; and
//! `redis-benchmark -t set,get` completes with non-zero rates and no errors, its
//! `SET`s then readable. Every tool run has a deadline, so a hang fails the test.
//!
//! Skipped (with a note, not a failure) only when `redis-cli` is not on `PATH`; CI
//! installs `redis-tools` (`.ci/run`). Takes a few seconds.

#[path = "proc_cluster/mod.rs"]
mod proc_cluster;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use proc_cluster::{installed, ProcCluster};

/// Runs `tool args` to its end within `limit` (a hang fails the test); returns its
/// stdout and stderr together.
fn run(tool: &str, args: &[&str], limit: Duration) -> String {
    let mut child = Command::new(tool)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {tool}: {e}"));
    let deadline = Instant::now() + limit;
    // The outputs are small (a benchmark's summary): the pipes do not fill.
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{tool} {args:?} did not finish within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let out = child.wait_with_output().expect("the tool's output");
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `redis-cli -p port args...` (plus `-c` when `follow`), its output trimmed.
fn cli(port: u16, follow: bool, args: &[&str]) -> String {
    let port = port.to_string();
    let mut all = vec!["-p", &port];
    if follow {
        all.push("-c");
    }
    all.extend_from_slice(args);
    run("redis-cli", &all, Duration::from_secs(10))
        .trim()
        .to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_cli_and_redis_benchmark_against_a_real_cluster() {
    if !installed("redis-cli") {
        eprintln!("NOTE: redis-cli is not on PATH: skipping (install redis-tools)");
        return;
    }
    let started = Instant::now();
    let mut cluster = ProcCluster::start(&[]);
    let leader = cluster.leader().await;
    let port = cluster.client[leader].port();
    let follower = cluster.client[(leader + 1) % 3].port();

    // The basic commands on the leader.
    assert_eq!(cli(port, false, &["SET", "k", "v"]), "OK");
    assert_eq!(cli(port, false, &["GET", "k"]), "v");
    assert_eq!(cli(port, false, &["DEL", "k"]), "1");
    assert_eq!(cli(port, false, &["GET", "k"]), "", "deleted");
    assert_eq!(
        cli(port, false, &["DEL", "k"]),
        "0",
        "nothing left to delete"
    );
    let info = cli(port, false, &["INFO"]);
    assert!(info.contains("role:leader"), "INFO on the leader: {info}");
    assert!(info.contains("storage_engine:list"), "INFO: {info}");

    // An unknown command: an error reply, and the node still serves.
    let unknown = cli(port, false, &["NOSUCHCOMMAND", "x"]);
    assert!(
        unknown.contains("ERR") && unknown.contains("unknown command"),
        "an unknown command's reply: {unknown:?}"
    );
    assert_eq!(cli(port, false, &["PING"]), "PONG", "serving after it");

    // A follower redirects a write to the leader; `-c` follows the redirection.
    let moved = cli(follower, false, &["SET", "k2", "v2"]);
    let leader_addr = cluster.client[leader].to_string();
    assert!(
        moved.contains("MOVED") && moved.contains(&leader_addr),
        "a follower's answer to SET: {moved:?} (leader {leader_addr})"
    );
    assert_eq!(cli(follower, true, &["SET", "k2", "v2"]), "OK");
    assert_eq!(cli(port, false, &["GET", "k2"]), "v2");

    // redis-benchmark: both tests complete, with rates and without errors.
    if installed("redis-benchmark") {
        let port_s = port.to_string();
        let out = run(
            "redis-benchmark",
            &[
                "-p", &port_s, "-t", "set,get", "-n", "2000", "-c", "10", "-d", "16", "-q",
            ],
            Duration::from_secs(60),
        );
        let lower = out.to_lowercase();
        assert!(
            !lower.contains("error") && !lower.contains("err "),
            "redis-benchmark reported errors:\n{out}"
        );
        for test in ["SET", "GET"] {
            let rate = out
                .split(['\r', '\n'])
                .filter_map(|l| l.trim().strip_prefix(&format!("{test}: ")))
                .filter_map(|l| l.split_whitespace().next())
                .filter_map(|r| r.parse::<f64>().ok())
                .next_back()
                .unwrap_or_else(|| panic!("no {test} rate in redis-benchmark's output:\n{out}"));
            assert!(rate > 0.0, "{test}: {rate} requests per second:\n{out}");
            eprintln!("redis-benchmark {test}: {rate} requests per second");
        }
        // Without -r every SET wrote the same key, `key:__rand_int__`, with the same
        // 16-byte value (random letters, drawn once per run).
        let value = cli(port, false, &["GET", "key:__rand_int__"]);
        assert_eq!(value.len(), 16, "the benchmark's value: {value:?}");
        assert_eq!(
            cli(follower, true, &["GET", "key:__rand_int__"]),
            value,
            "the same through a follower (redirected)"
        );
    } else {
        eprintln!("NOTE: redis-benchmark is not on PATH: skipping its part");
    }
    cluster.assert_running();
    eprintln!("redis tools test took {:.1?}", started.elapsed());
}
