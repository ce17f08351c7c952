//! A real single-node cluster with its metrics listener: `INFO` shows Redis 7's
//! `# Commandstats` and `# Latencystats` sections with the right counts, and `GET
//! /metrics` over plain HTTP answers a valid Prometheus text with the same counts,
//! latency summaries and the store's fill.

#![cfg(feature = "server")]

mod single_node;

/// The crate's own exposition checker, test-only (not public API); the items this
/// test does not use are the unit tests'.
#[allow(dead_code)]
#[path = "../src/server/metrics/parse.rs"]
mod parse;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use raft_nvm::node::Node;
use raft_nvm::replica::Engine;
use raft_nvm::resp::{info_field, Reply, RespClient};
use raft_nvm::ListOptions;

use parse::{parse, Sample};

/// One HTTP/1.1 request (`request` is the request line); the status line, the
/// headers and the body.
fn http(addr: SocketAddr, request: &str) -> (String, String, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the metrics listener");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    write!(stream, "{request}\r\nHost: test\r\nAccept: */*\r\n\r\n").expect("send the request");
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .expect("the listener answers and closes");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let (status, headers) = head.split_once("\r\n").unwrap_or((head, ""));
    (status.to_string(), headers.to_string(), body.to_string())
}

/// The value of the sample `name` with `labels`.
fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .find(|s| s.name == name && labels.iter().all(|(k, v)| s.label(k) == Some(*v)))
        .unwrap_or_else(|| panic!("no sample {name} {labels:?}"))
        .value
}

/// The `p50`, `p99` and `p99.9` of a `latency_percentiles_usec_*` field.
fn percentiles(field: &str) -> Vec<(String, f64)> {
    field
        .split(',')
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("p=value");
            (k.to_string(), v.parse().expect("a float"))
        })
        .collect()
}

async fn ok(c: &mut RespClient, args: &[&[u8]]) -> Reply {
    c.command(args).await.expect("a reply")
}

#[test]
fn info_and_the_prometheus_listener_count_requests_and_show_latency() {
    let dir = tempfile::tempdir().expect("tempdir");
    let rt = single_node::runtime();
    let any: SocketAddr = "127.0.0.1:0".parse().expect("address");
    let engine = Engine::List {
        path: dir.path().join("node1.pool"),
        pool_size: 1 << 20,
        opts: ListOptions::default(),
    };
    let mut cfg = single_node::single_node(engine);
    assert_eq!(cfg.metrics_addr, None, "no listener unless asked for");
    cfg.metrics_addr = Some(any);
    let node = rt.block_on(Node::start(cfg)).expect("node starts");
    let metrics = node.metrics_addr().expect("a metrics listener");

    // Wait for the single node to elect itself, through the metrics (which count
    // no request).
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let text = rt.block_on(node.metrics_text()).expect("the node runs");
        let samples = parse(&text).expect("valid exposition text");
        if value(&samples, "raftnvm_role", &[("role", "leader")]) == 1.0 {
            break;
        }
        assert!(Instant::now() < deadline, "no leader: {text}");
        std::thread::sleep(Duration::from_millis(20));
    }

    let info = rt.block_on(async {
        let mut c = RespClient::connect(node.client_addr())
            .await
            .expect("RESP connect");
        for i in 0..20 {
            let key = format!("k{i}");
            assert_eq!(
                ok(&mut c, &[b"SET", key.as_bytes(), b"value"]).await,
                Reply::Simple("OK".into())
            );
        }
        for i in 0..10 {
            let key = format!("k{}", i * 3);
            let expected = if i * 3 < 20 {
                Reply::Bulk(b"value".to_vec())
            } else {
                Reply::Nil
            };
            assert_eq!(ok(&mut c, &[b"GET", key.as_bytes()]).await, expected);
        }
        for key in ["k0", "k1", "absent"] {
            ok(&mut c, &[b"DEL", key.as_bytes()]).await;
        }
        assert_eq!(
            ok(&mut c, &[b"CAS", b"k2", b"value", b"new"]).await,
            Reply::Integer(1)
        );
        assert_eq!(
            ok(&mut c, &[b"CAS", b"k2", b"value", b"newer"]).await,
            Reply::Integer(0)
        );
        match ok(&mut c, &[b"INFO"]).await {
            Reply::Bulk(text) => String::from_utf8(text).expect("utf-8 INFO"),
            other => panic!("INFO: {other:?}"),
        }
    });

    // INFO: the old sections and fields unchanged, then Redis 7's two new ones.
    assert!(info.starts_with("# Raft\r\n"), "{info}");
    assert_eq!(info_field(&info, "role"), Some("leader"), "{info}");
    for field in [
        "commit_index",
        "store_used_bytes",
        "store_capacity_bytes",
        "store_free_bytes",
        "store_fill",
        "oom_refusals",
        "store_write_reserve_bytes",
        "store_writable_bytes",
        "compaction_last_pause_us",
        "compaction_last_duration_us",
    ] {
        let v = info_field(&info, field).unwrap_or_else(|| panic!("no {field}: {info}"));
        v.parse::<f64>()
            .unwrap_or_else(|_| panic!("{field}:{v} is not a number"));
    }
    let store = info.find("# Store\r\n").expect("# Store");
    let commands = info.find("# Commandstats\r\n").expect("# Commandstats");
    let latency = info.find("# Latencystats\r\n").expect("# Latencystats");
    assert!(store < commands && commands < latency, "{info}");
    for (command, calls) in [("set", 20), ("get", 10), ("del", 3), ("cas", 2)] {
        let stat = info_field(&info, &format!("cmdstat_{command}"))
            .unwrap_or_else(|| panic!("no cmdstat_{command}: {info}"));
        assert!(
            stat.starts_with(&format!("calls={calls},usec=")),
            "{command}: {stat}"
        );
        assert!(
            stat.ends_with(",rejected_calls=0,failed_calls=0"),
            "{command}: {stat}"
        );
        let p = percentiles(
            info_field(&info, &format!("latency_percentiles_usec_{command}"))
                .unwrap_or_else(|| panic!("no {command} percentiles: {info}")),
        );
        let names: Vec<&str> = p.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(names, ["p50", "p99", "p99.9"], "{command}");
        assert!(
            p[0].1 > 0.0 && p[0].1 <= p[1].1 && p[1].1 <= p[2].1,
            "{p:?}"
        );
    }
    // The INFO being answered is not counted yet (as in Redis).
    assert!(info_field(&info, "cmdstat_info").is_none(), "{info}");

    // GET /metrics: the same counts, as a valid exposition text.
    let (status, headers, body) = http(metrics, "GET /metrics HTTP/1.1");
    assert_eq!(status, "HTTP/1.1 200 OK", "{headers}");
    assert!(
        headers
            .to_ascii_lowercase()
            .contains("content-type: text/plain; version=0.0.4"),
        "{headers}"
    );
    let samples = parse(&body).expect("valid exposition text");
    for (command, calls) in [("set", 20.0), ("get", 10.0), ("del", 3.0), ("cas", 2.0)] {
        let c = [("command", command)];
        assert_eq!(value(&samples, "raftnvm_requests_total", &c), calls);
        assert_eq!(value(&samples, "raftnvm_requests_rejected_total", &c), 0.0);
        assert_eq!(
            value(&samples, "raftnvm_request_duration_seconds_count", &c),
            calls
        );
        assert!(value(&samples, "raftnvm_request_duration_seconds_sum", &c) > 0.0);
        let mut last = 0.0;
        for q in ["0.5", "0.99", "0.999"] {
            let v = value(
                &samples,
                "raftnvm_request_duration_seconds",
                &[("command", command), ("quantile", q)],
            );
            assert!(v.is_finite() && v > 0.0 && v >= last, "{command} {q}: {v}");
            assert!(v < 1.0, "{command} {q}: {v} s");
            last = v;
        }
    }
    assert_eq!(
        value(&samples, "raftnvm_requests_total", &[("command", "info")]),
        1.0
    );
    assert_eq!(value(&samples, "raftnvm_role", &[("role", "leader")]), 1.0);
    assert_eq!(
        value(&samples, "raftnvm_role", &[("role", "follower")]),
        0.0
    );
    // 20 SETs, 2 of 3 DELs and both CASes (a no-op entry too), and the leader's no-op.
    assert!(value(&samples, "raftnvm_commit_index", &[]) >= 25.0);
    assert_eq!(
        value(&samples, "raftnvm_applied_index", &[]),
        value(&samples, "raftnvm_commit_index", &[])
    );
    assert_eq!(
        value(&samples, "raftnvm_store_capacity_bytes", &[]),
        info_field(&info, "store_capacity_bytes")
            .and_then(|v| v.parse::<f64>().ok())
            .expect("capacity in INFO")
    );
    let fill = value(&samples, "raftnvm_store_fill_ratio", &[]);
    assert!(fill > 0.0 && fill < 1.0, "{fill}");
    assert_eq!(value(&samples, "raftnvm_oom_refusals_total", &[]), 0.0);
    assert!(value(&samples, "raftnvm_term", &[]) >= 1.0);
    assert!(
        samples
            .iter()
            .all(|s| s.family != "raftnvm_peer_lag_entries"),
        "a single node has no followers"
    );
    assert!(body.contains("# TYPE raftnvm_peer_lag_entries gauge\n"));

    // HEAD, other paths, methods and non-HTTP.
    let (status, _, body) = http(metrics, "HEAD /metrics HTTP/1.1");
    assert_eq!((status.as_str(), body.as_str()), ("HTTP/1.1 200 OK", ""));
    let (status, _, _) = http(metrics, "GET / HTTP/1.1");
    assert_eq!(status, "HTTP/1.1 404 Not Found");
    let (status, headers, _) = http(metrics, "POST /metrics HTTP/1.1");
    assert_eq!(status, "HTTP/1.1 405 Method Not Allowed");
    assert!(headers.contains("Allow: GET, HEAD"), "{headers}");
    let (status, _, _) = http(metrics, "hello");
    assert_eq!(status, "HTTP/1.1 400 Bad Request");

    rt.block_on(node.shutdown()).expect("clean shutdown");
    assert!(
        TcpStream::connect(metrics).is_err(),
        "the metrics listener closes with the node"
    );
}
