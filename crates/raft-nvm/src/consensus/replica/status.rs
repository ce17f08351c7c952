//! What a replica shows about itself, taken at one moment: [`ReplicaStatus`],
//! and the public part of it an embedder watches, [`NodeStatus`].
//!
//! Every figure `INFO`, `RAFT.CONFIG`, the Prometheus exposition (server layer)
//! and the node's status channel show is read from the core and the store here,
//! once, by [`Replica::status`] and [`Replica::node_status`]; the renderers only
//! format. `INFO`'s and `RAFT.CONFIG`'s text is rendered in this file (the
//! replica answers those commands itself); the exposition is rendered by the
//! server's metrics.

use std::collections::BTreeSet;

use crate::consensus::raft::{Membership, Role};
use crate::storage::store::StoreUsage;

use super::{CompactionCounts, Replica};

/// The public status of a node, what an embedder needs to follow it: its role
/// and term, the leader it knows, how far the log is committed and applied, the
/// configuration and the store's space. Compared before it is published, so a
/// change of any field is a new status and an idle node publishes nothing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeStatus {
    /// The node's id.
    pub id: u16,
    /// Its Raft role ([`Role::name`] names it).
    pub role: Role,
    /// The current term.
    pub term: u64,
    /// The leader it knows in this term, if any.
    pub leader: Option<u16>,
    /// The highest log index known to be committed.
    pub commit_index: u64,
    /// The highest log index applied to the store.
    pub applied_index: u64,
    /// The configuration in force: voters, outgoing voters (in a joint
    /// configuration) and learners.
    pub membership: Membership,
    /// The store's space.
    pub store: StoreUsage,
}

/// Everything a replica reports, taken at one moment (see [`Replica::status`]):
/// the public [`NodeStatus`] and what operators see besides in `INFO` and the
/// metrics.
#[derive(Clone, Debug, PartialEq)]
pub struct ReplicaStatus {
    /// The public part.
    pub node: NodeStatus,
    /// The leader's client address, if known (see `INFO`'s `leader_addr`).
    pub leader_addr: Option<String>,
    /// The store's last index (appended, maybe not committed).
    pub last_index: u64,
    /// The store's last durable index.
    pub durable_index: u64,
    /// The index of the configuration's entry (0: the starting configuration).
    pub membership_index: u64,
    /// Whether a configuration change is under way.
    pub membership_pending: bool,
    /// Every member with its client address as far as this node knows it.
    pub members: Vec<(u16, Option<String>)>,
    /// A leader's followers: `(peer, match index)` (empty on other roles).
    pub followers: Vec<(u16, u64)>,
    /// The member a leadership transfer goes to, if one is under way.
    pub transfer_to: Option<u16>,
    /// Whether lease reads are configured on.
    pub lease_reads_on: bool,
    /// Reads served from the leader lease.
    pub reads_by_lease: u64,
    /// The storage engine's name.
    pub engine: &'static str,
    /// The state machine's name, if the replica runs one.
    pub state_machine: Option<String>,
    /// The write reserve in bytes (bounded stores).
    pub write_reserve: Option<u64>,
    /// Compactions and refused writes.
    pub compactions: CompactionCounts,
    /// Whether a compaction is running.
    pub compaction_in_flight: bool,
    /// Client requests waiting for an answer.
    pub pending: usize,
}

impl Replica {
    /// The public status now. Cheap: no scan, one store lock for its usage.
    pub fn node_status(&self) -> NodeStatus {
        let mut status = NodeStatus {
            id: 0,
            role: Role::Follower,
            term: 0,
            leader: None,
            commit_index: 0,
            applied_index: 0,
            membership: Membership::default(),
            store: StoreUsage::default(),
        };
        self.refresh_status(&mut status);
        status
    }

    /// Brings `status` up to now, field by field, and says whether anything
    /// changed: what a driver publishing the status calls after each
    /// [`Replica::process`], so that an idle replica publishes nothing and the
    /// configuration is cloned only when it changed.
    pub fn refresh_status(&self, status: &mut NodeStatus) -> bool {
        let core = &self.core;
        let mut changed = set(&mut status.id, core.id());
        changed |= set(&mut status.role, core.role());
        changed |= set(&mut status.term, core.term());
        changed |= set(&mut status.leader, core.leader());
        changed |= set(&mut status.commit_index, core.commit_index());
        changed |= set(&mut status.applied_index, self.store.applied());
        changed |= set(&mut status.store, self.store.usage());
        if status.membership != *core.membership() {
            status.membership = core.membership().clone();
            changed = true;
        }
        changed
    }

    /// Everything this replica reports now.
    pub fn status(&self) -> ReplicaStatus {
        let node = self.node_status();
        let members = node
            .membership
            .members()
            .into_iter()
            .map(|id| (id, self.client_addrs.get(&id).cloned()))
            .collect();
        let write_reserve = node.store.capacity.map(|c| self.reserve(c));
        ReplicaStatus {
            leader_addr: self.leader_addr(),
            last_index: self.store.last_index(),
            durable_index: self.store.durable_index(),
            membership_index: self.core.membership_index(),
            membership_pending: self.core.membership_change_pending(),
            members,
            followers: self.core.follower_matches().collect(),
            transfer_to: self.core.transferring_to(),
            lease_reads_on: self.core.config().lease_reads,
            reads_by_lease: self.lease_reads,
            engine: self.store.engine(),
            state_machine: self.machine.as_ref().map(|m| m.name().to_string()),
            write_reserve,
            compactions: self.compactor.counts,
            compaction_in_flight: self.compactor.in_flight(),
            pending: self.pending(),
            node,
        }
    }
}

