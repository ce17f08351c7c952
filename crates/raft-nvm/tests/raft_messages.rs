//! Every message kind survives a serde round trip (the transport frames messages
//! with serde; JSON stands in for its format here), including binary keys and
//! values that are not UTF-8.

use raft_nvm::raft::{Command, Entry, Message, MessageBody, SnapshotResume};
use raft_nvm::{SnapshotItem, SnapshotMeta};

fn all_bodies() -> Vec<MessageBody> {
    let entries = vec![
        Entry {
            index: 7,
            term: 3,
            cmd: Command::Put {
                key: vec![0, 255, 1],
                value: vec![0xfe; 5],
            },
        },
        Entry {
            index: 8,
            term: 3,
            cmd: Command::Delete { key: b"k".to_vec() },
        },
        Entry {
            index: 9,
            term: 3,
            cmd: Command::Cas {
                key: b"k".to_vec(),
                expected: None,
                new: vec![0x80],
            },
        },
        Entry {
            index: 10,
            term: 4,
            cmd: Command::Noop,
        },
    ];
    vec![
        MessageBody::PreVote {
            last_index: 10,
            last_term: 4,
        },
        MessageBody::PreVoteResp { granted: true },
        MessageBody::RequestVote {
            last_index: 10,
            last_term: 4,
            transfer: true,
        },
        MessageBody::TimeoutNow,
        MessageBody::VoteResp { granted: false },
        MessageBody::AppendEntries {
            prev_index: 6,
            prev_term: 2,
            entries,
            commit: 5,
        },
        MessageBody::AppendResp {
            success: false,
            index: 6,
            hint: 3,
        },
        MessageBody::Heartbeat {
            commit: 9,
            ctx: Some(42),
            sent: 7,
        },
        MessageBody::HeartbeatResp { ctx: None, sent: 7 },
        MessageBody::SnapshotChunk {
            meta: SnapshotMeta {
                index: 100,
                term: 5,
            },
            seq: 2,
            items: vec![SnapshotItem {
                key: vec![0xff, 0],
                value: vec![],
                index: 99,
            }],
            done: true,
        },
        MessageBody::SnapshotAck {
            success: true,
            index: 100,
            resume: None,
        },
        MessageBody::SnapshotAck {
            success: false,
            index: 7,
            resume: Some(SnapshotResume {
                meta: SnapshotMeta {
                    index: 100,
                    term: 5,
                },
                seq: 3,
            }),
        },
        MessageBody::SnapshotProgress {
            resume: SnapshotResume {
                meta: SnapshotMeta {
                    index: 100,
                    term: 5,
                },
                seq: 4,
            },
        },
    ]
}

#[test]
fn every_message_kind_round_trips() {
    let bodies = all_bodies();
    let mut kinds: Vec<&str> = bodies.iter().map(MessageBody::kind).collect();
    kinds.dedup();
    assert_eq!(kinds.len(), 12, "one of each kind");
    for body in bodies {
        let m = Message {
            from: 1,
            to: 65534,
            term: u64::MAX,
            body,
        };
        let text = serde_json::to_string(&m).expect("serialize");
        let back: Message = serde_json::from_str(&text).expect("deserialize");
        assert_eq!(back, m, "{text}");
    }
}

#[test]
fn malformed_frames_are_errors_not_panics() {
    for bad in [
        "",
        "{",
        "null",
        r#"{"from":1,"to":2,"term":3,"body":{"Nope":{}}}"#,
        r#"{"from":70000,"to":2,"term":3,"body":{"VoteResp":{"granted":true}}}"#,
    ] {
        assert!(
            serde_json::from_str::<Message>(bad).is_err(),
            "{bad:?} was accepted"
        );
    }
}
