//! One replica of the key-value service: a [`RaftCore`] driven against a [`Store`],
//! synchronously and deterministically.
//!
//! This is the driver the Raft core's [`Ready`](crate::consensus::raft::Ready) describes, without any I/O of its
//! own besides the store: the tokio node (`node`, in the server layer above) feeds it ticks, messages
//! and client requests and carries its output over the network, and the
//! whole-cluster simulation drives the very same code step by step on crash-image
//! pools. Everything the service decides lives here:
//!
//! - **The store is the log.** A leader's proposals and a follower's received
//!   entries are appended to the store in [`Replica::process`], before any message
//!   that depends on them leaves; a conflicting suffix becomes a rollback record.
//!   The hard state is made durable first. A sync follows every batch that appended
//!   something (the thesis flushes at once on client requests), so acknowledgements
//!   (only of durable entries: the core's rule) never wait for a group timer. The
//!   sync runs inline, or, as [`ReplicaConfig::sync_by`] says (the node's), on
//!   the driver's own thread while the replica goes on receiving and appending:
//!   [`Output::sync`] asks for it and [`Replica::synced`] reports it. Runs of
//!   entries that need no state to decide (`SET`s) go to the store in one
//!   [`Store::append_batch`].
//! - **Conditional writes are decided at append time.** The store holds only puts,
//!   deletes and no-ops. A `CAS` (or a `DEL`, whose reply says whether the key
//!   existed) is evaluated against [`Store::latest`] when its entry is appended: the
//!   store then holds exactly the entries before it, which by log matching are the
//!   same on every replica, so every replica turns it into the same put or no-op.
//! - **Reads are MVCC reads at the applied index.** The store also holds appended
//!   but uncommitted versions, so a read names its timestamp: after read-index
//!   confirmed the leader's commit index, the value is read at the applied index
//!   (at or above it), never seeing an uncommitted write.
//! - **Lagging replicas** get the entries the leader's DRAM window no longer holds
//!   read back from its store (the log), in order, like any other `AppendEntries`;
//!   a few messages' worth per [`Replica::process`], so the first leave before the
//!   rest are read ([`ReplicaConfig::log_read_budget`]).
//!   Only once compaction dropped them does the leader stream its store as a
//!   snapshot ([`stream_snapshot`]); the follower installs each chunk as it arrives
//!   into a staging store through its [`StoreProvider`] (on an installer thread:
//!   at most two chunks in DRAM), which swaps the store atomically after the last
//!   one. A broken stream resumes at the first chunk the follower lacks (see the
//!   `snapshot` module).
//! - **A missing store is not a fresh start.** The provider opens an existing
//!   store only, unless told to bootstrap or join ([`StartMode`]); a joining
//!   replica's core stays passive (no votes, no campaigns) until it caught up, and
//!   then the provider forgets the join ([`StoreProvider::caught_up`]).
//! - **Compaction is the replica's call, run by its driver.** After each
//!   [`Replica::process`] the [`CompactionPolicy`] looks at the store's fill
//!   ([`Store::usage`]) and may set [`Output::compact`]; the driver runs
//!   [`Store::compact`] (beside appends: the node on a blocking thread) and reports
//!   with [`Replica::report_compaction`]. One runs at a time.
//! - **A full store refuses writes; it does not stop the replica.** A `SET` or
//!   `CAS` that would eat into [`ReplicaConfig::write_reserve`] is refused before it
//!   is proposed, with [`KvReply::OutOfMemory`] (Redis's `-OOM`); a `DEL` may use
//!   half the reserve, so an operator can free space. Should an append still fail
//!   with [`StoreError::Full`], the entries that did not fit are dropped from the
//!   core ([`RaftCore::on_store_full`]) and from the messages about to leave: a
//!   leader's clients get `OutOfMemory`, a follower does not acknowledge them and
//!   the leader sends them again later. Reads go on, and writes succeed again once
//!   a compaction (asked for at once) frees space.

mod compaction;
mod provider;
// The node's identity files (`node::identity`) use it.
#[cfg(feature = "server")]
pub(crate) use self::provider::sibling;
mod snapshot;
mod status;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::consensus::machine::{
    Applied, MachineCall, MachineReply, StateMachine, StateView, Write,
};
use crate::consensus::raft::{
    Command, Config, Entry, LogRead, Message, MessageBody, RaftCore, RaftError, Role,
    SnapshotRequest, StoreFacts,
};
use crate::consensus::service::{KvReply, KvRequest};
use crate::storage::error::StoreError;
use crate::storage::store::{CompactStats, Op, Store, StoreOptions};

use self::compaction::Compactor;
pub use self::compaction::{CompactionCounts, CompactionPolicy, DEFAULT_WRITE_RESERVE};

pub use self::provider::{
    recover_wal_swap, ChunkGauge, Engine, FileStoreProvider, SnapshotInstall, StagedStore,
    StartMode, StoreProvider, ThreadedInstall,
};
use self::snapshot::Receiving;
pub use self::snapshot::{snapshot_messages, stream_snapshot, Streamed, DEFAULT_CHUNK_BYTES};
pub use self::status::{NodeStatus, ReplicaStatus};

/// The most bytes of entries one replication message carries at most
/// (`max_entries_per_msg` of the largest entry the service accepts): half the
/// transport's default frame limit, so an append is never too large to send.
pub const MAX_MESSAGE_BYTES: usize = 32 << 20;

