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
//!   `# HELP` and `# TYPE` line per family, then its samples. [`NodeSnapshot`] and
//!   [`RequestStats::write_prometheus`] write the node's metrics, all named
//!   `raftnvm_*`; [`parse`] reads such a text back, checking it (for tests and
//!   tools).
//! - [`serve_http`]: answers `GET /metrics` with the exposition text, one request
//!   per connection.

use std::fmt::Write as _;
use std::io;
use std::time::Duration;

use hdrhistogram::Histogram;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinSet;

use crate::consensus::raft::Role;
use crate::consensus::replica::{CompactionCounts, Replica};
use crate::consensus::service::{KvReply, KvRequest};
use crate::storage::store::StoreUsage;

/// The longest latency a histogram tells apart (longer ones count as this long).
pub const MAX_LATENCY: Duration = Duration::from_secs(100);

/// The quantiles shown by `INFO` and in the Prometheus summaries: the quantile,
/// its Prometheus label and its `INFO` name.
const QUANTILES: [(f64, &str, &str); 3] = [
    (0.5, "0.5", "p50"),
    (0.99, "0.99", "p99"),
    (0.999, "0.999", "p99.9"),
];

/// The kinds of request a node counts separately.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CommandClass {
    /// `GET`: a linearizable read.
    Get,
    /// `SET`.
    Set,
    /// `DEL`.
    Del,
    /// `CAS`.
    Cas,
    /// `INFO`.
    Info,
    /// A state machine's write ([`crate::consensus::machine::MachineCall::Write`]).
    MachineWrite,
    /// A state machine's read ([`crate::consensus::machine::MachineCall::Read`]).
    MachineRead,
    /// An administrative command (`RAFT.TRANSFER-LEADER`).
    Admin,
}

impl CommandClass {
    /// Every class, in the order they are shown.
    pub const ALL: [CommandClass; 8] = [
        CommandClass::Get,
        CommandClass::Set,
        CommandClass::Del,
        CommandClass::Cas,
        CommandClass::Info,
        CommandClass::MachineWrite,
        CommandClass::MachineRead,
        CommandClass::Admin,
    ];

    /// The class of `req`.
    pub fn of(req: &KvRequest) -> CommandClass {
        match req {
            KvRequest::Get { .. } => CommandClass::Get,
            KvRequest::Set { .. } => CommandClass::Set,
            KvRequest::Delete { .. } => CommandClass::Del,
            KvRequest::Cas { .. } => CommandClass::Cas,
            KvRequest::Info => CommandClass::Info,
            KvRequest::Machine(crate::consensus::machine::MachineCall::Write(_)) => {
                CommandClass::MachineWrite
            }
            KvRequest::Machine(crate::consensus::machine::MachineCall::Read(_)) => {
                CommandClass::MachineRead
            }
            KvRequest::TransferLeader { .. }
            | KvRequest::ChangeMembership(_)
            | KvRequest::ShowMembership => CommandClass::Admin,
        }
    }

