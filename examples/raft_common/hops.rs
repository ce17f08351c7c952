//! A latency breakdown of sequential requests from the nodes' hop events
//! ([`raft_nvm::HOP_TRACE_TARGET`]): a `tracing` layer records them while switched on, and
//! [`breakdown`] finds the path most requests took and the median time of each step.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Instant;

use tracing::field::{Field, Visit};
use tracing_subscriber::layer::Context;
use tracing_subscriber::Layer;

/// A hop the client itself marks: it sent a request.
pub const CLIENT_SEND: &str = "client_send";
/// A hop the client itself marks: it has the reply.
pub const CLIENT_RECV: &str = "client_recv";

/// Marks a client hop (`CLIENT_SEND` or `CLIENT_RECV`).
pub fn client_hop(hop: &'static str) {
    tracing::trace!(target: raft_nvm::HOP_TRACE_TARGET, hop, node = 0u64);
}

/// One recorded hop event.
#[derive(Clone, Debug)]
pub struct Hop {
    at: Instant,
    hop: String,
    node: u64,
    /// The message kind of a `step`.
    kind: String,
}

/// Records hop events while on. Clone it to keep a handle after installing it.
#[derive(Clone, Default)]
pub struct Recorder {
    on: Arc<AtomicBool>,
    hops: Arc<Mutex<Vec<Hop>>>,
}

impl Recorder {
    /// Starts recording (from empty).
    pub fn start(&self) {
        self.hops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        self.on.store(true, Ordering::SeqCst);
    }

    /// Stops recording and hands over what was recorded.
    pub fn stop(&self) -> Vec<Hop> {
        self.on.store(false, Ordering::SeqCst);
        std::mem::take(&mut *self.hops.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

struct Fields {
    hop: String,
    node: u64,
    kind: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "hop" => self.hop = value.to_owned(),
            "kind" => self.kind = value.to_owned(),
            _ => {}
        }
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        if field.name() == "node" {
            self.node = value;
        }
    }

    fn record_debug(&mut self, _: &Field, _: &dyn std::fmt::Debug) {}
}

impl<S: tracing::Subscriber> Layer<S> for Recorder {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        if !self.on.load(Ordering::Relaxed)
            || event.metadata().target() != raft_nvm::HOP_TRACE_TARGET
        {
            return;
        }
        let at = Instant::now();
        let mut f = Fields {
            hop: String::new(),
            node: 0,
            kind: String::new(),
        };
        event.record(&mut f);
        let hop = Hop {
            at,
            hop: f.hop,
            node: f.node,
            kind: f.kind,
        };
        self.hops
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(hop);
    }
}

/// The path most requests took, with the median of each step.
pub struct Breakdown {
    /// `(from, to, median µs)` per step, in order.
    pub steps: Vec<(String, String, f64)>,
    /// Median of the whole path, µs.
    pub total_us: f64,
    /// Requests that took this path, and all requests.
    pub followed: usize,
    pub requests: usize,
}

/// Splits `hops` into requests (each from a `CLIENT_SEND` to the next), keeps
/// those that took the most common path (the same hops at the same nodes in the
/// same order: heartbeats and their answers make others differ), and takes the
/// median of each step over them. `None` without a complete request.
pub fn breakdown(hops: &[Hop]) -> Option<Breakdown> {
    let mut requests: Vec<&[Hop]> = Vec::new();
    let mut start = None;
    for (i, h) in hops.iter().enumerate() {
        if h.hop == CLIENT_SEND {
            start = Some(i);
        } else if h.hop == CLIENT_RECV {
            if let Some(s) = start.take() {
                requests.push(&hops[s..=i]);
            }
        }
    }
    let leader = hops.iter().find(|h| h.hop == "take").map(|h| h.node)?;
    let mut followers: Vec<u64> = Vec::new();
    for h in hops {
        if h.node != 0 && h.node != leader && !followers.contains(&h.node) {
            followers.push(h.node);
        }
    }
    let name = |h: &Hop| -> String {
        let who = match h.node {
            0 if h.hop.starts_with("client") => "client".to_owned(),
            0 => "leader RESP".to_owned(),
            n if n == leader => "leader".to_owned(),
            n => {
                let i = followers.iter().position(|&f| f == n).unwrap_or(0);
                format!("follower {}", (b'A' + (i % 26) as u8) as char)
            }
        };
        let what = match h.hop.as_str() {
            CLIENT_SEND => "sends",
            CLIENT_RECV => "has the reply",
            "step" => return format!("{who}: step {}", h.kind),
            other => other,
        };
        format!("{who}: {what}")
    };
    let mut paths: HashMap<Vec<String>, Vec<&[Hop]>> = HashMap::new();
    for r in &requests {
        paths
            .entry(r.iter().map(name).collect())
            .or_default()
            .push(r);
    }
    let (path, taken) = paths.into_iter().max_by_key(|(_, rs)| rs.len())?;
    let median = |mut v: Vec<f64>| -> f64 {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    };
    let us = |a: &Hop, b: &Hop| b.at.duration_since(a.at).as_secs_f64() * 1e6;
    let steps = (1..path.len())
        .map(|k| {
            let d = taken.iter().map(|r| us(&r[k - 1], &r[k])).collect();
            (path[k - 1].clone(), path[k].clone(), median(d))
        })
        .collect();
    let total_us = median(taken.iter().map(|r| us(&r[0], &r[r.len() - 1])).collect());
    Some(Breakdown {
        steps,
        total_us,
        followed: taken.len(),
        requests: requests.len(),
    })
}
