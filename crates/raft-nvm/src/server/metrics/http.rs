//! A plain-HTTP listener that answers `GET /metrics` with the node's exposition
//! text, one request per connection.

use std::io;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

/// Asks the node for its exposition text (the sending end of its metrics
/// requests; the node answers on its event loop).
pub type MetricsRequests = mpsc::Sender<oneshot::Sender<String>>;

/// How long a metrics connection may take, from accept to the last byte.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// The longest request head read.
const MAX_HEAD: usize = 8 << 10;

/// Serves `GET /metrics` on `listener` until `shutdown` holds `true` (or its
/// sender is gone): each connection gets one answer and is closed — `200` with
/// the text the node sends back through `requests` (`text/plain; version=0.0.4`),
/// `404` for another path, `405` for another method than `GET` or `HEAD`, `400`
/// for what is not HTTP/1.x, `503` once the node stopped. Open connections are
/// dropped at shutdown.
///
/// # Errors
///
/// Only if the listener is unusable (`InvalidInput`); other accept errors are
/// logged and accepting goes on.
pub async fn serve_http(
    listener: TcpListener,
    requests: MetricsRequests,
    mut shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    let mut conns = JoinSet::new();
    let result = crate::server::accept::accept_until_shutdown(
        &listener,
        &mut shutdown,
        &mut conns,
        "metrics",
        |stream, peer, conns| {
            let requests = requests.clone();
            conns.spawn(async move {
                match tokio::time::timeout(HTTP_TIMEOUT, answer(stream, &requests)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::debug!(%peer, error = %e, "metrics connection failed"),
                    Err(_) => tracing::debug!(%peer, "metrics connection timed out"),
                }
            });
        },
    )
    .await;
    conns.shutdown().await;
    result
}

/// Reads one request head from `stream` and answers it.
async fn answer(mut stream: TcpStream, requests: &MetricsRequests) -> io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let complete = loop {
        if head.windows(4).any(|w| w == b"\r\n\r\n") || head.windows(2).any(|w| w == b"\n\n") {
            break true;
        }
        if head.len() >= MAX_HEAD {
            break false;
        }
        let mut buf = [0u8; 1024];
        let n = stream.read(&mut buf).await?;
        if n == 0 {
            break false;
        }
        head.extend_from_slice(&buf[..n]);
    };
    let line = head
        .split(|&b| b == b'\n')
        .next()
        .map(|l| String::from_utf8_lossy(l).trim_end().to_string())
        .unwrap_or_default();
    let mut words = line.split(' ');
    let (method, target, version) = (words.next(), words.next(), words.next());
    let (status, body, extra) = match (method, target, version) {
        _ if !complete => ("400 Bad Request", "incomplete request\n".to_string(), ""),
        (Some(method), Some(target), Some(version))
            if version.starts_with("HTTP/1.") && words.next().is_none() =>
        {
            let path = target.split('?').next().unwrap_or(target);
            if path != "/metrics" {
                ("404 Not Found", "not found: try /metrics\n".to_string(), "")
            } else if method != "GET" && method != "HEAD" {
                (
                    "405 Method Not Allowed",
                    "use GET\n".to_string(),
                    "Allow: GET, HEAD\r\n",
                )
            } else {
                match node_text(requests).await {
                    Some(text) => ("200 OK", text, ""),
                    None => (
                        "503 Service Unavailable",
                        "the node has stopped\n".to_string(),
                        "",
                    ),
                }
            }
        }
        _ => (
            "400 Bad Request",
            "not an HTTP/1.x request\n".to_string(),
            "",
        ),
    };
    let content_type = if status.starts_with("200") {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra}Connection: close\r\n\r\n",
        body.len()
    )
    .into_bytes();
    if method != Some("HEAD") {
        response.extend_from_slice(body.as_bytes());
    }
    stream.write_all(&response).await?;
    stream.shutdown().await
}

/// The node's exposition text, or `None` if it stopped.
async fn node_text(requests: &MetricsRequests) -> Option<String> {
    let (tx, rx) = oneshot::channel();
    requests.send(tx).await.ok()?;
    rx.await.ok()
}
