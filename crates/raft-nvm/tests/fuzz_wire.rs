//! The wire fuzz targets' committed corpora, run as ordinary tests.
//!
//! Every file in `fuzz/corpus/resp_decode/`, `fuzz/corpus/frame_decode/`,
//! `fuzz/corpus/membership_decode/` and `fuzz/corpus/metrics_http/` goes through the body its target runs
//! (`raft_nvm::fuzzing::wire`), with the same counting allocator installed, so the
//! allocation bound is checked here too. Files named `ok-*` must decode, `err-*`
//! must be refused, `regress-*` reproduce a bug a fuzzer found (each also has a
//! named test below); other names (inputs a fuzzer run kept) only have to pass
//! the body's checks.
//!
//! The named files are made by the ignored test `regenerate_corpus`:
//!
//! ```text
//! cargo test -p raft-nvm --test fuzz_wire -- --ignored --exact regenerate_corpus
//! ```

// The wire formats are the `server` feature's.
#![cfg(feature = "server")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use raft_nvm::fuzzing::wire::{self, CountingAlloc};
use raft_nvm::net::{encode, Wire};
use raft_nvm::raft::{Command, Entry, Membership, Message, MessageBody};
use raft_nvm::resp::{decode_reply, encode_command, Decoder, Reply};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

fn corpus_dir(target: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../fuzz/corpus")
        .join(target)
}

fn corpus_files(target: &str) -> Vec<(String, Vec<u8>)> {
    let dir = corpus_dir(target);
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.expect("directory entry").path();
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .expect("UTF-8 file name")
                .to_owned();
            (name, std::fs::read(&path).expect("readable corpus file"))
        })
        .collect();
    files.sort();
    assert!(
        files.len() >= 4,
        "expected named seeds in {}, found {}",
        dir.display(),
        files.len()
    );
    files
}

#[test]
fn the_allocator_counts() {
    assert!(
        wire::counting_active(),
        "the allocation bound would not be checked"
    );
}

#[test]
fn resp_corpus() {
    for (name, bytes) in corpus_files("resp_decode") {
        let out = wire::resp_decode(&bytes);
        if name.starts_with("ok-") {
            assert!(
                !out.requests.is_empty() && out.error.is_none(),
                "{name}: {out:?}"
            );
        } else if name.starts_with("err-") {
            assert!(out.error.is_some(), "{name}: {out:?}");
        }
    }
}

#[test]
fn frame_corpus() {
    for (name, bytes) in corpus_files("frame_decode") {
        let wire = wire::frame_decode(&bytes);
        if name.starts_with("ok-") {
            assert!(wire.is_some(), "{name} should decode");
        } else if name.starts_with("err-") {
            assert!(wire.is_none(), "{name} should be refused");
        }
    }
}

#[test]
fn membership_corpus() {
    for (name, bytes) in corpus_files("membership_decode") {
        let ok = wire::membership_decode(&bytes);
        if name.starts_with("ok-") {
            assert!(ok, "{name} should decode");
        } else if name.starts_with("err-") {
            assert!(!ok, "{name} should be refused");
        }
    }
}

#[test]
fn metrics_corpus() {
    for (name, bytes) in corpus_files("metrics_http") {
        let out = wire::metrics_http(&bytes);
        if name.starts_with("ok-") {
            assert!(
                matches!(
                    out,
                    Some(wire::HttpOutcome {
                        status: Some(200),
                        in_time: true
                    })
                ),
                "{name}: {out:?}"
            );
        } else if name.starts_with("err-") {
            assert!(
                matches!(&out, Some(o) if o.status != Some(200)),
                "{name}: {out:?}"
            );
        }
    }
}

/// The chunk header of a `resp_decode` input: `cuts` reads of these lengths.
fn chunked(cuts: &[u8], stream: &[u8]) -> Vec<u8> {
    let mut v = vec![u8::try_from(cuts.len()).expect("few cuts")];
    v.extend_from_slice(cuts);
    v.extend_from_slice(stream);
    v
}

fn message(body: MessageBody) -> Vec<u8> {
    let mut out = Vec::new();
    encode(
        &Wire::Msg(Message {
            from: 1,
            to: 2,
            term: 3,
            body,
        }),
        &mut out,
    )
    .expect("encode");
    out.split_off(raft_nvm::net::LEN_PREFIX)
}

