//! A counter service: your own state machine on the persistent list.
//!
//! Three Raft nodes in this one process, each with its own pool file, serve
//! counters. The counters are a [`TypedMachine`] of a few dozen lines over their
//! own command and response types; replication, durability (the list on an
//! ordinary file, msync), crash recovery, compaction and snapshots for a lagging
//! node are the library's. The program talks to it with typed calls
//! ([`Node::client_write`], [`Node::client_read`]); a small adapter
//! ([`RespFace`]) also lets `redis-cli` reach it:
//!
//! ```text
//! cargo run --release --example counter
//! redis-cli -c -p 6391 INCRBY visits 5
//! ```
//!
//! Commands over RESP (any node; `-c` follows the redirection to the leader):
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
//! `--clients` concurrent tasks through `client_write` on the leader, reads the
//! counter back with `client_read`, prints a table and exits 0 if every
//! acknowledged increment is counted exactly once (1 otherwise).

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use raft_nvm::machine::{
    decode, encode, Answer, Applied, BatchState, MachineCall, MachineReply, StateMachine,
    StateView, Typed, TypedMachine,
};
use raft_nvm::node::{ClientWriteError, Member, Node};
use raft_nvm::raft::Role;
use raft_nvm::StoreError;
use serde::{Deserialize, Serialize};

/// A write: adds `by` to the counter `key`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
struct Add {
    key: Vec<u8>,
    by: i64,
}

/// Why a counter did not change (or cannot be read).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
enum CountError {
    /// The key holds something that is not a decimal counter.
    NotAnInteger,
    /// The sum does not fit an `i64`.
    Overflow,
}

impl CountError {
    /// Redis's wording.
    fn message(&self) -> &'static str {
        match self {
            CountError::NotAnInteger => "value is not an integer or out of range",
            CountError::Overflow => "increment or decrement would overflow",
        }
    }
}

/// The counters: each key holds a signed 64-bit count in decimal text (so the
/// built-in `GET` shows it).
#[derive(Debug)]
struct Counter;

/// The count stored under `key` (0 if absent).
fn stored(value: Option<Vec<u8>>) -> Result<i64, CountError> {
    match value {
        None => Ok(0),
        Some(v) => parse_count(&v).ok_or(CountError::NotAnInteger),
    }
}

/// A count stored as decimal text (`None`: not one).
fn parse_count(bytes: &[u8]) -> Option<i64> {
    std::str::from_utf8(bytes).ok()?.parse().ok()
}

impl TypedMachine for Counter {
    type Command = Add;
    type Response = Result<i64, CountError>;
    type Query = Vec<u8>;
    type Answer = Result<i64, CountError>;

    fn name(&self) -> &str {
        "counter"
    }

    fn apply(
        &self,
        state: &mut BatchState<'_>,
        batch: &[Add],
    ) -> Result<Vec<Result<i64, CountError>>, StoreError> {
        let mut out = Vec::with_capacity(batch.len());
        for (pos, Add { key, by }) in batch.iter().enumerate() {
            // `get` sees the increments earlier in the batch.
            let next = stored(state.get(key)?)
                .and_then(|now| now.checked_add(*by).ok_or(CountError::Overflow));
            if let Ok(next) = next {
                state.put(pos, key.clone(), next.to_string());
            }
            out.push(next);
        }
        Ok(out)
    }

    fn query(&self, state: &StateView<'_>, key: &Vec<u8>) -> Result<Self::Answer, StoreError> {
        Ok(stored(state.get(key)?))
    }
}

/// The counters' RESP face: parses `INCR`, `INCRBY`, `DECR`, `DECRBY` and
/// `COUNT` into the typed commands and queries, and renders their answers as
/// RESP integers and errors. The typed machine does the work.
#[derive(Debug)]
struct RespFace(Typed<Counter>);

/// A typed machine's answer as a RESP reply.
fn resp_reply(reply: MachineReply) -> MachineReply {
    let MachineReply::Bulk(bytes) = &reply else {
        return reply; // a refused write's error
    };
    match decode::<Answer<Result<i64, CountError>>>("answer", bytes) {
        Ok(Answer::Done(Ok(n))) => MachineReply::Integer(n),
        Ok(Answer::Done(Err(e))) => MachineReply::Error(e.message().into()),
        Ok(Answer::Undecodable(why)) => MachineReply::Error(why),
        Err(e) => MachineReply::Error(e.to_string()),
    }
}