/// Why a replica stopped.
#[derive(Debug, thiserror::Error)]
pub enum ReplicaError {
    /// The store failed (a replica whose store fails cannot go on: its log and the
    /// core's view of it would differ). A full store ([`StoreError::Full`]) is not
    /// such a failure: the replica refuses writes and goes on.
    #[error("store: {0}")]
    Store(#[from] StoreError),
    /// The core rejected its configuration or the store's facts.
    #[error("raft: {0}")]
    Raft(#[from] RaftError),
    /// The log holds a state machine's command at `index` and this replica has no
    /// [`StateMachine`] ([`ReplicaConfig::machine`]): it cannot know what the entry
    /// writes, so it stops rather than diverge from the others.
    #[error("entry {index} is a state machine's command and this node has no state machine; start it with the machine the cluster runs")]
    NoMachine {
        /// The entry.
        index: u64,
    },
}

/// A replica's configuration.
#[derive(Clone, Debug)]
pub struct ReplicaConfig {
    /// The Raft core's configuration (id, voters, timeouts, flow control).
    pub raft: Config,
    /// Each node's client (RESP) address, to name the leader in redirections.
    pub client_addrs: BTreeMap<u16, String>,
    /// Entries read back from the store for lagging followers per
    /// [`Replica::process`] (whole reads, at least one): the rest waits for the
    /// next call. [`LOG_READ_ENTRIES_PER_PROCESS`] unless testing.
    pub log_read_budget: u64,
    /// When the replica asks its driver to compact the store.
    pub compaction: CompactionPolicy,
    /// The share of the store's capacity kept for what must always fit: entries
    /// already accepted, a new leader's no-op, rollback records, deletes, and the
    /// free pages compaction copies into. A `SET` or `CAS` that would leave less
    /// free is refused with [`KvReply::OutOfMemory`]; a `DEL` may use the lower
    /// half; no entry is appended into the last quarter (a follower leaves such
    /// entries unacknowledged: the leader sends them again). At least eight of the
    /// engine's largest entries are kept; stores without a capacity (the WAL)
    /// refuse nothing.
    /// [`DEFAULT_WRITE_RESERVE`] unless testing.
    pub write_reserve: f64,
    /// The state machine serving [`KvRequest::Machine`] calls, or `None` for the
    /// key-value commands only. Every replica of a cluster must run the same one
    /// (see [`crate::consensus::machine`]).
    pub machine: Option<Arc<dyn StateMachine>>,
    /// Who runs the store's syncs: the replica inline ([`SyncBy::Replica`], the
    /// default), or the driver ([`SyncBy::Driver`], or [`SyncBy::DriverWhenIo`] as
    /// the node does).
    pub sync_by: SyncBy,
}

impl ReplicaConfig {
    /// A configuration with the default log-read budget, compaction policy and
    /// write reserve.
    pub fn new(raft: Config, client_addrs: BTreeMap<u16, String>) -> ReplicaConfig {
        ReplicaConfig {
            raft,
            client_addrs,
            log_read_budget: LOG_READ_ENTRIES_PER_PROCESS,
            compaction: CompactionPolicy::default(),
            write_reserve: DEFAULT_WRITE_RESERVE,
            machine: None,
            sync_by: SyncBy::Replica,
        }
    }
}

/// Who runs a replica's store syncs ([`ReplicaConfig::sync_by`]).
///
/// When the driver does, [`Replica::process`] asks for a sync through
/// [`Output::sync`] instead of syncing inline, and the driver calls
/// [`Replica::synced`] once it returned. A driver with threads to spare syncs on
/// another one, so that the node goes on receiving, appending and sending while
/// the store flushes (and a leader's own flush overlaps its followers'). Nothing
/// waits for it but what needs it: followers acknowledge, and a leader counts its
/// own log, only what the store reports durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncBy {
    /// The replica, inside [`Replica::process`]: the simple order.
    #[default]
    Replica,
    /// The driver, every sync.
    Driver,
    /// The driver when the store's syncs wait for a device
    /// ([`Store::sync_waits_for_io`]: `msync`, `fdatasync`), the replica
    /// otherwise (a few cache-line flushes cost less than a hand-off to another
    /// thread). What the node uses.
    DriverWhenIo,
}

/// What one [`Replica::process`] produced for the driver to carry out.
#[derive(Debug, Default)]
pub struct Output {
    /// Messages to send (the store already holds what they depend on).
    pub messages: Vec<Message>,
    /// Replies to client requests, by the token given to [`Replica::request`].
    pub replies: Vec<(u64, KvReply)>,
    /// Snapshots to stream (whole, or resumed); use [`stream_snapshot`] on
    /// [`Replica::store`] and report the outcome with
    /// [`Replica::report_snapshot_sent`], [`Replica::report_snapshot_failed`] or
    /// [`Replica::report_snapshot_stale`].
    pub snapshots: Vec<SnapshotRequest>,
    /// Entries read back from the store for lagging followers (a statistic).
    pub entries_from_store: u64,
    /// Compact the store now: run [`Store::compact`] on [`Replica::store`] (it runs
    /// beside appends and reads, so on another thread if the driver can) and report
    /// the outcome with [`Replica::report_compaction`]. Not set again until then.
    pub compact: bool,
    /// Sync the store (only when the driver syncs: [`ReplicaConfig::sync_by`]): run
    /// [`Store::sync`] on [`Replica::store`], then call [`Replica::synced`]. Nothing
    /// that needs the sync leaves before it: followers acknowledge, and a leader
    /// counts its own log, only what the store reports durable.
    pub sync: bool,
}

/// What a proposed write answers once applied.
#[derive(Debug)]
struct PendingWrite {
    token: u64,
    term: u64,
    /// Decided when the entry is appended.
    outcome: Option<KvReply>,
}

/// A read waiting for its read-index round or for the applied index.
#[derive(Debug)]
struct PendingRead {
    token: u64,
    what: ReadOf,
}

/// What a pending read asks for.
#[derive(Debug)]
enum ReadOf {
    /// `GET key`.
    Key(Vec<u8>),
    /// A state machine's query.
    Query(Vec<u8>),
}

/// One replica: the core, its store and the clients waiting on it.
pub struct Replica {
    core: RaftCore,
    store: Arc<dyn Store>,
    provider: Box<dyn StoreProvider>,
    client_addrs: BTreeMap<u16, String>,
    /// Proposed writes by log index.
    writes: BTreeMap<u64, PendingWrite>,
    /// Reads not yet handed to the core (one read-index round serves them all).
    unsent_reads: Vec<PendingRead>,
    /// Reads in a read-index round, by context.
    reads: BTreeMap<u64, Vec<PendingRead>>,
    /// Confirmed reads waiting for the applied index to reach theirs.
    confirmed: Vec<(u64, PendingRead)>,
    next_ctx: u64,
    /// The snapshot installation in progress (follower).
    incoming: Receiving,
    /// The core's log reads not served yet, in the order asked.
    log_reads: VecDeque<LogRead>,
    /// See [`ReplicaConfig::log_read_budget`].
    log_read_budget: u64,
    /// The store belongs to a join that has not caught up ([`StoreProvider::joining`]):
    /// once the core has, the provider is told.
    joining: bool,
    /// When to compact, and what compactions did.
    compactor: Compactor,
    /// See [`ReplicaConfig::write_reserve`].
    write_reserve: f64,
    /// Bytes of writes proposed since the last [`Replica::process`] (not yet
    /// appended): what the next admission check must leave room for.
    unappended: u64,
    /// See [`ReplicaConfig::machine`].
    machine: Option<Arc<dyn StateMachine>>,
    /// See [`ReplicaConfig::sync_by`].
    sync_by: SyncBy,
    /// Reads served from the leader's lease (not a read-index round).
    lease_reads: u64,
    /// `RAFT.PROMOTE` requests waiting for their learner to catch up: the token,
    /// the learner and the core's tick after which the request gives up.
    promotions: Vec<(u64, u16, u64)>,
}

/// The store options for a store a replica drives: no group syncs
/// (`group: u32::MAX`) and no timer. The replica syncs after every batch that
/// appended something, before any acknowledgement leaves, so a store's own group
/// sync would only split a batch into more syncs: with the default group of 10, a
/// follower catching up on 256-entry messages synced 26 times per message instead
/// of once (BENCHMARKS.md, "catch-up").
pub const REPLICA_STORE_OPTIONS: StoreOptions = StoreOptions {
    group: u32::MAX,
    sync_interval: None,
};

/// The default [`ReplicaConfig::log_read_budget`]. A restarted follower may need
/// the leader's whole in-flight window (16 messages of 256 entries: 8 MB of 2 KB
/// values); reading it all before sending any kept the follower idle for that long.
/// Two messages' worth per call lets the driver send the first while the rest waits
/// for the next call ([`Replica::has_deferred_work`]).
pub const LOG_READ_ENTRIES_PER_PROCESS: u64 = 512;

/// How many election timeouts a `RAFT.PROMOTE` waits for its learner to catch up
/// before it is refused.
pub const PROMOTION_WAIT_ELECTIONS: u64 = 20;

/// Bytes a write's record takes beyond its key and value, at most (header and
/// alignment, in either engine): what the write reserve check adds.
const RECORD_OVERHEAD: u64 = 64;

/// An upper bound on the bytes entry `e` takes in the store.
fn entry_bytes(e: &Entry) -> u64 {
    let payload = match &e.cmd {
        Command::Put { key, value } => key.len() + value.len(),
        Command::Delete { key } => key.len(),
        Command::Cas { key, new, .. } => key.len() + new.len(),
        // What the command writes is decided on appending: its own size is the
        // estimate (a larger write goes through `StoreError::Full` if it must).
        Command::Machine { data } => data.len(),
        Command::Config { data } => crate::consensus::raft::MEMBERSHIP_KEY.len() + data.len(),
        Command::Noop => 0,
    };
    payload as u64 + RECORD_OVERHEAD
}

impl std::fmt::Debug for Replica {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Replica")
            .field("id", &self.core.id())
            .field("role", &self.core.role())
            .field("term", &self.core.term())
            .field("engine", &self.store.engine())
            .finish_non_exhaustive()
    }
}

