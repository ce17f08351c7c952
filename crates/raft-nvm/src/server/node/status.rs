//! The node's status channel ([`Node::status`]): the replica's public
//! [`NodeStatus`], published by the event loop after each batch it processed,
//! and only when a field changed, so an idle node wakes no watcher.

use tokio::sync::watch;

use crate::consensus::replica::{NodeStatus, Replica};

use super::{EventLoop, Node};

impl Node {
    /// A channel that always holds this node's latest [`NodeStatus`] (role,
    /// term, leader, commit and applied index, configuration, store usage).
    /// `changed().await` wakes when the event loop published a new one: on an
    /// election, a commit, a configuration change, a write that used space.
    /// After the node stopped, the channel keeps its last status and
    /// `changed()` returns an error.
    ///
    /// ```no_run
    /// use raft_nvm::node::Node;
    ///
    /// async fn follow(node: &Node) {
    ///     let mut status = node.status();
    ///     while status.changed().await.is_ok() {
    ///         let s = status.borrow_and_update().clone();
    ///         println!(
    ///             "{} in term {}, leader {:?}, commit {}",
    ///             s.role.name(),
    ///             s.term,
    ///             s.leader,
    ///             s.commit_index
    ///         );
    ///     }
    /// }
    /// ```
    pub fn status(&self) -> watch::Receiver<NodeStatus> {
        self.status.clone()
    }
}

/// The channel for a replica's status, holding its status now.
pub(super) fn channel(
    replica: &Replica,
) -> (watch::Sender<NodeStatus>, watch::Receiver<NodeStatus>) {
    watch::channel(replica.node_status())
}

impl EventLoop {
    /// Publishes the replica's status if it changed since the last one.
    pub(super) fn publish_status(&self) {
        let replica = &self.replica;
        self.status
            .send_if_modified(|status| replica.refresh_status(status));
    }
}
