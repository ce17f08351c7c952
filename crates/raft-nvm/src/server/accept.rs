//! The accept loop the node's listeners share (RESP clients, the Prometheus
//! endpoint): connections are accepted until shutdown, each served on its own task,
//! finished tasks reaped as they end, and at most a fixed number served at once.
//!
//! A connection over the cap is refused at once: the listener's refusal line (if
//! it has one) is written without waiting — a fresh socket's send buffer is empty,
//! so a short line fits — and the socket is closed. The accept loop never waits on
//! a client, so a crowd of them cannot stall it. Refusals are logged as a warning
//! at most once a second (a crowd would otherwise flood the log), with the count
//! of those logged at debug meanwhile.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The pause after an accept error that is not about one connection (a shortage
/// of file descriptors or memory), so the loop does not spin on it.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// The shortest interval between two refusal warnings of one listener.
const REFUSAL_WARN_INTERVAL: Duration = Duration::from_secs(1);

/// Who a listener admits: its name in logs, the most connections it serves at
/// once, and what it tells a connection over that.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Admission {
    /// The listener's name in logs (`RESP`, `metrics`).
    pub(crate) what: &'static str,
    /// The most connections served at once (at least 1 is served whatever this
    /// says, so a listener is never shut by its configuration).
    pub(crate) max_conns: usize,
    /// Written to a refused connection before it is closed (may be empty).
    pub(crate) refusal: &'static [u8],
}

/// Logs refusals: a warning at most every [`REFUSAL_WARN_INTERVAL`], debug lines
/// in between, counted in the next warning.
struct RefusalLog {
    last_warning: Option<Instant>,
    suppressed: u64,
}

impl RefusalLog {
    fn refused(&mut self, admission: &Admission, peer: SocketAddr) {
        let now = Instant::now();
        if self
            .last_warning
            .is_none_or(|at| now.duration_since(at) >= REFUSAL_WARN_INTERVAL)
        {
            tracing::warn!(
                listener = admission.what,
                %peer,
                max_connections = admission.max_conns,
                suppressed = self.suppressed,
                "connection refused: the listener serves its maximum number of connections"
            );
            self.last_warning = Some(now);
            self.suppressed = 0;
        } else {
            self.suppressed += 1;
            tracing::debug!(listener = admission.what, %peer, "connection refused: at the connection cap");
        }
    }
}

/// Accepts connections on `listener` until `shutdown` holds `true` (or its sender is
/// gone), handing each to `serve`, which spawns its task into `conns`, while fewer
/// than `admission.max_conns` are served; refuses the others (see the module docs).
/// Reaps finished tasks meanwhile. The caller decides what happens to the
/// connections still open when it returns.
///
/// # Errors
///
/// Only if the listener itself is unusable (`InvalidInput`: not listening). Other
/// accept errors concern one connection or a passing shortage; they are logged
/// and accepting goes on, after [`ACCEPT_BACKOFF`] for a shortage.
pub(crate) async fn accept_until_shutdown(
    listener: &TcpListener,
    shutdown: &mut watch::Receiver<bool>,
    conns: &mut JoinSet<()>,
    admission: Admission,
    mut serve: impl FnMut(TcpStream, SocketAddr, &mut JoinSet<()>),
) -> io::Result<()> {
    let mut log = RefusalLog {
        last_warning: None,
        suppressed: 0,
    };
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
                Ok((stream, peer)) => {
                    // Connections that ended since the last reaping do not count.
                    reap_finished(conns, admission.what);
                    if conns.len() >= admission.max_conns.max(1) {
                        refuse(&stream, admission.refusal);
                        log.refused(&admission, peer);
                    } else {
                        serve(stream, peer, conns);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::InvalidInput => return Err(e),
                Err(e) => {
                    tracing::warn!(listener = admission.what, error = %e, "accept failed");
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
            Some(joined) = conns.join_next(), if !conns.is_empty() => log_joined(joined, admission.what),
        }
    }
}

/// Takes the finished tasks out of `conns` without waiting.
pub(crate) fn reap_finished(conns: &mut JoinSet<()>, what: &'static str) {
    while let Some(joined) = conns.try_join_next() {
        log_joined(joined, what);
    }
}

fn log_joined(joined: Result<(), tokio::task::JoinError>, what: &'static str) {
    if let Err(e) = joined {
        tracing::error!(listener = what, error = %e, "connection task failed");
    }
}

/// Writes `line` to a connection being refused, if it fits in the socket's send
/// buffer now (it always does on a fresh connection; if not, the client gets the
/// close alone). The caller then drops the stream, which closes it.
fn refuse(stream: &TcpStream, line: &[u8]) {
    if !line.is_empty() {
        let _ = stream.try_write(line);
    }
}
