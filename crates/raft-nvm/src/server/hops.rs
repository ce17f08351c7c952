//! The trace events a latency breakdown is built from (see [`TARGET`]).

/// The `tracing` target of the hop events: where a request is on its way through
/// the nodes, from which a latency breakdown can be built (`raft_bench
/// --breakdown` does).
///
/// Each event has this target, level TRACE, a `hop` field naming the
/// point and a `node` field (the node's id; 0 where the point does not know it,
/// such as a RESP connection). The points:
///
/// | `hop` | where |
/// | --- | --- |
/// | `request` | a RESP connection decoded a key-value command |
/// | `take` | the node's loop took a client call |
/// | `step` | the node's loop handed a peer's message to the replica (`kind` field) |
/// | `processed` | the node's loop finished a `process` (store written, messages queued) |
/// | `sent` | a transport writer wrote a batch to a peer (`peer` field) |
/// | `received` | a transport reader decoded a message from a peer |
/// | `reply` | a RESP connection wrote its replies |
///
/// Nothing is recorded unless a subscriber enables this target at TRACE, so the
/// points cost next to nothing in normal runs.
pub const TARGET: &str = "raft_nvm::hop";

/// Emits one hop event (see [`TARGET`]); extra `key = value` fields may follow.
macro_rules! hop {
    ($hop:literal, $node:expr $(, $($field:tt)*)?) => {
        tracing::trace!(target: $crate::server::hops::TARGET, hop = $hop, node = u64::from($node) $(, $($field)*)?)
    };
}
pub(crate) use hop;

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use tracing_subscriber::layer::{Context, SubscriberExt};
    use tracing_subscriber::Layer;

    /// Keeps `(target, fields)` of every event.
    #[derive(Clone, Default)]
    struct Keep(Arc<Mutex<Vec<(String, String)>>>);

    struct Fields(String);

    impl tracing::field::Visit for Fields {
        fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
            self.0 += &format!("{}={:?} ", field.name(), value);
        }
    }

    impl<S: tracing::Subscriber> Layer<S> for Keep {
        fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
            let mut fields = Fields(String::new());
            event.record(&mut fields);
            if let Ok(mut kept) = self.0.lock() {
                kept.push((event.metadata().target().to_owned(), fields.0));
            }
        }
    }

    #[test]
    fn a_hop_is_a_trace_event_of_the_documented_target_and_fields() {
        let keep = Keep::default();
        let subscriber = tracing_subscriber::registry().with(keep.clone());
        tracing::subscriber::with_default(subscriber, || {
            super::hop!("sent", 3u16, peer = 1u16);
        });
        let kept = keep.0.lock().map(|k| k.clone()).unwrap_or_default();
        assert_eq!(
            kept,
            [(
                super::TARGET.to_owned(),
                "hop=\"sent\" node=3 peer=1 ".to_owned()
            )]
        );
    }
}
