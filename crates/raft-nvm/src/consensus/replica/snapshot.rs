//! Snapshots between replicas.
//!
//! The leader streams its store in chunks of about [`DEFAULT_CHUNK_BYTES`]
//! ([`stream_snapshot`]). The follower installs each chunk as it arrives into a
//! staging store through its [`super::StoreProvider`]'s [`SnapshotInstall`] (a
//! thread fed chunk by chunk: the follower never holds the snapshot in DRAM), tells
//! the leader how far it got ([`MessageBody::SnapshotProgress`]) and, after the last
//! chunk, swaps the staged store in.
//!
//! **Resuming.** The stream of a snapshot is deterministic: for a given store and
//! index both engines stream the live records in key order (the list engine from
//! its index under the collector's gate, the WAL engine from its DRAM index), and a
//! snapshot is only served between the compaction floor and the applied index, so
//! whatever compaction did in between, the records visible at that index are the
//! same. The chunk boundaries depend on the leader's chunk size only. So a stream
//! broken by a lost connection (the leader's driver notices), or a chunk that went
//! missing (the follower sees a gap and answers with
//! [`MessageBody::SnapshotAck`]`{ resume: Some(..) }`), resumes at the first chunk
//! the follower lacks, provided the leader (same node, same term) still gives the
//! same snapshot `(index, term)`: the leader remembers the follower's progress and
//! asks its driver to skip the chunks before it ([`SnapshotRequest::resume`]). If
//! the store moved past that snapshot, the driver reports it stale and the next
//! snapshot starts over at the applied index.
//!
//! What resumes is an installation the follower *process* still holds: a restarted
//! follower removes any staging store on open (the list engine's staged chain is
//! detached until its final seal, so nothing of it would survive anyway) and answers
//! a resumed stream with a plain failure, after which the leader starts over.

use crate::consensus::raft::{
    IncomingChunk, Message, MessageBody, SnapshotRequest, SnapshotResume,
};
use crate::storage::error::{Result, StoreError};
use crate::storage::store::{SnapshotMeta, Store};

use super::provider::SnapshotInstall;
use super::{Replica, ReplicaError};

/// The default payload of one snapshot chunk.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

/// Streams the whole snapshot of `store` at `index` to `to` as
/// [`MessageBody::SnapshotChunk`] messages from `from` in `term`, handing each to
/// `send` (which returns false to stop early). Runs as long as the store's stream:
/// call it off the event loop. See [`stream_snapshot`] to resume one.
pub fn snapshot_messages(
    store: &dyn Store,
    from: u16,
    to: u16,
    term: u64,
    index: u64,
    chunk_bytes: usize,
    send: impl FnMut(Message) -> bool,
) -> Result<()> {
    let req = SnapshotRequest {
        to,
        index,
        resume: None,
    };
    stream_snapshot(store, from, term, &req, chunk_bytes, send).map(|_| ())
}

/// How [`stream_snapshot`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Streamed {
    /// Every chunk from the first one asked for went to `send`: `sent` chunks.
    Sent {
        /// Chunks handed to `send`.
        sent: u32,
    },
    /// `send` returned false: the stream stopped after `sent` chunks.
    Stopped {
        /// Chunks handed to `send` (the refused one included).
        sent: u32,
    },
    /// The request resumes a snapshot the store no longer gives (compacted past
    /// it, or another term at its index): nothing was sent. Report it with
    /// [`Replica::report_snapshot_stale`].
    Stale,
}

/// Streams the snapshot `req` asks for: the snapshot of `store` at `req.index` to
/// `req.to` as [`MessageBody::SnapshotChunk`] messages from `from` in `term`, each
/// handed to `send` (which returns false to stop early). With `req.resume`, the
/// chunks before `resume.seq` are read but not sent, and only if the store still
/// gives exactly `resume.meta` (else [`Streamed::Stale`]). Chunks hold about
/// `chunk_bytes` of records; resuming needs the same `chunk_bytes` as the stream it
/// resumes (one leader's configuration). Runs as long as the store's stream: call
/// it off the event loop.
pub fn stream_snapshot(
    store: &dyn Store,
    from: u16,
    term: u64,
    req: &SnapshotRequest,
    chunk_bytes: usize,
    mut send: impl FnMut(Message) -> bool,
) -> Result<Streamed> {
    let (meta, mut stream) = match store.snapshot(req.index) {
        Ok(s) => s,
        Err(StoreError::SnapshotUnavailable { .. }) if req.resume.is_some() => {
            return Ok(Streamed::Stale)
        }
        Err(e) => return Err(e),
    };
    let skip = match req.resume {
        Some(r) if r.meta != meta => return Ok(Streamed::Stale),
        Some(r) => r.seq,
        None => 0,
    };
    let to = req.to;
    let mut seq = 0u32;
    let mut sent = 0u32;
    let mut items = Vec::new();
    let mut bytes = 0usize;
    loop {
        let next = stream.next().transpose()?;
        let last = next.is_none();
        if let Some(item) = next {
            bytes += item.key.len() + item.value.len() + 16;
            items.push(item);
        }
        if last || bytes >= chunk_bytes {
            let chunk = std::mem::take(&mut items);
            if seq >= skip {
                sent += 1;
                let m = Message {
                    from,
                    to,
                    term,
                    body: MessageBody::SnapshotChunk {
                        meta,
                        seq,
                        items: chunk,
                        done: last,
                    },
                };
                if !send(m) {
                    return Ok(Streamed::Stopped { sent });
                }
            } else if last {
                // Fewer chunks than the follower holds: not the stream it resumes.
                return Ok(Streamed::Stale);
            }
            seq += 1;
            bytes = 0;
        }
        if last {
            return Ok(Streamed::Sent { sent });
        }
    }
}

