//! The networked node: a [`Replica`] run by tokio, with the TCP transport to its
//! peers and the RESP server for its clients.
//!
//! One task owns the replica. It waits for the next input — a tick, a message from a
//! peer, a client request, the end of a snapshot transfer — then drains every input
//! already queued (so a burst of client requests becomes one log batch and one
//! sync), runs [`Replica::process`], hands the messages to the transport and the
//! replies to the waiting clients. Store calls happen on that task, except syncs
//! that wait for a device (an `msync`, an `fdatasync`: [`crate::consensus::replica::SyncBy`]),
//! which run on a blocking thread, one at a time, while the task goes on receiving
//! and appending; their completion is taken before new messages, so a follower's
//! acknowledgements do not wait behind a lagging window. A forced-DAX pool's sync
//! (a few cache-line flushes) stays inline. Snapshots stream, and the
//! compactions the replica asks for ([`crate::consensus::replica::CompactionPolicy`]) run, on
//! blocking threads so the loop goes on meanwhile (the list's compaction runs
//! beside appends and reads; at most one is in flight); a follower hands each
//! received snapshot chunk to its installer thread (waiting only while that thread
//! still writes the previous one) and steps one chunk per process.
//!
//! The loop also measures the requests it serves ([`RequestStats`]: per command,
//! the calls and the time from taking a request to sending its reply), adds them to
//! `INFO` as Redis's `# Commandstats` and `# Latencystats` sections, and renders
//! the node's Prometheus metrics on request ([`Node::metrics_text`], and `GET
//! /metrics` on [`NodeConfig::metrics_addr`] when set).

mod builder;
mod call;
mod client;
mod clock;
mod config;
mod error;
mod identity;
mod lease_gate;
mod start;
mod status;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::consensus::raft::SnapshotRequest;
use crate::consensus::raft::{Message, MessageBody};
use crate::consensus::replica::{stream_snapshot, Output, Replica, ReplicaError, Streamed};
use crate::consensus::service::KvReply;
use crate::server::metrics::{
    write_status, CommandClass, Exposition, MetricsRequests, RequestStats,
};
use crate::server::net::Transport;
use crate::storage::error::StoreError;

use self::clock::TickClock;
pub(crate) use self::lease_gate::LeaseGate;
use self::lease_gate::ReadPoint;

pub use self::builder::{NodeBuilder, NODE_PAGE_SIZE};
pub use self::call::{KvCall, KvHandle};
pub use self::client::ClientWriteError;
pub use self::config::{Member, NodeConfig};
pub use self::error::NodeError;
pub use crate::consensus::replica::NodeStatus;

/// A running node.
#[derive(Debug)]
pub struct Node {
    id: u16,
    kv: KvHandle,
    raft_addr: SocketAddr,
    client_addr: SocketAddr,
    shutdown: watch::Sender<bool>,
    main: JoinHandle<Result<(), NodeError>>,
    resp: JoinHandle<()>,
    metrics: MetricsRequests,
    metrics_addr: Option<SocketAddr>,
    metrics_task: Option<JoinHandle<()>>,
    /// The status the event loop publishes (see [`Node::status`]).
    status: watch::Receiver<NodeStatus>,
    /// How long [`Node::shutdown`] waits for a leadership handover: one election
    /// timeout (the minimum).
    handover_timeout: std::time::Duration,
}

