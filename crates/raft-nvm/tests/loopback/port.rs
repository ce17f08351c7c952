//! Loopback ports for tests that start real nodes.
//!
//! Asking the kernel for port 0 and closing the listener hands back a port from the
//! ephemeral range, and the kernel may give that very port to an outgoing
//! connection (a node dialling a peer, a client) before the test's node binds it:
//! the node then fails with `AddrInUse`. The ports here come from below the
//! ephemeral range, which outgoing connections never use, and from one counter per
//! process, so two tests in one binary never pick the same port. Each process
//! starts at its own offset, and a port something else holds is skipped.
//!
//! Shared by raft-nvm's tests and the workspace's process-cluster tests
//! (`#[path]`), so both pick ports the same way.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// The lowest port handed out: above the registered services most machines run.
const FLOOR: u32 = 10_000;

/// The first port of the kernel's ephemeral range (Linux's default when the
/// setting cannot be read).
fn ephemeral_start() -> u32 {
    std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .filter(|&start: &u32| start > FLOOR + 1_000)
        .unwrap_or(32_768)
}

/// A port on 127.0.0.1 that nothing holds now and that the kernel will not give
/// to an outgoing connection.
pub fn free_port() -> u16 {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    static SPAN_AND_OFFSET: OnceLock<(u32, u32)> = OnceLock::new();
    let &(span, offset) = SPAN_AND_OFFSET.get_or_init(|| {
        let span = ephemeral_start() - FLOOR;
        // Processes that run at once (a test binary and the nodes it spawns, or
        // two binaries) start far apart.
        (span, std::process::id().wrapping_mul(7_919) % span)
    });
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = FLOOR + (offset + n) % span;
        let port = u16::try_from(port).expect("below the ephemeral range, so within u16");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free loopback port below the ephemeral range");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_bindable_and_below_the_ephemeral_range() {
        let ports: Vec<u16> = (0..64).map(|_| free_port()).collect();
        let mut sorted = ports.clone();
        sorted.sort_unstable();
        sorted.dedup();
        assert_eq!(sorted.len(), ports.len(), "a port was handed out twice");
        for p in ports {
            assert!(
                u32::from(p) >= FLOOR && u32::from(p) < ephemeral_start(),
                "{p}"
            );
        }
    }
}
