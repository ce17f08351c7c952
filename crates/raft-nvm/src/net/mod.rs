//! The TCP transport between Raft nodes: length-prefixed frames of serde-encoded
//! [`crate::raft::Message`]s, a bounded queue and a reconnecting writer per peer.
//!
//! (Being built: see issue 6.)