impl StateMachine for RespFace {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn parse(&self, args: &[Vec<u8>]) -> Option<Result<MachineCall, String>> {
        let (name, rest) = args.split_first()?;
        let name = String::from_utf8_lossy(name).to_ascii_lowercase();
        let amount = |arg: &[u8]| {
            parse_count(arg).ok_or_else(|| CountError::NotAnInteger.message().to_string())
        };
        let add = |key: &[u8], by: i64| {
            encode(
                "command",
                &Add {
                    key: key.to_vec(),
                    by,
                },
            )
            .map(MachineCall::Write)
            .map_err(|e| e.to_string())
        };
        let call = match (name.as_str(), rest) {
            ("incr", [key]) => add(key, 1),
            ("decr", [key]) => add(key, -1),
            ("incrby", [key, by]) => amount(by).and_then(|by| add(key, by)),
            ("decrby", [key, by]) => amount(by).and_then(|by| {
                by.checked_neg()
                    .ok_or_else(|| "decrement would overflow".to_string())
                    .and_then(|by| add(key, by))
            }),
            ("count", [key]) => encode("query", key)
                .map(MachineCall::Read)
                .map_err(|e| e.to_string()),
            ("incr" | "decr" | "incrby" | "decrby" | "count", _) => {
                Err(format!("wrong number of arguments for '{name}' command"))
            }
            _ => return None,
        };
        Some(call)
    }

    // The work is the typed machine's; its answers stay typed (postcard), so
    // `client_write` and `client_read` read them, and are rendered for RESP
    // clients only, on their connection.
    fn apply(&self, state: &StateView<'_>, command: &[u8]) -> Result<Applied, StoreError> {
        self.0.apply(state, command)
    }

    fn apply_batch(
        &self,
        state: &mut BatchState<'_>,
        commands: &[&[u8]],
    ) -> Result<Vec<MachineReply>, StoreError> {
        self.0.apply_batch(state, commands)
    }

    fn query(&self, state: &StateView<'_>, query: &[u8]) -> Result<MachineReply, StoreError> {
        self.0.query(state, query)
    }

