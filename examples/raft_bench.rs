//! The thesis's section 4.1 on this machine: a 3-node loopback cluster per storage
//! engine, driven by RESP clients over TCP.
//!
//! ```text
//! cargo run --release --example raft_bench -- [--json] [--quick] [--breakdown]
//!           [--engines list,list_file,wal] [--shm DIR] [--disk DIR]
//! ```
//!
//! Engines (the same cluster code, only the store differs):
//! * `list` — the persistent list in DAX-forced pools on tmpfs (`/dev/shm`): real
//!   `clwb` + `sfence`, the cost persistent memory would pay; **not durable** on
//!   this machine (no PM);
//! * `list_file` — the persistent list in pools on plain files (msync: durable);
//! * `wal` — the write-ahead log with `fdatasync` per batch plus snapshot files, on
//!   plain files (durable).
//!
//! Figures per engine (10-byte keys and values unless said):
//! * `seq_write_p50_us`/`p90`/`p99`: one client, each `SET` after the previous reply;
//! * `c20_p50_us`/`p90`/`p99`, `c20_ops_per_sec`: 20 clients writing at once;
//! * `c20_read_p50_us`/`p90`/`p99`, `c20_read_ops_per_sec`: 20 clients reading
//!   (linearizable `GET`: read-index round, then a read at the applied index);
//! * `catchup_ms`: a follower is stopped, 15,000 `SET`s of 2 KB values (distinct
//!   keys) are made, the follower is restarted; the time from its restart until it
//!   has applied the leader's last index (store recovery, the leader's snapshot of
//!   its store streamed and installed, the tail replicated);
//! * `startup_ms`: that follower, now holding the data, is stopped and started
//!   again; the time from the start until it answers a request (store recovered,
//!   index rebuilt, listeners up), and `startup_current_ms` until it has also
//!   applied the leader's commit index again.
//!
//! Before the engines, `loopback.rtt_p50_us`/`p90`: a 16-byte TCP echo between two
//! threads that block between round trips: the network and thread wake-ups the
//! cluster's messages pay too (on this VM a vCPU that went idle takes tens of µs to
//! wake, so the figure moves with the host's state).
//!
//! With `--json` the last line is one JSON object of `<engine>.<figure>` (and the
//! `loopback.*` figures).
//!
//! With `--breakdown`, each engine's sequential writes are traced through the
//! nodes' hop events ([`raft_nvm::HOP_TRACE_TARGET`]) and a table shows the path most of them
//! took (client, leader, followers, back) with the median time of each step.
//!
//! All clients and the three nodes share this process and the machine's 2 cores.

#[path = "../benches/common/mod.rs"]
mod common;
#[allow(dead_code)]
#[path = "common/progress.rs"]
mod progress;
#[path = "raft_common/mod.rs"]
mod raft_common;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use hdrhistogram::Histogram;
use progress::outln;
use raft_common::hops::{self, Recorder};
use raft_common::{loopback_members, ClusterSpec, EngineKind, PoolMode};
use raft_nvm::node::Node;
use raft_nvm::resp::{info_field, ClusterClient, RespClient};
use raft_nvm::service::{KvReply, KvRequest};
use serde_json::{Map, Value};

