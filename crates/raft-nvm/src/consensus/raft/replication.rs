//! Log replication: the leader's pipelined `AppendEntries` with flow control, the
//! follower's matching and rollback, durable-only acknowledgements, commit by
//! quorum, heartbeats carrying read-index rounds, and the snapshot hand-off.

use crate::storage::store::{SnapshotItem, SnapshotMeta};

use super::core::RaftCore;
use super::error::RaftError;
use super::log::AppendOutcome;
use super::message::{Entry, Message, MessageBody, SnapshotResume};
use super::progress::ProgressState;
use super::ready::{IncomingChunk, LogRead, SnapshotRequest};
use super::role::Role;

impl RaftCore {
    /// Messages of the current term that concern replication.
    pub(crate) fn step_replication(&mut self, m: Message) {
        let from_leader = matches!(
            m.body,
            MessageBody::AppendEntries { .. }
                | MessageBody::Heartbeat { .. }
                | MessageBody::SnapshotChunk { .. }
        );
        if from_leader {
            if !self.become_follower_of(m.from) {
                return;
            }
            self.leader_heard = Some(self.ticks);
        }
        match m.body {
            MessageBody::AppendEntries {
                prev_index,
                prev_term,
                entries,
                commit,
            } => self.handle_append(m.from, prev_index, prev_term, entries, commit),
            MessageBody::Heartbeat { commit, ctx, sent } => {
                self.log.commit_to(commit);
                self.sync_hint = true;
                self.send(m.from, MessageBody::HeartbeatResp { ctx, sent });
            }
            MessageBody::SnapshotChunk {
                meta,
                seq,
                items,
                done,
            } => self.handle_snapshot_chunk(m.from, meta, seq, items, done),
            MessageBody::AppendResp {
                success,
                index,
                hint,
            } => {
                self.state.hint_flush();
                self.handle_append_resp(m.from, success, index, hint)
            }
            MessageBody::HeartbeatResp { ctx, sent } => {
                self.state.hint_flush();
                self.handle_heartbeat_resp(m.from, ctx, sent)
            }
            MessageBody::SnapshotAck {
                success,
                index,
                resume,
            } => {
                self.state.hint_flush();
                self.handle_snapshot_ack(m.from, success, index, resume)
            }
            MessageBody::SnapshotProgress { resume } => {
                self.handle_snapshot_progress(m.from, resume)
            }
            MessageBody::TimeoutNow => self.handle_timeout_now(m.from),
            MessageBody::ReadIndex { ctx } => self.handle_read_index(m.from, ctx),
            MessageBody::ReadIndexResp { ctx, index } => {
                self.handle_read_index_resp(m.from, ctx, index)
            }
            _ => {}
        }
    }

    /// A message from the leader of the current term: follow it. Returns false if
    /// this node is itself the leader (impossible in a correct cluster).
    fn become_follower_of(&mut self, leader: u16) -> bool {
        match self.role() {
            Role::Leader => {
                tracing::error!(id = self.cfg.id, leader, "two leaders in one term");
                false
            }
            Role::Follower if self.leader == Some(leader) => {
                self.election_elapsed = 0;
                true
            }
            _ => {
                self.become_follower(self.term, Some(leader));
                true
            }
        }
    }

