//! The metrics' own tests: the exposition text parses back, the parser refuses
//! what the format does not allow, `INFO` takes Redis 7's shape (latency memory's bound is
//! tested in `stats.rs`, which sees the histograms).

use std::time::Duration;

use crate::consensus::raft::{Membership, Role};
use crate::consensus::replica::{CompactionCounts, NodeStatus, ReplicaStatus};
use crate::consensus::service::KvReply;
use crate::storage::store::StoreUsage;

use super::parse::{parse, valid_metric_name, Sample};
use super::*;

fn snapshot() -> ReplicaStatus {
    ReplicaStatus {
        node: NodeStatus {
            id: 1,
            role: Role::Leader,
            term: 3,
            leader: Some(1),
            commit_index: 40,
            applied_index: 40,
            membership: Membership::default(),
            store: StoreUsage {
                capacity: Some(1 << 20),
                used: 300 << 10,
                free: Some(700 << 10),
                versions: 55,
            },
        },
        leader_addr: None,
        last_index: 42,
        durable_index: 42,
        membership_index: 0,
        membership_pending: false,
        members: Vec::new(),
        followers: vec![(2, 42), (3, 17)],
        transfer_to: None,
        lease_reads_on: false,
        reads_by_lease: 0,
        engine: "list",
        state_machine: None,
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
    write_status(&snapshot(), &mut e);
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
