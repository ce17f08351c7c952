//! The cluster: real [`Replica`]s on simulated pools, driven step by step by one
//! seeded generator through the faulty network, with clients, crashes, restarts and
//! compaction, checked after every step.
//!
//! One step of simulated time: inject faults (crashes, power failures, partitions,
//! healing, armed install crashes), restart nodes whose outage ended, tick every node
//! whose tick is due (with drift: a tick is sometimes missed or doubled), deliver the
//! messages due, let clients send and time out, `process` every live node and carry
//! out its output (a node may crash inside `process`: at a fence of its trace, its
//! output discarded), compact some stores, rebase long traces, and check.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use raft_nvm::machine::KvMachine;
use raft_nvm::raft::{Config, MessageBody, Role};
use raft_nvm::replica::{
    stream_snapshot, Output, Replica, ReplicaConfig, StoreProvider, Streamed, SyncBy,
    LOG_READ_ENTRIES_PER_PROCESS,
};
use raft_nvm::service::{KvReply, KvRequest};
use raft_nvm::{HardState, StoreError};

use super::checks::Checker;
use super::clients::Clients;
use super::events::{record, show_call, Ev};
use super::forge::{self, Forger};
use super::net::{Faults, Net};
use super::params::Params;
use super::pmem::{crash_image, lock, maybe_rebase, InstallCrash, SimProvider, Slot};
use super::reconfig::{self, Kind, Reconfig};
use super::rng::{seeded, Rng};
use super::stats::Stats;
use super::wal::{self, SimWalProvider, WalSlot};

/// What a store claimed durable when its node crashed at the end of its trace; the
/// recovered store must still hold it.
#[derive(Clone, Debug)]
struct Claims {
    hard_state: HardState,
    durable: u64,
    /// Terms of the newest durable entries.
    terms: Vec<(u64, u64)>,
}

/// A node's durable media: a simulated pool (list) or a directory (WAL).
enum Disk {
    List(Arc<Mutex<Slot>>),
    Wal(Arc<Mutex<WalSlot>>),
}

impl Disk {
    /// A count that grows with every write to the media (the recorder's events, or
    /// the WAL's checkpoints); a crash inside a call is placed after such a count.
    fn events(&self) -> usize {
        match self {
            Disk::List(s) => lock(s).domain.as_ref().expect("pool").event_count(),
            Disk::Wal(s) => wal::lock(s).events(),
        }
    }

    /// The state a crash inside the next calls starts from (WAL: forget older
    /// checkpoints).
    fn mark(&self) {
        if let Disk::Wal(s) = self {
            wal::lock(s).mark();
        }
    }

    fn installs(&self) -> u64 {
        match self {
            Disk::List(s) => lock(s).installs,
            Disk::Wal(s) => wal::lock(s).installs,
        }
    }

    /// An armed installation crash fired (the list's slot forgets it here, the
    /// WAL's when its crash image is taken).
    fn fired(&self) -> Option<InstallCrash> {
        match self {
            Disk::List(s) => lock(s).fired.take(),
            Disk::Wal(s) => wal::lock(s).fired,
        }
    }

    fn arm(&self, how: Option<InstallCrash>) {
        match self {
            Disk::List(s) => lock(s).arm = how,
            Disk::Wal(s) => wal::lock(s).arm = how,
        }
    }

    fn is_wal(&self) -> bool {
        matches!(self, Disk::Wal(_))
    }
}

struct Node {
    replica: Option<Replica>,
    disk: Disk,
    restarts: u64,
    down_until: u64,
    phase: u64,
    claims: Option<Claims>,
    /// The last index when the node crashed.
    last_before_crash: Option<u64>,
    /// The replica asked for a compaction (`Output::compact`): `maintain` runs it.
    compact_asked: bool,
    /// The replica leaves syncs to the driver (`SyncBy::Driver`,
    /// some nodes, from their seed): the step at which the one it asked for runs,
    /// and how many steps such a sync waits.
    sync_due: Option<u64>,
    sync_delay: u64,
}

/// A whole cluster.
pub struct Cluster {
    seed: u64,
    /// Simulated time, in steps.
    pub now: u64,
    rng: Rng,
    p: Params,
    nodes: BTreeMap<u16, Node>,
    net: Net,
    clients: Clients,
    checker: Checker,
    addrs: BTreeMap<u16, String>,
    heal_at: u64,
    /// Losses on the client links (requests and replies).
    client_links: ClientLinks,
    /// Leadership transfers asked of the leader.
    transfers: Transfers,
    /// Lease reads: on in this seed (its own generator; needs check-quorum), and
    /// the clock drift they assume is kept.
    lease: Lease,
    /// Membership changes asked of the leader (some seeds).
    reconfig: Reconfig,
    /// Forged peers' messages (some seeds).
    forger: Forger,
    /// Counts.
    pub stats: Stats,
}

/// Leadership transfers (`RAFT.TRANSFER-LEADER`) asked of the leader at random
/// steps, drawn from a generator of their own (every other fault of a seed stays
/// where it was). The one in progress is followed until its target leads a later
/// term (done) or another node does (not counted).
struct Transfers {
    /// Per mille per step.
    rate: u32,
    rng: Rng,
    /// `(target, the term it was asked in)`.
    pending: Option<(u16, u64)>,
}