impl Replica {
    /// Opens the store through `provider` and restarts the core from it.
    pub fn open(
        cfg: ReplicaConfig,
        mut provider: Box<dyn StoreProvider>,
    ) -> Result<Replica, ReplicaError> {
        // The store is the log: applying is `Store::set_applied`, no entry copies.
        let mut raft = cfg.raft;
        raft.committed_entries = false;
        // The core is built from the store's facts before the provider writes to
        // the store (a list open writes its new epoch, a WAL open cuts a torn
        // tail): a store whose facts the core refuses is left as it was.
        let mut restarted: Option<Result<RaftCore, ReplicaError>> = None;
        let opened = provider.open_validated(&mut |store| {
            crate::storage::store::check_plausible(store)?;
            let core = StoreFacts::from_store(store)
                .and_then(|facts| RaftCore::restart(raft.clone(), facts))
                .map_err(ReplicaError::from);
            let refused = core.is_err();
            restarted = Some(core);
            if refused {
                // Only stops the open: the core's error is returned below.
                return Err(StoreError::Invalid(
                    "the Raft core refused the store".into(),
                ));
            }
            Ok(())
        });
        let (store, mut core) = match (opened, restarted) {
            (_, Some(Err(e))) => return Err(e),
            (Err(e), _) => return Err(e.into()),
            (Ok(store), Some(Ok(core))) => (store, core),
            (Ok(_), None) => {
                return Err(ReplicaError::Store(StoreError::Invalid(
                    "the store provider opened a store without checking it".into(),
                )))
            }
        };
        let mut joining = provider.joining();
        if joining && core.membership().all_voters().into_iter().eq([core.id()]) {
            // A join waits to catch up with a leader, and the only voter has none
            // to wait for: it would never elect one. Nobody else's votes or log
            // are at stake, so the join is over.
            tracing::warn!(
                id = core.id(),
                "a join marker on its cluster's only voter, which has no leader to catch up with: ignoring and removing it"
            );
            provider.caught_up()?;
            joining = false;
        }
        if joining {
            // The provider learns of a join while it opens; the core is passive
            // until it caught up with a leader.
            raft.passive_until_caught_up = true;
            core = RaftCore::restart(raft, StoreFacts::from_store(&*store)?)?;
        }
        tracing::info!(
            id = core.id(),
            engine = store.engine(),
            last_index = store.last_index(),
            applied = store.applied(),
            term = core.term(),
            joining,
            "replica opened"
        );
        Ok(Replica {
            core,
            store,
            provider,
            client_addrs: cfg.client_addrs,
            writes: BTreeMap::new(),
            unsent_reads: Vec::new(),
            reads: BTreeMap::new(),
            confirmed: Vec::new(),
            next_ctx: 1,
            incoming: Receiving::default(),
            log_reads: VecDeque::new(),
            log_read_budget: cfg.log_read_budget.max(1),
            joining,
            compactor: Compactor::new(cfg.compaction),
            write_reserve: cfg.write_reserve,
            unappended: 0,
            machine: cfg.machine,
            sync_by: cfg.sync_by,
            lease_reads: 0,
            promotions: Vec::new(),
        })
    }

    /// Whether the driver runs the store's syncs ([`ReplicaConfig::sync_by`]).
    fn driver_syncs(&self) -> bool {
        match self.sync_by {
            SyncBy::Replica => false,
            SyncBy::Driver => true,
            SyncBy::DriverWhenIo => self.store.sync_waits_for_io(),
        }
    }

    /// The sync [`Output::sync`] asked for returned: the core learns what is
    /// durable now. Call [`Replica::process`] next (acknowledgements and commits
    /// may follow).
    pub fn synced(&mut self) {
        self.core.on_persisted(self.store.durable_index());
    }

    /// The Raft core (read-only: role, term, indexes, progress).
    pub fn core(&self) -> &RaftCore {
        &self.core
    }

    /// The store (for snapshot streaming and inspection).
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// Advances logical time by one tick.
    pub fn tick(&mut self) {
        self.core.tick();
    }

    /// The transport saw `peer` dial this node: it just (re)started (see
    /// [`RaftCore::peer_up`]).
    pub fn peer_up(&mut self, peer: u16) {
        self.core.peer_up(peer);
    }