/// Puts `value` in `slot`; whether it differed.
fn set<T: PartialEq>(slot: &mut T, value: T) -> bool {
    if *slot == value {
        return false;
    }
    *slot = value;
    true
}

/// `value`, or `none` when absent, as `INFO` shows an optional field.
fn or_none<T: ToString>(value: Option<T>) -> String {
    value.map_or_else(|| "none".to_string(), |v| v.to_string())
}

impl ReplicaStatus {
    /// The `INFO` text: `# Raft` and `# Store`.
    pub fn info_text(&self) -> String {
        let n = &self.node;
        format!(
            "# Raft\r\nnode_id:{}\r\nrole:{}\r\nterm:{}\r\nleader_id:{}\r\nleader_addr:{}\r\ncommit_index:{}\r\napplied_index:{}\r\nlast_index:{}\r\ndurable_index:{}\r\npeers:{}\r\n{}{}leader_transfer_to:{}\r\nlease_reads:{}\r\nreads_by_lease:{}\r\nstorage_engine:{}\r\nstate_machine:{}\r\n{}",
            n.id,
            n.role.name(),
            n.term,
            or_none(n.leader),
            or_none(self.leader_addr.as_deref()),
            n.commit_index,
            n.applied_index,
            self.last_index,
            self.durable_index,
            self.member_addresses(),
            self.membership_fields("membership_"),
            self.info_followers(),
            or_none(self.transfer_to),
            if self.lease_reads_on { "on" } else { "off" },
            self.reads_by_lease,
            self.engine,
            self.state_machine.as_deref().unwrap_or("none"),
            self.info_store(),
        )
    }

    /// `INFO`'s `# Store` section: the store's space, compactions and refused
    /// writes; then, for bounded stores, the write reserve and what writes may
    /// still use before `-OOM`; then the last compaction's longest pause and
    /// wall time.
    fn info_store(&self) -> String {
        let usage = &self.node.store;
        let c = &self.compactions;
        let mut s = format!(
            "# Store\r\nstore_used_bytes:{}\r\nstore_capacity_bytes:{}\r\nstore_free_bytes:{}\r\nstore_fill:{}\r\nstore_versions:{}\r\ncompactions:{}\r\ncompactions_emergency:{}\r\ncompactions_failed:{}\r\ncompaction_freed:{}\r\ncompaction_in_flight:{}\r\noom_refusals:{}\r\nfull_appends:{}\r\n",
            usage.used,
            usage.capacity.map_or_else(|| "unbounded".to_string(), |c| c.to_string()),
            usage.free.map_or_else(|| "unbounded".to_string(), |f| f.to_string()),
            usage.fill().map_or_else(|| "none".to_string(), |f| format!("{f:.4}")),
            usage.versions,
            c.runs,
            c.emergency,
            c.failed,
            c.freed,
            u8::from(self.compaction_in_flight),
            c.oom_refusals,
            c.full_appends,
        );
        if let (Some(reserve), Some(free)) = (self.write_reserve, usage.free) {
            s.push_str(&format!(
                "store_write_reserve_bytes:{reserve}\r\nstore_writable_bytes:{}\r\n",
                free.saturating_sub(reserve)
            ));
        }
        s.push_str(&format!(
            "compaction_last_pause_us:{}\r\ncompaction_last_duration_us:{}\r\n",
            c.last_pause_us, c.last_duration_us
        ));
        s
    }

    /// On a leader, one `follower_<id>:match=<index>,lag=<entries>` line per
    /// follower (its durable match index and how far it is behind the leader's
    /// last index), as Redis's `INFO replication` lists its replicas; nothing on
    /// other roles.
    fn info_followers(&self) -> String {
        self.followers
            .iter()
            .map(|(p, matched)| {
                format!(
                    "follower_{p}:match={matched},lag={}\r\n",
                    self.last_index.saturating_sub(*matched)
                )
            })
            .collect()
    }

    /// This node's view of the configuration (`RAFT.CONFIG`), one `field:value`
    /// line each: the voters, the outgoing voters of a joint configuration, the
    /// learners, the entry's index, whether a change is under way, and each
    /// member's client address as far as this node knows it.
    pub fn membership_text(&self) -> String {
        format!(
            "{}addresses:{}\r\n",
            self.membership_fields(""),
            self.member_addresses()
        )
    }