    /// The command's name as Redis spells it in `INFO` (lower case).
    pub fn name(self) -> &'static str {
        match self {
            CommandClass::Get => "get",
            CommandClass::Set => "set",
            CommandClass::Del => "del",
            CommandClass::Cas => "cas",
            CommandClass::Info => "info",
            CommandClass::MachineWrite => "machine_write",
            CommandClass::MachineRead => "machine_read",
            CommandClass::Admin => "admin",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

/// How a request ended, in Redis's terms.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// It ran (whatever it answered: a value, nil, `:0`).
    Ok,
    /// It was refused before it ran: not the leader (`-MOVED`, `-TRYAGAIN`), too
    /// large, or no room (`-OOM`). Redis's `rejected_calls`; not in `calls`.
    Rejected,
    /// It was accepted but could not be answered (leadership lost, the node
    /// stopping): Redis's `failed_calls`, also counted in `calls`.
    Failed,
}

impl Outcome {
    /// The outcome `reply` stands for.
    pub fn of(reply: &KvReply) -> Outcome {
        match reply {
            KvReply::Value(_)
            | KvReply::Done
            | KvReply::Deleted(_)
            | KvReply::Swapped(_)
            | KvReply::Info(_)
            | KvReply::Machine(_) => Outcome::Ok,
            KvReply::NotLeader { .. } | KvReply::Rejected(_) | KvReply::OutOfMemory(_) => {
                Outcome::Rejected
            }
            KvReply::Unavailable(_) => Outcome::Failed,
        }
    }
}

/// One class's figures.
#[derive(Debug)]
struct ClassStats {
    /// Calls that ran (including failed ones).
    calls: u64,
    rejected: u64,
    failed: u64,
    /// The latency of the calls, summed.
    total_ns: u64,
    /// The latency of the calls, in nanoseconds (`None` only if the histogram
    /// could not be created, which fixed valid bounds rule out).
    latency: Option<Histogram<u64>>,
}

impl ClassStats {
    fn new() -> ClassStats {
        let high = u64::try_from(MAX_LATENCY.as_nanos()).unwrap_or(u64::MAX);
        let latency = match Histogram::new_with_bounds(1, high, 2) {
            Ok(h) => Some(h),
            Err(e) => {
                tracing::warn!("latency histogram: {e:?}; latencies are not recorded");
                None
            }
        };
        ClassStats {
            calls: 0,
            rejected: 0,
            failed: 0,
            total_ns: 0,
            latency,
        }
    }
}

/// Per-class request counts and latency histograms (see the [module](self) docs).
#[derive(Debug)]
pub struct RequestStats {
    classes: [ClassStats; CommandClass::ALL.len()],
}

impl Default for RequestStats {
    fn default() -> Self {
        RequestStats::new()
    }
}

impl RequestStats {
    /// Empty statistics.
    pub fn new() -> RequestStats {
        RequestStats {
            classes: std::array::from_fn(|_| ClassStats::new()),
        }
    }

    /// Records one request of `class` that ended with `reply` after `latency`.
    /// Refused requests are counted but their (short) latency is not recorded, as
    /// Redis does.
    pub fn record(&mut self, class: CommandClass, reply: &KvReply, latency: Duration) {
        let c = &mut self.classes[class.slot()];
        let outcome = Outcome::of(reply);
        if outcome == Outcome::Rejected {
            c.rejected += 1;
            return;
        }
        if outcome == Outcome::Failed {
            c.failed += 1;
        }
        c.calls += 1;
        let ns = u64::try_from(latency.as_nanos()).unwrap_or(u64::MAX);
        c.total_ns = c.total_ns.saturating_add(ns);
        if let Some(h) = c.latency.as_mut() {
            h.saturating_record(ns.max(1));
        }
    }

    /// Calls of `class` that ran (failed ones included).
    pub fn calls(&self, class: CommandClass) -> u64 {
        self.classes[class.slot()].calls
    }

    /// Calls of `class` refused before they ran.
    pub fn rejected(&self, class: CommandClass) -> u64 {
        self.classes[class.slot()].rejected
    }

    /// Calls of `class` that ran but could not be answered.
    pub fn failed(&self, class: CommandClass) -> u64 {
        self.classes[class.slot()].failed
    }

    /// The summed latency of the calls of `class`.
    pub fn total_latency(&self, class: CommandClass) -> Duration {
        Duration::from_nanos(self.classes[class.slot()].total_ns)
    }

    /// The latency at `quantile` (`0.0..=1.0`) of the calls of `class`, or `None`
    /// before the first.
    pub fn latency_at(&self, class: CommandClass, quantile: f64) -> Option<Duration> {
        let h = self.classes[class.slot()].latency.as_ref()?;
        (!h.is_empty()).then(|| Duration::from_nanos(h.value_at_quantile(quantile)))
    }