    /// Handles a message from a peer. One that is misrouted, invalid (see
    /// [`Message::validate`]), from a node outside the configuration, or carrying
    /// an entry this node's store cannot hold, is logged and dropped whole.
    pub fn step(&mut self, m: Message) {
        if let Some(reason) = self.unstorable(&m) {
            tracing::warn!(
                id = self.core.id(),
                from = m.from,
                kind = m.body.kind(),
                "dropped message: {reason}"
            );
            return;
        }
        if let Err(e) = self.core.step(m) {
            tracing::warn!(id = self.core.id(), "dropped message: {e}");
        }
    }

    /// Why `m` carries an entry or snapshot item this node's store cannot hold
    /// (RESP refuses such a key or value from a client; a peer's must not stop
    /// the replica at the append, which would fail with a store error).
    fn unstorable(&self, m: &Message) -> Option<String> {
        let fits = |key: usize, value: usize| self.store.fits(key, value);
        match &m.body {
            MessageBody::AppendEntries { entries, .. } => entries.iter().find_map(|e| {
                let (key, value) = match &e.cmd {
                    Command::Put { key, value } => (key.len(), value.len()),
                    Command::Delete { key } => (key.len(), 0),
                    Command::Cas { key, new, .. } => (key.len(), new.len()),
                    Command::Config { data } => (crate::consensus::raft::MEMBERSHIP_KEY.len(), data.len()),
                    Command::Noop | Command::Machine { .. } => return None,
                };
                (!fits(key, value)).then(|| {
                    format!(
                        "entry {} (a key of {key} bytes, a value of {value} bytes) exceeds the {} engine's entry limit",
                        e.index,
                        self.store.engine()
                    )
                })
            }),
            MessageBody::SnapshotChunk { items, .. } => items.iter().find_map(|i| {
                (!fits(i.key.len(), i.value.len())).then(|| {
                    format!(
                        "a snapshot item (a key of {} bytes, a value of {} bytes) exceeds the {} engine's entry limit",
                        i.key.len(),
                        i.value.len(),
                        self.store.engine()
                    )
                })
            }),
            _ => None,
        }
    }

    /// The leader's client address, if known. A node removed from the cluster
    /// hears from no leader any more: it names a voter of its last configuration
    /// instead, so that clients still talking to it move on.
    fn leader_addr(&self) -> Option<String> {
        if let Some(addr) = self
            .core
            .leader()
            .and_then(|l| self.client_addrs.get(&l).cloned())
        {
            return Some(addr);
        }
        let m = self.core.membership();
        if m.contains(self.core.id()) {
            return None;
        }
        m.voters
            .iter()
            .find_map(|v| self.client_addrs.get(v).cloned())
    }

    /// Takes a client request identified by `token`. Returns the reply at once when
    /// there is one (not the leader, a rejected request, `INFO`); otherwise the reply
    /// comes out of a later [`Replica::process`].
    pub fn request(&mut self, token: u64, req: KvRequest) -> Option<KvReply> {
        if let KvRequest::Info = req {
            return Some(KvReply::Info(self.status().info_text()));
        }
        if let KvRequest::ShowMembership = req {
            return Some(KvReply::Info(self.status().membership_text()));
        }
        if let KvRequest::TransferLeader { to } = req {
            return Some(self.transfer_leadership(to));
        }
        if self.core.role() != Role::Leader {
            let read = match req {
                KvRequest::Get { key } => Some(ReadOf::Key(key)),
                KvRequest::Machine(MachineCall::Read(query)) if self.machine.is_some() => {
                    Some(ReadOf::Query(query))
                }
                _ => None,
            };
            return match read {
                // A learner serves reads itself, through the leader's read index.
                Some(what) if self.serves_reads_as_learner() => self.read(token, what),
                _ => Some(KvReply::NotLeader {
                    leader: self.leader_addr(),
                }),
            };
        }
        if let Some(reason) = self.oversized(&req) {
            return Some(KvReply::Rejected(reason));
        }
        if let KvRequest::Set { key, .. } | KvRequest::Delete { key } | KvRequest::Cas { key, .. } =
            &req
        {
            if crate::consensus::raft::is_reserved_key(key) {
                return Some(KvReply::Rejected(
                    "keys starting with \\x00raft-nvm/ are the cluster's own (its configuration); they cannot be written".to_string(),
                ));
            }
        }
        if matches!(req, KvRequest::Machine(_)) && self.machine.is_none() {
            return Some(KvReply::Rejected(
                "this node runs no state machine".to_string(),
            ));
        }
        let need = match &req {
            KvRequest::Set { key, value } => Some((key.len() + value.len(), false)),
            KvRequest::Cas { key, new, .. } => Some((key.len() + new.len(), false)),
            KvRequest::Delete { key } => Some((key.len(), true)),
            KvRequest::Machine(MachineCall::Write(data)) => Some((data.len(), false)),
            KvRequest::ChangeMembership(_) => {
                Some((crate::consensus::raft::MEMBERSHIP_KEY.len() + 256, false))
            }
            KvRequest::Get { .. }
            | KvRequest::Info
            | KvRequest::Machine(_)
            | KvRequest::TransferLeader { .. }
            | KvRequest::ShowMembership => None,
        };
        if let Some((payload, delete)) = need {
            // A record's header and alignment: an upper bound for both engines.
            let bytes = self.charge(payload as u64 + RECORD_OVERHEAD);
            if let Some(reason) = self.no_room(bytes, delete) {
                self.compactor.refused(1);
                return Some(KvReply::OutOfMemory(reason));
            }
            self.unappended += bytes;
        }
        let cmd = match req {
            KvRequest::Get { key } => return self.read(token, ReadOf::Key(key)),
            KvRequest::Machine(MachineCall::Read(query)) => {
                return self.read(token, ReadOf::Query(query))
            }
            KvRequest::Machine(MachineCall::Write(data)) => Command::Machine { data },
            KvRequest::Set { key, value } => Command::Put { key, value },
            KvRequest::Delete { key } => Command::Delete { key },
            KvRequest::Cas { key, expected, new } => Command::Cas { key, expected, new },
            // Answered above; never left pending (its client would wait forever).
            KvRequest::Info => return Some(KvReply::Info(self.status().info_text())),
            KvRequest::TransferLeader { to } => return Some(self.transfer_leadership(to)),
            KvRequest::ChangeMembership(change) => {
                return self.change_membership(token, change);
            }
            KvRequest::ShowMembership => {
                return Some(KvReply::Info(self.status().membership_text()))
            }
        };
        match self.core.propose(cmd) {
            Ok(index) => {
                self.await_commit(index, token);
                None
            }
            // Leadership is moving: no leader to name yet (`TRYAGAIN`).
            Err(RaftError::Transferring { .. }) => Some(KvReply::NotLeader { leader: None }),
            Err(_) => Some(KvReply::NotLeader {
                leader: self.leader_addr(),
            }),
        }
    }

