//! The accept loop the node's listeners share (RESP clients, the Prometheus
//! endpoint): connections are accepted until shutdown, each served on its own task,
//! finished tasks reaped as they end.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;

/// The pause after an accept error that is not about one connection (a shortage
/// of file descriptors or memory), so the loop does not spin on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Accepts connections on `listener` until `shutdown` holds `true` (or its sender is
/// gone), handing each to `serve`, which spawns its task into `conns`; reaps
/// finished tasks meanwhile. The caller decides what happens to the connections
/// still open when it returns.
///
/// # Errors
///
/// Only if the listener itself is unusable (`InvalidInput`: not listening). Other
/// accept errors concern one connection or a passing shortage; they are logged
/// (`what` names the listener) and accepting goes on, after [`ACCEPT_BACKOFF`]
/// for a shortage.
pub(crate) async fn accept_until_shutdown(
    listener: &TcpListener,
    shutdown: &mut watch::Receiver<bool>,
    conns: &mut JoinSet<()>,
    what: &'static str,
    mut serve: impl FnMut(TcpStream, SocketAddr, &mut JoinSet<()>),
) -> io::Result<()> {
    loop {
        if *shutdown.borrow_and_update() {
            return Ok(());
        }
        tokio::select! {
            changed = shutdown.changed() => {
                if changed.is_err() {
                    return Ok(());
                }
            }
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => serve(stream, peer, conns),
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Err(e),
                Err(e) => {
                    tracing::warn!(listener = what, error = %e, "accept failed");
                    if !matches!(
                        e.kind(),
                        io::ErrorKind::ConnectionAborted
                            | io::ErrorKind::ConnectionReset
                            | io::ErrorKind::Interrupted
                            | io::ErrorKind::WouldBlock
                    ) {
                        tokio::time::sleep(ACCEPT_BACKOFF).await;
                    }
                }
            },
            // Reap finished connections so the set does not grow.
            Some(joined) = conns.join_next(), if !conns.is_empty() => {
                if let Err(e) = joined {
                    tracing::error!(listener = what, error = %e, "connection task failed");
                }
            }
        }
    }
}
