//! Snapshots between replicas: the leader streams its store in chunks of about
//! [`DEFAULT_CHUNK_BYTES`]; the follower collects the chunks of one snapshot in
//! order and installs them through its [`super::StoreProvider`] once the last one
//! arrived. A chunk out of order (a lost message, a newer offer) abandons the
//! installation and tells the leader, which offers the snapshot again.

use crate::error::Result;
use crate::raft::{IncomingChunk, Message, MessageBody};
use crate::store::{SnapshotItem, SnapshotMeta, Store};

use super::{Replica, ReplicaError};

/// The default payload of one snapshot chunk.
pub const DEFAULT_CHUNK_BYTES: usize = 1 << 20;

/// Streams the snapshot of `store` at `index` to `to` as [`MessageBody::SnapshotChunk`]
/// messages from `from` in `term`, handing each to `send` (which returns false to
/// stop early). Runs as long as the store's stream: call it off the event loop.
pub fn snapshot_messages(
    store: &dyn Store,
    from: u16,
    to: u16,
    term: u64,
    index: u64,
    chunk_bytes: usize,
    mut send: impl FnMut(Message) -> bool,
) -> Result<()> {
    let (meta, mut stream) = store.snapshot(index)?;
    let mut seq = 0u32;
    let mut items = Vec::new();
    let mut bytes = 0usize;
    let wrap = |seq: u32, items: Vec<SnapshotItem>, done: bool| Message {
        from,
        to,
        term,
        body: MessageBody::SnapshotChunk {
            meta,
            seq,
            items,
            done,
        },
    };
    loop {
        let next = stream.next().transpose()?;
        let last = next.is_none();
        if let Some(item) = next {
            bytes += item.key.len() + item.value.len() + 16;
            items.push(item);
        }
        if last || bytes >= chunk_bytes {
            if !send(wrap(seq, std::mem::take(&mut items), last)) {
                return Ok(());
            }
            seq += 1;
            bytes = 0;
        }
        if last {
            return Ok(());
        }
    }
}

/// A snapshot being received.
#[derive(Debug)]
pub(super) struct Incoming {
    from: u16,
    meta: SnapshotMeta,
    next_seq: u32,
    items: Vec<SnapshotItem>,
}

impl Replica {
    /// Takes one incoming chunk; installs the snapshot after its last one.
    pub(super) fn take_chunk(&mut self, chunk: IncomingChunk) -> Result<(), ReplicaError> {
        let IncomingChunk {
            from,
            meta,
            seq,
            items,
            done,
        } = chunk;
        if seq == 0 {
            if !done {
                self.provider.prepare();
            }
            self.incoming = Some(Incoming {
                from,
                meta,
                next_seq: 1,
                items,
            });
        } else {
            match &mut self.incoming {
                Some(inc) if inc.from == from && inc.meta == meta && inc.next_seq == seq => {
                    inc.items.extend(items);
                    inc.next_seq += 1;
                }
                _ => {
                    tracing::warn!(
                        id = self.core.id(),
                        from,
                        seq,
                        "snapshot chunk out of order: installation abandoned"
                    );
                    self.incoming = None;
                    self.core.on_snapshot_failed(from);
                    return Ok(());
                }
            }
        }
        if !done {
            return Ok(());
        }
        let Some(inc) = self.incoming.take() else {
            return Ok(());
        };
        let count = inc.items.len();
        let started = std::time::Instant::now();
        match self
            .provider
            .replace(&*self.store, inc.meta, &mut inc.items.into_iter())
        {
            Ok(store) => {
                self.store = store;
                self.store.set_applied(inc.meta.index);
                tracing::info!(
                    id = self.core.id(),
                    index = inc.meta.index,
                    records = count,
                    ms = started.elapsed().as_secs_f64() * 1e3,
                    "snapshot installed"
                );
                self.core.on_snapshot_installed(from, inc.meta);
            }
            Err(e) => {
                tracing::warn!(id = self.core.id(), "snapshot installation failed: {e}");
                self.core.on_snapshot_failed(from);
            }
        }
        Ok(())
    }
}
