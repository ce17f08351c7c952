//! What a run did: counts per seed, summed for the report (and to show that every
//! kind of fault and recovery actually happened).

/// What a run did (summed over seeds for the report).
#[derive(Clone, Copy, Debug, Default)]
pub struct Stats {
    pub steps: u64,
    pub crashes: u64,
    pub power_failures: u64,
    pub mid_process_crashes: u64,
    pub mid_compaction_crashes: u64,
    pub install_crashes: u64,
    /// Syncs a replica left to its driver (`SyncBy::Driver`), run
    /// steps later; crashes inside one.
    pub deferred_syncs: u64,
    pub mid_sync_crashes: u64,
    pub snapshots_sent: u64,
    pub snapshots_installed: u64,
    /// Snapshot streams that resumed a follower's installation at a later chunk.
    pub snapshots_resumed: u64,
    /// Resumed snapshots the leader's store no longer gave (started over).
    pub snapshots_stale: u64,
    /// Entries a leader read back from its store for a lagging follower.
    pub entries_from_store: u64,
    /// Processes that left log reads for a later call (answers spread out).
    pub deferred_log_reads: u64,
    pub compactions: u64,
    pub rebases: u64,
    /// Appends that found the store full (the replica dropped what did not fit).
    pub store_full: u64,
    /// Compactions the replicas' policy asked for.
    pub policy_compactions: u64,
    /// Entries a crash took from a store's log (appended, not yet durable).
    pub entries_lost: u64,
    /// Crashes that lost at least one entry.
    pub lossy_crashes: u64,
    pub terms_led: u64,
    pub partitions: u64,
    /// Client requests and replies lost on their links.
    pub client_requests_lost: u64,
    pub client_replies_lost: u64,
    pub ops_ok: u64,
    pub ops_unknown: u64,
    /// Writes refused with `OutOfMemory`.
    pub ops_oom: u64,
    /// Requests answered through the generic state machine path.
    pub ops_via_machine: u64,
    pub history: u64,
    pub messages: u64,
    pub replay_complete: u64,
    /// Crashes of list and of WAL nodes; WAL crash images with a file cut mid-write.
    pub list_crashes: u64,
    pub wal_crashes: u64,
    pub wal_torn: u64,
    /// Per-seed coverage (each 0 or 1 in a seed's counts): the seeds run, those
    /// with list / WAL nodes, and among them those where the end-of-run check that
    /// the state is the replay of the committed log ran (`replay_*`); seeds where a
    /// list node / a WAL node crashed (a WAL crash image was torn mid-write),
    /// where a snapshot was installed on a list / WAL node, and where a store was
    /// full (writes refused or appends dropped).
    pub seeds: u64,
    pub seeds_list: u64,
    pub seeds_wal: u64,
    pub replay_list: u64,
    pub replay_wal: u64,
    pub seeds_list_crash: u64,
    pub seeds_wal_crash: u64,
    pub seeds_wal_torn: u64,
    pub seeds_list_install: u64,
    pub seeds_wal_install: u64,
    pub seeds_pool_full: u64,
    /// Leadership transfers started, and those whose target then led a later term;
    /// seeds with at least one done.
    pub transfers_asked: u64,
    pub transfers_done: u64,
    pub seeds_transfer: u64,
    /// Reads served from a leader lease; seeds with leases on, and those where a
    /// lease read was served.
    pub lease_reads: u64,
    /// Node-steps at which a node held a leader lease (each checked against the
    /// other nodes' terms).
    pub lease_steps: u64,
    pub seeds_lease: u64,
    pub seeds_lease_served: u64,
    /// Membership changes asked, refused at once, and committed by kind; seeds with
    /// changes on, those where the replay check ran, and per kind those where one
    /// committed.
    pub membership_asked: u64,
    pub membership_refused: u64,
    pub learners_added: u64,
    pub promotions: u64,
    pub voters_removed: u64,
    pub leaders_removed: u64,
    pub learners_removed: u64,
    pub seeds_reconfig: u64,
    pub replay_reconfig: u64,
    pub seeds_learner_added: u64,
    pub seeds_promoted: u64,
    pub seeds_voter_removed: u64,
    pub seeds_leader_removed: u64,
    /// Reads a learner answered itself; seeds with one.
    pub learner_reads: u64,
    pub seeds_learner_read: u64,
    /// Forged peers' messages injected (`forge`); the invalid ones, all refused
    /// by validation; those of them handed to a replica all the same (its core
    /// refused them); strangers' (refused by the membership check); seeds with
    /// forgery.
    pub forged: u64,
    pub forged_invalid: u64,
    pub forged_past_transport: u64,
    pub forged_strangers: u64,
    pub seeds_forged: u64,
}

