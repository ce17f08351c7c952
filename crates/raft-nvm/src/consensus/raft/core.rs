//! The deterministic Raft state machine: its state, its inputs (ticks, messages,
//! proposals, reads, storage reports) and the [`Ready`] batches it hands out. The
//! election and replication rules live in `election.rs` and `replication.rs`.

use std::collections::BTreeMap;

use crate::storage::store::{HardState, SnapshotMeta};

use super::config::Config;
use super::error::RaftError;
use super::facts::StoreFacts;
use super::log::RaftLog;
use super::membership::MembershipLog;
use super::message::{Command, Message, MessageBody, SnapshotResume};
use super::progress::Progress;
use super::read_index::{ReadState, REMOTE_CTX_BASE};
use super::ready::{IncomingChunk, LogRead, Ready, SnapshotRequest};
use super::rng::{ticks_between, Rng};
use super::role::{FollowerState, Role, RoleState};

/// One Raft node as a pure, synchronous state machine. Drive it with
/// [`RaftCore::tick`], [`RaftCore::step`], [`RaftCore::propose`] and
/// [`RaftCore::read_index`]; collect its output with [`RaftCore::ready`] and report
/// storage progress with [`RaftCore::on_persisted`]. It holds no clock, thread or
/// I/O; randomness comes from the seed in its [`Config`].
#[derive(Debug)]
pub struct RaftCore {
    pub(crate) cfg: Config,
    pub(crate) rng: Rng,
    pub(crate) term: u64,
    pub(crate) vote: Option<u16>,
    /// The role, with the state only that role has (a leader's progress and
    /// transfer, a candidate's votes, a follower's acknowledgement marks).
    pub(crate) state: RoleState,
    pub(crate) leader: Option<u16>,
    pub(crate) log: RaftLog,
    pub(crate) election_elapsed: u32,
    pub(crate) heartbeat_elapsed: u32,
    pub(crate) randomized_timeout: u32,
    pub(crate) msgs: Vec<Message>,
    pub(crate) read_states: Vec<ReadState>,
    pub(crate) dropped_reads: Vec<u64>,
    pub(crate) log_reads: Vec<LogRead>,
    pub(crate) snapshot_requests: Vec<SnapshotRequest>,
    pub(crate) incoming_chunks: Vec<IncomingChunk>,
    /// The hard state last handed out.
    pub(crate) persisted_hs: HardState,
    /// A heartbeat was sent or received: flush pending appends now.
    pub(crate) sync_hint: bool,
    /// Joining: the leader commit index to reach before voting or campaigning
    /// (`Some(0)` until a leader named one); `None` once caught up, or when the node
    /// was not started passive ([`Config::passive_until_caught_up`]).
    pub(crate) catch_up_to: Option<u64>,
    /// Ticks since the core started (the clock of the leader lease).
    pub(crate) ticks: u64,
    /// Just (re)started with lease reads on: ignore vote requests until an
    /// election timeout passed, as if a leader had just been heard from.
    pub(crate) lease_guard: bool,
    /// The configuration as the log stands (see `membership.rs`).
    pub(crate) membership: MembershipLog,
    /// Read-index requests a leader took for learners, by the local context
    /// they run under: the learner and its own context (see `learner_reads.rs`).
    /// Not leader state: it outlives the leadership that took them until the
    /// next [`RaftCore::ready`] sends their answers (confirmed, or dropped when
    /// the leadership ended) back to the learners.
    pub(crate) remote_reads: BTreeMap<u64, (u16, u64)>,
    /// The next local context for a learner's read (never reused, across terms).
    pub(crate) next_remote_ctx: u64,
    /// The tick it last heard from a leader it followed (`None`: none since it
    /// started); kept through a campaign, which [`RaftCore::check_sender`] asks
    /// too.
    pub(crate) leader_heard: Option<u64>,
}

impl RaftCore {
    /// A node with an empty store.
    pub fn new(cfg: Config) -> Result<RaftCore, RaftError> {
        RaftCore::restart(cfg, StoreFacts::default())
    }