    /// Takes a read: answered at once when the leader's lease holds and the store
    /// has applied the commit index (see [`crate::consensus::raft::Config::lease_reads`]),
    /// otherwise queued for the next read-index round.
    fn read(&mut self, token: u64, what: ReadOf) -> Option<KvReply> {
        if let Some(index) = self.core.lease_read_index() {
            let applied = self.store.applied();
            if applied >= index {
                self.lease_reads += 1;
                return Some(match self.answer_read(&what, applied) {
                    Ok(reply) => reply,
                    Err(e) => {
                        tracing::error!(id = self.core.id(), "lease read failed: {e}");
                        KvReply::Unavailable(format!("the store failed: {e}"))
                    }
                });
            }
        }
        self.unsent_reads.push(PendingRead { token, what });
        None
    }

    /// The answer to read `what` at the applied index `applied`.
    fn answer_read(&self, what: &ReadOf, applied: u64) -> Result<KvReply, StoreError> {
        Ok(match what {
            ReadOf::Key(key) => KvReply::Value(self.store.get(key, applied)?),
            ReadOf::Query(query) => match &self.machine {
                Some(machine) => KvReply::Machine(
                    machine.query(&StateView::applied(&*self.store, applied), query)?,
                ),
                // `request` takes no query without a machine.
                None => KvReply::Rejected("this node runs no state machine".into()),
            },
        })
    }

    /// Request `token`'s reply waits for entry `index` (of this term) to commit.
    fn await_commit(&mut self, index: u64, token: u64) {
        self.writes.insert(
            index,
            PendingWrite {
                token,
                term: self.core.term(),
                outcome: None,
            },
        );
    }

    /// Proposes a membership change; its reply comes when the entry commits. A
    /// promotion whose learner lags or has not answered lately waits for it, up
    /// to [`PROMOTION_WAIT_ELECTIONS`] election timeouts.
    fn change_membership(
        &mut self,
        token: u64,
        change: crate::consensus::raft::MembershipChange,
    ) -> Option<KvReply> {
        let promoting = match change {
            crate::consensus::raft::MembershipChange::Promote(id) => Some(id),
            _ => None,
        };
        match self.core.propose_membership(change) {
            Ok(index) => {
                self.await_commit(index, token);
                None
            }
            Err(RaftError::LearnerBehind { .. } | RaftError::LearnerUnreachable(_))
                if promoting.is_some() =>
            {
                let wait =
                    u64::from(self.core.config().election_ticks_min) * PROMOTION_WAIT_ELECTIONS;
                let id = promoting.unwrap_or_default();
                self.promotions.push((token, id, self.core.ticks() + wait));
                None
            }
            Err(RaftError::NotLeader { .. }) => Some(KvReply::NotLeader {
                leader: self.leader_addr(),
            }),
            Err(e) => Some(KvReply::Rejected(e.to_string())),
        }
    }

    /// Tries the waiting promotions again: proposed once their learner caught up,
    /// refused once they waited too long, redirected when leadership moved.
    fn retry_promotions(&mut self, out: &mut Output) {
        if self.promotions.is_empty() {
            return;
        }
        for (token, id, give_up) in std::mem::take(&mut self.promotions) {
            if self.core.role() != Role::Leader {
                let leader = self.leader_addr();
                out.replies.push((token, KvReply::NotLeader { leader }));
                continue;
            }
            let change = crate::consensus::raft::MembershipChange::Promote(id);
            match self.core.propose_membership(change) {
                Ok(index) => self.await_commit(index, token),
                Err(e @ (RaftError::LearnerBehind { .. } | RaftError::LearnerUnreachable(_))) => {
                    if self.core.ticks() >= give_up {
                        out.replies
                            .push((token, KvReply::Rejected(format!("{e}; gave up waiting"))));
                    } else {
                        self.promotions.push((token, id, give_up));
                    }
                }
                // Another change under way: wait for it too.
                Err(RaftError::MembershipChangePending { .. }) if self.core.ticks() < give_up => {
                    self.promotions.push((token, id, give_up));
                }
                Err(e) => out.replies.push((token, KvReply::Rejected(e.to_string()))),
            }
        }
    }

    /// Starts handing the leadership to `to` (`None`: the follower whose log
    /// matches furthest); see [`RaftCore::transfer_leadership`].
    fn transfer_leadership(&mut self, to: Option<u16>) -> KvReply {
        if self.core.role() != Role::Leader {
            return KvReply::NotLeader {
                leader: self.leader_addr(),
            };
        }
        let Some(target) = to.or_else(|| self.core.most_caught_up_follower()) else {
            return KvReply::Rejected("no other voter to hand the leadership to".into());
        };
        match self.core.transfer_leadership(target) {
            Ok(()) => KvReply::Done,
            Err(e) => KvReply::Rejected(e.to_string()),
        }
    }

    /// The space a record of `bytes` takes, counting its page's share that records
    /// of its size leave unused (a record never spans two pages: two 700-byte
    /// records do not share a 1 KiB page). The engine's largest entry stands for
    /// the page's room.
    fn charge(&self, bytes: u64) -> u64 {
        let unit = self.store.max_payload() as u64 + RECORD_OVERHEAD;
        match unit.checked_div(bytes) {
            Some(per_unit) if per_unit > 0 => unit.div_ceil(per_unit),
            _ => bytes,
        }
    }

    /// The write reserve in bytes for a store of `capacity` (see
    /// [`ReplicaConfig::write_reserve`]).
    fn reserve(&self, capacity: u64) -> u64 {
        let floor = 8 * self.store.max_payload() as u64;
        ((capacity as f64 * self.write_reserve) as u64).max(floor)
    }

    /// Bytes this replica may still append before the last quarter of the reserve
    /// (`None`: unbounded). That quarter is never appended into, by leaders or
    /// followers: the list's compaction copies what it keeps into free pages, so a
    /// pool with none left could never be compacted again.
    fn append_room(&self) -> Option<u64> {
        let usage = self.store.usage();
        let (capacity, free) = (usage.capacity?, usage.free?);
        Some(free.saturating_sub(self.reserve(capacity) / 4))
    }

    /// Why a write of `bytes` does not fit: it would leave less free than the write
    /// reserve (half of it for a delete), counting what was proposed but not yet
    /// appended.
    fn no_room(&self, bytes: u64, delete: bool) -> Option<String> {
        let usage = self.store.usage();
        let (Some(capacity), Some(free)) = (usage.capacity, usage.free) else {
            return None;
        };
        let mut reserve = self.reserve(capacity);
        if delete {
            reserve /= 2;
        }
        let wanted = self.unappended + bytes + reserve;
        (free < wanted).then(|| {
            format!(
                "store full: {free} of {capacity} bytes free, a write needs {bytes} and {reserve} are reserved; delete keys or grow the pool"
            )
        })
    }