/// Lease reads in a seed. The simulation's clocks drift (a node's tick is
/// sometimes missed or doubled); with leases on, a node drifts at most once per
/// `2 × election_ticks_max` of its ticks, so two nodes drift apart by at most two
/// ticks over an election timeout: the `lease_drift_ticks` the replicas assume.
struct Lease {
    on: bool,
    /// Per node: its ticks since its last drift.
    since_drift: BTreeMap<u16, u64>,
    /// Reads served by lease, by replicas no longer running.
    served_by_gone: u64,
}

impl Lease {
    const DRIFT_TICKS: u32 = 2;

    fn new(seed: u64, check_quorum: bool) -> Lease {
        let mut rng = seeded(seed ^ 0x6c65_6173_6572_6473);
        Lease {
            on: check_quorum && rng.chance(400),
            since_drift: BTreeMap::new(),
            served_by_gone: 0,
        }
    }
}

impl Transfers {
    fn new(seed: u64) -> Transfers {
        let mut rng = seeded(seed ^ 0x7472_616e_7366_6572);
        let rate = rng.pick(&[0u32, 3, 10, 30]);
        Transfers {
            rate,
            rng,
            pending: None,
        }
    }
}

/// Faults on the links between clients and nodes: a request or a reply is lost
/// (the client times out). Drawn from a generator of their own, so that adding them
/// left every other fault of a seed where it was.
struct ClientLinks {
    /// Per mille per request and per reply.
    loss: u32,
    rng: Rng,
}

impl ClientLinks {
    fn new(seed: u64) -> ClientLinks {
        let mut rng = seeded(seed ^ 0x636c_6965_6e74_6c6b);
        let loss = rng.pick(&[0u32, 0, 20, 80]);
        ClientLinks { loss, rng }
    }

    fn lose(&mut self) -> bool {
        self.rng.chance(self.loss)
    }
}

impl Cluster {
    /// The cluster of `seed`, every node started on a fresh pool.
    pub fn new(seed: u64) -> Cluster {
        let mut rng = seeded(seed);
        let p = Params::for_seed(seed, &mut rng);
        let founders: Vec<u16> = (1..=p.n).collect();
        let reconfig = Reconfig::new(seed, p.n);
        let ids: Vec<u16> = founders.iter().chain(&reconfig.spares).copied().collect();
        let addrs: BTreeMap<u16, String> = ids
            .iter()
            .map(|&i| (i, format!("10.0.0.{i}:6379")))
            .collect();
        // With membership changes, clients talk to the spares too: a learner
        // serves reads itself (through its leader's read index).
        let client_nodes = if reconfig.on { ids.clone() } else { founders };
        let clients = Clients::new(p.clients.clone(), client_nodes, &addrs);
        let nodes = ids
            .iter()
            .map(|&id| {
                let phase = rng.below(p.tick_every);
                let disk = if p.wal_nodes.contains(&id) {
                    Disk::Wal(Arc::new(Mutex::new(WalSlot::new())))
                } else {
                    Disk::List(Arc::new(Mutex::new(Slot::default())))
                };
                (
                    id,
                    Node {
                        replica: None,
                        disk,
                        restarts: 0,
                        down_until: 0,
                        phase,
                        claims: None,
                        last_before_crash: None,
                        compact_asked: false,
                        sync_due: None,
                        sync_delay: 0,
                    },
                )
            })
            .collect();
        let lease = Lease::new(seed, p.check_quorum);
        let mut c = Cluster {
            seed,
            now: 0,
            net: Net::new(p.faults.clone()),
            rng,
            p,
            nodes,
            clients,
            checker: Checker::default(),
            addrs,
            heal_at: 0,
            transfers: Transfers::new(seed),
            lease,
            reconfig,
            forger: Forger::new(seed),
            client_links: ClientLinks::new(seed),
            stats: Stats::default(),
        };
        for id in ids {
            c.start(id);
        }
        c
    }

    /// The parameters, for the failure report.
    pub fn params(&self) -> &Params {
        &self.p
    }

    fn ids(&self) -> Vec<u16> {
        self.nodes.keys().copied().collect()
    }

    fn up(&self) -> Vec<u16> {
        self.nodes
            .iter()
            .filter(|(_, n)| n.replica.is_some())
            .map(|(&id, _)| id)
            .collect()
    }

    fn replica(&mut self, id: u16) -> Option<&mut Replica> {
        self.nodes.get_mut(&id).and_then(|n| n.replica.as_mut())
    }

    /// Node `id`'s replica if it is still incarnation `epoch` (a snapshot stream's
    /// fate reaches only the driver that sent it).
    fn sender(&mut self, id: u16, epoch: u64) -> Option<&mut Replica> {
        self.nodes
            .get_mut(&id)
            .filter(|n| n.restarts == epoch)
            .and_then(|n| n.replica.as_mut())
    }