    /// Appends Redis's `# Commandstats` and `# Latencystats` sections to an `INFO`
    /// text (`\r\n` line ends, as the rest of it).
    pub fn write_info(&self, out: &mut String) {
        out.push_str("# Commandstats\r\n");
        for class in CommandClass::ALL {
            let c = &self.classes[class.slot()];
            if c.calls == 0 && c.rejected == 0 {
                continue;
            }
            let usec = c.total_ns / 1000;
            let per_call = if c.calls == 0 {
                0.0
            } else {
                c.total_ns as f64 / 1000.0 / c.calls as f64
            };
            let _ = write!(
                out,
                "cmdstat_{}:calls={},usec={usec},usec_per_call={per_call:.2},rejected_calls={},failed_calls={}\r\n",
                class.name(),
                c.calls,
                c.rejected,
                c.failed,
            );
        }
        out.push_str("# Latencystats\r\n");
        for class in CommandClass::ALL {
            if self.calls(class) == 0 {
                continue;
            }
            let _ = write!(out, "latency_percentiles_usec_{}:", class.name());
            for (i, (q, _, label)) in QUANTILES.iter().enumerate() {
                let usec = self
                    .latency_at(class, *q)
                    .map_or(0.0, |d| d.as_nanos() as f64 / 1000.0);
                let sep = if i == 0 { "" } else { "," };
                let _ = write!(out, "{sep}{label}={usec:.3}");
            }
            out.push_str("\r\n");
        }
    }

    /// Writes the request families: `raftnvm_requests_total`,
    /// `raftnvm_requests_rejected_total`, `raftnvm_requests_failed_total` (by
    /// `command`) and the summary `raftnvm_request_duration_seconds` (by `command`,
    /// with `quantile` 0.5, 0.99 and 0.999, `NaN` before the first call).
    pub fn write_prometheus(&self, e: &mut Exposition) {
        let by_class =
            |e: &mut Exposition, name: &str, help: &str, f: &dyn Fn(CommandClass) -> u64| {
                e.family(name, MetricType::Counter, help);
                for class in CommandClass::ALL {
                    e.sample(name, &[("command", class.name())], f(class) as f64);
                }
            };
        by_class(
            e,
            "raftnvm_requests_total",
            "Client requests that ran (failed ones included), by command.",
            &|c| self.calls(c),
        );
        by_class(
            e,
            "raftnvm_requests_rejected_total",
            "Client requests refused before they ran (not the leader, too large, store full), by command.",
            &|c| self.rejected(c),
        );
        by_class(
            e,
            "raftnvm_requests_failed_total",
            "Client requests that ran but could not be answered (leadership lost, node stopping), by command.",
            &|c| self.failed(c),
        );
        let name = "raftnvm_request_duration_seconds";
        e.family(
            name,
            MetricType::Summary,
            "Time from the node taking a request off its queue to sending the reply, since start.",
        );
        for class in CommandClass::ALL {
            for (q, label, _) in QUANTILES {
                let value = self
                    .latency_at(class, q)
                    .map_or(f64::NAN, |d| d.as_secs_f64());
                e.sample(
                    name,
                    &[("command", class.name()), ("quantile", label)],
                    value,
                );
            }
            let labels = [("command", class.name())];
            e.sample(
                &format!("{name}_sum"),
                &labels,
                self.total_latency(class).as_secs_f64(),
            );
            e.sample(&format!("{name}_count"), &labels, self.calls(class) as f64);
        }
    }
}

/// The type of a metric family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    /// A value that only grows (names end in `_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Quantiles with `_sum` and `_count` samples.
    Summary,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Summary => "summary",
        }
    }
}