/// The follower's side: the installation in progress, if any.
#[derive(Default)]
pub(super) struct Receiving {
    current: Option<Installing>,
    /// The stream last answered with a plain failure (a chunk of a stream this
    /// replica holds nothing of): answered once, not per chunk.
    refused: Option<(u16, u64, SnapshotMeta)>,
}

/// A snapshot being installed into the staging store.
struct Installing {
    from: u16,
    term: u64,
    meta: SnapshotMeta,
    /// The next chunk needed: `0..next_seq` were pushed into `install`.
    next_seq: u32,
    /// A gap at `next_seq` was reported to the leader already.
    gap_reported: bool,
    install: Box<dyn SnapshotInstall>,
}

impl Receiving {
    /// Abandons the installation in progress (its staging store is removed).
    pub(super) fn abandon(&mut self) {
        if let Some(inc) = self.current.take() {
            tracing::info!(
                index = inc.meta.index,
                chunks = inc.next_seq,
                "snapshot installation abandoned"
            );
        }
    }
}

impl std::fmt::Debug for Receiving {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Receiving")
            .field(
                "current",
                &self.current.as_ref().map(|i| (i.from, i.meta, i.next_seq)),
            )
            .finish_non_exhaustive()
    }
}

impl Replica {
    /// Takes one incoming chunk: chunk 0 starts a new installation; the next chunk
    /// of the installation in progress goes into its staging store; the last one
    /// completes it and swaps the store. A gap asks the leader to resume; a chunk of
    /// a stream this replica holds nothing of asks it to start over.
    pub(super) fn take_chunk(&mut self, chunk: IncomingChunk) -> Result<(), ReplicaError> {
        let IncomingChunk {
            from,
            term,
            meta,
            seq,
            items,
            done,
        } = chunk;
        let id = self.core.id();
        if seq == 0 {
            self.incoming.abandon();
            match self.provider.begin_install(meta) {
                Ok(install) => {
                    tracing::info!(
                        id,
                        from,
                        index = meta.index,
                        "snapshot installation started"
                    );
                    self.incoming.current = Some(Installing {
                        from,
                        term,
                        meta,
                        next_seq: 0,
                        gap_reported: false,
                        install,
                    });
                }
                Err(e) => {
                    tracing::warn!(id, "cannot start a snapshot installation: {e}");
                    self.core.on_snapshot_failed(from, None);
                    return Ok(());
                }
            }
        }
        let inc = match &mut self.incoming.current {
            Some(inc) if inc.from == from && inc.term == term && inc.meta == meta => inc,
            _ => {
                if self.incoming.refused != Some((from, term, meta)) {
                    tracing::warn!(
                        id,
                        from,
                        seq,
                        index = meta.index,
                        "snapshot chunk of an installation this replica does not hold: start over"
                    );
                    self.incoming.refused = Some((from, term, meta));
                    self.core.on_snapshot_failed(from, None);
                }
                return Ok(());
            }
        };
        if seq < inc.next_seq {
            // Already installed (a resumed stream overlapping what arrived).
            return Ok(());
        }
        if seq > inc.next_seq {
            if !inc.gap_reported {
                inc.gap_reported = true;
                tracing::warn!(
                    id,
                    from,
                    seq,
                    next = inc.next_seq,
                    "snapshot chunks went missing: asking the leader to resume"
                );
                let resume = SnapshotResume {
                    meta,
                    seq: inc.next_seq,
                };
                self.core.on_snapshot_failed(from, Some(resume));
            }
            return Ok(());
        }
        if let Err(e) = inc.install.push(items) {
            tracing::warn!(id, "snapshot installation failed: {e}");
            self.incoming.abandon();
            self.core.on_snapshot_failed(from, None);
            return Ok(());
        }
        inc.next_seq += 1;
        inc.gap_reported = false;
        if !done {
            let resume = SnapshotResume {
                meta,
                seq: inc.next_seq,
            };
            self.core.on_snapshot_progress(from, resume);
            return Ok(());
        }
        let Some(inc) = self.incoming.current.take() else {
            return Ok(());
        };
        let started = std::time::Instant::now();
        match inc.install.finish(self.store.hard_state()) {
            Ok(store) => {
                self.store = store;
                self.store.set_applied(meta.index);
                tracing::info!(
                    id,
                    index = meta.index,
                    chunks = inc.next_seq,
                    finish_ms = started.elapsed().as_secs_f64() * 1e3,
                    "snapshot installed"
                );
                let membership =
                    crate::consensus::raft::stored_membership(&*self.store, meta.index)?;
                self.core.on_snapshot_installed(from, meta, membership);
            }
            Err(e) => {
                tracing::warn!(id, "snapshot installation failed: {e}");
                self.core.on_snapshot_failed(from, None);
            }
        }
        Ok(())
    }
}

impl Replica {
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
    /// [`RaftCore::report_snapshot_sent`](crate::consensus::raft::RaftCore::report_snapshot_sent): without it, a lost acknowledgement leaves
    /// the follower without entries until it asks again).
    pub fn report_snapshot_sent(&mut self, to: u16) {
        self.core.report_snapshot_sent(to);
    }
}