    /// Opens node `id`'s replica from its slot (a fresh pool or a crash image).
    fn start(&mut self, id: u16) {
        let node = self.nodes.get_mut(&id).expect("node");
        let mut raft = Config::new(id, (1..=self.p.n).collect());
        if id > self.p.n {
            // A spare starts as a learner of the founders' cluster: it follows a
            // leader once a configuration names it, and never campaigns before.
            raft.learners = vec![id];
        }
        raft.pre_vote = self.p.pre_vote;
        raft.check_quorum = self.p.check_quorum;
        raft.election_ticks_min = self.p.election.0;
        raft.election_ticks_max = self.p.election.1;
        raft.heartbeat_ticks = self.p.heartbeat;
        raft.window_entries = self.p.window;
        raft.max_entries_per_msg = self.p.per_msg;
        raft.max_inflight_msgs = self.p.inflight;
        raft.seed = self
            .seed
            .wrapping_mul(31)
            .wrapping_add(u64::from(id))
            .wrapping_add(node.restarts.wrapping_mul(7919));
        // Some nodes serve one entry's worth of log reads per process, so answers
        // are spread over many calls (and outlive crashes and elections); taken
        // from the node's seed, not the simulation's generator, to keep schedules.
        let log_read_budget = [1, 16, LOG_READ_ENTRIES_PER_PROCESS][(raft.seed % 3) as usize];
        // Half the nodes leave their syncs to the driver, which runs each one to
        // three steps later (as a node's sync thread would, while messages keep
        // arriving); also from the node's seed.
        let sync_delay = (raft.seed / 3) % 6;
        let mut cfg = ReplicaConfig::new(raft, self.addrs.clone());
        cfg.log_read_budget = log_read_budget;
        if sync_delay < 3 {
            cfg.sync_by = SyncBy::Driver;
        }
        cfg.machine = Some(Arc::new(KvMachine));
        cfg.raft.lease_reads = self.lease.on;
        cfg.raft.lease_drift_ticks = Lease::DRIFT_TICKS;
        let provider: Box<dyn StoreProvider> = match &node.disk {
            Disk::List(slot) => Box::new(SimProvider::new(self.p.pool.clone(), Arc::clone(slot))),
            Disk::Wal(slot) => Box::new(SimWalProvider::new(self.p.wal.clone(), Arc::clone(slot))),
        };
        let r = Replica::open(cfg, provider)
            .unwrap_or_else(|e| panic!("n{id} does not restart from its crash image: {e}"));
        let store = r.store();
        if let Some(before) = node.last_before_crash.take() {
            let lost = before.saturating_sub(store.last_index());
            self.stats.entries_lost += lost;
            self.stats.lossy_crashes += u64::from(lost > 0);
        }
        if let Some(c) = node.claims.take() {
            assert_eq!(
                store.hard_state(),
                c.hard_state,
                "n{id}: the durable hard state was lost in the crash"
            );
            assert!(
                store.last_index() >= c.durable,
                "n{id}: recovered up to {}, but {} was durable before the crash",
                store.last_index(),
                c.durable
            );
            for (i, t) in c.terms {
                if let Some(now) = store.term_at(i) {
                    assert_eq!(now, t, "n{id}: durable entry {i} changed in the crash");
                }
            }
        }
        record(
            self.now,
            Ev::Restart {
                node: id,
                last: store.last_index(),
                applied: store.applied(),
                term: store.hard_state().term,
            },
        );
        self.checker.opened(id, &r);
        node.replica = Some(r);
        node.sync_due = None;
        node.sync_delay = sync_delay;
    }

    /// Crashes node `id`: its store becomes a crash image of its pool (at the end of
    /// the trace, or at a fence from event `from` on), its memory and inbox are gone.
    fn crash(&mut self, id: u16, from: Option<usize>, why: &str) {
        let now = self.now;
        let outage = self.rng.range(5, self.p.outage);
        let node = self.nodes.get_mut(&id).expect("node");
        let Some(r) = node.replica.take() else { return };
        self.lease.served_by_gone += r.lease_reads();
        let store = r.store();
        node.last_before_crash = Some(store.last_index());
        node.claims = from.is_none().then(|| {
            let durable = store.durable_index();
            Claims {
                hard_state: store.hard_state(),
                durable,
                terms: (durable.saturating_sub(8).max(1)..=durable)
                    .filter_map(|i| store.term_at(i).map(|t| (i, t)))
                    .collect(),
            }
        });
        drop(store);
        let how = match &node.disk {
            Disk::List(slot) => {
                let domain = lock(slot).domain.clone().expect("a live store's pool");
                let img = crash_image(&domain, from, &mut self.rng);
                drop(r);
                let mut slot = lock(slot);
                slot.image = Some(img.image);
                slot.domain = None;
                slot.arm = None;
                slot.fired = None;
                self.stats.list_crashes += 1;
                img.how
            }
            Disk::Wal(slot) => {
                drop(r);
                let mut slot = wal::lock(slot);
                let (img, how) = slot.crash_image(from, &mut self.rng);
                slot.image = Some(img);
                slot.arm = None;
                slot.fired = None;
                slot.install_images.clear();
                self.stats.wal_crashes += 1;
                self.stats.wal_torn += u64::from(wal::is_torn(&how));
                format!("WAL files {how}")
            }
        };
        node.restarts += 1;
        node.down_until = now + outage;
        for (from, epoch) in self.net.purge_to(id) {
            if let Some(r) = self.sender(from, epoch) {
                r.report_snapshot_failed(id);
            }
        }
        self.stats.crashes += 1;
        record(
            now,
            Ev::Crash {
                node: id,
                how: format!("{why}, {how}"),
            },
        );
    }

