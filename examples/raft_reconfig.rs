//! Reconfiguration figures, on the list engine with pools forced to DAX
//! on `/dev/shm` (as `raft_bench`'s `list`: PM's cost, not durable), three nodes in
//! this process, with 20 clients writing throughout. `--durable` runs the same on
//! plain files under `--disk` (msync: the durable path).
//!
//! ```text
//! cargo run --release --example raft_reconfig -- --json
//! cargo run --release --example raft_reconfig -- --json --durable
//! ```
//!
//! * `transfer_ms`: from sending `RAFT.TRANSFER-LEADER <id>` to the leader until
//!   that node answers a `SET` with `+OK` (the median of five transfers, each to
//!   the next node round the cluster);
//! * `lease_read_p50_us`, `readindex_read_p50_us`: one client's `GET`s at the
//!   leader, one after another, with lease reads on and off (two clusters, the
//!   same load); the reading client runs on a thread of its own, as a client
//!   process would (the nodes and writers share the runtime's workers);
//! * `writes_lost`: writes acknowledged to the 20 writers that are not read back
//!   with their value at the end, over both clusters (must be 0);
//! * `add_learner_catchup_ms`: a third cluster is loaded with 15,000 values of
//!   2 KB beside a spare node started as a learner-to-be; with the 20 writers
//!   running, from sending `RAFT.ADD-LEARNER` until the leader reports the
//!   learner's lag (`INFO`'s `follower_4:...,lag=`) under 100 entries;
//! * `promote_ms`: from sending `RAFT.PROMOTE 4` until the leader reports the
//!   change done (`membership_pending:0`: the joint configuration committed and
//!   left);
//! * `remove_leader_unavailable_ms`: `RAFT.REMOVE-NODE <leader>`; the longest gap
//!   between two successful writes (of all 20 writers) from the request until
//!   the change is done, another node leads, and a write succeeded after that,
//!   the gap from the request to the first success included.
//!
//! With `--json` the last line is one JSON object of these figures.

#[path = "../benches/common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "common/progress.rs"]
mod progress;
#[path = "raft_common/mod.rs"]
mod raft_common;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use progress::outln;
use raft_common::{engine, loopback_members, ClusterSpec, EngineKind, PoolMode};
use raft_nvm::node::{Node, NodeConfig};
use raft_nvm::replica::StartMode;
use raft_nvm::resp::{info_field, ClientError, ClusterClient, Reply, RespClient};
use serde_json::{Map, Value};

#[derive(Parser, Debug)]
#[command(about = "Leadership transfer and lease-read figures under 20 writing clients")]
struct Args {
    /// Print one final JSON line of the figures.
    #[arg(long)]
    json: bool,
    /// Directory of the DAX-forced pools (default: /dev/shm if present).
    #[arg(long)]
    shm: Option<PathBuf>,
    /// Pools on plain files under `--disk`, durable (msync), instead of forced DAX.
    #[arg(long)]
    durable: bool,
    /// Directory of the durable pools.
    #[arg(long, default_value = "target")]
    disk: PathBuf,
    /// First port used (each cluster takes the next block of 20).
    #[arg(long, default_value_t = 17500)]
    base_port: u16,
    /// Reads per read-latency figure.
    #[arg(long, default_value_t = 2000)]
    reads: usize,
}

/// Transfers measured (the median is reported).
const TRANSFERS: usize = 5;
/// Values in the cluster a learner joins, and their size.
const PRELOAD_VALUES: usize = 15_000;
const PRELOAD_BYTES: usize = 2048;
/// Concurrent writers.
const WRITERS: usize = 20;

fn main() -> std::process::ExitCode {
    let args = Args::parse();
    raft_common::init_logs_quiet();
    raft_common::run_main("raft_reconfig", run(args))
}

/// What one cluster's run measured.
struct ClusterRun {
    read_p50_us: f64,
    transfers_ms: Vec<f64>,
    acked: usize,
    lost: usize,
}