/// Writes the named corpus files (run by hand; see the module docs).
#[test]
#[ignore = "writes fuzz/corpus/{resp_decode,frame_decode,membership_decode,metrics_http}; run by hand to regenerate"]
fn regenerate_corpus() {
    let mut set = Vec::new();
    encode_command(&[b"SET", b"key", b"value"], &mut set);
    let mut get = Vec::new();
    encode_command(&[b"GET", b"key"], &mut get);
    let mut pipeline = set.clone();
    pipeline.extend_from_slice(&get);
    pipeline.extend_from_slice(b"PING\r\n\r\nSET k \"a\\x41 b\" 'c\\'d'\n");
    let replies = [
        Reply::Simple("OK".into()),
        Reply::Array(vec![
            Reply::Bulk(b"v".to_vec()),
            Reply::Nil,
            Reply::Integer(-7),
            Reply::Error("MOVED 0 127.0.0.1:7001".into()),
        ]),
    ]
    .iter()
    .flat_map(Reply::to_bytes)
    .collect::<Vec<u8>>();
    let resp: Vec<(&str, Vec<u8>)> = vec![
        ("ok-set", chunked(&[], &set)),
        ("ok-pipeline-cut", chunked(&[3, 1, 7, 2, 9], &pipeline)),
        ("ok-inline", chunked(&[2], b"SET k \"a b\"\r\nDEL k\n")),
        // Replies are no requests (an error for the server); the client decodes them.
        ("replies", chunked(&[1, 5], &replies)),
        ("err-not-bulk", chunked(&[], b"*1\r\n:1\r\n")),
        ("err-bulk-too-long", chunked(&[], b"*1\r\n$67108865\r\n")),
        ("err-unbalanced-quotes", chunked(&[4], b"SET k \"v\n")),
        ("err-no-crlf", chunked(&[], b"*1\r\n$1\r\nab\r\n")),
        (
            "partial-bulk",
            chunked(&[6], b"*2\r\n$3\r\nGET\r\n$10\r\nabc"),
        ),
    ];
    let membership = Membership {
        voters: BTreeSet::from([1, 2, 3]),
        outgoing: BTreeSet::new(),
        learners: BTreeSet::from([4]),
        addresses: BTreeMap::new(),
    };
    let mut hello = Vec::new();
    encode(
        &Wire::Hello {
            from: 1,
            to: 2,
            cluster: 0xfeed,
            reply_to: ([127, 0, 0, 1], 7001).into(),
        },
        &mut hello,
    )
    .expect("encode");
    let append = message(MessageBody::AppendEntries {
        prev_index: 4,
        prev_term: 2,
        entries: vec![
            Entry {
                index: 5,
                term: 3,
                cmd: Command::Put {
                    key: b"k".to_vec(),
                    value: b"v".to_vec(),
                },
            },
            Entry {
                index: 6,
                term: 3,
                cmd: Command::Config {
                    data: membership.encode(),
                },
            },
        ],
        commit: 4,
    });
    let frame: Vec<(&str, Vec<u8>)> = vec![
        ("ok-hello", hello[raft_nvm::net::LEN_PREFIX..].to_vec()),
        ("ok-append", append.clone()),
        (
            "ok-heartbeat",
            message(MessageBody::Heartbeat {
                commit: 9,
                ctx: Some(1),
                sent: 2,
            }),
        ),
        ("err-empty", Vec::new()),
        ("err-trailing", [&append[..], &[0]].concat()),
        ("err-truncated", append[..append.len() - 1].to_vec()),
        ("err-bad-variant", vec![0x7f]),
    ];
    let mut mem_ok = vec![0];
    mem_ok.extend_from_slice(&membership.encode());
    let membership_files: Vec<(&str, Vec<u8>)> = vec![
        ("ok-membership", mem_ok.clone()),
        ("ok-typed-list", [&[1u8, 2, 1, b'a', 0][..]].concat()),
        (
            "err-membership-truncated",
            mem_ok[..mem_ok.len() - 1].to_vec(),
        ),
        // No voters at all: `Membership::validate` accepts it (the initial, empty
        // configuration is one).
        ("ok-membership-empty", vec![0, 0, 0, 0, 0]),
        (
            "err-typed-huge-count",
            vec![1, 0xff, 0xff, 0xff, 0xff, 0x0f],
        ),
    ];
    // Byte 0: 0, a client that stays (silent) after its request; 2, one that
    // closes its side; 1, exposition text.
    let http = |mode: u8, text: &[u8]| [&[mode][..], text].concat();
    let metrics: Vec<(&str, Vec<u8>)> = vec![
        (
            "ok-get",
            http(0, b"GET /metrics HTTP/1.1\r\nHost: n\r\n\r\n"),
        ),
        ("ok-get-1.0", http(0, b"GET /metrics HTTP/1.0\r\n\r\n")),
        // hyper without `half_close` drops a connection whose client closed its
        // side before the answer: no response (curl and Prometheus do not).
        (
            "get-half-closed",
            http(2, b"GET /metrics HTTP/1.1\r\nHost: n\r\n\r\n"),
        ),
        (
            "err-other-path",
            http(2, b"GET / HTTP/1.1\r\nHost: n\r\n\r\n"),
        ),
        (
            "err-post",
            http(0, b"POST /metrics HTTP/1.1\r\nContent-Length: 1\r\n\r\nx"),
        ),
        ("err-garbage", http(2, b"\x16\x03\x01 not http\r\n\r\n")),
        ("err-slow-loris", http(0, b"GET /metrics HTTP/1.1\r\nHost")),
        (
            "exposition",
            http(
                1,
                b"# HELP raftnvm_up Up.\n# TYPE raftnvm_up gauge\nraftnvm_up{node=\"1\"} 1\n",
            ),
        ),
    ];
    for (target, files) in [
        ("metrics_http", metrics),
        ("resp_decode", resp),
        ("frame_decode", frame),
        ("membership_decode", membership_files),
    ] {
        let dir = corpus_dir(target);
        std::fs::create_dir_all(&dir).expect("create corpus directory");
        for (name, bytes) in files {
            std::fs::write(dir.join(name), bytes).expect("write corpus file");
        }
    }
}