    fn handle_append(
        &mut self,
        from: u16,
        prev_index: u64,
        prev_term: u64,
        entries: Vec<Entry>,
        commit: u64,
    ) {
        // Configuration entries take effect once appended (Raft §6).
        let configs: Vec<Entry> = entries
            .iter()
            .filter(|e| matches!(e.cmd, super::message::Command::Config { .. }))
            .cloned()
            .collect();
        let outcome = self.log.maybe_append(prev_index, prev_term, entries);
        if let AppendOutcome::Matched { upto, cut } = outcome {
            self.follow_configs(&configs, upto, cut);
        }
        match outcome {
            AppendOutcome::Matched { upto, .. } => {
                self.log.commit_to(commit.min(upto));
                if let Some(f) = self.state.follower_mut() {
                    f.verified = f.verified.max(upto);
                    f.ack_pending = true;
                }
                self.maybe_ack(upto <= self.log.durable);
                if let Some(target) = &mut self.catch_up_to {
                    // `AppendEntries` carries the leader's whole commit index
                    // (heartbeats only as far as this follower matches).
                    *target = (*target).max(commit);
                    self.maybe_caught_up();
                }
            }
            AppendOutcome::Rejected => {
                tracing::debug!(id = self.cfg.id, prev_index, prev_term, "append rejected");
                let hint = self.log.last_index().min(prev_index.saturating_sub(1));
                self.send(
                    from,
                    MessageBody::AppendResp {
                        success: false,
                        index: prev_index,
                        hint,
                    },
                );
            }
        }
    }

    /// A joining node ([`super::Config::passive_until_caught_up`]): ends the
    /// passive phase once its log holds the current leader's commit index, verified
    /// against that leader and durable, and the entry there is of the leader's term.
    /// That leader committed an entry of its own term, so its log and commit index
    /// cover everything committed before its term (leader completeness) as well as
    /// everything it committed itself up to there; from then on this node is a
    /// follower that merely lagged.
    pub(crate) fn maybe_caught_up(&mut self) {
        let Some(target) = self.catch_up_to else {
            return;
        };
        let Some(f) = self.state.follower() else {
            return;
        };
        if self.leader.is_none() || target == 0 {
            return;
        }
        let have = f.verified.min(self.log.durable);
        if have >= target && self.log.term(target) == Some(self.term) {
            self.catch_up_to = None;
            tracing::info!(
                id = self.cfg.id,
                term = self.term,
                index = target,
                "caught up with the leader: voting and campaigning from now on"
            );
        }
    }

    /// Follower: acknowledges what is both verified against the leader and durable.
    pub(crate) fn maybe_ack(&mut self, force: bool) {
        let Some(leader) = self.leader else { return };
        let durable = self.log.durable;
        let Some(f) = self.state.follower_mut() else {
            return;
        };
        if !f.ack_pending {
            return;
        }
        let upto = f.verified.min(durable);
        if durable >= f.verified {
            f.ack_pending = false;
        }
        if upto > f.acked || force {
            f.acked = f.acked.max(upto);
            self.send(
                leader,
                MessageBody::AppendResp {
                    success: true,
                    index: upto,
                    hint: 0,
                },
            );
        }
    }

    fn handle_append_resp(&mut self, from: u16, success: bool, index: u64, hint: u64) {
        let now = self.ticks;
        if self.role() != Role::Leader
            || (success && self.acknowledged_beyond_log(from, index, "append"))
        {
            return;
        }
        let Some(pr) = self.state.progress_mut(from) else {
            return;
        };
        pr.recent_active = true;
        pr.heard = Some(now);
        if success {
            if pr.acked(index) {
                self.maybe_commit();
            }
            if self.state.transfer().is_some_and(|t| t.target == from) {
                self.maybe_send_timeout_now();
            }
        } else {
            let matched = pr.matched;
            if pr.rejected(index, hint) {
                if pr.matched < matched {
                    tracing::warn!(
                        id = self.cfg.id,
                        from,
                        matched,
                        last = hint,
                        "follower's log ends below its acknowledged match: it lost its store"
                    );
                }
                tracing::debug!(id = self.cfg.id, from, index, hint, next = pr.next, "probe");
            }
        }
    }

    /// Whether `from`'s acknowledgement (of an append or a snapshot: `what`) up to
    /// `index` reaches beyond this leader's log: nobody holds entries it never
    /// appended, so such an answer (a forged or broken peer's) is logged and must
    /// not count toward a commit.
    fn acknowledged_beyond_log(&self, from: u16, index: u64, what: &str) -> bool {
        let last = self.log.last_index();
        if index <= last {
            return false;
        }
        tracing::warn!(
            id = self.cfg.id,
            from,
            index,
            last,
            "{what} acknowledged above the last index: ignored"
        );
        true
    }

