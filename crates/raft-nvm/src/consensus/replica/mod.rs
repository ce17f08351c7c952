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
//!
//! One file per concern, each an `impl Replica` block beside the others:
//! `mod.rs` (the configuration, the output, the replica's state and
//! [`Replica::open`]), `drive.rs` (the inputs and [`Replica::process`]),
//! `append.rs` (appending to the store, conditional writes decided),
//! `admission.rs` (a client request taken, refused, or answered when its entry
//! commits), `reads.rs` (read-index rounds and lease reads), `promotions.rs`
//! (membership changes, promotions, leadership transfer), `log_reads.rs`
//! (entries read back for a lagging follower), `snapshot.rs` (snapshots sent
//! and received), `compaction.rs` (when to compact), `status.rs` (what the
//! replica reports: `INFO`, `RAFT.CONFIG`, the metrics and the node's status),
//! `provider/` (where stores come from: the provider traits, the file provider,
//! the threaded snapshot install and the staged stores).

mod admission;
mod append;
mod compaction;
mod drive;
mod log_reads;
mod promotions;
mod provider;
mod reads;
// The node's identity files (`node::identity`) use it.
#[cfg(feature = "server")]
pub(crate) use self::provider::sibling;
mod snapshot;
mod status;

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use crate::consensus::machine::StateMachine;
use crate::consensus::raft::{
    Command, Config, Entry, LogRead, Message, RaftCore, RaftError, SnapshotRequest, StoreFacts,
};
use crate::consensus::service::KvReply;
use crate::storage::error::StoreError;
use crate::storage::store::{Store, StoreOptions};

pub use self::compaction::{
    CompactionCounts, CompactionPolicy, Compactor, Reason as CompactionReason,
    DEFAULT_WRITE_RESERVE,
};

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
    /// The state machine serving [`KvRequest::Machine`](crate::consensus::service::KvRequest::Machine) calls, or `None` for the
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

    /// The Raft core (read-only: role, term, indexes, progress).
    pub fn core(&self) -> &RaftCore {
        &self.core
    }

    /// The store (for snapshot streaming and inspection).
    pub fn store(&self) -> Arc<dyn Store> {
        Arc::clone(&self.store)
    }

    /// Records where member `id` serves clients (a member added by a membership
    /// change): `NotLeader` replies and `INFO` name it from then on.
    pub fn learn_client_addr(&mut self, id: u16, addr: String) {
        self.client_addrs.insert(id, addr);
    }

    /// The number of client requests waiting for an answer.
    pub fn pending(&self) -> usize {
        self.writes.len()
            + self.unsent_reads.len()
            + self.reads.values().map(Vec::len).sum::<usize>()
            + self.confirmed.len()
    }
}