/// The decoders agree with themselves on a few hand-made cases (outside the
/// corpus, so a corpus regeneration cannot lose them).
#[test]
fn hand_made_streams() {
    let out = wire::resp_decode(&chunked(&[1, 1, 1], b"*1\r\n$4\r\nPING\r\nPING\r\n"));
    assert_eq!(out.requests.len(), 2);
    assert!(out.error.is_none() && out.leftover == 0);
    let mut dec = Decoder::new();
    assert_eq!(dec.decode(b"*2\r\n$3\r\nGET\r\n"), Ok((13, None)));
    assert_eq!(decode_reply(b"+OK"), Ok(None));
}

/// `*1024\r\n` announces 1024 arguments; the decoder reserved room for all of them
/// at once (24 KiB for 7 bytes). Found by `resp_decode`
/// (`fuzz/corpus/resp_decode/regress-announced-args`, `*444`).
#[test]
fn regress_announced_argument_count_is_not_reserved_up_front() {
    assert!(wire::counting_active());
    let mut dec = Decoder::new();
    let (result, allocated) = wire::measure(|| dec.decode(b"*1024\r\n"));
    assert_eq!(result, Ok((7, None)));
    assert!(
        allocated < 1024,
        "{allocated} bytes reserved for 7 bytes of input"
    );
}

/// Nested arrays each announcing 64 elements: the client's reply decoder reserved
/// 64 elements per level before any arrived (64 KiB for 160 bytes at 32 levels).
/// Found by reading the decoder beside the `resp_decode` bound, not by a fuzzer
/// run (which had not built such a nest yet); the corpus keeps the input as
/// `regress-nested-array-reserve`.
#[test]
fn regress_nested_array_replies_reserve_what_arrived() {
    assert!(wire::counting_active());
    let nest = b"*64\r\n".repeat(32);
    let (result, allocated) = wire::measure(|| decode_reply(&nest));
    assert_eq!(result, Ok(None));
    assert!(
        allocated <= 128 * nest.len() + 4096,
        "{allocated} bytes reserved for {} bytes of replies",
        nest.len()
    );
    wire::resp_decode(&chunked(&[], &nest));
}
