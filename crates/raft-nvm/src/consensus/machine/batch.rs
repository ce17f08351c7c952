//! A batch of machine commands applied together ([`BatchState`]): the map as
//! the commands of the batch see it, and the one write each of them makes.
//!
//! A replica appends a run of consecutive machine entries (a leader's proposals
//! of one process, a follower's entries of one message) as one batch. The
//! commands are still separate Raft entries, each with at most one write, so
//! each stays atomic; the batch only saves the machine a call per command. How
//! entries are grouped differs between replicas, so the outcome of each command
//! must not depend on the grouping: `get` sees exactly the entries before the
//! command in log order, whether they were applied in an earlier batch or
//! earlier in this one.

use crate::storage::error::StoreError;
use crate::storage::store::Store;

use super::{Applied, MachineReply, StateView, Write};

/// The replicated map as a batch of commands sees it, and the write each command
/// of the batch makes (see the module docs).
///
/// Commands are named by their position in the batch (`0..len()`). Record their
/// writes in order: [`BatchState::get`] answers with the newest write recorded so
/// far (the highest position's), then the store, which is what the store holds
/// once the batch is appended.
pub struct BatchState<'a> {
    /// The state before the batch.
    under: StateView<'a>,
    /// The log index of the batch's first command.
    first: u64,
    /// Each command's write (`None`: changes nothing).
    writes: Vec<Option<Write>>,
    /// Each command's refused write, with the reason (see [`refusal`]).
    refused: Vec<Option<String>>,
    /// The largest key and value one entry may hold.
    max_entry: usize,
    /// Added to the positions a machine names (a typed machine's commands that
    /// decoded are a window of the batch; see [`crate::consensus::machine::Typed`]).
    base: usize,
    /// Commands visible through `base` (the window's length).
    window: usize,
}

impl std::fmt::Debug for BatchState<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchState")
            .field("first", &self.first)
            .field("len", &self.writes.len())
            .finish_non_exhaustive()
    }
}

impl<'a> BatchState<'a> {
    /// A batch of `len` commands, the first at log index `first`, over `store`
    /// holding exactly the entries before it.
    pub(crate) fn new(store: &'a dyn Store, first: u64, len: usize, max_entry: usize) -> Self {
        BatchState::over(StateView::before(store, first), len, max_entry)
    }

    /// A batch of `len` commands after the state `under` (the first command at
    /// its index).
    pub(crate) fn over(under: StateView<'a>, len: usize, max_entry: usize) -> Self {
        BatchState {
            first: under.index(),
            under,
            writes: vec![None; len],
            refused: vec![None; len],
            max_entry,
            base: 0,
            window: len,
        }
    }