impl Node {
    /// Opens the store, binds the Raft and client addresses and starts serving.
    pub async fn start(cfg: NodeConfig) -> Result<Node, NodeError> {
        let me = *cfg
            .members
            .get(&cfg.id)
            .ok_or(NodeError::UnknownId(cfg.id))?;
        let (replica, cluster) = start::open_replica(&cfg).await?;
        let (inbound_tx, inbound_rx) = mpsc::channel(4096);
        let transport = start::start_transport(&cfg, me, cluster, inbound_tx).await?;
        let raft_addr = transport.local_addr();
        let (listener, client_addr) = start::bind_clients(me.client).await?;
        let (kv, calls) = mpsc::channel(cfg.client_queue);
        let lease_gate = cfg.raft.lease_reads.then(|| Arc::new(LeaseGate::default()));
        let (shutdown, shutdown_rx) = watch::channel(false);
        let resp = {
            let kv = kv.clone();
            let shutdown_rx = shutdown_rx.clone();
            let server = crate::server::resp::RespServer::from_listener(listener, kv)
                .with_limits(cfg.max_request_bytes, cfg.max_client_buffers)
                .with_max_clients(cfg.max_clients)
                .with_request_timeout(cfg.request_timeout)
                .with_password(cfg.requirepass.clone())
                .with_machine(cfg.machine.clone())
                .with_lease_gate(lease_gate.clone());
            tokio::spawn(async move {
                if let Err(e) = server.run(shutdown_rx).await {
                    tracing::error!("client listener failed: {e}");
                }
            })
        };
        let (metrics, metrics_rx) = mpsc::channel(16);
        let (metrics_addr, metrics_task) =
            start::serve_metrics(&cfg, &metrics, &shutdown_rx).await?;
        // Taken once, here: this node's transport is its own.
        let peer_ups = transport
            .take_peer_ups()
            .unwrap_or_else(|| mpsc::channel(1).1);
        let (status_tx, status) = status::channel(&replica);
        let event_loop = EventLoop {
            status: status_tx,
            replica,
            transport,
            inbound: inbound_rx,
            peer_ups,
            batch_entries: 0,
            calls,
            waiting: HashMap::new(),
            next_token: 1,
            snapshot_done: mpsc::unbounded_channel(),
            sending_snapshot: Vec::new(),
            chunk_bytes: cfg.snapshot_chunk_bytes,
            compaction_done: mpsc::unbounded_channel(),
            stats: RequestStats::new(),
            metrics: metrics_rx,
            clock: TickClock::new(cfg.tick),
            lease_gate,
            cluster,
            known_membership: crate::consensus::raft::Membership::default(),
            syncs: StoreSyncs {
                running: false,
                again: false,
                done: mpsc::unbounded_channel(),
            },
        };
        let main = tokio::spawn(event_loop.run(cfg.tick, shutdown_rx));
        tracing::info!(id = cfg.id, %raft_addr, %client_addr, "node started");
        Ok(Node {
            id: cfg.id,
            kv,
            raft_addr,
            client_addr,
            shutdown,
            main,
            resp,
            metrics,
            metrics_addr,
            metrics_task,
            status,
            handover_timeout: cfg.tick * cfg.raft.election_ticks_min,
        })
    }

    /// This node's id.
    pub fn id(&self) -> u16 {
        self.id
    }

    /// Where it listens for peers.
    pub fn raft_addr(&self) -> SocketAddr {
        self.raft_addr
    }

    /// Where it listens for RESP clients.
    pub fn client_addr(&self) -> SocketAddr {
        self.client_addr
    }

    /// Where it serves `GET /metrics` ([`NodeConfig::metrics_addr`], with the port
    /// the OS chose for port 0), if it does.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The node's metrics in the Prometheus text format (what `GET /metrics`
    /// answers), rendered by its event loop; `None` once the node stopped.
    pub async fn metrics_text(&self) -> Option<String> {
        let (tx, rx) = oneshot::channel();
        self.metrics.send(tx).await.ok()?;
        rx.await.ok()
    }

    /// A handle to submit requests directly (without RESP).
    pub fn handle(&self) -> KvHandle {
        self.kv.clone()
    }

    /// Submits one request and waits for its reply.
    pub async fn call(&self, req: crate::consensus::service::KvRequest) -> KvReply {
        let (tx, rx) = oneshot::channel();
        if self.kv.send(KvCall { req, reply: tx }).await.is_err() {
            return KvReply::Unavailable("node stopped".into());
        }
        rx.await
            .unwrap_or_else(|_| KvReply::Unavailable("node stopped".into()))
    }

    /// Whether the node's loop has ended (shut down, or its store failed).
    pub fn is_finished(&self) -> bool {
        self.main.is_finished()
    }

