//! The node driver: a Raft core and a store, run by tokio.
//!
//! (Being built: see issue 6.)