    /// One step; `chaos` enables the faults.
    pub fn step(&mut self, chaos: bool) {
        self.now += 1;
        self.stats.steps += 1;
        if chaos {
            self.faults();
        }
        for id in self.ids() {
            let n = &self.nodes[&id];
            if n.replica.is_none()
                && (n.down_until <= self.now || !chaos)
                && !self.reconfig.retired.contains(&id)
            {
                self.start(id);
            }
        }
        self.tick();
        self.deliver();
        if chaos && self.forger.now() {
            self.forge();
        }
        for (node, token, req) in self.clients.send(self.now, &mut self.rng) {
            if chaos && self.client_links.lose() {
                self.stats.client_requests_lost += 1;
                record(
                    self.now,
                    Ev::Net(format!("request {token} to n{node} lost")),
                );
                continue;
            }
            match self.nodes.get_mut(&node).and_then(|n| n.replica.as_mut()) {
                Some(r) => {
                    if let Some(reply) = r.request(token, req) {
                        self.clients
                            .reply(self.now, node, token, reply, &mut self.rng);
                    }
                }
                None => self.clients.unreachable(self.now, token, &mut self.rng),
            }
        }
        for id in self.up() {
            self.process(id, chaos);
        }
        self.clients.timeouts(self.now, &mut self.rng);
        self.run_syncs(chaos);
        self.maintain(chaos);
        for id in self.up() {
            let r = self.nodes[&id].replica.as_ref().expect("up");
            self.checker.check_node(self.now, id, r);
        }
        if self.reconfig.on {
            self.retire_removed();
        }
        if self.lease.on {
            self.check_leases();
        }
    }

    /// The lease's promise, checked at every step whatever the clients do: while a
    /// node holds a leader lease, no node leads a later term.
    fn check_leases(&mut self) {
        let cores: Vec<(u16, &raft_nvm::raft::RaftCore)> = self
            .nodes
            .iter()
            .filter_map(|(&id, n)| n.replica.as_ref().map(|r| (id, r.core())))
            .collect();
        for &(id, core) in &cores {
            if core.lease().is_none() {
                continue;
            }
            self.stats.lease_steps += 1;
            if let Some(&(other, newer)) = cores
                .iter()
                .find(|(o, c)| *o != id && c.role() == Role::Leader && c.term() > core.term())
            {
                panic!(
                    "lease: n{id} holds a lease in term {} while n{other} leads term {} (step {})",
                    core.term(),
                    newer.term(),
                    self.now
                );
            }
        }
    }

    /// The live node leading the newest term, if any.
    fn leader(&self) -> Option<u16> {
        self.nodes
            .iter()
            .filter_map(|(&id, n)| n.replica.as_ref().map(|r| (id, r.core())))
            .filter(|(_, c)| c.role() == Role::Leader)
            .max_by_key(|(_, c)| c.term())
            .map(|(id, _)| id)
    }

    /// A node to hit: the leader half the time (leader changes are where
    /// uncommitted entries are lost), otherwise any of `among`.
    fn target(&mut self, among: &[u16]) -> u16 {
        match self.leader() {
            Some(l) if among.contains(&l) && self.rng.chance(500) => l,
            _ => self.rng.pick(among),
        }
    }

    fn faults(&mut self) {
        let up = self.up();
        if !up.is_empty() && self.rng.chance(self.p.crash) {
            let id = self.target(&up);
            self.crash(id, None, "crash");
        }
        if !up.is_empty() && self.rng.chance(self.p.power) {
            self.stats.power_failures += 1;
            for id in self.up() {
                self.crash(id, None, "power failure");
            }
        }
        if self.rng.chance(self.p.install_crash) {
            let id = self.rng.pick(&self.ids());
            let how = if self.rng.chance(500) {
                InstallCrash::BeforeSwap
            } else {
                InstallCrash::AfterSwap
            };
            self.nodes[&id].disk.arm(Some(how));
        }
        if self.net.partitioned() {
            if self.now >= self.heal_at {
                self.net.heal();
                record(self.now, Ev::Net("healed".into()));
            }
        } else if self.rng.chance(self.p.partition) {
            self.partition();
        }
        self.transfer();
        self.reconfigure();
    }

    /// Maybe asks the leader for a membership change (see `reconfig.rs`).
    fn reconfigure(&mut self) {
        if let Some((_, _, node, epoch)) = self.reconfig.pending {
            let n = &self.nodes[&node];
            if n.replica.is_none() || n.restarts != epoch {
                // The node asked crashed: its answer is lost with it.
                self.reconfig.pending = None;
            }
        }
        if !self.reconfig.due() {
            return;
        }
        let Some(l) = self.leader() else {
            return;
        };
        let all = self.ids();
        let Some(r) = self.nodes.get_mut(&l).and_then(|n| n.replica.as_mut()) else {
            return;
        };
        let m = r.core().membership().clone();
        let Some((change, kind)) = self.reconfig.pick(l, &m.voters, &m.learners, &all) else {
            return;
        };
        let token = self.reconfig.token();
        let reply = r.request(token, KvRequest::ChangeMembership(change.clone()));
        record(
            self.now,
            Ev::Net(format!("n{l} asked for {change:?} ({m}): {reply:?}")),
        );
        self.stats.membership_asked += 1;
        let epoch = self.nodes[&l].restarts;
        match reply {
            None => self.reconfig.pending = Some((token, kind, l, epoch)),
            Some(_) => self.stats.membership_refused += 1,
        }
    }

    /// The answer to a membership change (its entry committed, or its fate unknown).
    fn membership_answered(&mut self, token: u64, reply: &KvReply) {
        let Some((pending, kind, _, _)) = self.reconfig.pending else {
            return;
        };
        if pending != token {
            return;
        }
        self.reconfig.pending = None;
        if *reply != KvReply::Done {
            return;
        }
        let st = &mut self.stats;
        match kind {
            Kind::AddLearner => st.learners_added += 1,
            Kind::Promote => st.promotions += 1,
            Kind::RemoveVoter => st.voters_removed += 1,
            Kind::RemoveLeader => st.leaders_removed += 1,
            Kind::RemoveLearner => st.learners_removed += 1,
        }
    }