    fn resp_reply(&self, reply: MachineReply) -> MachineReply {
        resp_reply(reply)
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
async fn start(dir: &Path, members: &BTreeMap<u16, Member>) -> Result<Vec<Arc<Node>>, String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let mut nodes = Vec::new();
    for &id in members.keys() {
        let node = Node::builder(id)
            .members(members.clone())
            .list(dir.join(format!("node{id}.pool")), POOL_SIZE)
            .bootstrap()
            .state_machine(RespFace(Typed::new(Counter)))
            .start()
            .await
            .map_err(|e| e.to_string())?;
        nodes.push(Arc::new(node));
    }
    Ok(nodes)
}

/// Stops every node (each syncs its store).
async fn stop(nodes: Vec<Arc<Node>>) -> Result<(), String> {
    for node in nodes {
        let node = Arc::try_unwrap(node).map_err(|_| "a node is still in use".to_string())?;
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

/// How long a call waits for a leader.
const LEADER_WAIT: Duration = Duration::from_secs(10);

/// Runs `call` on the leader: a node that does not lead answers `NotLeader`
/// (and did nothing), so the call moves to the leader it names, or waits for
/// one, for at most [`LEADER_WAIT`].
async fn on_leader<T, F, Fut>(nodes: &[Arc<Node>], call: F) -> Result<T, ClientWriteError>
where
    F: Fn(Arc<Node>) -> Fut,
    Fut: std::future::Future<Output = Result<T, ClientWriteError>>,
{
    let deadline = Instant::now() + LEADER_WAIT;
    // Start where the nodes' status channels say the leader is.
    let mut at = nodes
        .iter()
        .position(|n| n.status().borrow().role == Role::Leader)
        .unwrap_or(0);
    loop {
        match call(Arc::clone(&nodes[at])).await {
            Err(ClientWriteError::NotLeader { leader, .. }) if Instant::now() < deadline => {
                at = match nodes.iter().position(|n| Some(n.id()) == leader) {
                    Some(i) => i,
                    None => {
                        // No leader known yet: an election runs.
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        (at + 1) % nodes.len()
                    }
                };
            }
            other => return other,
        }
    }
}

/// Adds `by` to counter `key`: the new value.
async fn add(nodes: &[Arc<Node>], key: &[u8], by: i64) -> Result<i64, String> {
    let cmd = Add {
        key: key.to_vec(),
        by,
    };
    let done = on_leader(nodes, |n| {
        let cmd = cmd.clone();
        async move { n.client_write::<Counter>(cmd).await }
    })
    .await;
    match done {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(e.message().to_string()),
        Err(e) => Err(e.to_string()),
    }
}

/// Counter `key`, read linearizably.
async fn count(nodes: &[Arc<Node>], key: &[u8]) -> Result<i64, String> {
    let read = on_leader(nodes, |n| {
        let key = key.to_vec();
        async move { n.client_read::<Counter>(key).await }
    })
    .await;
    match read {
        Ok(Ok(n)) => Ok(n),
        Ok(Err(e)) => Err(e.message().to_string()),
        Err(e) => Err(e.to_string()),
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

/// Runs `increments` increments of `hits` from `clients` concurrent tasks
/// through `client_write`, then reads the count back.
async fn run_check(
    nodes: &[Arc<Node>],
    increments: u64,
    clients: u64,
) -> Result<CheckReport, String> {
    let before = count(nodes, b"hits").await?;
    let started = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    let clients = clients.clamp(1, increments.max(1));
    for c in 0..clients {
        let share = increments / clients + u64::from(c < increments % clients);
        let nodes = nodes.to_vec();
        tasks.spawn(async move {
            let mut failed = 0u64;
            for _ in 0..share {
                if add(&nodes, b"hits", 1).await.is_err() {
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
    let after = count(nodes, b"hits").await?;
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
    let addrs: Vec<SocketAddr> = nodes.iter().map(|n| n.client_addr()).collect();
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
    let report = run_check(&nodes, increments, args.clients).await?;
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
    use raft_nvm::resp::{ClusterClient, Reply};

    use super::*;

    fn call(args: &[&str]) -> Option<Result<MachineCall, String>> {
        let args: Vec<Vec<u8>> = args.iter().map(|a| a.as_bytes().to_vec()).collect();
        RespFace(Typed::new(Counter)).parse(&args)
    }

    fn add_call(key: &[u8], by: i64) -> MachineCall {
        let add = Add {
            key: key.to_vec(),
            by,
        };
        MachineCall::Write(encode("command", &add).expect("encode"))
    }

    #[test]
    fn the_resp_face_parses_its_commands_only() {
        assert_eq!(call(&["INCR", "k"]), Some(Ok(add_call(b"k", 1))));
        assert_eq!(call(&["decrby", "k", "7"]), Some(Ok(add_call(b"k", -7))));
        assert_eq!(
            call(&["COUNT", "k"]),
            Some(Ok(MachineCall::Read(
                encode("query", &b"k".to_vec()).expect("encode")
            )))
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
    /// second run reopens the stores and must find the first run's count. The
    /// typed errors, and the RESP face beside the typed calls.
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
                let report = run_check(&nodes, 300, 6).await.expect("check");
                let big = format!("big{round}");
                assert_eq!(
                    add(&nodes, big.as_bytes(), i64::MAX).await,
                    Ok(i64::MAX),
                    "a fresh counter"
                );
                assert_eq!(
                    add(&nodes, big.as_bytes(), 1).await,
                    Err(CountError::Overflow.message().to_string())
                );
                let mut c = ClusterClient::new(nodes.iter().map(|n| n.client_addr()).collect());
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
                    count(&nodes, b"name").await,
                    Err(CountError::NotAnInteger.message().to_string())
                );
                assert_eq!(
                    c.command(&[b"GET", b"hits"]).await.expect("GET"),
                    Reply::Bulk(report.after.to_string().into_bytes())
                );
                assert_eq!(
                    c.command(&[b"INCRBY", b"hits", b"2"])
                        .await
                        .expect("INCRBY"),
                    Reply::Integer(report.after + 2)
                );
                assert_eq!(
                    c.command(&[b"DECR", b"hits"]).await.expect("DECR"),
                    Reply::Integer(report.after + 1)
                );
                assert_eq!(
                    c.command(&[b"COUNT", b"hits"]).await.expect("COUNT"),
                    Reply::Integer(report.after + 1)
                );
                drop(c);
                stop(nodes).await.expect("stop");
                report
            });
            assert!(report.passed(), "round {round}: {report:?}");
            assert_eq!(
                report.before,
                301 * (round - 1),
                "round {round}: {report:?}"
            );
        }
    }
}