/// A Prometheus text-format (0.0.4) document being written: call
/// [`Exposition::family`] before a family's samples, and keep them together.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// An empty document.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts the family `name` (a valid metric name) with its `HELP` and `TYPE` lines.
    pub fn family(&mut self, name: &str, kind: MetricType, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = write!(
            self.text,
            "# HELP {name} {help}\n# TYPE {name} {}\n",
            kind.as_str()
        );
    }

    /// A sample of the current family (`name` is the family's, or its `_sum` or
    /// `_count` for a summary); label values are escaped.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(k);
                self.text.push_str("=\"");
                for ch in v.chars() {
                    match ch {
                        '\\' => self.text.push_str("\\\\"),
                        '"' => self.text.push_str("\\\""),
                        '\n' => self.text.push_str("\\n"),
                        c => self.text.push(c),
                    }
                }
                self.text.push('"');
            }
            self.text.push('}');
        }
        self.text.push(' ');
        if value.is_nan() {
            self.text.push_str("NaN");
        } else if value.is_infinite() {
            self.text
                .push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(self.text, "{value}");
        }
        self.text.push('\n');
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: MetricType, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The text.
    pub fn finish(self) -> String {
        self.text
    }
}

/// What a replica shows in the metrics, taken at one moment (see
/// [`NodeSnapshot::of`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeSnapshot {
    /// The node's id.
    pub id: u16,
    /// Its role: `leader`, `follower`, `pre-candidate` or `candidate`.
    pub role: &'static str,
    /// The current term.
    pub term: u64,
    /// The leader it knows, if any.
    pub leader: Option<u16>,
    /// The commit index.
    pub commit_index: u64,
    /// The store's applied index.
    pub applied_index: u64,
    /// The store's last index.
    pub last_index: u64,
    /// The store's durable index.
    pub durable_index: u64,
    /// A leader's followers: `(peer, match index)` (empty on other roles).
    pub peers: Vec<(u16, u64)>,
    /// The storage engine's name.
    pub engine: &'static str,
    /// The store's space.
    pub usage: StoreUsage,
    /// The write reserve in bytes (bounded stores).
    pub write_reserve: Option<u64>,
    /// Compactions and refused writes.
    pub compactions: CompactionCounts,
    /// Whether a compaction is running.
    pub compaction_in_flight: bool,
    /// Client requests waiting for an answer.
    pub pending: usize,
}

/// The roles [`NodeSnapshot::role`] takes.
const ROLES: [&str; 4] = ["leader", "follower", "pre-candidate", "candidate"];

/// The name of `role` as `INFO` and the metrics show it ([`Role::name`]).
pub fn role_name(role: Role) -> &'static str {
    role.name()
}

impl NodeSnapshot {
    /// The figures of `replica` now.
    pub fn of(replica: &Replica) -> NodeSnapshot {
        let core = replica.core();
        let store = replica.store();
        let role = core.role();
        let peers = core.follower_matches().collect();
        NodeSnapshot {
            id: core.id(),
            role: role_name(role),
            term: core.term(),
            leader: core.leader(),
            commit_index: core.commit_index(),
            applied_index: store.applied(),
            last_index: store.last_index(),
            durable_index: store.durable_index(),
            peers,
            engine: store.engine(),
            usage: store.usage(),
            write_reserve: replica.write_reserve_bytes(),
            compactions: replica.compaction_counts(),
            compaction_in_flight: replica.compaction_in_flight(),
            pending: replica.pending(),
        }
    }