    /// The largest key and value one entry may hold: `max_entries_per_msg` of
    /// them must fit one replication message, well under the transport's frame
    /// limit. The same on every replica of a cluster (it is configuration), so
    /// what a state machine writes can be checked against it deterministically.
    fn max_entry(&self) -> usize {
        MAX_MESSAGE_BYTES / self.core.config().max_entries_per_msg.max(1)
    }

    /// Why `req` cannot be stored (a key or value over the engine's limits).
    fn oversized(&self, req: &KvRequest) -> Option<String> {
        let (key, value_len) = match req {
            KvRequest::Get { key } | KvRequest::Delete { key } => (key, 0),
            KvRequest::Set { key, value } => (key, value.len()),
            KvRequest::Cas { key, new, .. } => (key, new.len()),
            KvRequest::Machine(MachineCall::Write(data)) => {
                let max_entry = self.max_entry();
                return (data.len() > max_entry).then(|| {
                    format!(
                        "a command of {} bytes exceeds {max_entry} bytes, the largest entry a replication message carries",
                        data.len()
                    )
                });
            }
            KvRequest::Info
            | KvRequest::Machine(_)
            | KvRequest::TransferLeader { .. }
            | KvRequest::ChangeMembership(_)
            | KvRequest::ShowMembership => return None,
        };
        if key.len() > usize::from(u16::MAX) {
            return Some(format!(
                "key of {} bytes is longer than {} bytes",
                key.len(),
                u16::MAX
            ));
        }
        let per_message = self.core.config().max_entries_per_msg.max(1);
        let max_entry = self.max_entry();
        if key.len() + value_len > max_entry {
            return Some(format!(
                "key and value of {} bytes exceed {max_entry} bytes, the largest entry a replication message of {per_message} entries carries",
                key.len() + value_len
            ));
        }
        (!self.store.fits(key.len(), value_len)).then(|| {
            format!(
                "a key of {} bytes with a value of {value_len} bytes exceeds the {} engine's entry limit",
                key.len(),
                self.store.engine()
            )
        })
    }

    /// The write reserve in bytes ([`ReplicaConfig::write_reserve`] of the
    /// store's capacity), or `None` for a store without a capacity.
    pub fn write_reserve_bytes(&self) -> Option<u64> {
        self.store.usage().capacity.map(|c| self.reserve(c))
    }

    /// Whether a compaction asked for by [`Output::compact`] is running.
    pub fn compaction_in_flight(&self) -> bool {
        self.compactor.in_flight()
    }

    /// Records where member `id` serves clients (a member added by a membership
    /// change): `NotLeader` replies and `INFO` name it from then on.
    pub fn learn_client_addr(&mut self, id: u16, addr: String) {
        self.client_addrs.insert(id, addr);
    }

    /// Carries out everything the core has to do (see [`crate::consensus::raft::Ready`] for the
    /// order) and appends the results to `out`. Call it after every batch of
    /// inputs. An error means the store failed: stop the replica.
    pub fn process(&mut self, out: &mut Output) -> Result<(), ReplicaError> {
        self.start_reads(out);
        // Reads left over from the last call first: they were asked first.
        let mut read_budget = self.log_read_budget;
        self.serve_log_reads(&mut read_budget, out)?;
        // A bounded loop: one Ready may enable another (a commit, a snapshot ack).
        for _ in 0..64 {
            if !self.core.has_ready() {
                break;
            }
            let mut rd = self.core.ready();
            if let Some(hs) = rd.hard_state {
                self.store.set_hard_state(hs)?;
            }
            // `(kept, retruncate, bytes needed)` once the store is found full.
            let mut full = None;
            if let Some(after) = rd.truncate_after {
                match self.store.truncate_after(after, self.core.term()) {
                    Ok(()) => self.fail_writes_above(after, out),
                    Err(StoreError::Full { needed }) => full = Some((after, true, needed)),
                    Err(e) => return Err(e.into()),
                }
            }
            if full.is_none() {
                full = self.append_entries(&rd.entries)?;
            }
            if let Some((kept, retruncate, needed)) = full {
                self.store_full(kept, retruncate, needed, &mut rd.messages, out);
            }
            if rd.must_sync {
                if self.driver_syncs() {
                    out.sync = true;
                } else {
                    self.store.sync()?;
                }
            }
            out.messages.extend(rd.messages);
            if let Some(to) = rd.apply_to {
                self.store.set_applied(to);
                self.answer_writes(to, out);
            }
            for rs in rd.read_states {
                for r in self.reads.remove(&rs.ctx).unwrap_or_default() {
                    self.confirmed.push((rs.index, r));
                }
            }
            for ctx in rd.dropped_reads {
                for r in self.reads.remove(&ctx).unwrap_or_default() {
                    out.replies.push((
                        r.token,
                        KvReply::Unavailable(
                            "leadership lost before the read was confirmed".into(),
                        ),
                    ));
                }
            }
            self.log_reads.extend(rd.log_reads);
            self.serve_log_reads(&mut read_budget, out)?;
            out.snapshots.extend(rd.snapshots_to_send);
            for chunk in rd.snapshot_chunks {
                self.take_chunk(chunk)?;
            }
            self.core.on_persisted(self.store.durable_index());
        }
        // Everything proposed before this call was handed out and appended (or
        // refused) above.
        self.unappended = 0;
        self.retry_promotions(out);
        self.serve_reads(out)?;
        if self.core.role() != Role::Leader {
            self.fail_all(out);
        } else {
            // A leader installs nothing: drop what it was receiving as a follower.
            self.incoming.abandon();
        }
        if self.joining && !self.core.is_catching_up() {
            // The core caught up on durable entries only: the join is over.
            self.provider.caught_up()?;
            self.joining = false;
        }
        if self.compactor.due(&*self.store).is_some() {
            out.compact = true;
        }
        Ok(())
    }

    /// The store had no room for what a Ready handed out above `kept`: the core
    /// forgets it, `messages` (the same Ready's, not sent yet) stop carrying it,
    /// and the writes it held are refused. See [`RaftCore::on_store_full`].
    fn store_full(
        &mut self,
        kept: u64,
        retruncate: bool,
        needed: u64,
        messages: &mut Vec<Message>,
        out: &mut Output,
    ) {
        tracing::warn!(
            id = self.core.id(),
            role = ?self.core.role(),
            kept,
            needed,
            retruncate,
            "store full: entries not appended"
        );
        self.core.on_store_full(kept, retruncate);
        // A leader's entries above `kept` were first handed out in this Ready: with
        // them out of its messages, no one ever sees them.
        crate::consensus::raft::unsent_above(messages, kept);
        let refused = self.writes.split_off(&(kept + 1));
        self.compactor.append_failed();
        self.compactor.refused(refused.len() as u64);
        for (_, w) in refused {
            out.replies.push((
                w.token,
                KvReply::OutOfMemory(format!(
                    "store full: no room for a {needed}-byte record; the write was not applied"
                )),
            ));
        }
    }