    /// A node restarted from its store's facts, with an empty DRAM window.
    pub fn restart(cfg: Config, facts: StoreFacts) -> Result<RaftCore, RaftError> {
        cfg.validate()?;
        let last = facts.last_index();
        if facts.durable_index > last {
            return Err(RaftError::Facts(format!(
                "durable index {} above the last index {last}",
                facts.durable_index
            )));
        }
        if facts.hard_state.term < facts.tail_terms.last().copied().unwrap_or(0) {
            return Err(RaftError::Facts(format!(
                "term {} below the last entry's term",
                facts.hard_state.term
            )));
        }
        let membership = match &facts.membership {
            Some((index, term, current)) => MembershipLog {
                current: current.clone(),
                index: *index,
                term: *term,
                previous: facts
                    .membership_before
                    .clone()
                    .unwrap_or_else(|| cfg.membership()),
            },
            None => MembershipLog::initial(cfg.membership()),
        };
        let mut rng = Rng::new(cfg.seed ^ u64::from(cfg.id).wrapping_mul(0x9e37_79b9));
        let randomized_timeout =
            ticks_between(&mut rng, cfg.election_ticks_min, cfg.election_ticks_max);
        let log = RaftLog::restore(
            cfg.window_entries,
            facts.applied,
            facts.applied_term,
            facts.tail_terms,
            facts.durable_index,
        );
        tracing::debug!(
            id = cfg.id,
            term = facts.hard_state.term,
            last,
            "raft core starts"
        );
        Ok(RaftCore {
            rng,
            term: facts.hard_state.term,
            vote: facts.hard_state.vote,
            state: RoleState::Follower(FollowerState::default()),
            leader: None,
            log,
            election_elapsed: 0,
            heartbeat_elapsed: 0,
            randomized_timeout,
            msgs: Vec::new(),
            read_states: Vec::new(),
            dropped_reads: Vec::new(),
            log_reads: Vec::new(),
            snapshot_requests: Vec::new(),
            incoming_chunks: Vec::new(),
            persisted_hs: facts.hard_state,
            sync_hint: false,
            catch_up_to: cfg.passive_until_caught_up.then_some(0),
            ticks: 0,
            lease_guard: cfg.lease_reads,
            membership,
            remote_reads: BTreeMap::new(),
            next_remote_ctx: 0,
            leader_heard: None,
            cfg,
        })
    }

    /// This node's id.
    pub fn id(&self) -> u16 {
        self.cfg.id
    }

    /// The current term.
    pub fn term(&self) -> u64 {
        self.term
    }

    /// The vote cast in the current term.
    pub fn vote(&self) -> Option<u16> {
        self.vote
    }

    /// The current role.
    pub fn role(&self) -> Role {
        self.state.role()
    }

    /// The leader this node knows of.
    pub fn leader(&self) -> Option<u16> {
        self.leader
    }

    /// The commit index.
    pub fn commit_index(&self) -> u64 {
        self.log.committed
    }

    /// The index up to which entries were handed out for applying.
    pub fn applied_index(&self) -> u64 {
        self.log.applied
    }

    /// The index up to which the store reported durability.
    pub fn durable_index(&self) -> u64 {
        self.log.durable
    }

    /// The last index of the log.
    pub fn last_index(&self) -> u64 {
        self.log.last_index()
    }

    /// The term of the last entry.
    pub fn last_term(&self) -> u64 {
        self.log.last_term()
    }

    /// The term of `index`, if the core still knows it.
    pub fn term_at(&self, index: u64) -> Option<u64> {
        self.log.term(index)
    }

    /// A leader's record of follower `peer`.
    pub fn progress(&self, peer: u16) -> Option<&Progress> {
        self.state.progress(peer)
    }

