//! The recent-events log a failing seed prints: a per-thread ring buffer of compact
//! events, formatted only when a seed fails (or live with `CLUSTER_TRACE=1`). It is
//! thread-local so it survives the panic that ends a failing seed.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;

use raft_nvm::linearizability::{Call, Op, Outcome};
use raft_nvm::service::{KvReply, KvRequest};

/// How many events a failure report shows.
const KEEP: usize = 120;

/// Something that happened in the cluster.
#[derive(Clone, Debug)]
pub enum Ev {
    /// A message was handed to its recipient.
    Deliver {
        from: u16,
        to: u16,
        kind: &'static str,
        term: u64,
    },
    /// A message was dropped (`why`: lost, link cut, recipient down).
    Drop {
        from: u16,
        to: u16,
        kind: &'static str,
        why: &'static str,
    },
    /// A node changed role or term.
    Role {
        node: u16,
        role: &'static str,
        term: u64,
        commit: u64,
        last: u64,
    },
    /// A node crashed; its store recovered from a crash image.
    Crash { node: u16, how: String },
    /// A node restarted from its recovered store.
    Restart {
        node: u16,
        last: u64,
        applied: u64,
        term: u64,
    },
    /// The network changed: a partition, a one-way cut, healing.
    Net(String),
    /// A client sent a request.
    Invoke {
        client: u64,
        node: u16,
        req: KvRequest,
    },
    /// A client got an answer.
    Reply {
        client: u64,
        node: u16,
        reply: KvReply,
    },
    /// A client's node was down: the request was not sent.
    Unreachable { client: u64, node: u16 },
    /// A client gave up waiting.
    Timeout { client: u64, node: u16 },
    /// A leader streamed a snapshot.
    Snapshot { from: u16, to: u16, index: u64 },
    /// A node compacted its store.
    Compact { node: u16, freed: u64 },
    /// A phase of the run began.
    Phase(&'static str),
}

impl fmt::Display for Ev {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Ev::Deliver {
                from,
                to,
                kind,
                term,
            } => write!(f, "{from}->{to} {kind} t{term}"),
            Ev::Drop {
                from,
                to,
                kind,
                why,
            } => write!(f, "{from}->{to} {kind} dropped ({why})"),
            Ev::Role {
                node,
                role,
                term,
                commit,
                last,
            } => write!(f, "n{node} {role} t{term} commit {commit} last {last}"),
            Ev::Crash { node, how } => write!(f, "n{node} CRASH {how}"),
            Ev::Restart {
                node,
                last,
                applied,
                term,
            } => write!(
                f,
                "n{node} restart: last {last} applied {applied} term {term}"
            ),
            Ev::Net(s) => write!(f, "net: {s}"),
            Ev::Invoke { client, node, req } => write!(f, "c{client} -> n{node} {}", show(req)),
            Ev::Reply {
                client,
                node,
                reply,
            } => write!(f, "c{client} <- n{node} {}", show_reply(reply)),
            Ev::Unreachable { client, node } => write!(f, "c{client} cannot reach n{node}"),
            Ev::Timeout { client, node } => write!(f, "c{client} timed out on n{node}"),
            Ev::Snapshot { from, to, index } => {
                write!(f, "n{from} streams a snapshot at {index} to n{to}")
            }
            Ev::Compact { node, freed } => write!(f, "n{node} compacted ({freed} pages freed)"),
            Ev::Phase(p) => write!(f, "--- {p} ---"),
        }
    }
}

/// A request in one short line.
pub fn show(req: &KvRequest) -> String {
    let s = text;
    match req {
        KvRequest::Get { key } => format!("GET {}", s(key)),
        KvRequest::Set { key, value } => format!("SET {} {}", s(key), s(value)),
        KvRequest::Delete { key } => format!("DEL {}", s(key)),
        KvRequest::Cas { key, expected, new } => {
            format!(
                "CAS {} {} -> {}",
                s(key),
                text_opt(expected.as_deref()),
                s(new)
            )
        }
        KvRequest::Info => "INFO".into(),
        KvRequest::Machine(call) => format!("MACHINE {call:?}"),
        KvRequest::TransferLeader { to } => format!("RAFT.TRANSFER-LEADER {to:?}"),
        KvRequest::ChangeMembership(c) => format!("MEMBERSHIP {c:?}"),
        KvRequest::ShowMembership => "RAFT.CONFIG".into(),
    }
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn text_opt(v: Option<&[u8]>) -> String {
    v.map_or_else(|| "<absent>".into(), text)
}

/// A reply in one short line.
pub fn show_reply(reply: &KvReply) -> String {
    match reply {
        KvReply::Value(v) => format!("value {}", text_opt(v.as_deref())),
        other => format!("{other:?}"),
    }
}

/// A history entry in one short line.
pub fn show_call(c: &Call) -> String {
    let op = match &c.op {
        Op::Get => "get".to_string(),
        Op::Set(v) => format!("set {}", text(v)),
        Op::Delete => "delete".to_string(),
        Op::Cas { expected, new } => {
            format!("cas {} -> {}", text_opt(expected.as_deref()), text(new))
        }
    };
    let outcome = match &c.outcome {
        Outcome::Value(v) => text_opt(v.as_deref()),
        other => format!("{other:?}"),
    };
    let done = c.complete.map_or("-".into(), |t| t.to_string());
    format!(
        "client {} [{}, {done}] {op} -> {outcome}",
        c.client, c.invoke
    )
}

struct Log {
    events: VecDeque<(u64, Ev)>,
    live: bool,
}

thread_local! {
    static LOG: RefCell<Log> = RefCell::new(Log {
        events: VecDeque::new(),
        live: std::env::var_os("CLUSTER_TRACE").is_some(),
    });
}

/// Records `ev` at simulated time `now`.
pub fn record(now: u64, ev: Ev) {
    LOG.with(|l| {
        let mut l = l.borrow_mut();
        if l.live {
            eprintln!("[{now:>5}] {ev}");
        }
        if l.events.len() == KEEP {
            l.events.pop_front();
        }
        l.events.push_back((now, ev));
    });
}

/// Forgets everything (a new seed starts).
pub fn clear() {
    LOG.with(|l| l.borrow_mut().events.clear());
}

/// The recent events, formatted, oldest first.
pub fn recent() -> String {
    LOG.with(|l| {
        l.borrow()
            .events
            .iter()
            .map(|(t, e)| format!("  [{t:>5}] {e}\n"))
            .collect()
    })
}