    fn handle_heartbeat_resp(&mut self, from: u16, ctx: Option<u64>, sent: u64) {
        let now = self.ticks;
        let last = self.log.last_index();
        let Some(leader) = self.state.leader_mut() else {
            return;
        };
        let Some(pr) = leader.progress.get_mut(&from) else {
            return;
        };
        pr.recent_active = true;
        pr.heard = Some(now);
        // Only this term's heartbeats reach here (the term rules drop older ones).
        // An echo of a tick not yet reached was never sent by this leader: it
        // would stretch the lease past what the follower promised.
        if sent <= now {
            pr.lease_sent = pr.lease_sent.max(sent);
        }
        if pr.state == ProgressState::Probe {
            pr.paused = false;
        } else if pr.state == ProgressState::Replicate && pr.matched < last && pr.stalled() {
            // The follower is alive but what is in flight made no progress since
            // the last heartbeat: appends were lost. (A window that is merely full
            // is normal while a lagging follower catches up; re-probing then would
            // re-send what is already on its way.)
            pr.become_probe();
        }
        if let Some(ctx) = ctx {
            let membership = &self.membership.current;
            let done = leader.read_only.ack(ctx, from, |acks| {
                membership.has_quorum(|v| acks.contains(&v))
            });
            self.read_states.extend(done);
        }
    }

    fn handle_snapshot_chunk(
        &mut self,
        from: u16,
        meta: SnapshotMeta,
        seq: u32,
        items: Vec<SnapshotItem>,
        done: bool,
    ) {
        if meta.index <= self.log.committed || self.log.term(meta.index) == Some(meta.term) {
            // Nothing to install: the log already has it (log matching). Acknowledge
            // once it is durable here (through the ordinary append acknowledgement).
            if seq == 0 {
                self.log.commit_to(meta.index);
                self.sync_hint = true;
                let durable = self.log.durable;
                // A message from the leader made this node its follower.
                let Some(f) = self.state.follower_mut() else {
                    return;
                };
                f.verified = f.verified.max(meta.index);
                if durable >= meta.index {
                    let index = f.verified.min(durable);
                    self.send(
                        from,
                        MessageBody::SnapshotAck {
                            success: true,
                            index,
                            resume: None,
                        },
                    );
                } else {
                    f.ack_pending = true;
                }
            }
            return;
        }
        self.incoming_chunks.push(IncomingChunk {
            from,
            term: self.term,
            meta,
            seq,
            items,
            done,
        });
    }

    /// Leader: remembers how far a follower's installation got (see
    /// [`super::Progress::snapshot_resume`]).
    fn handle_snapshot_progress(&mut self, from: u16, resume: SnapshotResume) {
        if let Some(pr) = self.state.progress_mut(from) {
            pr.recent_active = true;
            pr.snapshot_resume = Some(resume);
        }
    }

    fn handle_snapshot_ack(
        &mut self,
        from: u16,
        success: bool,
        index: u64,
        resume: Option<SnapshotResume>,
    ) {
        if self.role() != Role::Leader
            || (success && self.acknowledged_beyond_log(from, index, "snapshot"))
        {
            return;
        }
        let Some(pr) = self.state.progress_mut(from) else {
            return;
        };
        pr.recent_active = true;
        // Installed: nothing to resume. Failed: resume where the follower says
        // (a lost chunk), or start over (it holds nothing of the stream).
        pr.snapshot_resume = if success { None } else { resume };
        if success && pr.acked(index) {
            self.maybe_commit();
        }
        if let Some(pr) = self.state.progress_mut(from) {
            if matches!(pr.state, ProgressState::Snapshot { .. }) {
                // Short of the snapshot: probe again at the next heartbeat.
                pr.become_probe();
                pr.paused = true;
            }
        }
        if success {
            self.send_commit_index(from);
        }
    }