    /// The members of the newest leader's configuration, once it is committed
    /// (`None` while a change is under way or no node leads).
    ///
    /// Only a leader of the newest term any node ever led counts: a deposed
    /// leader cut off since (its term older) still believes in an old
    /// configuration.
    fn committed_members(&mut self) -> Option<std::collections::BTreeSet<u16>> {
        for n in self.nodes.values() {
            if let Some(c) = n.replica.as_ref().map(|r| r.core()) {
                if c.role() == Role::Leader {
                    self.reconfig.newest_led_term = self.reconfig.newest_led_term.max(c.term());
                }
            }
        }
        let l = self.leader()?;
        let core = self.nodes[&l].replica.as_ref()?.core();
        (core.term() == self.reconfig.newest_led_term && !core.membership_change_pending())
            .then(|| core.membership().members())
    }

    /// Stops for good every node whose removal is committed.
    fn retire_removed(&mut self) {
        let Some(members) = self.committed_members() else {
            return;
        };
        self.reconfig.committed_member.extend(&members);
        let gone: Vec<u16> = self
            .reconfig
            .committed_member
            .iter()
            .copied()
            .filter(|id| !members.contains(id) && !self.reconfig.retired.contains(id))
            .collect();
        for id in gone {
            self.reconfig.retired.insert(id);
            if self.nodes[&id].replica.is_some() {
                self.crash(id, None, "retired (its removal committed)");
            }
            record(self.now, Ev::Net(format!("n{id} retired")));
        }
    }

    /// Maybe asks the leader to hand its leadership to another node (up or down:
    /// a transfer to a crashed node must time out harmlessly), and follows the
    /// transfer in progress.
    fn transfer(&mut self) {
        let leader = self.leader();
        if let (Some((target, term)), Some(l)) = (self.transfers.pending, leader) {
            let lead_term = self.nodes[&l]
                .replica
                .as_ref()
                .map_or(0, |r| r.core().term());
            if lead_term > term {
                if l == target {
                    self.stats.transfers_done += 1;
                    record(self.now, Ev::Net(format!("transfer to n{target} done")));
                }
                self.transfers.pending = None;
            }
        }
        if !self.transfers.rng.chance(self.transfers.rate) {
            return;
        }
        let Some(l) = leader else {
            return;
        };
        let others: Vec<u16> = self.ids().into_iter().filter(|&id| id != l).collect();
        let target = self.transfers.rng.pick(&others);
        let Some(r) = self.nodes.get_mut(&l).and_then(|n| n.replica.as_mut()) else {
            return;
        };
        let term = r.core().term();
        let reply = r.request(u64::MAX, KvRequest::TransferLeader { to: Some(target) });
        record(
            self.now,
            Ev::Net(format!(
                "n{l} asked to hand leadership to n{target}: {reply:?}"
            )),
        );
        if reply == Some(KvReply::Done) {
            self.stats.transfers_asked += 1;
            self.transfers.pending = Some((target, term));
        }
    }

    fn partition(&mut self) {
        let mut ids = self.ids();
        self.rng.shuffle(&mut ids);
        let first = self.target(&ids);
        let at = ids.iter().position(|&i| i == first).expect("a node");
        ids.swap(0, at);
        match self.rng.below(4) {
            0 | 1 => {
                // A minority (one node, or two of five) cut off both ways.
                let k = if ids.len() == 5 && self.rng.chance(500) {
                    2
                } else {
                    1
                };
                let (a, b) = ids.split_at(k);
                self.net.split(a, b);
            }
            2 => {
                // Some links cut one way.
                for _ in 0..self.rng.range(1, 3) {
                    let (a, b) = (ids[0], ids[1]);
                    self.net.cut(a, b);
                    self.rng.shuffle(&mut ids);
                }
            }
            _ => {
                // A node that hears everyone but nobody hears (or the reverse).
                let x = ids[0];
                let out = self.rng.chance(500);
                for &y in &ids[1..] {
                    if out {
                        self.net.cut(x, y);
                    } else {
                        self.net.cut(y, x);
                    }
                }
            }
        }
        self.stats.partitions += 1;
        self.heal_at = self.now + self.rng.range(10, self.p.outage);
        record(self.now, Ev::Net(self.net.describe()));
    }

    fn tick(&mut self) {
        let (now, every) = (self.now, self.p.tick_every);
        let bound = 2 * u64::from(self.p.election.1);
        for (&id, n) in self.nodes.iter_mut() {
            let Some(r) = n.replica.as_mut() else {
                continue;
            };
            if (now + n.phase) % every != 0 {
                continue;
            }
            // Clock drift: a tick is sometimes missed or doubled (with leases on,
            // at most once per `bound` ticks of the node: see `Lease`).
            let mut drift = self.rng.below(100);
            if self.lease.on {
                let since = self.lease.since_drift.entry(id).or_insert(0);
                *since += 1;
                if drift < 2 && *since < bound {
                    drift = 2;
                } else if drift < 2 {
                    *since = 0;
                }
            }
            match drift {
                0 => {}
                1 => {
                    r.tick();
                    r.tick();
                }
                _ => r.tick(),
            }
        }
    }