    /// The compaction [`Output::compact`] asked for ended with `result`.
    pub fn report_compaction(&mut self, result: &Result<CompactStats, StoreError>) {
        self.compactor
            .finished(self.core.id(), result, &*self.store);
    }

    /// Runs the compaction [`Output::compact`] asked for on this thread and reports
    /// it (for drivers without threads of their own, such as simulations).
    pub fn compact_now(&mut self) -> Result<CompactStats, StoreError> {
        let result = self.store.compact();
        self.report_compaction(&result);
        result
    }

    /// What the compactions this replica asked for did, and how many writes it
    /// refused for lack of space.
    pub fn compaction_counts(&self) -> CompactionCounts {
        self.compactor.counts
    }

    /// Whether [`Replica::process`] left work for its next call (log reads beyond
    /// its budget): a driver should call it again soon even if no input arrives.
    pub fn has_deferred_work(&self) -> bool {
        !self.log_reads.is_empty()
    }

    /// Serves queued log reads in order while `budget` (entries) lasts.
    fn serve_log_reads(&mut self, budget: &mut u64, out: &mut Output) -> Result<(), ReplicaError> {
        while *budget > 0 {
            let Some(read) = self.log_reads.pop_front() else {
                break;
            };
            let served = self.serve_log_read(read)?;
            out.entries_from_store += served;
            *budget = budget.saturating_sub(served.max(1));
        }
        Ok(())
    }

    /// Reads entries the leader's window no longer holds back from the store and
    /// hands them to the core for a lagging follower (or reports them compacted);
    /// returns how many it sent.
    fn serve_log_read(&mut self, read: LogRead) -> Result<u64, ReplicaError> {
        if !self.core.log_read_is_current(&read) {
            // The core would ignore the answer: do not read the store for it.
            return Ok(0);
        }
        let prev_term = match read.from.checked_sub(1) {
            Some(0) => Some(0),
            Some(prev) => self.store.term_at(prev),
            None => None,
        };
        let wanted = (read.last + 1).saturating_sub(read.from);
        let mut entries = Vec::with_capacity(usize::try_from(wanted).unwrap_or(0));
        for index in read.from..=read.last {
            match self.store.entry(index)? {
                Some(e) => entries.push(Entry::from(e)),
                None => break,
            }
        }
        match prev_term {
            Some(prev_term) if entries.len() as u64 == wanted => {
                let sent = entries.len() as u64;
                self.core.send_stored_entries(read, prev_term, entries)?;
                return Ok(sent);
            }
            _ => {
                tracing::debug!(
                    to = read.to,
                    from = read.from,
                    last = read.last,
                    found = entries.len(),
                    prev_known = prev_term.is_some(),
                    "entries a follower needs are compacted away"
                );
                self.core.report_entries_unavailable(read);
            }
        }
        Ok(0)
    }

    /// Hands the reads that arrived since the last round to the core as one round.
    fn start_reads(&mut self, out: &mut Output) {
        if self.unsent_reads.is_empty() {
            return;
        }
        let reads = std::mem::take(&mut self.unsent_reads);
        if let Some(index) = self.core.lease_read_index() {
            // The leader's lease holds: no read-index round (see `Config::lease_reads`).
            self.lease_reads += reads.len() as u64;
            self.confirmed.extend(reads.into_iter().map(|r| (index, r)));
            return;
        }
        let ctx = self.next_ctx;
        self.next_ctx += 1;
        match self.core.read_index(ctx) {
            Ok(()) => {
                self.reads.insert(ctx, reads);
            }
            Err(_) => {
                let leader = self.leader_addr();
                out.replies.extend(reads.into_iter().map(|r| {
                    (
                        r.token,
                        KvReply::NotLeader {
                            leader: leader.clone(),
                        },
                    )
                }));
            }
        }
    }