impl Stats {
    /// Adds `o` to these counts.
    pub fn add(&mut self, o: &Stats) {
        self.steps += o.steps;
        self.crashes += o.crashes;
        self.power_failures += o.power_failures;
        self.mid_process_crashes += o.mid_process_crashes;
        self.mid_compaction_crashes += o.mid_compaction_crashes;
        self.install_crashes += o.install_crashes;
        self.deferred_syncs += o.deferred_syncs;
        self.mid_sync_crashes += o.mid_sync_crashes;
        self.snapshots_sent += o.snapshots_sent;
        self.snapshots_installed += o.snapshots_installed;
        self.snapshots_resumed += o.snapshots_resumed;
        self.snapshots_stale += o.snapshots_stale;
        self.entries_from_store += o.entries_from_store;
        self.deferred_log_reads += o.deferred_log_reads;
        self.compactions += o.compactions;
        self.rebases += o.rebases;
        self.store_full += o.store_full;
        self.policy_compactions += o.policy_compactions;
        self.entries_lost += o.entries_lost;
        self.lossy_crashes += o.lossy_crashes;
        self.terms_led += o.terms_led;
        self.partitions += o.partitions;
        self.client_requests_lost += o.client_requests_lost;
        self.client_replies_lost += o.client_replies_lost;
        self.ops_ok += o.ops_ok;
        self.ops_unknown += o.ops_unknown;
        self.ops_oom += o.ops_oom;
        self.ops_via_machine += o.ops_via_machine;
        self.history += o.history;
        self.messages += o.messages;
        self.replay_complete += o.replay_complete;
        self.list_crashes += o.list_crashes;
        self.wal_crashes += o.wal_crashes;
        self.wal_torn += o.wal_torn;
        self.seeds += o.seeds;
        self.seeds_list += o.seeds_list;
        self.seeds_wal += o.seeds_wal;
        self.replay_list += o.replay_list;
        self.replay_wal += o.replay_wal;
        self.seeds_list_crash += o.seeds_list_crash;
        self.seeds_wal_crash += o.seeds_wal_crash;
        self.seeds_wal_torn += o.seeds_wal_torn;
        self.seeds_list_install += o.seeds_list_install;
        self.seeds_wal_install += o.seeds_wal_install;
        self.seeds_pool_full += o.seeds_pool_full;
        self.transfers_asked += o.transfers_asked;
        self.transfers_done += o.transfers_done;
        self.seeds_transfer += o.seeds_transfer;
        self.lease_reads += o.lease_reads;
        self.lease_steps += o.lease_steps;
        self.seeds_lease += o.seeds_lease;
        self.seeds_lease_served += o.seeds_lease_served;
        self.membership_asked += o.membership_asked;
        self.membership_refused += o.membership_refused;
        self.learners_added += o.learners_added;
        self.promotions += o.promotions;
        self.voters_removed += o.voters_removed;
        self.leaders_removed += o.leaders_removed;
        self.learners_removed += o.learners_removed;
        self.seeds_reconfig += o.seeds_reconfig;
        self.replay_reconfig += o.replay_reconfig;
        self.seeds_learner_added += o.seeds_learner_added;
        self.seeds_promoted += o.seeds_promoted;
        self.seeds_voter_removed += o.seeds_voter_removed;
        self.seeds_leader_removed += o.seeds_leader_removed;
        self.learner_reads += o.learner_reads;
        self.seeds_learner_read += o.seeds_learner_read;
        self.forged += o.forged;
        self.forged_invalid += o.forged_invalid;
        self.forged_past_transport += o.forged_past_transport;
        self.forged_strangers += o.forged_strangers;
        self.seeds_forged += o.seeds_forged;
    }
}
