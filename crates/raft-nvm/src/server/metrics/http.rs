//! The metrics listener: hyper's HTTP/1 server answering `GET /metrics` with the
//! node's exposition text, one request per connection.
//!
//! Against hostile clients: a connection may take [`HTTP_TIMEOUT`] from accept to
//! its last byte (a slow-loris client is dropped then), its request head at most
//! [`MAX_HEAD`] bytes, and at most [`DEFAULT_MAX_METRICS_CONNECTIONS`] (or the
//! node's `max_metrics_connections`) are served at once; one more is closed at
//! once, unanswered, and the refusal logged.

use std::convert::Infallible;
use std::io;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, ALLOW, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpListener;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

/// Asks the node for its exposition text (the sending end of its metrics
/// requests; the node answers on its event loop).
pub type MetricsRequests = mpsc::Sender<oneshot::Sender<String>>;

/// How long a metrics connection may take, from accept to the last byte.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);
/// The most bytes of a request buffered (hyper's smallest limit): a longer
/// request head is refused.
pub(crate) const MAX_HEAD: usize = 8 << 10;
/// The default limit on the metrics connections served at once (a scraper needs
/// one; a few dashboards a handful).
pub const DEFAULT_MAX_METRICS_CONNECTIONS: usize = 64;
/// The exposition format's content type.
const EXPOSITION_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Serves `GET /metrics` on `listener` until `shutdown` holds `true` (or its
/// sender is gone): each connection gets one answer and is closed — `200` with
/// the text the node sends back through `requests` (`text/plain; version=0.0.4`),
/// `404` for another path, `405` for another method than `GET` or `HEAD`, `400`
/// for what is not HTTP/1.x (hyper's answer), `503` once the node stopped. Open
/// connections are dropped at shutdown. At most
/// [`DEFAULT_MAX_METRICS_CONNECTIONS`] are served at once
/// ([`serve_http_capped`] sets another cap).
///
/// # Errors
///
/// Only if the listener is unusable (`InvalidInput`); other accept errors are
/// logged and accepting goes on.
pub async fn serve_http(
    listener: TcpListener,
    requests: MetricsRequests,
    shutdown: watch::Receiver<bool>,
) -> io::Result<()> {
    serve_http_capped(
        listener,
        requests,
        shutdown,
        DEFAULT_MAX_METRICS_CONNECTIONS,
    )
    .await
}

/// [`serve_http`], serving at most `max_connections` at once (at least 1); one
/// more is closed at once, unanswered, and the refusal logged.
///
/// # Errors
///
/// As [`serve_http`].
pub async fn serve_http_capped(
    listener: TcpListener,
    requests: MetricsRequests,
    mut shutdown: watch::Receiver<bool>,
    max_connections: usize,
) -> io::Result<()> {
    let mut conns = JoinSet::new();
    let result = crate::server::accept::accept_until_shutdown(
        &listener,
        &mut shutdown,
        &mut conns,
        crate::server::accept::Admission {
            what: "metrics",
            max_conns: max_connections,
            refusal: b"",
        },
        |stream, peer, conns| {
            let requests = requests.clone();
            conns.spawn(async move {
                match serve_within_timeout(stream, requests, HTTP_TIMEOUT).await {
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

/// Serves one connection within `timeout` ([`HTTP_TIMEOUT`] in the listener;
/// `Err`: it took longer and was dropped). Generic over the stream, and the
/// timeout a parameter, so the `metrics_http` fuzz target can drive it in memory
/// and quickly.
pub(crate) async fn serve_within_timeout<S>(
    stream: S,
    requests: MetricsRequests,
    timeout: Duration,
) -> Result<hyper::Result<()>, tokio::time::error::Elapsed>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::time::timeout(timeout, serve_connection(stream, requests, timeout)).await
}

/// Serves one connection: one request, then the connection is closed.
async fn serve_connection<S>(
    stream: S,
    requests: MetricsRequests,
    timeout: Duration,
) -> hyper::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = service_fn(move |request| {
        let requests = requests.clone();
        async move { Ok::<_, Infallible>(answer(&request, &requests).await) }
    });
    http1::Builder::new()
        .keep_alive(false)
        // As the hand-written responder before it wrote them (`Allow`, ...).
        .title_case_headers(true)
        .max_buf_size(MAX_HEAD)
        .timer(TokioTimer::new())
        .header_read_timeout(timeout)
        .serve_connection(TokioIo::new(stream), service)
        .await
}

/// The response to `request` (hyper leaves the body out for `HEAD`).
async fn answer(request: &Request<Incoming>, requests: &MetricsRequests) -> Response<Full<Bytes>> {
    let (status, body) = if request.uri().path() != "/metrics" {
        (
            StatusCode::NOT_FOUND,
            "not found: try /metrics\n".to_string(),
        )
    } else if request.method() != Method::GET && request.method() != Method::HEAD {
        (StatusCode::METHOD_NOT_ALLOWED, "use GET\n".to_string())
    } else {
        match node_text(requests).await {
            Some(text) => (StatusCode::OK, text),
            None => (
                StatusCode::SERVICE_UNAVAILABLE,
                "the node has stopped\n".to_string(),
            ),
        }
    };
    let content_type = if status == StatusCode::OK {
        EXPOSITION_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let mut response = Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if status == StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
    }
    response
}

/// The node's exposition text, or `None` if it stopped.
async fn node_text(requests: &MetricsRequests) -> Option<String> {
    let (tx, rx) = oneshot::channel();
    requests.send(tx).await.ok()?;
    rx.await.ok()
}
