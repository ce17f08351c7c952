//! A one-member node on loopback (ports chosen by the system), for the tests that
//! talk to a real node: its configuration, bootstrapped, and a runtime to run it.

use std::net::SocketAddr;

use raft_nvm::node::{Member, NodeConfig};
use raft_nvm::replica::{Engine, StartMode};

/// The configuration of node 1, the only member, over `engine`, bootstrapping.
pub fn single_node(engine: Engine) -> NodeConfig {
    let any: SocketAddr = "127.0.0.1:0".parse().expect("address");
    let members = [(
        1,
        Member {
            raft: any,
            client: any,
        },
    )]
    .into_iter()
    .collect();
    let mut cfg = NodeConfig::new(1, members, engine);
    cfg.start = StartMode::Bootstrap;
    cfg
}

/// A two-worker runtime, as the node binaries use.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}