#[derive(Parser, Debug)]
#[command(about = "3-node Raft cluster benchmark per storage engine")]
struct Args {
    /// Print a final JSON line of all figures.
    #[arg(long)]
    json: bool,
    /// A tenth of the operations (catch-up still writes 1,500 x 2 KB).
    #[arg(long)]
    quick: bool,
    /// Engines to run, comma-separated: list, list_file, wal.
    #[arg(long, default_value = "list,list_file,wal", value_delimiter = ',')]
    engines: Vec<String>,
    /// Directory of the DAX-forced pools.
    #[arg(long)]
    shm: Option<PathBuf>,
    /// Directory of the plain files (list_file, wal).
    #[arg(long, default_value = "target")]
    disk: PathBuf,
    /// First port used (each engine's cluster takes the next block of 20).
    #[arg(long, default_value_t = 17100)]
    base_port: u16,
    /// Also print where a sequential write's time goes: the median of each step
    /// of the path most writes took, from the nodes' hop trace events.
    #[arg(long)]
    breakdown: bool,
    /// Authenticate the nodes to each other with the cluster secret in this file
    /// (chmod 600), to measure what authentication costs.
    #[arg(long, value_name = "PATH")]
    cluster_secret_file: Option<PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let recorder = args.breakdown.then(Recorder::default);
    match &recorder {
        Some(r) => raft_common::init_logs_quiet_recording(r.clone()),
        None => raft_common::init_logs_quiet(),
    }
    raft_common::run_main("raft_bench", run(&args, recorder.as_ref()))
}

/// One engine's set-up.
struct Setup {
    name: &'static str,
    kind: EngineKind,
    mode: PoolMode,
    dir: PathBuf,
}

fn setup(name: &str, args: &Args, run_id: &str) -> Result<Setup, String> {
    let shm = args.shm.clone().unwrap_or_else(common::default_dir);
    let (name, kind, mode, base) = match name {
        "list" => ("list", EngineKind::List, PoolMode::ForceDax, shm),
        "list_file" => (
            "list_file",
            EngineKind::List,
            PoolMode::Auto,
            args.disk.clone(),
        ),
        "wal" => ("wal", EngineKind::Wal, PoolMode::Auto, args.disk.clone()),
        other => return Err(format!("unknown engine `{other}` (list, list_file, wal)")),
    };
    Ok(Setup {
        name,
        kind,
        mode,
        dir: base.join(format!("pmkit-raft-bench-{run_id}-{name}")),
    })
}

async fn run(args: &Args, recorder: Option<&Recorder>) -> Result<(), String> {
    let run_id = format!("{}", std::process::id());
    let mut figures = Map::new();
    let rounds = if args.quick { 500 } else { 5000 };
    // A step per engine after the loopback probe; lines print through `outln!`,
    // with the bar off the screen.
    let section = progress::Section::new("raft_bench", args.engines.len() as u64 + 1);
    section.step("loopback round trip");
    let (rtt_p50, rtt_p90) = tokio::task::spawn_blocking(move || loopback_rtt_us(rounds))
        .await
        .map_err(|err| format!("loopback round trip: {err}"))??;
    outln!(
        "loopback round trip between two blocking threads: p50 {rtt_p50:.1} us, \
         p90 {rtt_p90:.1} us (the network and wake-ups under every latency below)"
    );
    figures.insert("loopback.rtt_p50_us".into(), Value::from(rtt_p50));
    figures.insert("loopback.rtt_p90_us".into(), Value::from(rtt_p90));
    let mut table = Vec::new();
    for (i, name) in args.engines.iter().enumerate() {
        section.step(name);
        let s = setup(name, args, &run_id)?;
        let port = args.base_port + 20 * i as u16;
        let result = bench_engine(&s, args, port, recorder, &mut figures).await;
        let _ = std::fs::remove_dir_all(&s.dir);
        table.push((s.name, result?));
    }
    drop(section);
    print_table(&table);
    if args.json {
        outln!("{}", Value::Object(figures));
    }
    Ok(())
}

