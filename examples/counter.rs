//! A counter service: your own state machine on the persistent list.
//!
//! Three Raft nodes in this one process, each with its own pool file, serve
//! counters over RESP. The counters are a [`StateMachine`] of a few dozen lines;
//! replication, durability (the list on an ordinary file, msync), crash recovery,
//! compaction and snapshots for a lagging node are the library's.
//!
//! ```text
//! cargo run --release --example counter
//! redis-cli -c -p 6391 INCRBY visits 5
//! ```
//!
//! Commands (any node; `-c` follows the redirection to the leader):
//!
//! | command | reply |
//! | --- | --- |
//! | `INCR key`, `DECR key` | the new value |
//! | `INCRBY key n`, `DECRBY key n` | the new value |
//! | `COUNT key` | the value, 0 if absent (a linearizable read) |
//!
//! `GET key` (built in) shows the stored decimal text. Errors use Redis's
//! wording: a key holding something that is not a decimal counter is `ERR value is
//! not an integer or out of range`, an overflow is `ERR increment or decrement would
//! overflow`. The service runs until Ctrl-C; run it again over the same
//! `--data-dir` and the counters are still there.
//!
//! `--check N` starts the service on free ports, runs `N` increments from
//! `--clients` concurrent clients, reads the counter back, prints a table and exits
//! 0 if every acknowledged increment is counted exactly once (1 otherwise).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use raft_nvm::machine::{Applied, MachineCall, MachineReply, StateMachine, StateView};
use raft_nvm::node::{Member, Node};
use raft_nvm::resp::{ClusterClient, Reply};
use raft_nvm::StoreError;

/// The counters: each key holds a signed 64-bit count in decimal text.
#[derive(Debug)]
struct Counter;

/// A write's bytes: the amount (8 bytes, little-endian), then the key.
fn encode_add(key: &[u8], by: i64) -> Vec<u8> {
    let mut bytes = by.to_le_bytes().to_vec();
    bytes.extend_from_slice(key);
    bytes
}

/// A count stored as decimal text (`None`: not one).
fn parse_count(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

impl StateMachine for Counter {
    fn name(&self) -> &str {
        "counter"
    }

    fn parse(&self, args: &[Vec<u8>]) -> Option<Result<MachineCall, String>> {
        let (name, rest) = args.split_first()?;
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let amount = |arg: &[u8]| {
            parse_count(arg).ok_or_else(|| "value is not an integer or out of range".to_string())
        };
        let call = match (name.as_str(), rest) {
            ("incr", [key]) => Ok(MachineCall::Write(encode_add(key, 1))),
            ("decr", [key]) => Ok(MachineCall::Write(encode_add(key, -1))),
            ("incrby", [key, by]) => amount(by).map(|by| MachineCall::Write(encode_add(key, by))),
            ("decrby", [key, by]) => amount(by).and_then(|by| {
                by.checked_neg()
                    .map(|by| MachineCall::Write(encode_add(key, by)))
                    .ok_or_else(|| "decrement would overflow".to_string())
            }),
            ("count", [key]) => Ok(MachineCall::Read(key.clone())),
            ("incr" | "decr" | "incrby" | "decrby" | "count", _) => {
                Err(format!("wrong number of arguments for '{name}' command"))
            }
            _ => return None,
        };
        Some(call)
    }

    fn apply(&self, state: &StateView<'_>, command: &[u8]) -> Result<Applied, StoreError> {
        let Some((by, key)) = command.split_first_chunk::<8>() else {
            return Ok(Applied::reply(MachineReply::Error(
                "malformed counter command".into(),
            )));
        };
        let now = match state.get(key)? {
            None => 0,
            Some(v) => match parse_count(&v) {
                Some(n) => n,
                None => {
                    return Ok(Applied::reply(MachineReply::Error(
                        "value is not an integer or out of range".into(),
                    )))
                }
            },
        };
        Ok(match now.checked_add(i64::from_le_bytes(*by)) {
            Some(next) => Applied::put(key, next.to_string(), MachineReply::Integer(next)),
            None => Applied::reply(MachineReply::Error(
                "increment or decrement would overflow".into(),
            )),
        })
    }

    fn query(&self, state: &StateView<'_>, key: &[u8]) -> Result<MachineReply, StoreError> {
        Ok(match state.get(key)? {
            None => MachineReply::Integer(0),
            Some(v) => parse_count(&v).map_or_else(
                || MachineReply::Error("value is not an integer or out of range".into()),
                MachineReply::Integer,
            ),
        })
    }
}

#[derive(Parser, Debug)]
#[command(
    about = "A counter service on three Raft nodes (RESP: INCR, INCRBY, DECR, DECRBY, COUNT)"
)]
struct Args {
    /// Where the three pool files live (created on the first run).
    #[arg(long, default_value = "target/counter")]
    data_dir: PathBuf,
    /// Node `i` serves clients on this port + `i` (6391..6393).
    #[arg(long, default_value_t = 6390)]
    client_port_base: u16,
    /// Node `i` talks Raft on this port + `i` (7391..7393).
    #[arg(long, default_value_t = 7390)]
    raft_port_base: u16,
    /// Run N increments on free ports, check the count, print a table and exit.
    #[arg(long, value_name = "N")]
    check: Option<u64>,
    /// Concurrent clients of `--check`.
    #[arg(long, default_value_t = 8)]
    clients: u64,
}

