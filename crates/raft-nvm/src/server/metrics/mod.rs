//! What a running node measures about itself, and the two ways it shows it: Redis
//! `INFO` sections and the Prometheus text exposition format, the latter served by
//! an optional plain-HTTP listener ([`serve_http`]).
//!
//! - [`RequestStats`]: per command class ([`CommandClass`]: `get`, `set`, `del`,
//!   `cas`, `info`) the calls, the calls refused before they ran and the calls that
//!   failed, and an HDR histogram of their latency (nanoseconds, two significant
//!   digits, saturating at [`MAX_LATENCY`]: about 30 KiB per class whatever the
//!   traffic). The node's event loop owns it and records each request from the
//!   moment it takes the request off its queue to the moment it sends the reply:
//!   no lock, one clock read per request and one per batch of replies. The figures
//!   are cumulative since the node started, as Redis's are until `CONFIG
//!   RESETSTAT`.
//! - [`RequestStats::write_info`]: Redis 7's `# Commandstats`
//!   (`cmdstat_set:calls=…,usec=…,usec_per_call=…,rejected_calls=…,failed_calls=…`)
//!   and `# Latencystats` (`latency_percentiles_usec_set:p50=…,p99=…,p99.9=…`)
//!   sections, appended by the node to the replica's `INFO` text. As in Redis, a
//!   class appears once it has been called.
//! - [`Exposition`]: a writer of the Prometheus text format (version 0.0.4): one
//!   `# HELP` and `# TYPE` line per family, then its samples. [`write_status`] and
//!   [`RequestStats::write_prometheus`] write the node's metrics, all named
//!   `raftnvm_*`; the tests read such a text back, checking it (`parse.rs`,
//!   built for tests only).
//! - [`serve_http`]: answers `GET /metrics` with the exposition text (hyper's HTTP/1
//!   server), one request per connection.
//!
//! One file each: `stats.rs` (the request statistics), `exposition.rs` (the
//! writer), `snapshot.rs` (a replica's families, from its `ReplicaStatus`), `parse.rs`
//! (the reader, test-only), `http.rs` (the listener, on hyper's HTTP/1 server).

mod exposition;
mod http;
/// Test-only: the unit tests here and `tests/metrics.rs` (which includes the file)
/// read the exposition back with it.
#[cfg(test)]
pub(crate) mod parse;
mod snapshot;
mod stats;
#[cfg(test)]
mod tests;

pub use self::exposition::{Exposition, MetricType};
pub use self::http::{
    serve_http, serve_http_capped, MetricsRequests, DEFAULT_MAX_METRICS_CONNECTIONS,
};
pub(crate) use self::http::{serve_within_timeout, MAX_HEAD};
pub use self::snapshot::write_status;
pub use self::stats::{CommandClass, Outcome, RequestStats, MAX_LATENCY};