/// The median and p90 round trip of a 16-byte echo over loopback TCP between two
/// threads that block in between (as the runtime's idle workers do), in µs: the
/// floor under every latency the cluster shows. On a VM whose idle vCPUs halt it is
/// mostly the cost of waking a thread, and it moves with the host's state.
fn loopback_rtt_us(round_trips: usize) -> Result<(f64, f64), String> {
    use std::io::{Read, Write};
    use std::net::{TcpListener, TcpStream};
    let e = |what: &str, err: std::io::Error| format!("loopback round trip: {what}: {err}");
    let listener = TcpListener::bind("127.0.0.1:0").map_err(|err| e("bind", err))?;
    let addr = listener.local_addr().map_err(|err| e("address", err))?;
    let echo = std::thread::spawn(move || -> std::io::Result<()> {
        let (mut conn, _) = listener.accept()?;
        conn.set_nodelay(true)?;
        let mut buf = [0u8; 16];
        while conn.read_exact(&mut buf).is_ok() {
            conn.write_all(&buf)?;
        }
        Ok(())
    });
    let mut conn = TcpStream::connect(addr).map_err(|err| e("connect", err))?;
    conn.set_nodelay(true).map_err(|err| e("nodelay", err))?;
    let mut h = hist();
    let mut buf = [7u8; 16];
    for _ in 0..round_trips {
        let t = Instant::now();
        conn.write_all(&buf).map_err(|err| e("write", err))?;
        conn.read_exact(&mut buf).map_err(|err| e("read", err))?;
        record(&mut h, t);
    }
    drop(conn);
    let _ = echo.join();
    Ok((q(&h, 0.5), q(&h, 0.9)))
}