    /// The store under the batch.
    pub(crate) fn store(&self) -> &'a dyn Store {
        self.under.store()
    }

    /// The number of commands in the batch.
    pub fn len(&self) -> usize {
        self.window
    }

    /// Whether the batch holds no command.
    pub fn is_empty(&self) -> bool {
        self.window == 0
    }

    /// The log index of command `pos`.
    pub fn index(&self, pos: usize) -> u64 {
        self.first + (self.base + pos) as u64
    }

    /// The value of `key` after the writes recorded so far (see the type's
    /// docs), or `None` if it is absent.
    ///
    /// # Errors
    ///
    /// The store's (a damaged record).
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        self.get_before(self.writes.len(), key)
    }

    /// Records that command `pos` sets `key` to `value`, replacing any write it
    /// recorded before (a command changes at most one key). A write over the
    /// entry limits or to one of the cluster's own keys is refused: nothing is
    /// recorded, and the client gets an error instead of the command's response
    /// (decided the same way on every replica). A `pos` outside the batch is
    /// ignored.
    pub fn put(&mut self, pos: usize, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) {
        let write = Write::Put {
            key: key.into(),
            value: value.into(),
        };
        self.set_in_window(pos, write);
    }

    /// Records that command `pos` deletes `key` (see [`BatchState::put`]).
    pub fn delete(&mut self, pos: usize, key: impl Into<Vec<u8>>) {
        self.set_in_window(pos, Write::Delete { key: key.into() });
    }

    /// Records `write` as the write of command `pos` of the window.
    fn set_in_window(&mut self, pos: usize, write: Write) {
        if pos < self.window {
            self.set(self.base + pos, Some(write));
        }
    }

    /// Records `write` as the write of command `at` of the whole batch, or its
    /// refusal.
    fn set(&mut self, at: usize, write: Option<Write>) {
        if at >= self.writes.len() {
            return;
        }
        let why = write.as_ref().and_then(|w| refusal(w, self.max_entry));
        self.refused[at] = why;
        self.writes[at] = if self.refused[at].is_some() {
            None
        } else {
            write
        };
    }

    /// The value of `key` after the writes of the commands before position `end`
    /// of the whole batch.
    pub(crate) fn get_before(&self, end: usize, key: &[u8]) -> Result<Option<Vec<u8>>, StoreError> {
        for write in self.writes[..end.min(self.writes.len())].iter().rev() {
            match write {
                Some(Write::Put { key: k, value }) if k == key => return Ok(Some(value.clone())),
                Some(Write::Delete { key: k }) if k == key => return Ok(None),
                _ => {}
            }
        }
        self.under.get(key)
    }

    /// Narrows the positions a machine names to `len` commands from `base` of
    /// the whole batch.
    pub(crate) fn set_window(&mut self, base: usize, len: usize) {
        self.base = base.min(self.writes.len());
        self.window = len.min(self.writes.len() - self.base);
    }

    /// The view command `pos` of the whole batch is applied against by a
    /// one-at-a-time [`super::StateMachine::apply`].
    pub(crate) fn view(&self, pos: usize) -> StateView<'_> {
        StateView::in_batch(self, pos, self.first + pos as u64)
    }

    /// Records what a one-at-a-time `apply` decided for command `pos` of the
    /// whole batch; returns the client's reply (an error if the write is refused).
    pub(crate) fn record(&mut self, pos: usize, applied: Applied) -> MachineReply {
        self.set(pos, applied.write);
        self.reply(pos, Some(applied.reply))
    }

    /// The client's reply for command `pos` of the whole batch: the refusal of
    /// its write if it was refused, else `reply` (`None`: the machine answered
    /// none).
    pub(crate) fn reply(&self, pos: usize, reply: Option<MachineReply>) -> MachineReply {
        if let Some(Some(why)) = self.refused.get(pos) {
            return MachineReply::Error(why.clone());
        }
        reply.unwrap_or_else(|| {
            MachineReply::Error(
                "the state machine answered fewer responses than the batch had commands".into(),
            )
        })
    }

    /// The write of command `pos` of the whole batch.
    pub(crate) fn write(&self, pos: usize) -> Option<&Write> {
        self.writes.get(pos).and_then(Option::as_ref)
    }

    /// Takes the write of command `pos` of the whole batch out.
    pub(crate) fn take_write(&mut self, pos: usize) -> Option<Write> {
        self.writes.get_mut(pos).and_then(Option::take)
    }
}

/// Why `write` cannot be stored: a key of the cluster's own, or a key or value
/// over the entry limits (`max_entry` bytes of key and value). The same on every
/// replica (the limits are configuration).
pub(crate) fn refusal(write: &Write, max_entry: usize) -> Option<String> {
    let (key, value_len) = match write {
        Write::Put { key, value } => (key, value.len()),
        Write::Delete { key } => (key, 0),
    };
    if crate::consensus::raft::is_reserved_key(key) {
        return Some(
            "the command writes one of the cluster's own keys (\\x00raft-nvm/...); nothing was written"
                .to_string(),
        );
    }
    if key.len() > usize::from(u16::MAX) || key.len() + value_len > max_entry {
        return Some(format!(
            "the command's write (a {}-byte key, a {value_len}-byte value) exceeds the entry limit ({} bytes of key, {max_entry} of key and value); nothing was written",
            key.len(),
            u16::MAX
        ));
    }
    None
}
