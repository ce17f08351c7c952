//! A replica's Prometheus families (`raftnvm_*`), written from its
//! [`ReplicaStatus`] (the same figures `INFO` shows, taken once).

use crate::consensus::replica::ReplicaStatus;

use super::exposition::Exposition;
use super::exposition::MetricType::{Counter, Gauge};

/// The roles `raftnvm_role` has a sample for.
const ROLES: [&str; 4] = ["leader", "follower", "pre-candidate", "candidate"];

/// Writes `s`'s families: identity and role, Raft indexes, each follower's
/// match index and lag (on a leader), the store's space, and compactions and
/// refused writes.
pub fn write_status(s: &ReplicaStatus, e: &mut Exposition) {
    write_identity(s, e);
    write_indexes(s, e);
    write_store(s, e);
    write_compactions(s, e);
}

/// The node's id, engine, role, term and known leader.
fn write_identity(s: &ReplicaStatus, e: &mut Exposition) {
    let id = s.node.id.to_string();
    e.family(
        "raftnvm_node_info",
        Gauge,
        "The node's id and storage engine (always 1).",
    );
    e.sample(
        "raftnvm_node_info",
        &[("node_id", &id), ("engine", s.engine)],
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
            f64::from(u8::from(role == s.node.role.name())),
        );
    }
    e.single(
        "raftnvm_term",
        Gauge,
        "The current Raft term.",
        s.node.term as f64,
    );
    e.single(
        "raftnvm_leader_id",
        Gauge,
        "The leader this node knows (0: none).",
        f64::from(s.node.leader.unwrap_or(0)),
    );
}

/// The Raft indexes, and (on a leader) each follower's match index and lag.
fn write_indexes(s: &ReplicaStatus, e: &mut Exposition) {
    e.single(
        "raftnvm_commit_index",
        Gauge,
        "The highest log index known to be committed.",
        s.node.commit_index as f64,
    );
    e.single(
        "raftnvm_applied_index",
        Gauge,
        "The highest log index applied to the store.",
        s.node.applied_index as f64,
    );
    e.single(
        "raftnvm_last_index",
        Gauge,
        "The store's last log index (appended, maybe not committed).",
        s.last_index as f64,
    );
    e.single(
        "raftnvm_durable_index",
        Gauge,
        "The store's last durable log index.",
        s.durable_index as f64,
    );
    e.family(
        "raftnvm_peer_match_index",
        Gauge,
        "A leader's view of the highest index each follower holds durably.",
    );
    for (peer, matched) in &s.followers {
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
    for (peer, matched) in &s.followers {
        e.sample(
            "raftnvm_peer_lag_entries",
            &[("peer", &peer.to_string())],
            s.last_index.saturating_sub(*matched) as f64,
        );
    }
}

/// The store's space: used, capacity, free, fill, the write reserve, versions.
fn write_store(s: &ReplicaStatus, e: &mut Exposition) {
    e.single(
        "raftnvm_store_used_bytes",
        Gauge,
        "Bytes of the store holding records, live or dead.",
        s.node.store.used as f64,
    );
    if let Some(capacity) = s.node.store.capacity {
        e.single(
            "raftnvm_store_capacity_bytes",
            Gauge,
            "Bytes the store can hold in all (bounded engines only).",
            capacity as f64,
        );
    }
    if let Some(free) = s.node.store.free {
        e.single(
            "raftnvm_store_free_bytes",
            Gauge,
            "Bytes still free for appends (bounded engines only; an upper bound).",
            free as f64,
        );
    }
    if let Some(fill) = s.node.store.fill() {
        e.single(
            "raftnvm_store_fill_ratio",
            Gauge,
            "Used bytes over capacity (bounded engines only).",
            fill,
        );
    }
    if let Some(reserve) = s.write_reserve {
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
        s.node.store.versions as f64,
    );
}

/// Compactions, refused writes and the requests waiting.
fn write_compactions(s: &ReplicaStatus, e: &mut Exposition) {
    let c = &s.compactions;
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
        f64::from(u8::from(s.compaction_in_flight)),
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
        s.pending as f64,
    );
}