    /// Writes the node's families: identity and role, Raft indexes, each
    /// follower's match index and lag (on a leader), the store's space, and
    /// compactions and refused writes.
    pub fn write_prometheus(&self, e: &mut Exposition) {
        use MetricType::{Counter, Gauge};
        let id = self.id.to_string();
        e.family(
            "raftnvm_node_info",
            Gauge,
            "The node's id and storage engine (always 1).",
        );
        e.sample(
            "raftnvm_node_info",
            &[("node_id", &id), ("engine", self.engine)],
            1.0,
        );
        e.family(
            "raftnvm_role",
            Gauge,
            "1 for the node's current Raft role, 0 for the others.",
        );
        for role in ROLES {
            e.sample(
                "raftnvm_role",
                &[("role", role)],
                f64::from(u8::from(role == self.role)),
            );
        }
        e.single(
            "raftnvm_term",
            Gauge,
            "The current Raft term.",
            self.term as f64,
        );
        e.single(
            "raftnvm_leader_id",
            Gauge,
            "The leader this node knows (0: none).",
            f64::from(self.leader.unwrap_or(0)),
        );
        e.single(
            "raftnvm_commit_index",
            Gauge,
            "The highest log index known to be committed.",
            self.commit_index as f64,
        );
        e.single(
            "raftnvm_applied_index",
            Gauge,
            "The highest log index applied to the store.",
            self.applied_index as f64,
        );
        e.single(
            "raftnvm_last_index",
            Gauge,
            "The store's last log index (appended, maybe not committed).",
            self.last_index as f64,
        );
        e.single(
            "raftnvm_durable_index",
            Gauge,
            "The store's last durable log index.",
            self.durable_index as f64,
        );
        e.family(
            "raftnvm_peer_match_index",
            Gauge,
            "A leader's view of the highest index each follower holds durably.",
        );
        for (peer, matched) in &self.peers {
            e.sample(
                "raftnvm_peer_match_index",
                &[("peer", &peer.to_string())],
                *matched as f64,
            );
        }
        e.family(
            "raftnvm_peer_lag_entries",
            Gauge,
            "A leader's last index minus each follower's match index.",
        );
        for (peer, matched) in &self.peers {
            e.sample(
                "raftnvm_peer_lag_entries",
                &[("peer", &peer.to_string())],
                self.last_index.saturating_sub(*matched) as f64,
            );
        }
        e.single(
            "raftnvm_store_used_bytes",
            Gauge,
            "Bytes of the store holding records, live or dead.",
            self.usage.used as f64,
        );
        if let Some(capacity) = self.usage.capacity {
            e.single(
                "raftnvm_store_capacity_bytes",
                Gauge,
                "Bytes the store can hold in all (bounded engines only).",
                capacity as f64,
            );
        }
        if let Some(free) = self.usage.free {
            e.single(
                "raftnvm_store_free_bytes",
                Gauge,
                "Bytes still free for appends (bounded engines only; an upper bound).",
                free as f64,
            );
        }
        if let Some(fill) = self.usage.fill() {
            e.single(
                "raftnvm_store_fill_ratio",
                Gauge,
                "Used bytes over capacity (bounded engines only).",
                fill,
            );
        }
        if let Some(reserve) = self.write_reserve {
            e.single(
                "raftnvm_store_write_reserve_bytes",
                Gauge,
                "Free bytes kept back: a SET or CAS that would eat into them gets -OOM.",
                reserve as f64,
            );
        }
        e.single(
            "raftnvm_store_versions",
            Gauge,
            "Versions the store's DRAM index holds.",
            self.usage.versions as f64,
        );
        let c = &self.compactions;
        e.single(
            "raftnvm_compactions_total",
            Counter,
            "Compactions that completed.",
            c.runs as f64,
        );
        e.single(
            "raftnvm_compactions_emergency_total",
            Counter,
            "Completed compactions that were emergency runs (high fill or a refused write).",
            c.emergency as f64,
        );
        e.single(
            "raftnvm_compactions_failed_total",
            Counter,
            "Compactions that failed.",
            c.failed as f64,
        );
        e.single(
            "raftnvm_compaction_freed_total",
            Counter,
            "Pages (list) or bytes (WAL) compactions gave back.",
            c.freed as f64,
        );
        e.single(
            "raftnvm_compaction_in_flight",
            Gauge,
            "1 while a compaction runs.",
            f64::from(u8::from(self.compaction_in_flight)),
        );
        e.single(
            "raftnvm_compaction_last_pause_seconds",
            Gauge,
            "The longest time the last completed compaction held up a reader or writer.",
            c.last_pause_us as f64 / 1e6,
        );
        e.single(
            "raftnvm_compaction_last_duration_seconds",
            Gauge,
            "The wall time of the last completed compaction.",
            c.last_duration_us as f64 / 1e6,
        );
        e.single(
            "raftnvm_oom_refusals_total",
            Counter,
            "Writes refused because the store is full (-OOM).",
            c.oom_refusals as f64,
        );
        e.single(
            "raftnvm_full_appends_total",
            Counter,
            "Appends that found the store full (their entries were dropped).",
            c.full_appends as f64,
        );
        e.single(
            "raftnvm_pending_requests",
            Gauge,
            "Client requests waiting for an answer.",
            self.pending as f64,
        );
    }
}