    /// Stops the node (syncs the store, closes the listeners) and waits for it.
    /// A leader first hands its leadership to the follower whose log matches
    /// furthest and waits, at most an election timeout, until it no longer leads,
    /// so a rolling restart costs the cluster no election.
    pub async fn shutdown(self) -> Result<(), NodeError> {
        self.hand_over_leadership().await;
        let _ = self.shutdown.send(true);
        let result = self
            .main
            .await
            .map_err(|e| NodeError::Task(e.to_string()))?;
        let _ = self.resp.await;
        if let Some(task) = self.metrics_task {
            let _ = task.await;
        }
        result
    }

    /// If this node leads, hands its leadership over (see [`Node::shutdown`]).
    async fn hand_over_leadership(&self) {
        let req = crate::consensus::service::KvRequest::TransferLeader { to: None };
        if !matches!(self.call(req).await, KvReply::Done) {
            return; // not the leader, alone, or stopped
        }
        let started = Instant::now();
        while started.elapsed() < self.handover_timeout {
            match self.call(crate::consensus::service::KvRequest::Info).await {
                KvReply::Info(text)
                    if crate::server::resp::info_field(&text, "role") == Some("leader") =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(1)).await;
                }
                _ => {
                    tracing::info!(
                        id = self.id,
                        ms = started.elapsed().as_secs_f64() * 1e3,
                        "leadership handed over before shutdown"
                    );
                    return;
                }
            }
        }
        tracing::warn!(
            id = self.id,
            "leadership handover before shutdown timed out; stopping anyway"
        );
    }

    /// Waits until the node stops by itself (a store failure) and returns why.
    pub async fn wait(&mut self) -> Result<(), NodeError> {
        (&mut self.main)
            .await
            .map_err(|e| NodeError::Task(e.to_string()))?
    }
}

/// The two addresses a member's configuration entry carries,
/// `raft_addr/client_addr` (see [`crate::consensus::raft::MembershipChange::AddLearner`]).
pub fn parse_member_address(address: &str) -> Option<(SocketAddr, SocketAddr)> {
    let (raft, client) = address.split_once('/')?;
    Some((raft.trim().parse().ok()?, client.trim().parse().ok()?))
}

/// The end of one snapshot transfer: the follower and how it ended.
type SnapshotDone = (u16, SnapshotEnd);

/// How a snapshot transfer ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum SnapshotEnd {
    /// Every chunk was delivered to the transport.
    Delivered,
    /// The stream or the connection failed.
    Failed,
    /// The installation to resume is no longer available (see [`Streamed::Stale`]).
    Stale,
}

/// The store's syncs run on a blocking thread, one at a time (see
/// [`crate::consensus::replica::SyncBy::DriverWhenIo`]).
struct StoreSyncs {
    /// Whether a sync runs.
    running: bool,
    /// Whether another was asked for while it ran.
    again: bool,
    /// Where a sync reports its end.
    done: (
        mpsc::UnboundedSender<SyncDone>,
        mpsc::UnboundedReceiver<SyncDone>,
    ),
}

/// The end of one sync.
type SyncDone = Result<(), StoreError>;

/// The end of one compaction.
type CompactionDone =
    Result<crate::storage::store::CompactStats, crate::storage::error::StoreError>;

/// A client waiting for the reply to its request.
struct Waiting {
    reply: oneshot::Sender<KvReply>,
    class: CommandClass,
    /// When the loop took the request.
    taken: Instant,
}

/// The task that owns the replica.
struct EventLoop {
    replica: Replica,
    transport: Arc<Transport>,
    inbound: mpsc::Receiver<Message>,
    /// Peers that dialled this node (they just started).
    peer_ups: mpsc::Receiver<u16>,
    /// Entries stepped since the last process (see [`DRAIN_ENTRIES`]).
    batch_entries: usize,
    calls: mpsc::Receiver<KvCall>,
    waiting: HashMap<u64, Waiting>,
    next_token: u64,
    snapshot_done: (
        mpsc::UnboundedSender<SnapshotDone>,
        mpsc::UnboundedReceiver<SnapshotDone>,
    ),
    /// Followers a snapshot is streaming to (one transfer each at a time).
    sending_snapshot: Vec<u16>,
    chunk_bytes: usize,
    compaction_done: (
        mpsc::UnboundedSender<CompactionDone>,
        mpsc::UnboundedReceiver<CompactionDone>,
    ),
    /// The requests served, for `INFO` and the metrics.
    stats: RequestStats,
    /// Requests for the metrics text.
    metrics: mpsc::Receiver<oneshot::Sender<String>>,
    /// The replica's clock: one tick per `tick` of wall time.
    clock: TickClock,
    /// With lease reads on: the read point published for the RESP connections.
    lease_gate: Option<Arc<LeaseGate>>,
    /// The cluster this node belongs to (see [`NodeConfig::cluster_id`]).
    cluster: u64,
    /// The configuration the transport and client addresses last followed.
    known_membership: crate::consensus::raft::Membership,
    /// The store's syncs, run on a blocking thread (see [`StoreSyncs`]).
    syncs: StoreSyncs,
    /// Where the replica's status is published (see [`Node::status`]).
    status: watch::Sender<NodeStatus>,
}