/// The figures of one engine, for the table.
type Row = Vec<(&'static str, f64)>;

async fn bench_engine(
    s: &Setup,
    args: &Args,
    port: u16,
    recorder: Option<&Recorder>,
    figures: &mut Map<String, Value>,
) -> Result<Row, String> {
    let _ = std::fs::remove_dir_all(&s.dir);
    let spec = ClusterSpec {
        members: loopback_members(3, port, port + 10),
        kind: s.kind,
        mode: s.mode,
        dir: s.dir.clone(),
        cluster_secret: args
            .cluster_secret_file
            .as_deref()
            .map(raft_nvm::secret::Secret::from_file)
            .transpose()
            .map_err(|e| e.to_string())?,
    };
    let mut nodes: Vec<Option<Node>> = spec.start_all().await?.into_iter().map(Some).collect();
    let addrs: Vec<_> = spec.members.values().map(|m| m.client).collect();
    let scale = if args.quick { 10 } else { 1 };
    let mut row = Row::new();
    let mut put = |row: &mut Row, k: &'static str, v: f64| {
        figures.insert(
            format!("{}.{k}", s.name),
            Value::from((v * 100.0).round() / 100.0),
        );
        row.push((k, v));
    };

    // Wait for a leader (its no-op committed).
    let mut client = ClusterClient::new(addrs.clone());
    client
        .set(b"warmup", b"1")
        .await
        .map_err(|e| format!("no leader: {e}"))?;
    let leader_addr = client.current().ok_or("no leader")?;
    outln!("[{}] leader at {leader_addr}", s.name);

    // Sequential writes from one client.
    let n = 5000 / scale;
    let mut conn = RespClient::connect(leader_addr)
        .await
        .map_err(|e| e.to_string())?;
    let mut h = hist();
    if let Some(r) = recorder {
        r.start();
    }
    for i in 0..n {
        let key = format!("seq{:07}", i % 100_000);
        let t = Instant::now();
        hops::client_hop(hops::CLIENT_SEND);
        let r = conn.command(&[b"SET", key.as_bytes(), b"0123456789"]).await;
        hops::client_hop(hops::CLIENT_RECV);
        record(&mut h, t);
        r.map_err(|e| e.to_string())?;
    }
    if let Some(r) = recorder {
        print_breakdown(s.name, &r.stop())?;
    }
    put(&mut row, "seq_write_p50_us", q(&h, 0.5));
    put(&mut row, "seq_write_p90_us", q(&h, 0.9));
    put(&mut row, "seq_write_p99_us", q(&h, 0.99));

    // 20 concurrent clients, writes then reads.
    let per = 2000 / scale;
    let (h, ops) = concurrent(leader_addr, 20, per, true).await?;
    put(&mut row, "c20_p50_us", q(&h, 0.5));
    put(&mut row, "c20_p90_us", q(&h, 0.9));
    put(&mut row, "c20_p99_us", q(&h, 0.99));
    put(&mut row, "c20_ops_per_sec", ops);
    let (h, ops) = concurrent(leader_addr, 20, per, false).await?;
    put(&mut row, "c20_read_p50_us", q(&h, 0.5));
    put(&mut row, "c20_read_p90_us", q(&h, 0.9));
    put(&mut row, "c20_read_p99_us", q(&h, 0.99));
    put(&mut row, "c20_read_ops_per_sec", ops);

    // Catch-up of a lagging follower after 15,000 writes of 2 KB.
    let leader_pos = addrs
        .iter()
        .position(|&a| a == leader_addr)
        .ok_or("leader not a member")?;
    let lag_pos = (leader_pos + 1) % addrs.len();
    let lag_id = nodes[lag_pos].as_ref().map(Node::id).ok_or("node gone")?;
    if let Some(node) = nodes[lag_pos].take() {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    let writes = 15_000 / scale;
    let (_, big_ops) = concurrent_big(leader_addr, 20, writes, 2048).await?;
    outln!("[{}] wrote {writes} x 2 KB at {big_ops:.0} ops/s", s.name);
    let leader = nodes[leader_pos].as_ref().ok_or("leader gone")?;
    let target = index_of(leader, "last_index").await?;
    let started = Instant::now();
    let node = spec.start(lag_id).await.map_err(|e| e.to_string())?;
    wait_applied(&node, target, Duration::from_secs(60)).await?;
    put(
        &mut row,
        "catchup_ms",
        started.elapsed().as_secs_f64() * 1e3,
    );
    nodes[lag_pos] = Some(node);

    // Cold start of that node, which now holds the data.
    if let Some(node) = nodes[lag_pos].take() {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    let leader = nodes[leader_pos].as_ref().ok_or("leader gone")?;
    let target = index_of(leader, "commit_index").await?;
    let started = Instant::now();
    let node = spec.start(lag_id).await.map_err(|e| e.to_string())?;
    let KvReply::Info(_) = node.call(KvRequest::Info).await else {
        return Err("restarted node did not answer".into());
    };
    put(
        &mut row,
        "startup_ms",
        started.elapsed().as_secs_f64() * 1e3,
    );
    wait_applied(&node, target, Duration::from_secs(60)).await?;
    put(
        &mut row,
        "startup_current_ms",
        started.elapsed().as_secs_f64() * 1e3,
    );
    nodes[lag_pos] = Some(node);

    for node in nodes.into_iter().flatten() {
        node.shutdown().await.map_err(|e| e.to_string())?;
    }
    Ok(row)
}

/// Prints where a sequential write's time went (see `--breakdown`).
fn print_breakdown(engine: &str, recorded: &[hops::Hop]) -> Result<(), String> {
    let b = hops::breakdown(recorded).ok_or_else(|| {
        format!(
            "--breakdown: no write was traced through the nodes ({} hop events)",
            recorded.len()
        )
    })?;
    outln!(
        "[{engine}] where a sequential write's time goes: the path {} of {} writes took, \
         median of each step (the tracing itself adds a little to each)",
        b.followed,
        b.requests
    );
    for (from, to, us) in &b.steps {
        outln!("  {from:<34} -> {to:<34} {us:>8.1} us");
    }
    outln!("  {:<72} {:>8.1} us", "whole path", b.total_us);
    Ok(())
}

fn hist() -> Histogram<u64> {
    // 1 µs .. 60 s, 3 significant digits; the bounds are constants.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

fn record(h: &mut Histogram<u64>, t: Instant) {
    let us = (t.elapsed().as_nanos() / 1000).max(1) as u64;
    h.saturating_record(us);
}

fn q(h: &Histogram<u64>, quantile: f64) -> f64 {
    h.value_at_quantile(quantile) as f64
}

/// `clients` connections to `addr`, each sending `per` commands one after another
/// (`command(client, i)` builds the i-th of a client); returns the merged latency
/// histogram and the throughput.
async fn load<F>(
    addr: std::net::SocketAddr,
    clients: usize,
    per: usize,
    command: F,
) -> Result<(Histogram<u64>, f64), String>
where
    F: Fn(usize, usize) -> Vec<Vec<u8>> + Clone + Send + 'static,
{
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let command = command.clone();
        tasks.push(tokio::spawn(async move {
            let mut conn = RespClient::connect(addr).await.map_err(|e| e.to_string())?;
            let mut h = hist();
            for i in 0..per {
                let args = command(c, i);
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                let t = Instant::now();
                let r = conn.command(&args).await;
                record(&mut h, t);
                match r {
                    Ok(raft_nvm::resp::Reply::Error(e)) => return Err(e.into_owned()),
                    Ok(_) => {}
                    Err(e) => return Err(e.to_string()),
                }
            }
            Ok::<_, String>(h)
        }));
    }
    let mut all = hist();
    for t in tasks {
        let h = t.await.map_err(|e| e.to_string())??;
        all.add(&h).map_err(|e| e.to_string())?;
    }
    let secs = started.elapsed().as_secs_f64();
    Ok((all, (clients * per) as f64 / secs))
}

/// 20-client writes (`write`) or reads of 10-byte values on 1,000 keys per client.
async fn concurrent(
    addr: std::net::SocketAddr,
    clients: usize,
    per: usize,
    write: bool,
) -> Result<(Histogram<u64>, f64), String> {
    load(addr, clients, per, move |c, i| {
        let key = format!("c{c:02}k{:05}", i % 1000).into_bytes();
        if write {
            vec![b"SET".to_vec(), key, b"0123456789".to_vec()]
        } else {
            vec![b"GET".to_vec(), key]
        }
    })
    .await
}

/// `total` writes of `value_len`-byte values to distinct keys from `clients` clients.
async fn concurrent_big(
    addr: std::net::SocketAddr,
    clients: usize,
    total: usize,
    value_len: usize,
) -> Result<(Histogram<u64>, f64), String> {
    load(addr, clients, total.div_ceil(clients), move |c, i| {
        let value = vec![b'a' + (c % 26) as u8; value_len];
        vec![
            b"SET".to_vec(),
            format!("big{c:02}-{i:06}").into_bytes(),
            value,
        ]
    })
    .await
}

/// A field of `node`'s `INFO`, as a number.
async fn index_of(node: &Node, field: &str) -> Result<u64, String> {
    match node.call(KvRequest::Info).await {
        KvReply::Info(text) => info_field(&text, field)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("INFO has no {field}")),
        other => Err(format!("INFO answered {other:?}")),
    }
}

/// Polls `node` until its applied index reaches `target`.
async fn wait_applied(node: &Node, target: u64, limit: Duration) -> Result<(), String> {
    let started = Instant::now();
    loop {
        if index_of(node, "applied_index").await? >= target {
            return Ok(());
        }
        if started.elapsed() > limit {
            return Err(format!("node {} did not reach index {target}", node.id()));
        }
        tokio::time::sleep(Duration::from_micros(200)).await;
    }
}

fn print_table(table: &[(&str, Row)]) {
    let Some((_, first)) = table.first() else {
        return;
    };
    print!("{:<26}", "figure");
    for (name, _) in table {
        print!("{name:>12}");
    }
    outln!();
    for (i, (k, _)) in first.iter().enumerate() {
        print!("{k:<26}");
        for (_, row) in table {
            match row.get(i) {
                Some((_, v)) => print!("{v:>12.1}"),
                None => print!("{:>12}", "-"),
            }
        }
        outln!();
    }
}