    fn deliver(&mut self) {
        for f in self.net.due(self.now, &mut self.rng) {
            let (from, to, kind, term) = (f.msg.from, f.msg.to, f.msg.body.kind(), f.msg.term);
            let why = if f.lost {
                Some("lost")
            } else if self.net.blocked(from, to) {
                Some("link cut")
            } else if self.nodes[&to].replica.is_none() {
                Some("recipient down")
            } else {
                None
            };
            let last_chunk = matches!(f.msg.body, MessageBody::SnapshotChunk { done: true, .. });
            let noisy = matches!(
                f.msg.body,
                MessageBody::Heartbeat { .. } | MessageBody::HeartbeatResp { .. }
            );
            if let Some(why) = why {
                if !noisy {
                    record(
                        self.now,
                        Ev::Drop {
                            from,
                            to,
                            kind,
                            why,
                        },
                    );
                }
                if let Some(epoch) = f.epoch {
                    // The stream broke: the sender's driver learns it.
                    if let Some(r) = self.sender(from, epoch) {
                        r.report_snapshot_failed(to);
                    }
                }
                continue;
            }
            if !noisy {
                record(
                    self.now,
                    Ev::Deliver {
                        from,
                        to,
                        kind,
                        term,
                    },
                );
            }
            self.replica(to).expect("up").step(f.msg);
            if let (true, Some(epoch)) = (last_chunk, f.epoch) {
                // The whole stream went through: the sender's driver learns it.
                if let Some(r) = self.sender(from, epoch) {
                    r.report_snapshot_sent(to);
                }
            }
        }
    }

    /// Injects one forged message into a running node (see `forge`): an invalid
    /// one must fail validation, and, handed to the replica all the same, change
    /// nothing; a stranger's must change nothing either.
    fn forge(&mut self) {
        let up = self.up();
        if up.is_empty() {
            return;
        }
        let to = self.forger.pick(&up);
        let members = self.ids();
        let core = self.nodes[&to].replica.as_ref().expect("up").core();
        let before = (core.term(), core.last_index(), core.commit_index());
        let f = self.forger.forge(to, core, &members);
        let (from, kind, what) = (f.msg.from, f.msg.body.kind(), f.what);
        self.stats.forged += 1;
        let verdict = f.msg.validate(&forge::limits());
        if f.invalid {
            assert!(
                verdict.is_err(),
                "a forged {kind} ({what}) from {from} passed validation"
            );
            self.stats.forged_invalid += 1;
            if !self.forger.bypass_transport() {
                record(
                    self.now,
                    Ev::Net(format!(
                        "forged {kind} ({what}) from {from} to n{to}: refused by the transport"
                    )),
                );
                return;
            }
            self.stats.forged_past_transport += 1;
        }
        let stranger = what == "stranger";
        self.stats.forged_strangers += u64::from(stranger);
        record(
            self.now,
            Ev::Net(format!("forged {kind} ({what}) from {from} to n{to}")),
        );
        let r = self.replica(to).expect("up");
        r.step(f.msg);
        if f.invalid || stranger {
            let core = r.core();
            let after = (core.term(), core.last_index(), core.commit_index());
            assert_eq!(
                before, after,
                "n{to} took a forged {kind} ({what}) from {from}: (term, last, commit) moved"
            );
        }
    }

    /// Runs node `id`'s `process` and carries out its output.
    fn process(&mut self, id: u16, chaos: bool) {
        let node = self.nodes.get_mut(&id).expect("node");
        let Some(r) = node.replica.as_mut() else {
            return;
        };
        node.disk.mark();
        let installs = node.disk.installs();
        let before = node.disk.events();
        let full_before = r.compaction_counts().full_appends;
        let mut out = Output::default();
        let result = r.process(&mut out);
        // A full store no longer stops the replica: it drops what did not fit.
        self.stats.store_full += r.compaction_counts().full_appends - full_before;
        node.compact_asked |= out.compact;
        if out.sync && node.sync_due.is_none() {
            node.sync_due = Some(self.now + node.sync_delay + 1);
        }
        let (fired, installed) = (node.disk.fired(), node.disk.installs() != installs);
        self.stats.snapshots_installed += u64::from(installed);
        self.stats.entries_from_store += out.entries_from_store;
        self.stats.deferred_log_reads += u64::from(r.has_deferred_work());
        match result {
            Ok(()) => {}
            Err(e) => panic!("n{id}: process failed: {e}"),
        }
        if let Some(how) = fired {
            self.stats.install_crashes += 1;
            self.crash(
                id,
                None,
                &format!("crash in a snapshot installation, {how:?}"),
            );
            return;
        }
        let wrote = self.nodes[&id].disk.events() > before;
        if chaos && wrote && !installed && self.rng.chance(self.p.mid_crash) {
            self.stats.mid_process_crashes += 1;
            self.crash(id, Some(before), "crash inside process");
            return;
        }
        let now = self.now;
        for m in out.messages {
            self.stats.messages += 1;
            self.net.send(now, m, &mut self.rng);
        }
        for (token, reply) in out.replies {
            if token >= reconfig::TOKEN_BASE {
                self.membership_answered(token, &reply);
                continue;
            }
            if chaos && self.client_links.lose() {
                self.stats.client_replies_lost += 1;
                record(
                    now,
                    Ev::Net(format!("n{id}'s reply to request {token} lost")),
                );
                continue;
            }
            if matches!(reply, KvReply::Value(_)) {
                let core = self.nodes[&id].replica.as_ref().map(|r| r.core());
                if core.is_some_and(|c| c.membership().is_learner(c.id())) {
                    self.stats.learner_reads += 1;
                }
            }
            self.clients.reply(now, id, token, reply, &mut self.rng);
        }
        let chunk_bytes = self.p.chunk_bytes;
        let epoch = self.nodes[&id].restarts;
        for req in out.snapshots {
            let (to, index) = (req.to, req.index);
            let r = self.replica(id).expect("up");
            let (store, term) = (r.store(), r.core().term());
            let mut chunks = Vec::new();
            let streamed = stream_snapshot(&*store, id, term, &req, chunk_bytes, |m| {
                chunks.push(m);
                true
            });
            match streamed {
                Ok(Streamed::Stale) => {
                    r.report_snapshot_stale(to);
                    self.stats.snapshots_stale += 1;
                }
                Ok(_) => {
                    self.stats.snapshots_resumed += u64::from(req.resume.is_some());
                    self.stats.snapshots_sent += 1;
                    record(
                        now,
                        Ev::Snapshot {
                            from: id,
                            to,
                            index,
                        },
                    );
                    self.net.send_stream(now, chunks, epoch, &mut self.rng);
                }
                Err(_) => r.report_snapshot_failed(to),
            }
        }
    }