    /// A leader's followers and the index each durably matches, by id (nothing on
    /// other roles).
    pub fn follower_matches(&self) -> impl Iterator<Item = (u16, u64)> + '_ {
        self.state
            .leader()
            .into_iter()
            .flat_map(|l| l.progress.iter().map(|(&id, p)| (id, p.matched)))
    }

    /// Whether this node is still catching up after joining with an empty store
    /// ([`Config::passive_until_caught_up`]): it then neither votes nor campaigns.
    pub fn is_catching_up(&self) -> bool {
        self.catch_up_to.is_some()
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Advances logical time by one tick.
    pub fn tick(&mut self) {
        self.ticks += 1;
        self.expire_asked_reads();
        if self.role() == Role::Leader {
            self.tick_leader();
        } else {
            self.tick_election();
        }
    }

    /// A leader appends `cmd` to its log; returns its index. It is replicated by
    /// the next [`RaftCore::ready`], batched with other proposals made before it.
    pub fn propose(&mut self, cmd: Command) -> Result<u64, RaftError> {
        if self.role() != Role::Leader {
            return Err(RaftError::NotLeader {
                leader: self.leader,
            });
        }
        if let Some(target) = self.transferring_to() {
            return Err(RaftError::Transferring { target });
        }
        self.state.hint_flush();
        Ok(self.log.append(self.term, cmd))
    }

    /// Asks for a linearizable read identified by `ctx`. The answer arrives as a
    /// [`ReadState`] in a later [`Ready`] once the leader has committed an entry of
    /// its term and a quorum confirmed its leadership after the request; serve it
    /// when the applied index reaches [`ReadState::index`].
    ///
    /// A follower that knows its leader asks it instead
    /// ([`MessageBody::ReadIndex`]); the answer arrives the same way (the driver
    /// serves a learner's reads so, see `learner_reads.rs`).
    pub fn read_index(&mut self, ctx: u64) -> Result<(), RaftError> {
        if ctx >= REMOTE_CTX_BASE {
            return Err(RaftError::DuplicateRead(ctx));
        }
        let first_commit = self.log.term(self.log.committed) == Some(self.term);
        let Some(leader) = self.state.leader_mut() else {
            return self.read_index_via_leader(ctx);
        };
        if leader.read_only.contains(ctx) || leader.reads_waiting.contains(&ctx) {
            return Err(RaftError::DuplicateRead(ctx));
        }
        if !first_commit {
            leader.reads_waiting.push(ctx);
            return Ok(());
        }
        self.start_read(ctx);
        Ok(())
    }

    /// Records a read at the commit index and starts its confirmation round.
    pub(crate) fn start_read(&mut self, ctx: u64) {
        if self.alone_is_quorum() {
            self.read_states.push(ReadState {
                ctx,
                index: self.log.committed,
            });
            return;
        }
        if let Some(leader) = self.state.leader_mut() {
            leader.read_only.add(ctx, self.log.committed, self.cfg.id);
        }
        self.bcast_heartbeat();
    }

    /// Handles a message from a peer.
    pub fn step(&mut self, m: Message) -> Result<(), RaftError> {
        if m.to != self.cfg.id || m.from == self.cfg.id || m.from == u16::MAX {
            return Err(RaftError::Misrouted {
                from: m.from,
                to: m.to,
                id: self.cfg.id,
            });
        }
        // The transport refuses such a message already; the core checks again
        // because it is driven without one too (the simulation), and nothing
        // out of range may reach the log, the hard state or the arithmetic on
        // indexes.
        if let Err(reason) = m.validate(&super::MessageLimits::default()) {
            return Err(RaftError::InvalidMessage {
                from: m.from,
                kind: m.body.kind(),
                reason,
            });
        }
        self.check_sender(&m)?;
        self.step_inner(m);
        Ok(())
    }

    /// Refuses a message from a node outside the configuration as the log stands
    /// (voters, outgoing voters, learners): a removed node, or one that never
    /// belonged, must not move this node's term, log or state. Two exceptions:
    ///
    /// - The leader this node follows in the current term is heard until that
    ///   term ends, even once this node appended a configuration without it: a
    ///   leader being removed leads until its removal commits, then hands over
    ///   (`TimeoutNow`), and the followers learn that commit from it.
    /// - A leader's message (an append, a heartbeat, a snapshot chunk) of this
    ///   node's term or a later one, while this node heard from no leader for an
    ///   election timeout (or ever since it started). A node that was away while
    ///   the configuration changed, or a learner started with the founders'
    ///   configuration, does not know the leader that was added meanwhile, and
    ///   only that leader can bring it up to date. A node that follows a live
    ///   leader, or leads, or is its configuration's only voter (it appended
    ///   every change since), never takes a stranger for its leader.
    pub(crate) fn check_sender(&self, m: &Message) -> Result<(), RaftError> {
        let current = &self.membership.current;
        if current.contains(m.from) || (self.leader == Some(m.from) && m.term == self.term) {
            return Ok(());
        }
        let from_leader = matches!(
            m.body,
            MessageBody::AppendEntries { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::SnapshotChunk { .. }
        );
        // A node that is its configuration's only voter is in every quorum of
        // it, so it appended every configuration change since: no leader it does
        // not know can exist (unless it lost its log and is catching up, `--join`).
        // A one-node cluster thus never takes a stranger for its leader, not even
        // in the moments after its start before it leads.
        let sole_voter = !current.is_joint()
            && current.voters.len() == 1
            && current.voters.contains(&self.cfg.id)
            && !self.is_catching_up();
        let timeout = u64::from(self.cfg.election_ticks_min);
        let leaderless = !sole_voter
            && self.role() != Role::Leader
            && self
                .leader_heard
                .is_none_or(|t| self.ticks.saturating_sub(t) >= timeout);
        if from_leader && m.term >= self.term && leaderless {
            tracing::info!(
                id = self.cfg.id,
                from = m.from,
                term = m.term,
                membership = %current,
                "no leader heard lately: following a leader outside the configuration this node knows"
            );
            return Ok(());
        }
        Err(RaftError::NotAMember {
            from: m.from,
            membership: current.to_string(),
        })
    }

    /// The store made everything handed out so far durable up to `durable_index`.
    pub fn on_persisted(&mut self, durable_index: u64) {
        if !self.log.on_persisted(durable_index) {
            return;
        }
        match self.role() {
            Role::Leader => {
                self.state.hint_flush();
                self.maybe_commit();
            }
            Role::Follower => {
                self.maybe_ack(false);
                self.maybe_caught_up();
            }
            _ => {}
        }
    }

    /// The store is full: the driver wrote what the last [`Ready`] handed out only up
    /// to `kept` (the store's last index) and dropped the rest, and it removed the
    /// entries above `kept` from that Ready's `AppendEntries` before sending them.
    /// With `retruncate`, the Ready's truncation itself failed and the store still
    /// holds an older suffix above `kept`.
    ///
    /// The core forgets the entries above `kept`, as a crash forgets unsynced ones.
    /// A follower acknowledged none of them (acknowledgements are durable-only), so
    /// the leader sends them again later. A leader's own entries above `kept` were
    /// first handed out in that Ready and reached no one: it forgets them and probes
    /// every follower it was about to send them to, and the indexes are proposed
    /// afresh. A leader left without an entry of its term (its no-op did not fit)
    /// could never commit, nor serve reads: it steps down.
    ///
    /// [`unsent_above`] is the removal from the messages.
    pub fn on_store_full(&mut self, kept: u64, retruncate: bool) {
        if kept >= self.log.last_index() && !retruncate {
            return;
        }
        tracing::warn!(
            id = self.cfg.id,
            kept,
            last = self.log.last_index(),
            retruncate,
            "store full: entries above the store's last index abandoned"
        );
        self.log.abandon_after(kept, retruncate);
        self.configs_abandoned_after(kept);
        let last = self.log.last_index();
        if let Some(f) = self.state.follower_mut() {
            f.verified = f.verified.min(last);
        }
        if let Some(leader) = self.state.leader_mut() {
            for pr in leader.progress.values_mut() {
                let snapshot = matches!(pr.state, super::progress::ProgressState::Snapshot { .. });
                if !snapshot && pr.next > last + 1 {
                    pr.become_probe();
                }
            }
            if self.log.last_term() != self.term {
                tracing::warn!(
                    id = self.cfg.id,
                    term = self.term,
                    "store full: no entry of this term fits; stepping down"
                );
                self.become_follower(self.term, None);
            }
        }
    }

    /// The driver installed the snapshot `meta` received from `from`: the log now
    /// ends there and everything up to it is committed, applied and durable.
    /// `membership` is the configuration the snapshot holds (the value of
    /// [`super::MEMBERSHIP_KEY`] in it; `None`: it holds none, the starting
    /// configuration stands).
    pub fn on_snapshot_installed(
        &mut self,
        from: u16,
        meta: SnapshotMeta,
        membership: Option<super::Membership>,
    ) {
        if meta.index <= self.log.committed {
            return;
        }
        tracing::info!(id = self.cfg.id, index = meta.index, "snapshot installed");
        self.log.install_snapshot(meta.index, meta.term);
        self.config_from_snapshot(membership);
        if let Some(f) = self.state.follower_mut() {
            f.verified = meta.index;
            f.acked = meta.index;
            f.ack_pending = false;
        }
        self.maybe_caught_up();
        self.send(
            from,
            MessageBody::SnapshotAck {
                success: true,
                index: meta.index,
                resume: None,
            },
        );
    }

    /// The driver could not install the snapshot from `from`: with `resume`, it
    /// holds the chunks before `resume.seq` and asks the leader to go on from there
    /// (a chunk went missing); without, the leader starts over.
    pub fn on_snapshot_failed(&mut self, from: u16, resume: Option<SnapshotResume>) {
        let index = self.log.last_index();
        self.send(
            from,
            MessageBody::SnapshotAck {
                success: false,
                index,
                resume,
            },
        );
    }

    /// The driver holds chunks `0..resume.seq` of the snapshot from `from` in its
    /// staging store: tell the leader, so that it can resume a broken stream there.
    pub fn on_snapshot_progress(&mut self, from: u16, resume: SnapshotResume) {
        self.send(from, MessageBody::SnapshotProgress { resume });
    }

    /// The leader's driver could not resume the snapshot installation of `to` (its
    /// store no longer gives that snapshot: compaction moved past it): forget the
    /// follower's installation and probe it again; its next snapshot starts over.
    pub fn report_snapshot_stale(&mut self, to: u16) {
        if let Some(pr) = self.state.progress_mut(to) {
            pr.snapshot_resume = None;
        }
        self.report_snapshot_failed(to);
    }

    /// The leader's driver could not deliver a snapshot to `to`: probe it again.
    pub fn report_snapshot_failed(&mut self, to: u16) {
        if let Some(leader) = self.state.leader_mut() {
            if let Some(pr) = leader.progress.get_mut(&to) {
                if matches!(pr.state, super::progress::ProgressState::Snapshot { .. }) {
                    pr.become_probe();
                    leader.flush_hint = true;
                }
            }
        }
    }

    /// The leader's driver finished streaming a snapshot to `to` (every chunk went to
    /// the transport). The follower's acknowledgement may still be lost, or the
    /// follower may crash before installing: rather than wait for it forever, the
    /// leader probes the follower just past the snapshot once it answers a heartbeat
    /// (as etcd does on `SnapshotFinish`). An installed snapshot matches the probe;
    /// otherwise the follower rejects it and the leader offers a snapshot again.
    pub fn report_snapshot_sent(&mut self, to: u16) {
        if let Some(pr) = self.state.progress_mut(to) {
            if let super::progress::ProgressState::Snapshot { pending } = pr.state {
                pr.become_probe();
                pr.next = pr.next.max(pending + 1);
                pr.paused = true;
            }
        }
    }

    /// Whether [`RaftCore::ready`] would hand out anything. (A leader flushes its
    /// appends in every `ready`; this flags when an input may have enabled one.)
    pub fn has_ready(&self) -> bool {
        HardState {
            term: self.term,
            vote: self.vote,
        } != self.persisted_hs
            || self.log.has_unstable()
            || self.log.has_committed()
            || !self.msgs.is_empty()
            || !self.read_states.is_empty()
            || !self.dropped_reads.is_empty()
            || !self.log_reads.is_empty()
            || !self.snapshot_requests.is_empty()
            || !self.incoming_chunks.is_empty()
            || self.state.leader().is_some_and(|l| l.flush_hint)
            || (self.sync_hint && self.log.durable < self.log.last_index())
    }

    /// Hands out the next batch of work (see [`Ready`] for the processing order).
    pub fn ready(&mut self) -> Ready {
        // Reads confirmed (or dropped) for learners go back to them as messages.
        self.route_remote_reads();
        // Committed entries first, so a snapshot asked for below is taken at the
        // applied index this very Ready reaches.
        let (committed, apply_to) = self.log.take_committed(self.cfg.committed_entries);
        // A snapshot asked for since the last Ready (the driver found a follower's
        // entries compacted away) is taken at the applied index this Ready reaches,
        // like one asked for below, so the driver always snapshots its applied state.
        let applied = self.log.applied;
        for r in &mut self.snapshot_requests {
            // A resumed snapshot must stay at the index the follower started.
            if r.index < applied && r.resume.is_none() {
                r.index = applied;
                if let Some(pr) = self.state.progress_mut(r.to) {
                    pr.become_snapshot(applied);
                }
            }
        }
        if self.role() == Role::Leader {
            self.flush_appends();
        }
        if let Some(leader) = self.state.leader_mut() {
            leader.flush_hint = false;
        }
        let hs = HardState {
            term: self.term,
            vote: self.vote,
        };
        let hard_state = (hs != self.persisted_hs).then_some(hs);
        self.persisted_hs = hs;
        // A leader replicates from its window; a follower whose driver needs no
        // committed entries (the store is the log) hands its commands over instead
        // of copying them (should it lead later, it reads them back from the store).
        let keep = self.role() == Role::Leader || self.cfg.committed_entries;
        let (truncate_after, entries) = self.log.take_unstable(keep);
        let must_sync = !entries.is_empty()
            || truncate_after.is_some()
            || (self.sync_hint && self.log.durable < self.log.last_index());
        self.sync_hint = false;
        Ready {
            hard_state,
            must_sync,
            truncate_after,
            entries,
            messages: std::mem::take(&mut self.msgs),
            committed,
            apply_to,
            read_states: std::mem::take(&mut self.read_states),
            dropped_reads: std::mem::take(&mut self.dropped_reads),
            log_reads: std::mem::take(&mut self.log_reads),
            snapshots_to_send: std::mem::take(&mut self.snapshot_requests),
            snapshot_chunks: std::mem::take(&mut self.incoming_chunks),
        }
    }

    /// A message `body` to `to` in the current term.
    pub(crate) fn send(&mut self, to: u16, body: MessageBody) {
        self.send_with_term(to, self.term, body);
    }

    /// A message `body` to `to` stamped with `term`.
    pub(crate) fn send_with_term(&mut self, to: u16, term: u64, body: MessageBody) {
        self.msgs.push(Message {
            from: self.cfg.id,
            to,
            term,
            body,
        });
    }

    /// The other members (voters and learners): whom a leader replicates to.
    /// Until the configuration in force commits, the members of the one before it
    /// too: a node being removed then receives the entry that removes it, so it
    /// knows it is out (it stops campaigning and sends its clients elsewhere).
    pub(crate) fn others(&self) -> Vec<u16> {
        let id = self.cfg.id;
        let mut all = self.membership.current.members();
        if self.membership.index > self.log.committed {
            all.extend(self.membership.previous.members());
        }
        all.into_iter().filter(|&p| p != id).collect()
    }

    /// The other voters (both halves of a joint configuration): whom a candidate
    /// asks for votes.
    pub(crate) fn other_voters(&self) -> Vec<u16> {
        let id = self.cfg.id;
        self.membership
            .current
            .all_voters()
            .into_iter()
            .filter(|&p| p != id)
            .collect()
    }

    /// Whether this node's own vote is a quorum (it is the only voter).
    pub(crate) fn alone_is_quorum(&self) -> bool {
        let id = self.cfg.id;
        self.membership.current.has_quorum(|v| v == id)
    }
}

/// Removes the entries above `kept` from the `AppendEntries` among `messages`, and
/// every `AppendEntries` that would follow one of them (its `prev_index` above
/// `kept`): what a driver whose store refused those entries must not send (see
/// [`RaftCore::on_store_full`]).
pub fn unsent_above(messages: &mut Vec<super::Message>, kept: u64) {
    messages.retain_mut(|m| match &mut m.body {
        super::MessageBody::AppendEntries {
            prev_index,
            entries,
            ..
        } => {
            entries.retain(|e| e.index <= kept);
            *prev_index <= kept
        }
        _ => true,
    });
}