/// Inputs drained per wake-up before processing (bounds the latency of a batch).
const DRAIN: usize = 1024;

/// Replicated entries drained before processing. A follower acknowledges what one
/// process made durable, so a lagging follower that drained the leader's whole
/// in-flight window before acknowledging any of it would leave the leader idle
/// while it appends, and then itself idle while the leader reads and sends the
/// next window. Processing every few hundred entries keeps both busy.
const DRAIN_ENTRIES: usize = 512;

impl EventLoop {
    async fn run(
        mut self,
        tick: std::time::Duration,
        mut shutdown: watch::Receiver<bool>,
    ) -> Result<(), NodeError> {
        let mut ticker = tokio::time::interval(tick);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let result = loop {
            tokio::select! {
                biased;
                _ = shutdown.changed() => break Ok(()),
                // Before the inbound messages: while a lagging follower's window
                // keeps arriving, its acknowledgements must not wait for the end.
                Some(done) = self.syncs.done.1.recv() => {
                    if let Err(e) = done {
                        tracing::error!(id = self.replica.core().id(), "stopping: sync failed: {e}");
                        break Err(ReplicaError::Store(e).into());
                    }
                    self.syncs.running = false;
                    self.replica.synced();
                    if std::mem::take(&mut self.syncs.again) {
                        self.start_sync();
                    }
                }
                Some(m) = self.inbound.recv() => self.step(m),
                Some(peer) = self.peer_ups.recv() => self.replica.peer_up(peer),
                Some(call) = self.calls.recv() => self.take_call(call),
                Some(tx) = self.metrics.recv() => {
                    let _ = tx.send(self.metrics_text());
                }
                Some(done) = self.snapshot_done.1.recv() => self.snapshot_finished(done),
                Some(done) = self.compaction_done.1.recv() => {
                    self.replica.report_compaction(&done);
                }
                _ = ticker.tick() => self.catch_up_ticks(),
                // Nothing arrived, but the last process left log reads to serve.
                () = std::future::ready(()), if self.replica.has_deferred_work() => {}
            }
            self.drain();
            let big = self.batch_entries >= DRAIN_ENTRIES;
            if let Err(e) = self.process() {
                tracing::error!(id = self.replica.core().id(), "stopping: {e}");
                break Err(e);
            }
            crate::server::hops::hop!("processed", self.replica.core().id());
            if big || self.replica.has_deferred_work() {
                // More is queued: let the transport's writers send what this batch
                // produced (the acknowledgements the leader waits for, the entries
                // a lagging follower waits for) before taking the next one, rather
                // than starve them on a busy runtime.
                tokio::task::yield_now().await;
            }
        };
        self.transport.shutdown();
        for (_, w) in self.waiting.drain() {
            let _ = w.reply.send(KvReply::Unavailable("node stopped".into()));
        }
        let store = self.replica.store();
        // A clean stop records the exact durable end, so the next start refuses
        // damage to anything this node acknowledged rather than cut it.
        if let Err(e) = tokio::task::spawn_blocking(move || store.sync_clean())
            .await
            .map_err(|e| NodeError::Task(e.to_string()))?
        {
            tracing::warn!("final sync failed: {e}");
        }
        result
    }