    /// The syncs replicas left to the driver that are due: each syncs the store, then
    /// the replica learns it and processes (its acknowledgements and commits
    /// follow). A node may crash inside the sync.
    fn run_syncs(&mut self, chaos: bool) {
        for id in self.up() {
            let node = self.nodes.get_mut(&id).expect("node");
            if node.sync_due.is_none_or(|due| due > self.now) {
                continue;
            }
            node.sync_due = None;
            node.disk.mark();
            let before = node.disk.events();
            let store = node.replica.as_ref().expect("up").store();
            if let Err(e) = store.sync() {
                panic!("n{id}: a deferred sync failed: {e}");
            }
            drop(store);
            self.stats.deferred_syncs += 1;
            let wrote = self.nodes[&id].disk.events() > before;
            if chaos && wrote && self.rng.chance(self.p.mid_crash) {
                self.stats.mid_sync_crashes += 1;
                self.crash(id, Some(before), "crash inside a deferred sync");
                continue;
            }
            if let Some(r) = self.nodes.get_mut(&id).and_then(|n| n.replica.as_mut()) {
                r.synced();
            }
            self.process(id, chaos);
        }
    }

    /// Compaction (the node's background compactor, run at random steps and when
    /// the pool runs low; a node may crash inside it) and trace rebasing.
    fn maintain(&mut self, chaos: bool) {
        for id in self.up() {
            let asked = self
                .nodes
                .get_mut(&id)
                .is_some_and(|n| std::mem::take(&mut n.compact_asked));
            let node = &self.nodes[&id];
            let (domain, list) = match &node.disk {
                Disk::List(slot) => {
                    let slot = lock(slot);
                    (slot.domain.clone(), slot.store.upgrade())
                }
                Disk::Wal(_) => (None, None),
            };
            node.disk.mark();
            let store = node.replica.as_ref().expect("up").store();
            let low = list.is_some_and(|l| {
                let (_, free) = l.page_lists();
                free.len() * 3 < l.page_count() as usize
            });
            let own = self.p.own_compactor && (low || self.rng.chance(self.p.compact));
            if asked || own {
                let before = self.nodes[&id].disk.events();
                let result = match self.nodes.get_mut(&id).and_then(|n| n.replica.as_mut()) {
                    // The replica's policy asked: it hears how the run went.
                    Some(r) if asked => {
                        self.stats.policy_compactions += 1;
                        r.compact_now()
                    }
                    _ => store.compact(),
                };
                match result {
                    Ok(s) => {
                        self.stats.compactions += 1;
                        if s.freed > 0 {
                            record(
                                self.now,
                                Ev::Compact {
                                    node: id,
                                    freed: s.freed,
                                },
                            );
                        }
                    }
                    Err(StoreError::Full { .. }) => {}
                    Err(e) => panic!("n{id}: compaction failed: {e}"),
                }
                let wrote = self.nodes[&id].disk.events() > before;
                if chaos && wrote && self.rng.chance(self.p.mid_crash * 4) {
                    drop(store);
                    self.stats.mid_compaction_crashes += 1;
                    self.crash(id, Some(before), "crash inside compaction");
                    continue;
                }
            }
            let quiescent = store.durable_index() == store.last_index();
            if let Some(domain) = domain.filter(|_| quiescent) {
                if maybe_rebase(&domain) {
                    self.stats.rebases += 1;
                }
            }
        }
    }

    /// Heals everything and runs fault-free until the cluster is quiet; then reads
    /// every key through the leader and waits again. Panics if it does not settle.
    pub fn settle(&mut self) {
        record(self.now, Ev::Phase("heal"));
        self.net.heal();
        self.net.faults = Faults::calm();
        self.clients.issuing = false;
        for n in self.nodes.values() {
            n.disk.arm(None);
        }
        let leader = self.run_until_quiet("settling after the faults");
        record(self.now, Ev::Phase("final reads"));
        self.clients.final_reads(self.now, leader);
        self.run_until_quiet("the final reads");
    }

    fn run_until_quiet(&mut self, what: &str) -> u16 {
        for _ in 0..6000 {
            self.step(false);
            if let Some(l) = self.quiet() {
                return l;
            }
        }
        let roles: Vec<String> = self
            .nodes
            .iter()
            .map(|(id, n)| match &n.replica {
                Some(r) => format!(
                    "n{id}: {:?} t{} commit {} applied {} last {} progress {:?}",
                    r.core().role(),
                    r.core().term(),
                    r.core().commit_index(),
                    r.store().applied(),
                    r.store().last_index(),
                    self.nodes
                        .keys()
                        .filter_map(|&p| r.core().progress(p).map(|pr| (p, pr.clone())))
                        .collect::<Vec<_>>()
                ),
                None => format!("n{id}: down"),
            })
            .collect();
        panic!("liveness: no quiet cluster after {what}: {roles:?}");
    }