    /// Leader: a follower that just installed a snapshot and has nothing more to
    /// receive gets an empty `AppendEntries` at its match, carrying the whole
    /// commit index (heartbeats carry it only as far as the leader knows the
    /// follower matches). A joining member needs it to finish catching up
    /// ([`super::Config::passive_until_caught_up`]); when entries remain to send,
    /// they carry it.
    fn send_commit_index(&mut self, to: u16) {
        let last = self.log.last_index();
        let Some(pr) = self.state.progress(to) else {
            return;
        };
        if pr.state != ProgressState::Replicate || pr.next <= last {
            return;
        }
        self.send_empty_append(to);
    }

    /// Leader: an empty `AppendEntries` at `to`'s match (when the window still
    /// knows that entry's term). A follower that has the match acknowledges it and
    /// learns the whole commit index; one that lost its store rejects it, which
    /// makes the leader probe from its end ([`super::Progress`]'s rejection rule).
    fn send_empty_append(&mut self, to: u16) {
        let Some(pr) = self.state.progress(to) else {
            return;
        };
        let prev_index = pr.matched;
        let Some(prev_term) = self.log.term(prev_index) else {
            return;
        };
        let commit = self.log.committed;
        self.send(
            to,
            MessageBody::AppendEntries {
                prev_index,
                prev_term,
                entries: Vec::new(),
                commit,
            },
        );
    }

    /// Leader: commit the highest index a quorum holds durably, if it is of the
    /// current term (older entries commit only indirectly, under it).
    pub(crate) fn maybe_commit(&mut self) {
        let (id, durable) = (self.cfg.id, self.log.durable);
        let state = &self.state;
        // The highest index a quorum (of both halves, when joint) holds durably.
        let Some(q) = self.membership.current.quorum_value(|v| {
            if v == id {
                durable
            } else {
                state.progress(v).map_or(0, |p| p.matched)
            }
        }) else {
            return;
        };
        if q <= self.log.committed || self.log.term(q) != Some(self.term) {
            return;
        }
        self.log.commit_to(q);
        tracing::trace!(id = self.cfg.id, commit = q, "commit");
        // Followers learn the new commit index from the next AppendEntries or
        // heartbeat, not from a round of its own: a message to every follower and
        // an answer from each, per commit, would double the messages of a client
        // writing one key at a time, and on a busy machine delay the reply it waits
        // for. A follower's applied index lags by at most a heartbeat interval.
        let waiting = self
            .state
            .leader_mut()
            .map(|l| std::mem::take(&mut l.reads_waiting))
            .unwrap_or_default();
        for ctx in waiting {
            self.start_read(ctx);
        }
        self.after_commit_membership();
    }

    /// Leader: heartbeats to all, carrying the newest pending read context.
    pub(crate) fn bcast_heartbeat(&mut self) {
        let ctx = self.state.leader().and_then(|l| l.read_only.last_ctx());
        self.state.hint_flush();
        self.sync_hint = true;
        for p in self.others() {
            self.send_heartbeat(p, ctx);
        }
    }

    /// Leader: one heartbeat to `to` carrying the commit index as far as `to`
    /// matches, and the pending read-index round `ctx`; a probing follower may be
    /// sent entries again once it answers.
    fn send_heartbeat(&mut self, to: u16, ctx: Option<u64>) {
        let Some(pr) = self.state.progress_mut(to) else {
            return;
        };
        if pr.state == ProgressState::Probe {
            pr.paused = false;
        }
        let commit = self.log.committed.min(pr.matched);
        let sent = self.ticks;
        self.send(to, MessageBody::Heartbeat { commit, ctx, sent });
    }