async fn run(args: Args) -> Result<(), String> {
    let (dir, mode) = if args.durable {
        (args.disk.clone(), PoolMode::Auto)
    } else {
        (
            args.shm.clone().unwrap_or_else(common::default_dir),
            PoolMode::ForceDax,
        )
    };
    outln!(
        "pools: {} ({})",
        dir.display(),
        if args.durable {
            "plain files, durable"
        } else {
            "forced DAX, not durable"
        }
    );
    // A step per cluster; their lines print through `outln!`, with the bar off the
    // screen.
    let section = progress::Section::new("raft_reconfig", 3);
    section.step("transfers and reads, ReadIndex");
    let readindex = one_cluster(&args, &dir, mode, false, args.base_port).await?;
    section.step("transfers and reads, leases");
    let lease = one_cluster(&args, &dir, mode, true, args.base_port + 20).await?;
    section.step("add a learner, promote it, remove the leader");
    let members = membership_cluster(&dir, mode, args.base_port + 40).await?;
    drop(section);
    let mut transfers = readindex.transfers_ms.clone();
    transfers.sort_by(f64::total_cmp);
    let transfer_ms = transfers
        .get(transfers.len() / 2)
        .copied()
        .unwrap_or(f64::NAN);
    let writes_lost = readindex.lost + lease.lost + members.lost;

    outln!();
    outln!("| figure | value | target |");
    outln!("| --- | --- | --- |");
    outln!(
        "| transfer_ms (median of {TRANSFERS}: {}) | {transfer_ms:.1} | <= 50 |",
        readindex
            .transfers_ms
            .iter()
            .map(|t| format!("{t:.1}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    outln!(
        "| lease_read_p50_us | {:.0} | <= half of read-index |",
        lease.read_p50_us
    );
    outln!("| readindex_read_p50_us | {:.0} | |", readindex.read_p50_us);
    outln!(
        "| add_learner_catchup_ms ({PRELOAD_VALUES} x {PRELOAD_BYTES} B) | {:.1} | <= 150 |",
        members.catchup_ms
    );
    outln!("| promote_ms | {:.1} | |", members.promote_ms);
    outln!(
        "| remove_leader_unavailable_ms | {:.1} | <= 100 |",
        members.remove_leader_gap_ms
    );
    outln!(
        "| writes_lost (of {} acknowledged) | {writes_lost} | 0 |",
        readindex.acked + lease.acked + members.acked
    );
    if args.json {
        let mut figures = Map::new();
        let round = |v: f64| Value::from((v * 100.0).round() / 100.0);
        figures.insert("transfer_ms".into(), round(transfer_ms));
        figures.insert("lease_read_p50_us".into(), round(lease.read_p50_us));
        figures.insert("readindex_read_p50_us".into(), round(readindex.read_p50_us));
        figures.insert("writes_lost".into(), Value::from(writes_lost));
        figures.insert("add_learner_catchup_ms".into(), round(members.catchup_ms));
        figures.insert("promote_ms".into(), round(members.promote_ms));
        figures.insert(
            "remove_leader_unavailable_ms".into(),
            round(members.remove_leader_gap_ms),
        );
        outln!("{}", Value::Object(figures));
    }
    Ok(())
}

/// One cluster with lease reads `lease` on or off: writers throughout, the read
/// latency at the leader, and (read-index cluster) the transfers.
async fn one_cluster(
    args: &Args,
    base: &std::path::Path,
    mode: PoolMode,
    lease: bool,
    port: u16,
) -> Result<ClusterRun, String> {
    let name = if lease { "lease" } else { "read-index" };
    let dir = base.join(format!("pmkit-raft-reconfig-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let spec = ClusterSpec {
        members: loopback_members(3, port, port + 10),
        kind: EngineKind::List,
        mode,
        dir: dir.clone(),
        cluster_secret: None,
    };
    let nodes = spec
        .start_all_with(|cfg| cfg.raft.lease_reads = lease)
        .await?;
    let addrs: Vec<SocketAddr> = spec.members.values().map(|m| m.client).collect();
    let result = measure(args, &addrs, lease).await;
    let run = tear_down(nodes, &dir, result).await?;
    outln!(
        "[{name}] read p50 {:.0} us; {} writes acknowledged, {} lost",
        run.read_p50_us,
        run.acked,
        run.lost
    );
    Ok(run)
}

/// Stops `nodes` cleanly and removes their directory `dir`, then hands back what
/// was measured on them.
async fn tear_down<T>(
    nodes: Vec<Node>,
    dir: &std::path::Path,
    result: Result<T, String>,
) -> Result<T, String> {
    for node in nodes {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    let _ = std::fs::remove_dir_all(dir);
    result
}

async fn measure(args: &Args, addrs: &[SocketAddr], lease: bool) -> Result<ClusterRun, String> {
    let mut client = ClusterClient::new(addrs.to_vec());
    client
        .set(b"warmup", b"1")
        .await
        .map_err(|e| format!("no leader: {e}"))?;
    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (addrs, stop) = (addrs.to_vec(), Arc::clone(&stop));
        writers.spawn(write_until(addrs, stop, w));
    }
    // Let the writers reach their pace.
    tokio::time::sleep(Duration::from_millis(200)).await;

    let read_p50_us = read_p50(addrs, args.reads).await?;
    let mut transfers_ms = Vec::new();
    if !lease {
        for i in 0..TRANSFERS {
            transfers_ms.push(transfer_once(addrs, i).await?);
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    while let Some(done) = writers.join_next().await {
        acked.extend(done.map_err(|e| e.to_string())?);
    }
    let lost = count_lost(addrs, &acked).await?;
    Ok(ClusterRun {
        read_p50_us,
        transfers_ms,
        acked: acked.len(),
        lost,
    })
}

/// How many of the acknowledged writes `acked` are not read back with their value.
async fn count_lost(addrs: &[SocketAddr], acked: &[(Vec<u8>, Vec<u8>)]) -> Result<usize, String> {
    let mut reader = ClusterClient::new(addrs.to_vec());
    reader.max_attempts = 5000;
    let mut lost = 0;
    for (key, value) in acked {
        let got = reader.get(key).await.map_err(|e| e.to_string())?;
        if got.as_deref() != Some(value.as_slice()) {
            lost += 1;
        }
    }
    Ok(lost)
}

/// Writes distinct keys until `stop`; returns those acknowledged, with their
/// values. A write whose outcome is unknown is not counted either way.
async fn write_until(
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    writer: usize,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    write_timed(addrs, stop, writer, None).await
}

/// [`write_until`], noting when each acknowledgement arrived in `times`.
async fn write_timed(
    addrs: Vec<SocketAddr>,
    stop: Arc<AtomicBool>,
    writer: usize,
    times: Option<Arc<Mutex<Vec<Instant>>>>,
) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut client = ClusterClient::new(addrs);
    client.max_attempts = 5000;
    let mut acked = Vec::new();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let key = format!("w{writer}-{seq}").into_bytes();
        let value = format!("v{seq}").into_bytes();
        match client.set(&key, &value).await {
            Ok(()) => {
                if let Some(t) = &times {
                    t.lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .push(Instant::now());
                }
                acked.push((key, value))
            }
            Err(ClientError::Indeterminate(_)) => {}
            Err(e) => {
                tracing::warn!(writer, "write failed: {e}");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
        seq += 1;
    }
    acked
}

/// The leader's client address.
async fn leader(addrs: &[SocketAddr]) -> Result<SocketAddr, String> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        for &a in addrs {
            let Ok(mut c) = RespClient::connect(a).await else {
                continue;
            };
            if let Ok(Reply::Bulk(text)) = c.command(&[b"INFO"]).await {
                let text = String::from_utf8_lossy(&text).into_owned();
                if info_field(&text, "role") == Some("leader") {
                    return Ok(a);
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Err("no leader within 5 s".into())
}

/// The median latency of `reads` sequential `GET`s at the leader, in µs. The
/// reader runs on a thread and runtime of its own, as a client process of its own
/// would: the nodes and the writers share this runtime's workers, and a reader
/// queued behind them would time their scheduling more than the read.
async fn read_p50(addrs: &[SocketAddr], reads: usize) -> Result<f64, String> {
    let at = leader(addrs).await?;
    let reader = std::thread::spawn(move || -> Result<f64, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?;
        rt.block_on(async move {
            let mut c = RespClient::connect(at).await.map_err(|e| e.to_string())?;
            let mut h = Histogram::<u64>::new(3).map_err(|e| e.to_string())?;
            for i in 0..reads {
                let t = Instant::now();
                match c.command(&[b"GET", b"warmup"]).await {
                    Ok(Reply::Bulk(_)) => {}
                    other => return Err(format!("read {i}: {other:?}")),
                }
                let _ = h.record(t.elapsed().as_micros() as u64);
            }
            Ok(h.value_at_quantile(0.5) as f64)
        })
    });
    tokio::task::spawn_blocking(move || reader.join())
        .await
        .map_err(|e| e.to_string())?
        .map_err(|_| "the reader thread panicked".to_string())?
}

/// One transfer to the next node after the leader: from the request to the target
/// answering a write, in ms.
async fn transfer_once(addrs: &[SocketAddr], i: usize) -> Result<f64, String> {
    let from = leader(addrs).await?;
    let pos = addrs
        .iter()
        .position(|&a| a == from)
        .ok_or("leader not a member")?;
    let target_pos = (pos + 1) % addrs.len();
    let target_id = (target_pos + 1).to_string();
    let mut to_leader = RespClient::connect(from).await.map_err(|e| e.to_string())?;
    let mut to_target = RespClient::connect(addrs[target_pos])
        .await
        .map_err(|e| e.to_string())?;
    let key = format!("transfer-{i}").into_bytes();
    let started = Instant::now();
    match to_leader
        .command(&[b"RAFT.TRANSFER-LEADER", target_id.as_bytes()])
        .await
    {
        Ok(Reply::Simple(_)) => {}
        other => return Err(format!("transfer {i}: {other:?}")),
    }
    while started.elapsed() < Duration::from_secs(5) {
        match to_target.command(&[b"SET", &key, b"1"]).await {
            Ok(Reply::Simple(_)) => return Ok(started.elapsed().as_secs_f64() * 1e3),
            Ok(Reply::Error(_)) => tokio::time::sleep(Duration::from_micros(200)).await,
            other => return Err(format!("transfer {i}: write to the target: {other:?}")),
        }
    }
    Err(format!("transfer {i}: the target did not lead within 5 s"))
}

/// What the membership cluster measured.
struct MembershipRun {
    catchup_ms: f64,
    promote_ms: f64,
    remove_leader_gap_ms: f64,
    acked: usize,
    lost: usize,
}

/// Three founders loaded with [`PRELOAD_VALUES`] values and a spare node 4; with
/// the writers running, node 4 is added, promoted, and the leader removed.
async fn membership_cluster(
    base: &std::path::Path,
    mode: PoolMode,
    port: u16,
) -> Result<MembershipRun, String> {
    let dir = base.join(format!(
        "pmkit-raft-reconfig-{}-members",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    let all = loopback_members(4, port, port + 10);
    let spec = ClusterSpec {
        members: all.range(1..=3).map(|(&i, &m)| (i, m)).collect(),
        kind: EngineKind::List,
        mode,
        dir: dir.clone(),
        cluster_secret: None,
    };
    let mut nodes = spec.start_all().await?;
    let mut spare = NodeConfig::new(4, all.clone(), engine(EngineKind::List, mode, &dir, 4));
    spare.learner = true;
    spare.start = StartMode::Join;
    nodes.push(Node::start(spare).await.map_err(|e| e.to_string())?);
    let addrs: Vec<SocketAddr> = all.values().map(|m| m.client).collect();
    let result = membership_phases(&addrs, &all[&4]).await;
    let run = tear_down(nodes, &dir, result).await?;
    outln!(
        "[membership] catch-up {:.1} ms, promote {:.1} ms, leader removal gap {:.1} ms; {} writes acknowledged, {} lost",
        run.catchup_ms, run.promote_ms, run.remove_leader_gap_ms, run.acked, run.lost
    );
    Ok(run)
}

async fn membership_phases(
    addrs: &[SocketAddr],
    spare: &raft_nvm::node::Member,
) -> Result<MembershipRun, String> {
    // The load: 15,000 values of 2 KB, 32 clients at a time.
    let mut loaders = tokio::task::JoinSet::new();
    for l in 0..32 {
        let addrs = addrs.to_vec();
        loaders.spawn(async move {
            let mut c = ClusterClient::new(addrs);
            c.max_attempts = 5000;
            for i in (l..PRELOAD_VALUES).step_by(32) {
                let key = format!("load-{i:05}");
                c.set(key.as_bytes(), &[b'x'; PRELOAD_BYTES])
                    .await
                    .map_err(|e| format!("load {key}: {e}"))?;
            }
            Ok::<(), String>(())
        });
    }
    while let Some(done) = loaders.join_next().await {
        done.map_err(|e| e.to_string())??;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let times: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let mut writers = tokio::task::JoinSet::new();
    for w in 0..WRITERS {
        let (addrs, stop, times) = (addrs.to_vec(), Arc::clone(&stop), Arc::clone(&times));
        writers.spawn(write_timed(addrs, stop, w, Some(times)));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    // Add the learner; until the leader sees it within 100 entries.
    let (raft4, client4) = (spare.raft.to_string(), spare.client.to_string());
    let mut admin = ClusterClient::new(addrs.to_vec());
    admin.max_attempts = 5000;
    let started = Instant::now();
    expect_ok(
        &mut admin,
        &[
            b"RAFT.ADD-LEARNER",
            b"4",
            raft4.as_bytes(),
            client4.as_bytes(),
        ],
    )
    .await?;
    let mut catchup_ms = f64::NAN;
    while started.elapsed() < Duration::from_secs(30) {
        let info = leader_info(addrs).await?;
        let lag = info_field(&info, "follower_4")
            .and_then(|f| f.split("lag=").nth(1))
            .and_then(|l| l.parse::<u64>().ok());
        if lag.is_some_and(|l| l < 100) {
            catchup_ms = started.elapsed().as_secs_f64() * 1e3;
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if catchup_ms.is_nan() {
        return Err("the learner did not catch up within 30 s".into());
    }

    // Promote: until the change is done (joint configuration committed and left).
    let started = Instant::now();
    retry_change(&mut admin, &[b"RAFT.PROMOTE", b"4"]).await?;
    wait_settled(addrs).await?;
    let promote_ms = started.elapsed().as_secs_f64() * 1e3;

    // Remove the leader: the longest stretch without a successful write.
    let leader_addr = leader(addrs).await?;
    let leader_id = addrs
        .iter()
        .position(|&a| a == leader_addr)
        .map(|p| (p + 1).to_string())
        .ok_or("leader not a member")?;
    let started = Instant::now();
    retry_change(&mut admin, &[b"RAFT.REMOVE-NODE", leader_id.as_bytes()]).await?;
    wait_settled(addrs).await?;
    // Until another node leads (the removed one hands over once its removal
    // committed) ...
    let mut new_leader = leader_addr;
    while new_leader == leader_addr {
        if started.elapsed() > Duration::from_secs(10) {
            return Err("the removed leader still leads after 10 s".into());
        }
        new_leader = leader(addrs).await?;
    }
    // ... and a write completed after that.
    let settled = Instant::now();
    // A write on the new configuration, then a little more load.
    while times
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .last()
        .is_none_or(|&t| t <= settled)
    {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::Relaxed);
    let mut acked = Vec::new();
    while let Some(done) = writers.join_next().await {
        acked.extend(done.map_err(|e| e.to_string())?);
    }
    let mut times = times.lock().unwrap_or_else(PoisonError::into_inner).clone();
    times.sort();
    let mut gap = Duration::ZERO;
    let mut prev = started;
    for &t in times.iter().filter(|&&t| t > started) {
        gap = gap.max(t - prev);
        prev = t;
        if t > settled {
            break;
        }
    }
    let lost = count_lost(addrs, &acked).await?;
    Ok(MembershipRun {
        catchup_ms,
        promote_ms,
        remove_leader_gap_ms: gap.as_secs_f64() * 1e3,
        acked: acked.len(),
        lost,
    })
}

/// `args` must answer `+OK`.
async fn expect_ok(client: &mut ClusterClient, args: &[&[u8]]) -> Result<(), String> {
    match client.command(args).await {
        Ok(Reply::Simple(s)) if s == "OK" => Ok(()),
        other => Err(format!("{}: {other:?}", String::from_utf8_lossy(args[0]))),
    }
}

/// A membership command, asked again while the previous change is under way or
/// a learner lags (for at most 10 s).
async fn retry_change(client: &mut ClusterClient, args: &[&[u8]]) -> Result<(), String> {
    let started = Instant::now();
    loop {
        match client.command(args).await {
            Ok(Reply::Simple(s)) if s == "OK" => return Ok(()),
            Ok(Reply::Error(e))
                if (e.contains("under way") || e.contains("behind") || e.contains("lately"))
                    && started.elapsed() < Duration::from_secs(10) =>
            {
                tokio::time::sleep(Duration::from_micros(200)).await;
            }
            other => return Err(format!("{}: {other:?}", String::from_utf8_lossy(args[0]))),
        }
    }
}

/// The leader's `INFO` text.
async fn leader_info(addrs: &[SocketAddr]) -> Result<String, String> {
    let at = leader(addrs).await?;
    let mut c = RespClient::connect(at).await.map_err(|e| e.to_string())?;
    match c.command(&[b"INFO"]).await {
        Ok(Reply::Bulk(text)) => Ok(String::from_utf8_lossy(&text).into_owned()),
        other => Err(format!("INFO: {other:?}")),
    }
}

/// Until the leader reports no membership change under way.
async fn wait_settled(addrs: &[SocketAddr]) -> Result<(), String> {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(10) {
        if let Ok(info) = leader_info(addrs).await {
            if info_field(&info, "membership_pending") == Some("0") {
                return Ok(());
            }
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
    Err("the membership change did not finish within 10 s".into())
}