/// A sample read back by [`parse`].
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's name (with `_sum` or `_count` for a summary's).
    pub name: String,
    /// Its family (declared by a `TYPE` line before it).
    pub family: String,
    /// Its labels, in order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why [`parse`] refused a text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {reason}: {text}")]
pub struct ExpositionError {
    /// The line (from 1).
    pub line: usize,
    /// What is wrong.
    pub reason: &'static str,
    /// The line's text.
    pub text: String,
}

/// Whether `name` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Whether `name` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`, not `__*`).
pub fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    !name.starts_with("__")
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Reads a Prometheus text-format document back, checking what this crate relies
/// on: every sample belongs to the family of the latest `TYPE` line (its name, or
/// `_sum`/`_count` of a summary, whose other samples carry `quantile`), each
/// family is declared once, names and labels are valid, values parse as `f64`.
pub fn parse(text: &str) -> Result<Vec<Sample>, ExpositionError> {
    let mut samples = Vec::new();
    let mut declared: Vec<String> = Vec::new();
    let mut current: Option<(String, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let err = |reason| ExpositionError {
            line: i + 1,
            reason,
            text: line.to_string(),
        };
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match words.next() {
                Some("HELP") => {
                    let name = words.next().ok_or_else(|| err("HELP without a name"))?;
                    if !valid_metric_name(name) {
                        return Err(err("invalid metric name"));
                    }
                }
                Some("TYPE") => {
                    let name = words.next().ok_or_else(|| err("TYPE without a name"))?;
                    let kind = words.next().ok_or_else(|| err("TYPE without a type"))?;
                    if !valid_metric_name(name) {
                        return Err(err("invalid metric name"));
                    }
                    if !["counter", "gauge", "summary", "histogram", "untyped"].contains(&kind) {
                        return Err(err("unknown metric type"));
                    }
                    if declared.iter().any(|d| d == name) {
                        return Err(err("family declared twice"));
                    }
                    declared.push(name.to_string());
                    current = Some((name.to_string(), kind.to_string()));
                }
                _ => {}
            }
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(at) => line.split_at(at),
            None => return Err(err("a sample without a value")),
        };
        if !valid_metric_name(name) {
            return Err(err("invalid metric name"));
        }
        let (labels, rest) = if let Some(body) = rest.strip_prefix('{') {
            parse_labels(body).ok_or_else(|| err("malformed labels"))?
        } else {
            (Vec::new(), rest)
        };
        if labels.iter().any(|(k, _)| !valid_label_name(k)) {
            return Err(err("invalid label name"));
        }
        let mut fields = rest.split_whitespace();
        let value = fields
            .next()
            .ok_or_else(|| err("a sample without a value"))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse::<f64>().map_err(|_| err("value is not a float"))?,
        };
        if let Some(ts) = fields.next() {
            ts.parse::<i64>()
                .map_err(|_| err("timestamp is not an integer"))?;
        }
        if fields.next().is_some() {
            return Err(err("trailing text after the value"));
        }
        let Some((family, kind)) = &current else {
            return Err(err("a sample before any TYPE line"));
        };
        let belongs = if name == family {
            kind != "summary" || labels.iter().any(|(k, _)| k == "quantile")
        } else {
            kind == "summary"
                && name
                    .strip_prefix(family.as_str())
                    .is_some_and(|s| s == "_sum" || s == "_count")
        };
        if !belongs {
            return Err(err("sample outside its family (no TYPE line before it)"));
        }
        samples.push(Sample {
            name: name.to_string(),
            family: family.clone(),
            labels,
            value,
        });
    }
    Ok(samples)
}