    /// The driver learned that `peer` just (re)started: its transport dialled this
    /// node. A leader sends it a heartbeat at once instead of at the next heartbeat
    /// tick, so a restarted follower learns the commit index, and the leader how
    /// far it is behind, without waiting; and an empty append at its match, so a
    /// follower that came back without its store (rejoining) is found even if no
    /// write follows. Nothing for other roles or unknown ids.
    pub fn peer_up(&mut self, peer: u16) {
        let Some(leader) = self.state.leader_mut() else {
            return;
        };
        if !leader.progress.contains_key(&peer) {
            return;
        }
        leader.flush_hint = true;
        let ctx = leader.read_only.last_ctx();
        self.send_heartbeat(peer, ctx);
        self.send_empty_append(peer);
    }

    /// Leader: sends what flow control allows to every follower (pipelining up to
    /// `max_inflight_msgs` batches of `max_entries_per_msg`).
    pub(crate) fn flush_appends(&mut self) {
        for p in self.others() {
            while self.send_append(p) {}
        }
    }

    /// Sends one `AppendEntries` (or asks for a snapshot) to `to`; returns whether
    /// another one may follow right away.
    fn send_append(&mut self, to: u16) -> bool {
        let last = self.log.last_index();
        let (max_inflight, max_entries) =
            (self.cfg.max_inflight_msgs, self.cfg.max_entries_per_msg);
        let Some(pr) = self.state.progress_mut(to) else {
            return false;
        };
        if pr.is_paused(max_inflight) {
            return false;
        }
        if pr.next > last + 1 {
            pr.next = last + 1;
        }
        let next = pr.next;
        let state = pr.state;
        let matched = pr.matched;
        if state == ProgressState::Replicate && next > last {
            return false;
        }
        if state == ProgressState::Probe && matched >= last {
            return false;
        }
        // While the driver has not answered a read of entries for `to`, later ones
        // go the same way even if the window has them: the driver answers in order,
        // possibly several Readies later, and entries must reach the follower in
        // order (a gap makes it reject everything after, and the leader probe again).
        let reading = pr.unanswered_reads > 0;
        let from_window = if reading {
            Err(next)
        } else {
            self.log.entries_from(next, max_entries)
        };
        match from_window {
            Ok((prev_term, entries)) => {
                let n = entries.len();
                let end = next - 1 + n as u64;
                let commit = self.log.committed;
                if let Some(pr) = self.state.progress_mut(to) {
                    pr.sent(n, end);
                }
                self.send(
                    to,
                    MessageBody::AppendEntries {
                        prev_index: next - 1,
                        prev_term,
                        entries,
                        commit,
                    },
                );
                state == ProgressState::Replicate && n > 0
            }
            Err(_) => {
                // The window no longer holds what the follower needs, but the store
                // does (it is the log) until compaction drops it: ask the driver to
                // read it back. Everything up to `last` was handed out for appending
                // no later than this Ready, so the store has it by the time the
                // driver serves the read; a leader never truncates its own log.
                let end = last.min(next - 1 + max_entries as u64);
                if let Some(pr) = self.state.progress_mut(to) {
                    pr.sent((end + 1 - next) as usize, end);
                    pr.unanswered_reads += 1;
                }
                self.log_reads.push(LogRead {
                    to,
                    from: next,
                    last: end,
                    term: self.term,
                });
                state == ProgressState::Replicate
            }
        }
    }

