//! Helpers for the tests that run several real nodes in one process on loopback:
//! free ports for their members, and a node's `INFO` over RESP.

#![allow(dead_code)] // each test uses a different part

use std::net::{SocketAddr, TcpListener};

use raft_nvm::resp::{Reply, RespClient};

/// A port free on loopback now (a test that binds several picks them one cluster
/// at a time, so two clusters never pick the same one).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

/// The `INFO` text of the node serving clients at `addr`.
pub async fn info(addr: SocketAddr) -> String {
    let mut c = RespClient::connect(addr).await.expect("connect");
    match c.command(&[b"INFO"]).await.expect("INFO") {
        Reply::Bulk(text) => String::from_utf8(text).expect("utf-8"),
        other => panic!("INFO answered {other:?}"),
    }
}
