//! The figures of a replica taken at one moment, and their Prometheus
//! families (`raftnvm_*`).

use crate::consensus::raft::Role;
use crate::consensus::replica::{CompactionCounts, Replica};
use crate::storage::store::StoreUsage;

use super::exposition::{Exposition, MetricType};

/// What a replica shows in the metrics, taken at one moment (see
/// [`NodeSnapshot::of`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSnapshot {
    /// The node's id.
    pub id: u16,
    /// Its role: `leader`, `follower`, `pre-candidate` or `candidate`.
    pub role: &'static str,
    /// The current term.
    pub term: u64,
    /// The leader it knows, if any.
    pub leader: Option<u16>,
    /// The commit index.
    pub commit_index: u64,
    /// The store's applied index.
    pub applied_index: u64,
    /// The store's last index.
    pub last_index: u64,
    /// The store's durable index.
    pub durable_index: u64,
    /// A leader's followers: `(peer, match index)` (empty on other roles).
    pub peers: Vec<(u16, u64)>,
    /// The storage engine's name.
    pub engine: &'static str,
    /// The store's space.
    pub usage: StoreUsage,
    /// The write reserve in bytes (bounded stores).
    pub write_reserve: Option<u64>,
    /// Compactions and refused writes.
    pub compactions: CompactionCounts,
    /// Whether a compaction is running.
    pub compaction_in_flight: bool,
    /// Client requests waiting for an answer.
    pub pending: usize,
}

/// The roles [`NodeSnapshot::role`] takes.
const ROLES: [&str; 4] = ["leader", "follower", "pre-candidate", "candidate"];

/// The name of `role` as `INFO` and the metrics show it ([`Role::name`]).
pub fn role_name(role: Role) -> &'static str {
    role.name()
}

impl NodeSnapshot {
    /// The figures of `replica` now.
    pub fn of(replica: &Replica) -> NodeSnapshot {
        let core = replica.core();
        let store = replica.store();
        let role = core.role();
        let peers = core.follower_matches().collect();
        NodeSnapshot {
            id: core.id(),
            role: role_name(role),
            term: core.term(),
            leader: core.leader(),
            commit_index: core.commit_index(),
            applied_index: store.applied(),
            last_index: store.last_index(),
            durable_index: store.durable_index(),
            peers,
            engine: store.engine(),
            usage: store.usage(),
            write_reserve: replica.write_reserve_bytes(),
            compactions: replica.compaction_counts(),
            compaction_in_flight: replica.compaction_in_flight(),
            pending: replica.pending(),
        }
    }