    /// Takes every input already queued, without waiting.
    fn drain(&mut self) {
        for _ in 0..DRAIN {
            let mut any = false;
            if self.batch_entries < DRAIN_ENTRIES {
                if let Ok(m) = self.inbound.try_recv() {
                    self.step(m);
                    any = true;
                }
            }
            if let Ok(call) = self.calls.try_recv() {
                self.take_call(call);
                any = true;
            }
            if !any {
                break;
            }
        }
    }

    /// Hands a peer's message to the replica, counting the entries it carries.
    fn step(&mut self, m: Message) {
        crate::server::hops::hop!("step", self.replica.core().id(), kind = m.body.kind());
        match &m.body {
            MessageBody::AppendEntries { entries, .. } => self.batch_entries += entries.len(),
            // One snapshot chunk per process: each goes to the installer before the
            // next is stepped, so chunks do not pile up in the core.
            MessageBody::SnapshotChunk { .. } => self.batch_entries = DRAIN_ENTRIES,
            _ => {}
        }
        self.replica.step(m);
    }

    /// Ticks the replica once per tick period that ended (see [`TickClock`]).
    fn catch_up_ticks(&mut self) {
        for _ in 0..self.clock.due() {
            self.replica.tick();
        }
    }

    fn take_call(&mut self, call: KvCall) {
        // A lease read must see the time that really passed.
        self.catch_up_ticks();
        crate::server::hops::hop!("take", self.replica.core().id());
        let token = self.next_token;
        self.next_token += 1;
        let class = CommandClass::of(&call.req);
        let is_info = matches!(call.req, crate::consensus::service::KvRequest::Info);
        let taken = Instant::now();
        match self.replica.request(token, call.req) {
            Some(mut reply) => {
                // `INFO` gains the node's own sections (`RAFT.CONFIG` is text too,
                // but only the configuration).
                if let (KvReply::Info(text), true) = (&mut reply, is_info) {
                    text.push_str(&format!("cluster_id:{:016x}\r\n", self.cluster));
                    if let Some(gate) = &self.lease_gate {
                        // Reads the RESP connections answered from the lease
                        // themselves (not in `# Commandstats`: the loop never saw them).
                        text.push_str(&format!("reads_by_lease_direct:{}\r\n", gate.served()));
                    }
                    self.stats.write_info(text);
                }
                self.stats.record(class, &reply, taken.elapsed());
                let _ = call.reply.send(reply);
            }
            None => {
                let reply = call.reply;
                self.waiting.insert(
                    token,
                    Waiting {
                        reply,
                        class,
                        taken,
                    },
                );
            }
        }
    }

    /// The node's metrics in the Prometheus text format.
    fn metrics_text(&self) -> String {
        let mut e = Exposition::new();
        write_status(&self.replica.status(), &mut e);
        self.stats.write_prometheus(&mut e);
        e.finish()
    }

    fn process(&mut self) -> Result<(), NodeError> {
        self.batch_entries = 0;
        let mut out = Output::default();
        self.replica.process(&mut out)?;
        self.follow_membership();
        // Before anything this process produced leaves (see `LeaseGate`).
        self.publish_read_point();
        for m in out.messages {
            self.transport.send(m);
        }
        let now = Instant::now();
        for (token, reply) in out.replies {
            if let Some(w) = self.waiting.remove(&token) {
                self.stats
                    .record(w.class, &reply, now.saturating_duration_since(w.taken));
                let _ = w.reply.send(reply);
            }
        }
        for req in out.snapshots {
            self.start_snapshot(req);
        }
        if out.compact {
            self.start_compaction();
        }
        if out.sync {
            self.start_sync();
        }
        self.publish_status();
        Ok(())
    }

    /// Syncs the store on a blocking thread (one sync at a time: one asked for
    /// while another runs starts when it returns, and covers everything appended
    /// by then).
    fn start_sync(&mut self) {
        if self.syncs.running {
            self.syncs.again = true;
            return;
        }
        self.syncs.running = true;
        let store = self.replica.store();
        let done = self.syncs.done.0.clone();
        tokio::task::spawn_blocking(move || {
            let _ = done.send(store.sync());
        });
    }

