//! The RESP (Redis protocol) front end: clients such as `redis-cli` and
//! `redis-benchmark` talk to a node through it.
//!
//! (Being built: see issue 6.)