    /// The configuration's `field:value` lines (voters, outgoing voters,
    /// learners, the entry's index, whether a change is under way), each name
    /// after `prefix`: shared by `RAFT.CONFIG` and `INFO`.
    fn membership_fields(&self, prefix: &str) -> String {
        let m = &self.node.membership;
        let list =
            |ids: &BTreeSet<u16>| ids.iter().map(u16::to_string).collect::<Vec<_>>().join(",");
        format!(
            "{prefix}voters:{}\r\n{prefix}outgoing:{}\r\n{prefix}learners:{}\r\n{prefix}index:{}\r\n{prefix}pending:{}\r\n",
            list(&m.voters),
            list(&m.outgoing),
            list(&m.learners),
            self.membership_index,
            u8::from(self.membership_pending),
        )
    }

    /// Every member as `id@client_addr` (or `id` where its address is unknown),
    /// comma-separated.
    fn member_addresses(&self) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|(id, addr)| match addr {
                Some(a) => format!("{id}@{a}"),
                None => id.to_string(),
            })
            .collect();
        members.join(",")
    }
}

#[cfg(test)]
mod tests {
    //! `INFO` and `RAFT.CONFIG` byte for byte, as clients and the tests that
    //! parse them read them.

    use std::collections::BTreeSet;

    use super::*;

    fn status() -> ReplicaStatus {
        ReplicaStatus {
            node: NodeStatus {
                id: 1,
                role: Role::Leader,
                term: 3,
                leader: Some(1),
                commit_index: 40,
                applied_index: 39,
                membership: Membership {
                    voters: BTreeSet::from([1, 2, 3]),
                    learners: BTreeSet::from([4]),
                    ..Membership::default()
                },
                store: StoreUsage {
                    capacity: Some(1000),
                    used: 400,
                    free: Some(600),
                    versions: 7,
                },
            },
            leader_addr: Some("127.0.0.1:6379".into()),
            last_index: 42,
            durable_index: 41,
            membership_index: 5,
            membership_pending: true,
            members: vec![
                (1, Some("127.0.0.1:6379".into())),
                (2, None),
                (3, Some("h3:1".into())),
                (4, None),
            ],
            followers: vec![(2, 42), (3, 17)],
            transfer_to: Some(2),
            lease_reads_on: true,
            reads_by_lease: 9,
            engine: "list",
            state_machine: Some("counter".into()),
            write_reserve: Some(50),
            compactions: CompactionCounts {
                runs: 2,
                emergency: 1,
                failed: 0,
                freed: 8,
                oom_refusals: 3,
                full_appends: 4,
                last_pause_us: 120,
                last_duration_us: 900,
            },
            compaction_in_flight: true,
            pending: 1,
        }
    }

    #[test]
    fn info_has_its_fields_in_order() {
        let expected = "# Raft\r\nnode_id:1\r\nrole:leader\r\nterm:3\r\nleader_id:1\r\n\
            leader_addr:127.0.0.1:6379\r\ncommit_index:40\r\napplied_index:39\r\n\
            last_index:42\r\ndurable_index:41\r\npeers:1@127.0.0.1:6379,2,3@h3:1,4\r\n\
            membership_voters:1,2,3\r\nmembership_outgoing:\r\nmembership_learners:4\r\n\
            membership_index:5\r\nmembership_pending:1\r\n\
            follower_2:match=42,lag=0\r\nfollower_3:match=17,lag=25\r\n\
            leader_transfer_to:2\r\nlease_reads:on\r\nreads_by_lease:9\r\n\
            storage_engine:list\r\nstate_machine:counter\r\n\
            # Store\r\nstore_used_bytes:400\r\nstore_capacity_bytes:1000\r\n\
            store_free_bytes:600\r\nstore_fill:0.4000\r\nstore_versions:7\r\n\
            compactions:2\r\ncompactions_emergency:1\r\ncompactions_failed:0\r\n\
            compaction_freed:8\r\ncompaction_in_flight:1\r\noom_refusals:3\r\n\
            full_appends:4\r\nstore_write_reserve_bytes:50\r\nstore_writable_bytes:550\r\n\
            compaction_last_pause_us:120\r\ncompaction_last_duration_us:900\r\n";
        assert_eq!(status().info_text(), expected);
    }

    #[test]
    fn info_names_what_is_absent_and_unbounded() {
        let mut s = status();
        s.node.leader = None;
        s.leader_addr = None;
        s.transfer_to = None;
        s.state_machine = None;
        s.node.store = StoreUsage {
            capacity: None,
            used: 400,
            free: None,
            versions: 7,
        };
        s.write_reserve = None;
        let text = s.info_text();
        for line in [
            "leader_id:none\r\n",
            "leader_addr:none\r\n",
            "leader_transfer_to:none\r\n",
            "state_machine:none\r\n",
            "store_capacity_bytes:unbounded\r\n",
            "store_free_bytes:unbounded\r\n",
            "store_fill:none\r\n",
        ] {
            assert!(text.contains(line), "{line:?} missing from {text}");
        }
        assert!(!text.contains("store_write_reserve_bytes"), "{text}");
    }

    #[test]
    fn raft_config_lists_the_configuration_and_addresses() {
        assert_eq!(
            status().membership_text(),
            "voters:1,2,3\r\noutgoing:\r\nlearners:4\r\nindex:5\r\npending:1\r\n\
             addresses:1@127.0.0.1:6379,2,3@h3:1,4\r\n"
        );
    }
}