    /// Appends `entries` to the store: runs of entries whose decision reads no
    /// state (`SET`s, configurations, no-ops) in one [`Store::append_batch`] each,
    /// the others one at a time ([`Replica::append`]). Returns `(kept, false, bytes
    /// needed)` if the store had no room for them all: it holds them up to `kept`.
    fn append_entries(
        &mut self,
        entries: &[Entry],
    ) -> Result<Option<(u64, bool, u64)>, ReplicaError> {
        let mut room = self.append_room();
        let mut run: Vec<(u64, u64, Op<'_>)> = Vec::new();
        for e in entries {
            let bytes = self.charge(entry_bytes(e));
            if let Some(left) = room.as_mut() {
                if *left < bytes {
                    if let Some(full) = self.append_run(&mut run)? {
                        return Ok(Some(full));
                    }
                    return Ok(Some((self.store.last_index(), false, bytes)));
                }
                *left -= bytes;
            }
            if let Some((op, outcome)) = crate::consensus::machine::decide_blind(&e.cmd) {
                self.decided(e, outcome);
                run.push((e.index, e.term, op));
                continue;
            }
            if let Some(full) = self.append_run(&mut run)? {
                return Ok(Some(full));
            }
            match self.append(e) {
                Ok(()) => {}
                Err(ReplicaError::Store(StoreError::Full { needed })) => {
                    return Ok(Some((self.store.last_index(), false, needed)));
                }
                Err(e) => return Err(e),
            }
        }
        self.append_run(&mut run)
    }

    /// Appends the run [`Replica::append_entries`] gathered, and empties it.
    fn append_run(
        &self,
        run: &mut Vec<(u64, u64, Op<'_>)>,
    ) -> Result<Option<(u64, bool, u64)>, ReplicaError> {
        if run.is_empty() {
            return Ok(None);
        }
        let result = self.store.append_batch(run);
        run.clear();
        match result {
            Ok(()) => Ok(None),
            Err(StoreError::Full { needed }) => Ok(Some((self.store.last_index(), false, needed))),
            Err(e) => Err(e.into()),
        }
    }

    /// Records what the write proposed as entry `e` answers (if this replica
    /// proposed it, in that term).
    fn decided(&mut self, e: &Entry, outcome: KvReply) {
        if let Some(w) = self.writes.get_mut(&e.index) {
            if w.term == e.term {
                w.outcome = Some(outcome);
            }
        }
    }

    /// Appends entry `e` to the store, deciding conditional writes and state
    /// machine commands against the entries before it.
    fn append(&mut self, e: &Entry) -> Result<(), ReplicaError> {
        let state = StateView::before(&*self.store, e.index);
        let applied;
        let (op, outcome) = match &e.cmd {
            Command::Machine { data } => {
                let Some(machine) = &self.machine else {
                    return Err(ReplicaError::NoMachine { index: e.index });
                };
                applied = machine.apply(&state, data)?;
                let (op, reply) = self.machine_op(&state, &applied)?;
                (op, KvReply::Machine(reply))
            }
            kv => crate::consensus::machine::decide_kv(&state, kv)?,
        };
        self.store.append(e.index, e.term, op)?;
        self.decided(e, outcome);
        Ok(())
    }

    /// The store operation of a machine's decision, and the client's reply. A write
    /// over the entry limits ([`Replica::max_entry`], configuration) is not stored
    /// and answers an error: decided the same way on every replica. Deleting an
    /// absent key stores nothing.
    fn machine_op<'a>(
        &self,
        state: &StateView<'_>,
        applied: &'a Applied,
    ) -> Result<(Op<'a>, MachineReply), StoreError> {
        let reply = applied.reply.clone();
        let (key, value_len) = match &applied.write {
            None => return Ok((Op::Noop, reply)),
            Some(Write::Put { key, value }) => (key, value.len()),
            Some(Write::Delete { key }) => (key, 0),
        };
        if crate::consensus::raft::is_reserved_key(key) {
            return Ok((
                Op::Noop,
                MachineReply::Error(
                    "the command writes one of the cluster's own keys (\\x00raft-nvm/...); nothing was written"
                        .to_string(),
                ),
            ));
        }
        let max_entry = self.max_entry();
        if key.len() > usize::from(u16::MAX) || key.len() + value_len > max_entry {
            return Ok((
                Op::Noop,
                MachineReply::Error(format!(
                    "the command's write (a {}-byte key, a {value_len}-byte value) exceeds the entry limit ({} bytes of key, {max_entry} of key and value); nothing was written",
                    key.len(),
                    u16::MAX
                )),
            ));
        }
        Ok(match &applied.write {
            Some(Write::Put { key, value }) => (Op::Put { key, value }, reply),
            Some(Write::Delete { key }) if state.get(key)?.is_some() => (Op::Delete { key }, reply),
            _ => (Op::Noop, reply),
        })
    }

    /// Answers the writes applied up to `to`.
    fn answer_writes(&mut self, to: u64, out: &mut Output) {
        let rest = self.writes.split_off(&(to + 1));
        for (index, w) in std::mem::replace(&mut self.writes, rest) {
            let reply = match w.outcome {
                Some(r) if self.store.term_at(index).is_none_or(|t| t == w.term) => r,
                _ => KvReply::Unavailable("the entry was replaced by a new leader's".into()),
            };
            out.replies.push((w.token, reply));
        }
    }

    /// Fails the writes whose entries a truncation discarded.
    fn fail_writes_above(&mut self, after: u64, out: &mut Output) {
        for (_, w) in self.writes.split_off(&(after + 1)) {
            out.replies.push((
                w.token,
                KvReply::Unavailable("the entry was replaced by a new leader's".into()),
            ));
        }
    }

    /// Serves confirmed reads whose index the store has applied.
    fn serve_reads(&mut self, out: &mut Output) -> Result<(), ReplicaError> {
        if self.confirmed.is_empty() {
            return Ok(());
        }
        let applied = self.store.applied();
        let mut waiting = Vec::new();
        for (index, r) in std::mem::take(&mut self.confirmed) {
            if index <= applied {
                let reply = self.answer_read(&r.what, applied)?;
                out.replies.push((r.token, reply));
            } else {
                waiting.push((index, r));
            }
        }
        self.confirmed = waiting;
        Ok(())
    }

    /// Whether this node takes reads without leading: it is a learner that knows
    /// its leader (it asks it for the read index, see
    /// [`RaftCore::read_index`]).
    fn serves_reads_as_learner(&self) -> bool {
        let core = &self.core;
        core.role() == Role::Follower
            && core.leader().is_some()
            && core.membership().is_learner(core.id())
    }

    /// No longer leader: the outcome of every pending write is unknown, and reads
    /// not yet confirmed must go to the new leader (a learner keeps its own: the
    /// core drops them if its leader changes).
    fn fail_all(&mut self, out: &mut Output) {
        for (_, w) in std::mem::take(&mut self.writes) {
            out.replies.push((
                w.token,
                KvReply::Unavailable(
                    "leadership lost; the write may or may not take effect".into(),
                ),
            ));
        }
        if self.serves_reads_as_learner() {
            return;
        }
        let leader = self.leader_addr();
        let reads = std::mem::take(&mut self.unsent_reads)
            .into_iter()
            .chain(std::mem::take(&mut self.reads).into_values().flatten());
        for r in reads {
            out.replies.push((
                r.token,
                KvReply::NotLeader {
                    leader: leader.clone(),
                },
            ));
        }
    }

    /// The leader's driver could not deliver a snapshot to `to`.
    pub fn report_snapshot_failed(&mut self, to: u16) {
        self.core.report_snapshot_failed(to);
    }

    /// The leader's driver could not resume a snapshot to `to`: its store no longer
    /// gives the snapshot the follower started ([`Streamed::Stale`]); the next one
    /// starts over.
    pub fn report_snapshot_stale(&mut self, to: u16) {
        self.core.report_snapshot_stale(to);
    }

    /// The leader's driver delivered every chunk of a snapshot to `to` (see
    /// [`RaftCore::report_snapshot_sent`]: without it, a lost acknowledgement leaves
    /// the follower without entries until it asks again).
    pub fn report_snapshot_sent(&mut self, to: u16) {
        self.core.report_snapshot_sent(to);
    }

    /// Where reads may be served from the leader lease without this replica:
    /// `(applied index, tick count at which the lease ends)`, when the lease
    /// holds and the store has applied its index (see [`RaftCore::lease`]).
    pub fn lease_read_point(&self) -> Option<(u64, u64)> {
        let lease = self.core.lease()?;
        let applied = self.store.applied();
        (applied >= lease.index).then_some((applied, lease.until_tick))
    }

    /// Reads this replica served from its leader lease (see
    /// [`crate::consensus::raft::Config::lease_reads`]) rather than a read-index round.
    pub fn lease_reads(&self) -> u64 {
        self.lease_reads
    }

    /// The number of client requests waiting for an answer.
    pub fn pending(&self) -> usize {
        self.writes.len()
            + self.unsent_reads.len()
            + self.reads.values().map(Vec::len).sum::<usize>()
            + self.confirmed.len()
    }
}