    /// The driver read the entries of `read` (and the term of the entry before
    /// them) back from the store: sends them to the follower. A late answer, after
    /// this node's term or role changed, is dropped whatever it holds; an answer
    /// that does not match the request is refused.
    pub fn send_stored_entries(
        &mut self,
        read: LogRead,
        prev_term: u64,
        entries: Vec<Entry>,
    ) -> Result<(), RaftError> {
        // A late answer (this node no longer leads in the term that asked) is
        // dropped unread: the store may hold a later leader's entries by now.
        if !self.answered(&read) {
            return Ok(());
        }
        // A read the core made has `1 <= from <= last + 1`; anything else is refused.
        let expected = (read.last + 1)
            .checked_sub(read.from)
            .filter(|_| read.from > 0);
        let contiguous = entries
            .iter()
            .zip(read.from..)
            .all(|(e, index)| e.index == index && e.term <= read.term);
        if expected != Some(entries.len() as u64) || !contiguous {
            return Err(RaftError::LogRead(format!(
                "asked for entries {}..={} of term <= {}, got {} entries starting at {:?}",
                read.from,
                read.last,
                read.term,
                entries.len(),
                entries.first().map(|e| e.index)
            )));
        }
        let commit = self.log.committed;
        self.send(
            read.to,
            MessageBody::AppendEntries {
                prev_index: read.from - 1,
                prev_term,
                entries,
                commit,
            },
        );
        Ok(())
    }

    /// Whether an answer to `read` would still matter: this node still leads in the
    /// term that asked. A driver may skip reading the store for a read that does not.
    pub fn log_read_is_current(&self, read: &LogRead) -> bool {
        self.role() == Role::Leader && self.term == read.term
    }

    /// Counts the driver's answer to `read`; returns whether the answer still
    /// matters ([`RaftCore::log_read_is_current`]).
    fn answered(&mut self, read: &LogRead) -> bool {
        if !self.log_read_is_current(read) {
            return false;
        }
        if let Some(pr) = self.state.progress_mut(read.to) {
            pr.unanswered_reads = pr.unanswered_reads.saturating_sub(1);
        }
        true
    }

    /// The driver could not read the entries of `read` back (compaction dropped
    /// one): the follower gets a snapshot at the applied index instead.
    pub fn report_entries_unavailable(&mut self, read: LogRead) {
        if !self.answered(&read) {
            return;
        }
        let at = self.log.applied;
        let Some(pr) = self.state.progress_mut(read.to) else {
            return;
        };
        if matches!(pr.state, ProgressState::Snapshot { .. }) {
            return;
        }
        // A snapshot the follower partly installed, if it still covers what the
        // follower misses: resume it (the driver reports it stale if the store can
        // no longer give it, and the next attempt starts over at the applied index).
        let resume = pr
            .snapshot_resume
            .filter(|r| r.meta.index >= read.from && r.meta.index > pr.matched);
        if let Some(r) = resume {
            tracing::info!(
                id = self.cfg.id,
                to = read.to,
                index = r.meta.index,
                seq = r.seq,
                "follower needs a snapshot: resuming its installation"
            );
            pr.become_snapshot(r.meta.index);
            self.snapshot_requests.push(SnapshotRequest {
                to: read.to,
                index: r.meta.index,
                resume: Some(r),
            });
            return;
        }
        pr.snapshot_resume = None;
        if at >= read.from && at > pr.matched {
            tracing::info!(
                id = self.cfg.id,
                to = read.to,
                at,
                "follower needs a snapshot"
            );
            pr.become_snapshot(at);
            self.snapshot_requests.push(SnapshotRequest {
                to: read.to,
                index: at,
                resume: None,
            });
        } else {
            // Entries above the applied index are never compacted away; try again
            // from the follower's match at the next heartbeat.
            tracing::warn!(
                id = self.cfg.id,
                to = read.to,
                from = read.from,
                "stored entries unavailable"
            );
            pr.become_probe();
            pr.paused = true;
        }
    }

    /// Wraps one chunk of a snapshot the driver read from the store into a message
    /// to `to` (stamped with this node's id and term).
    pub fn snapshot_chunk(
        &self,
        to: u16,
        meta: SnapshotMeta,
        seq: u32,
        items: Vec<SnapshotItem>,
        done: bool,
    ) -> Message {
        Message {
            from: self.cfg.id,
            to,
            term: self.term,
            body: MessageBody::SnapshotChunk {
                meta,
                seq,
                items,
                done,
            },
        }
    }
}