    /// Keeps the transport's peers and the replica's client addresses in step
    /// with the configuration: a member added by a change is dialled at the
    /// address its configuration entry carries; a member whose removal is
    /// committed is dropped.
    fn follow_membership(&mut self) {
        let core = self.replica.core();
        if *core.membership() == self.known_membership {
            return;
        }
        let m = core.membership().clone();
        let settled = !core.membership_change_pending();
        let me = core.id();
        for (&id, address) in &m.addresses {
            match parse_member_address(address) {
                Some((raft, client)) => {
                    if self.transport.add_peer(id, raft) {
                        tracing::info!(id = me, member = id, %raft, %client, "dialling a new member");
                    }
                    self.replica.learn_client_addr(id, client.to_string());
                }
                None => {
                    tracing::warn!(
                        member = id,
                        address,
                        "a member's address does not parse (raft_addr/client_addr): not dialled"
                    );
                }
            }
        }
        // A removed member is dropped once its removal committed, unless it still
        // leads: a removed leader hands over first, and needs the answers.
        let leader = self.replica.core().leader();
        let mut keep = false;
        if settled {
            for peer in self.transport.peers() {
                if m.contains(peer) {
                    continue;
                }
                if leader == Some(peer) {
                    keep = true;
                } else if self.transport.remove_peer(peer) {
                    tracing::info!(member = peer, "a removed member: no longer dialled");
                }
            }
        }
        // A pending change, or a removed leader still kept, is looked at again.
        if settled && !keep {
            self.known_membership = m;
        }
    }

    /// Publishes where the RESP connections may read from the lease, or that
    /// they may not.
    fn publish_read_point(&self) {
        let Some(gate) = &self.lease_gate else {
            return;
        };
        let point = self
            .replica
            .lease_read_point()
            .map(|(applied, until_tick)| ReadPoint {
                store: self.replica.store(),
                applied,
                deadline: self
                    .clock
                    .instant_of(until_tick, self.replica.core().ticks()),
            });
        gate.publish(point);
    }

    /// Runs the compaction the replica asked for on a blocking thread; the outcome
    /// comes back through `compaction_done` (the replica asks for no other meanwhile).
    fn start_compaction(&mut self) {
        let store = self.replica.store();
        let done = self.compaction_done.0.clone();
        tokio::task::spawn_blocking(move || {
            let _ = done.send(store.compact());
        });
    }

    /// Streams the snapshot `req` asks for on a blocking thread.
    fn start_snapshot(&mut self, req: SnapshotRequest) {
        let (to, index) = (req.to, req.index);
        if self.sending_snapshot.contains(&to) {
            return;
        }
        self.sending_snapshot.push(to);
        let store = self.replica.store();
        let transport = Arc::clone(&self.transport);
        let from = self.replica.core().id();
        let term = self.replica.core().term();
        let chunk = self.chunk_bytes;
        let done = self.snapshot_done.0.clone();
        let rt = tokio::runtime::Handle::current();
        tokio::task::spawn_blocking(move || {
            let started = std::time::Instant::now();
            let result = stream_snapshot(&*store, from, term, &req, chunk, |m| {
                rt.block_on(transport.send_wait(m)).is_ok()
            });
            let (end, sent) = match result {
                Ok(Streamed::Sent { sent }) => (SnapshotEnd::Delivered, sent),
                Ok(Streamed::Stopped { sent }) => (SnapshotEnd::Failed, sent),
                Ok(Streamed::Stale) => (SnapshotEnd::Stale, 0),
                Err(e) => {
                    tracing::warn!(to, index, "snapshot stream failed: {e}");
                    (SnapshotEnd::Failed, 0)
                }
            };
            tracing::info!(
                to,
                index,
                resumed_at = req.resume.map(|r| r.seq),
                chunks = sent,
                ?end,
                ms = started.elapsed().as_secs_f64() * 1e3,
                "snapshot sent"
            );
            let _ = done.send((to, end));
        });
    }

    fn snapshot_finished(&mut self, (to, end): SnapshotDone) {
        self.sending_snapshot.retain(|&p| p != to);
        match end {
            SnapshotEnd::Delivered => self.replica.report_snapshot_sent(to),
            SnapshotEnd::Failed => self.replica.report_snapshot_failed(to),
            SnapshotEnd::Stale => self.replica.report_snapshot_stale(to),
        }
    }
}