    /// The leader, if the cluster is quiet: every node up, one leader whose log is
    /// committed in its term and applied everywhere, no client waiting.
    fn quiet(&self) -> Option<u16> {
        if !self.clients.idle() {
            return None;
        }
        let mut leader = None;
        for (&id, n) in &self.nodes {
            if self.reconfig.retired.contains(&id) {
                continue;
            }
            let r = n.replica.as_ref()?;
            if r.core().role() == Role::Leader {
                if leader.is_some() {
                    return None;
                }
                leader = Some(id);
            }
        }
        let l = self.nodes[&leader?].replica.as_ref()?;
        let (commit, last) = (l.core().commit_index(), l.core().last_index());
        if commit != last || l.core().term_at(commit) != Some(l.core().term()) {
            return None;
        }
        // Every member applied it (spares never added, and retired nodes, are
        // not members); the configuration itself is committed.
        if l.core().membership_change_pending() {
            return None;
        }
        let members = l.core().membership().members();
        self.nodes
            .iter()
            .filter(|(id, _)| members.contains(id))
            .all(|(_, n)| {
                n.replica
                    .as_ref()
                    .is_some_and(|r| r.store().applied() == commit)
            })
            .then_some(l.core().id())
    }

    /// A digest of the client history (to check that a seed replays exactly).
    pub fn fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for c in &self.clients.history {
            (
                c.client,
                &c.key,
                format!("{:?}", c.op),
                format!("{:?}", c.outcome),
            )
                .hash(&mut h);
            (c.invoke, c.complete).hash(&mut h);
        }
        self.now.hash(&mut h);
        h.finish()
    }

    /// The end-of-run checks: convergence and linearizability.
    pub fn finish(&mut self) {
        let leader = self.quiet().expect("quiet after settling");
        let index = self.nodes[&leader]
            .replica
            .as_ref()
            .expect("up")
            .core()
            .commit_index();
        let members = self.nodes[&leader]
            .replica
            .as_ref()
            .expect("up")
            .core()
            .membership()
            .members();
        let replicas: Vec<(u16, &Replica)> = self
            .nodes
            .iter()
            .filter(|(id, _)| members.contains(id))
            .map(|(&id, n)| (id, n.replica.as_ref().expect("up")))
            .collect();
        // The stored configuration is checked like the clients' keys.
        let mut keys = self.p.clients.keys.clone();
        keys.push(raft_nvm::raft::MEMBERSHIP_KEY.to_vec());
        let complete = self.checker.converged(&replicas, &keys, index);
        self.stats.replay_complete += u64::from(complete);
        let wal = self.nodes.values().filter(|n| n.disk.is_wal()).count();
        let (has_list, has_wal) = (wal < self.nodes.len(), wal > 0);
        let st = &mut self.stats;
        st.seeds = 1;
        st.seeds_list = u64::from(has_list);
        st.seeds_wal = u64::from(has_wal);
        st.replay_list = u64::from(has_list && complete);
        st.replay_wal = u64::from(has_wal && complete);
        st.seeds_list_crash = u64::from(st.list_crashes > 0);
        st.seeds_wal_crash = u64::from(st.wal_crashes > 0);
        st.seeds_wal_torn = u64::from(st.wal_torn > 0);
        let installs = |wal: bool| {
            self.nodes
                .values()
                .filter(|n| n.disk.is_wal() == wal)
                .map(|n| n.disk.installs())
                .sum::<u64>()
        };
        let (list_installs, wal_installs) = (installs(false), installs(true));
        let st = &mut self.stats;
        st.seeds_list_install = u64::from(list_installs > 0);
        st.seeds_wal_install = u64::from(wal_installs > 0);
        st.seeds_pool_full = u64::from(st.store_full > 0 || self.clients.stats.oom > 0);
        st.seeds_transfer = u64::from(st.transfers_done > 0);
        st.seeds_reconfig = u64::from(self.reconfig.on);
        st.replay_reconfig = u64::from(self.reconfig.on && complete);
        st.seeds_learner_added = u64::from(st.learners_added > 0);
        st.seeds_promoted = u64::from(st.promotions > 0);
        st.seeds_voter_removed = u64::from(st.voters_removed > 0);
        st.seeds_leader_removed = u64::from(st.leaders_removed > 0);
        st.seeds_learner_read = u64::from(st.learner_reads > 0);
        st.seeds_forged = u64::from(st.forged > 0);
        let lease_reads = self.lease.served_by_gone
            + self
                .nodes
                .values()
                .filter_map(|n| n.replica.as_ref())
                .map(Replica::lease_reads)
                .sum::<u64>();
        let st = &mut self.stats;
        st.lease_reads = lease_reads;
        st.seeds_lease = u64::from(self.lease.on);
        st.seeds_lease_served = u64::from(lease_reads > 0);
        self.stats.terms_led = self.checker.terms_led() as u64;
        let cs = self.clients.stats;
        self.stats.ops_ok = cs.ok;
        self.stats.ops_unknown = cs.unknown;
        self.stats.ops_oom = cs.oom;
        self.stats.ops_via_machine = cs.via_machine;
        self.stats.history = self.clients.history.len() as u64;
        if let Err(v) = raft_nvm::linearizability::check(&self.clients.history) {
            let calls: String = v
                .calls
                .iter()
                .map(|c| format!("  {}\n", show_call(c)))
                .collect();
            panic!(
                "linearizability: the history of key {:?} is not linearizable:\n{calls}",
                String::from_utf8_lossy(&v.key)
            );
        }
    }
}
