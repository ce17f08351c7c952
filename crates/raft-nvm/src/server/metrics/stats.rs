//! Request statistics: per command class the calls, refusals and failures, and
//! an HDR histogram of their latency, shown as Redis 7's `INFO` sections and as
//! Prometheus summaries.

use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;

use crate::consensus::service::{KvReply, KvRequest};

use super::exposition::{Exposition, MetricType};

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

/// Per-class request counts and latency histograms (the `metrics` module explains the classes).
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

#[cfg(test)]
mod tests {
    use super::*;

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