/// The labels after `{`: the pairs and the text after `}`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (key, rest) = s.split_once('=')?;
        let body = rest.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = body.char_indices();
        let end = loop {
            let (at, c) = chars.next()?;
            match c {
                '"' => break at,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    _ => return None,
                },
                c => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        s = body[end + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return None;
        }
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot() -> NodeSnapshot {
        NodeSnapshot {
            id: 1,
            role: "leader",
            term: 3,
            leader: Some(1),
            commit_index: 40,
            applied_index: 40,
            last_index: 42,
            durable_index: 42,
            peers: vec![(2, 42), (3, 17)],
            engine: "list",
            usage: StoreUsage {
                capacity: Some(1 << 20),
                used: 300 << 10,
                free: Some(700 << 10),
                versions: 55,
            },
            write_reserve: Some(52_428),
            compactions: CompactionCounts {
                runs: 2,
                last_pause_us: 120,
                ..CompactionCounts::default()
            },
            compaction_in_flight: false,
            pending: 1,
        }
    }

    fn stats() -> RequestStats {
        let mut s = RequestStats::new();
        for i in 1..=100u64 {
            s.record(
                CommandClass::Set,
                &KvReply::Done,
                Duration::from_micros(i * 10),
            );
        }
        s.record(
            CommandClass::Get,
            &KvReply::Value(None),
            Duration::from_micros(50),
        );
        s.record(
            CommandClass::Get,
            &KvReply::NotLeader { leader: None },
            Duration::from_micros(1),
        );
        s.record(
            CommandClass::Del,
            &KvReply::Unavailable("leadership lost".into()),
            Duration::from_millis(3),
        );
        s
    }

    fn text() -> String {
        let mut e = Exposition::new();
        snapshot().write_prometheus(&mut e);
        stats().write_prometheus(&mut e);
        e.finish()
    }

    fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
        samples
            .iter()
            .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
            .unwrap_or_else(|| panic!("no {name} {labels:?}"))
            .value
    }

    #[test]
    fn the_exposition_text_parses_back_line_by_line() {
        let text = text();
        assert!(text.ends_with('\n'));
        let samples = parse(&text).expect("valid exposition text");
        // Every line is a HELP, a TYPE or a sample, and every family has both.
        let mut families = 0;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                families += 1;
                let name = rest.split(' ').next().expect("a name");
                assert!(name.starts_with("raftnvm_"), "{line}");
                assert!(
                    text.contains(&format!("# HELP {name} ")),
                    "{name} has no HELP"
                );
                if rest.ends_with(" counter") {
                    assert!(name.ends_with("_total"), "{line}");
                }
            } else if !line.starts_with("# HELP ") {
                assert!(samples.iter().any(|s| line.starts_with(&s.name)), "{line}");
            }
        }
        assert!(families >= 30, "{families} families");
        let sample_lines = text.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(samples.len(), sample_lines);
        assert!(samples
            .iter()
            .all(|s| valid_metric_name(&s.name) && s.name.starts_with("raftnvm_")));

        assert_eq!(value(&samples, "raftnvm_role", &[("role", "leader")]), 1.0);
        assert_eq!(
            value(&samples, "raftnvm_role", &[("role", "follower")]),
            0.0
        );
        assert_eq!(
            value(&samples, "raftnvm_peer_lag_entries", &[("peer", "3")]),
            25.0
        );
        assert_eq!(
            value(&samples, "raftnvm_peer_match_index", &[("peer", "2")]),
            42.0
        );
        let fill = value(&samples, "raftnvm_store_fill_ratio", &[]);
        assert!((fill - 300.0 / 1024.0).abs() < 1e-9, "{fill}");
        assert_eq!(value(&samples, "raftnvm_compactions_total", &[]), 2.0);
        assert_eq!(
            value(&samples, "raftnvm_compaction_last_pause_seconds", &[]),
            120e-6
        );
        let set = [("command", "set")];
        assert_eq!(value(&samples, "raftnvm_requests_total", &set), 100.0);
        assert_eq!(
            value(&samples, "raftnvm_request_duration_seconds_count", &set),
            100.0
        );
        let sum = value(&samples, "raftnvm_request_duration_seconds_sum", &set);
        assert!((sum - 0.0505).abs() < 1e-9, "{sum}");
        let p50 = value(
            &samples,
            "raftnvm_request_duration_seconds",
            &[("command", "set"), ("quantile", "0.5")],
        );
        assert!((p50 - 500e-6).abs() < 10e-6, "{p50}");
        let p999 = value(
            &samples,
            "raftnvm_request_duration_seconds",
            &[("command", "set"), ("quantile", "0.999")],
        );
        assert!((p999 - 1e-3).abs() < 20e-6, "{p999}");
        let get = [("command", "get")];
        assert_eq!(value(&samples, "raftnvm_requests_total", &get), 1.0);
        assert_eq!(
            value(&samples, "raftnvm_requests_rejected_total", &get),
            1.0
        );
        let del = [("command", "del")];
        assert_eq!(value(&samples, "raftnvm_requests_failed_total", &del), 1.0);
        // A class never called has NaN quantiles and zero counts.
        assert!(value(
            &samples,
            "raftnvm_request_duration_seconds",
            &[("command", "cas"), ("quantile", "0.99")]
        )
        .is_nan());
    }

    #[test]
    fn the_parser_refuses_what_the_format_does_not_allow() {
        let ok = "# HELP a_total A.\n# TYPE a_total counter\na_total{x=\"q\\\"\\n\"} 1\n";
        let samples = parse(ok).expect("valid");
        assert_eq!(samples[0].label("x"), Some("q\"\n"));
        for bad in [
            "a_total 1\n",
            "# TYPE a_total counter\nb_total 1\n",
            "# TYPE a gauge\na x\n",
            "# TYPE 1a gauge\n",
            "# TYPE a gauge\na{1x=\"v\"} 1\n",
            "# TYPE a gauge\na{x=\"v} 1\n",
            "# TYPE a gauge\n# TYPE a gauge\n",
            "# TYPE s summary\ns 1\n",
            "# TYPE a gauge\na 1 2 3\n",
        ] {
            assert!(parse(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn info_sections_take_redis_7s_shape() {
        let mut info = String::new();
        stats().write_info(&mut info);
        let lines: Vec<&str> = info.split("\r\n").collect();
        assert_eq!(lines[0], "# Commandstats");
        assert!(
            lines.contains(
                &"cmdstat_get:calls=1,usec=50,usec_per_call=50.00,rejected_calls=1,failed_calls=0"
            ),
            "{info}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.starts_with("cmdstat_set:calls=100,usec=50500,")),
            "{info}"
        );
        assert!(
            lines.iter().all(|l| !l.starts_with("cmdstat_cas")),
            "{info}"
        );
        let set = lines
            .iter()
            .find_map(|l| l.strip_prefix("latency_percentiles_usec_set:"))
            .expect("set percentiles");
        let fields: Vec<(&str, f64)> = set
            .split(',')
            .map(|f| {
                let (k, v) = f.split_once('=').expect("k=v");
                (k, v.parse().expect("a number"))
            })
            .collect();
        assert_eq!(
            fields.iter().map(|f| f.0).collect::<Vec<_>>(),
            ["p50", "p99", "p99.9"]
        );
        assert!((fields[0].1 - 500.0).abs() < 10.0, "{set}");
        assert!(info.contains("# Latencystats\r\n"), "{info}");
        assert!(info.ends_with("\r\n"));
    }

    #[test]
    fn latency_memory_is_bounded_and_long_latencies_saturate() {
        let mut s = RequestStats::new();
        s.record(CommandClass::Get, &KvReply::Done, Duration::from_secs(1000));
        let p = s.latency_at(CommandClass::Get, 1.0).expect("a sample");
        assert!(p <= MAX_LATENCY + MAX_LATENCY / 50, "{p:?}");
        // The fixed-bound histograms' size does not depend on the traffic.
        for c in &s.classes {
            let h = c.latency.as_ref().expect("histogram");
            assert!(h.distinct_values() < 8 << 10, "{}", h.distinct_values());
        }
    }
}