/// Each node's pool size: compaction keeps the counters' overwrites inside it.
const POOL_SIZE: u64 = 64 << 20;

/// Three members on loopback.
fn members(raft_ports: [u16; 3], client_ports: [u16; 3]) -> BTreeMap<u16, Member> {
    (0..3)
        .map(|i| {
            let at = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            (
                i as u16 + 1,
                Member {
                    raft: at(raft_ports[i]),
                    client: at(client_ports[i]),
                },
            )
        })
        .collect()
}

/// Starts the three nodes (creating their stores on the first run).
async fn start(dir: &Path, members: &BTreeMap<u16, Member>) -> Result<Vec<Node>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut nodes = Vec::new();
    for &id in members.keys() {
        let node = Node::builder(id)
            .members(members.clone())
            .list(dir.join(format!("node{id}.pool")), POOL_SIZE)
            .bootstrap()
            .state_machine(Counter)
            .start()
            .await
            .map_err(|e| e.to_string())?;
        nodes.push(node);
    }
    Ok(nodes)
}

/// Stops every node (each syncs its store).
async fn stop(nodes: Vec<Node>) -> Result<(), String> {
    for node in nodes {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// A port free on loopback now.
fn free_port() -> Result<u16, String> {
    std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port: {e}"))
}

/// Three ports free on loopback now.
fn free_ports() -> Result<[u16; 3], String> {
    Ok([free_port()?, free_port()?, free_port()?])
}

/// `COUNT key` through the leader.
async fn count(client: &mut ClusterClient, key: &[u8]) -> Result<i64, String> {
    match client.command(&[b"COUNT", key]).await {
        Ok(Reply::Integer(n)) => Ok(n),
        other => Err(format!("COUNT answered {other:?}")),
    }
}

/// What `--check` saw.
#[derive(Debug)]
struct CheckReport {
    increments: u64,
    clients: u64,
    seconds: f64,
    before: i64,
    after: i64,
    failed: u64,
}

impl CheckReport {
    fn passed(&self) -> bool {
        self.failed == 0 && self.after - self.before == self.increments as i64
    }
}

/// Runs `increments` `INCR hits` from `clients` clients against the service at
/// `nodes` (client addresses), then reads the count back.
async fn run_check(
    nodes: Vec<SocketAddr>,
    increments: u64,
    clients: u64,
) -> Result<CheckReport, String> {
    let mut reader = ClusterClient::new(nodes.clone());
    let before = count(&mut reader, b"hits").await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let clients = clients.clamp(1, increments.max(1));
    for c in 0..clients {
        let share = increments / clients + u64::from(c < increments % clients);
        let nodes = nodes.clone();
        tasks.spawn(async move {
            let mut client = ClusterClient::new(nodes);
            let mut failed = 0u64;
            for _ in 0..share {
                if !matches!(
                    client.command(&[b"INCR", b"hits"]).await,
                    Ok(Reply::Integer(_))
                ) {
                    failed += 1;
                }
            }
            failed
        });
    }
    let mut failed = 0;
    while let Some(done) = tasks.join_next().await {
        failed += done.map_err(|e| e.to_string())?;
    }
    let seconds = started.elapsed().as_secs_f64();
    let after = count(&mut reader, b"hits").await?;
    Ok(CheckReport {
        increments,
        clients,
        seconds,
        before,
        after,
        failed,
    })
}

async fn run(args: Args) -> Result<bool, String> {
    let ports = |base: u16| [base + 1, base + 2, base + 3];
    let (raft, client) = match args.check {
        Some(_) => (free_ports()?, free_ports()?),
        None => (ports(args.raft_port_base), ports(args.client_port_base)),
    };
    let members = members(raft, client);
    let nodes = start(&args.data_dir, &members).await?;
    let addrs: Vec<SocketAddr> = nodes.iter().map(Node::client_addr).collect();
    let Some(increments) = args.check else {
        println!(
            "counter service: 3 nodes, clients on {}; pools in {}",
            addrs
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", "),
            args.data_dir.display()
        );
        println!(
            "try: redis-cli -c -p {} INCR visits   (Ctrl-C stops)",
            client[0]
        );
        tokio::signal::ctrl_c().await.map_err(|e| e.to_string())?;
        stop(nodes).await?;
        return Ok(true);
    };
    let report = run_check(addrs, increments, args.clients).await?;
    stop(nodes).await?;
    println!("| increments | clients | seconds | incr/s | count before | count after | failed |");
    println!("| --- | --- | --- | --- | --- | --- | --- |");
    println!(
        "| {} | {} | {:.2} | {:.0} | {} | {} | {} |",
        report.increments,
        report.clients,
        report.seconds,
        report.increments as f64 / report.seconds.max(1e-9),
        report.before,
        report.after,
        report.failed
    );
    let passed = report.passed();
    println!(
        "{}",
        if passed {
            "every acknowledged increment counted exactly once"
        } else {
            "MISMATCH: the count does not equal the acknowledged increments"
        }
    );
    Ok(passed)
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("counter: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("counter: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(args: &[&str]) -> Option<Result<MachineCall, String>> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        Counter.parse(&args)
    }

    #[test]
    fn parses_its_commands_only() {
        assert_eq!(
            call(&["INCR", "k"]),
            Some(Ok(MachineCall::Write(encode_add(b"k", 1))))
        );
        assert_eq!(
            call(&["decrby", "k", "7"]),
            Some(Ok(MachineCall::Write(encode_add(b"k", -7))))
        );
        assert_eq!(
            call(&["COUNT", "k"]),
            Some(Ok(MachineCall::Read(b"k".to_vec())))
        );
        assert!(matches!(call(&["INCRBY", "k", "x"]), Some(Err(_))));
        assert!(matches!(call(&["INCR"]), Some(Err(_))));
        assert!(matches!(
            call(&["DECRBY", "k", &i64::MIN.to_string()]),
            Some(Err(_))
        ));
        assert_eq!(call(&["HGET", "k", "f"]), None);
    }

    /// The example's own check, on free ports over a fresh directory, twice: the
    /// second run reopens the stores and must find the first run's count.
    #[test]
    fn check_counts_every_increment_and_survives_a_restart() {
        let dir = tempfile::tempdir().expect("temp dir");
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        for round in 1..=2 {
            let members = members(
                free_ports().expect("free ports"),
                free_ports().expect("free ports"),
            );
            let report = rt.block_on(async {
                let nodes = start(dir.path(), &members).await.expect("start");
                let addrs = nodes.iter().map(Node::client_addr).collect();
                let report = run_check(addrs, 300, 6).await.expect("check");
                let mut c = ClusterClient::new(nodes.iter().map(Node::client_addr).collect());
                // A wrong type and a built-in read beside the machine's commands.
                assert_eq!(
                    c.command(&[b"SET", b"name", b"alice"]).await.expect("SET"),
                    Reply::Simple("OK".into())
                );
                assert!(matches!(
                    c.command(&[b"INCR", b"name"]).await.expect("INCR"),
                    Reply::Error(e) if e.contains("not an integer")
                ));
                assert_eq!(
                    c.command(&[b"GET", b"hits"]).await.expect("GET"),
                    Reply::Bulk(report.after.to_string().into_bytes())
                );
                stop(nodes).await.expect("stop");
                report
            });
            assert!(report.passed(), "round {round}: {report:?}");
            assert_eq!(
                report.before,
                300 * (round - 1),
                "round {round}: {report:?}"
            );
        }
    }
}