    /// Writes the node's families: identity and role, Raft indexes, each
    /// follower's match index and lag (on a leader), the store's space, and
    /// compactions and refused writes.
    pub fn write_prometheus(&self, e: &mut Exposition) {
        use MetricType::{Counter, Gauge};
        let id = self.id.to_string();
        e.family(
            "raftnvm_node_info",
            Gauge,
            "The node's id and storage engine (always 1).",
        );
        e.sample(
            "raftnvm_node_info",
            &[("node_id", &id), ("engine", self.engine)],
            1.0,
        );
        e.family(
            "raftnvm_role",
            Gauge,
            "1 for the node's current Raft role, 0 for the others.",
        );
        for role in ROLES {
            e.sample(
                "raftnvm_role",
                &[("role", role)],
                f64::from(u8::from(role == self.role)),
            );
        }
        e.single(
            "raftnvm_term",
            Gauge,
            "The current Raft term.",
            self.term as f64,
        );
        e.single(
            "raftnvm_leader_id",
            Gauge,
            "The leader this node knows (0: none).",
            f64::from(self.leader.unwrap_or(0)),
        );
        e.single(
            "raftnvm_commit_index",
            Gauge,
            "The highest log index known to be committed.",
            self.commit_index as f64,
        );
        e.single(
            "raftnvm_applied_index",
            Gauge,
            "The highest log index applied to the store.",
            self.applied_index as f64,
        );
        e.single(
            "raftnvm_last_index",
            Gauge,
            "The store's last log index (appended, maybe not committed).",
            self.last_index as f64,
        );
        e.single(
            "raftnvm_durable_index",
            Gauge,
            "The store's last durable log index.",
            self.durable_index as f64,
        );
        e.family(
            "raftnvm_peer_match_index",
            Gauge,
            "A leader's view of the highest index each follower holds durably.",
        );
        for (peer, matched) in &self.peers {
            e.sample(
                "raftnvm_peer_match_index",
                &[("peer", &peer.to_string())],
                *matched as f64,
            );
        }
        e.family(
            "raftnvm_peer_lag_entries",
            Gauge,
            "A leader's last index minus each follower's match index.",
        );
        for (peer, matched) in &self.peers {
            e.sample(
                "raftnvm_peer_lag_entries",
                &[("peer", &peer.to_string())],
                self.last_index.saturating_sub(*matched) as f64,
            );
        }
        e.single(
            "raftnvm_store_used_bytes",
            Gauge,
            "Bytes of the store holding records, live or dead.",
            self.usage.used as f64,
        );
        if let Some(capacity) = self.usage.capacity {
            e.single(
                "raftnvm_store_capacity_bytes",
                Gauge,
                "Bytes the store can hold in all (bounded engines only).",
                capacity as f64,
            );
        }
        if let Some(free) = self.usage.free {
            e.single(
                "raftnvm_store_free_bytes",
                Gauge,
                "Bytes still free for appends (bounded engines only; an upper bound).",
                free as f64,
            );
        }
        if let Some(fill) = self.usage.fill() {
            e.single(
                "raftnvm_store_fill_ratio",
                Gauge,
                "Used bytes over capacity (bounded engines only).",
                fill,
            );
        }
        if let Some(reserve) = self.write_reserve {
            e.single(
                "raftnvm_store_write_reserve_bytes",
                Gauge,
                "Free bytes kept back: a SET or CAS that would eat into them gets -OOM.",
                reserve as f64,
            );
        }
        e.single(
            "raftnvm_store_versions",
            Gauge,
            "Versions the store's DRAM index holds.",
            self.usage.versions as f64,
        );
        let c = &self.compactions;
        e.single(
            "raftnvm_compactions_total",
            Counter,
            "Compactions that completed.",
            c.runs as f64,
        );
        e.single(
            "raftnvm_compactions_emergency_total",
            Counter,
            "Completed compactions that were emergency runs (high fill or a refused write).",
            c.emergency as f64,
        );
        e.single(
            "raftnvm_compactions_failed_total",
            Counter,
            "Compactions that failed.",
            c.failed as f64,
        );
        e.single(
            "raftnvm_compaction_freed_total",
            Counter,
            "Pages (list) or bytes (WAL) compactions gave back.",
            c.freed as f64,
        );
        e.single(
            "raftnvm_compaction_in_flight",
            Gauge,
            "1 while a compaction runs.",
            f64::from(u8::from(self.compaction_in_flight)),
        );
        e.single(
            "raftnvm_compaction_last_pause_seconds",
            Gauge,
            "The longest time the last completed compaction held up a reader or writer.",
            c.last_pause_us as f64 / 1e6,
        );
        e.single(
            "raftnvm_compaction_last_duration_seconds",
            Gauge,
            "The wall time of the last completed compaction.",
            c.last_duration_us as f64 / 1e6,
        );
        e.single(
            "raftnvm_oom_refusals_total",
            Counter,
            "Writes refused because the store is full (-OOM).",
            c.oom_refusals as f64,
        );
        e.single(
            "raftnvm_full_appends_total",
            Counter,
            "Appends that found the store full (their entries were dropped).",
            c.full_appends as f64,
        );
        e.single(
            "raftnvm_pending_requests",
            Gauge,
            "Client requests waiting for an answer.",
            self.pending as f64,
        );
    }
}
