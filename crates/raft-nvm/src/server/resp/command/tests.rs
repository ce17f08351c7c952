//! Parsing every command, its errors, and the encoding of the replies.

use super::*;
use crate::consensus::machine::MachineCall;

fn parse(words: &[&str]) -> Result<Command, CommandError> {
    Command::parse(words.iter().map(|w| w.as_bytes().to_vec()).collect())
}

fn kv(words: &[&str]) -> KvRequest {
    match parse(words) {
        Ok(Command::Kv(req)) => req,
        other => panic!("{words:?}: {other:?}"),
    }
}

fn local(words: &[&str]) -> Local {
    match parse(words) {
        Ok(Command::Local(l)) => l,
        other => panic!("{words:?}: {other:?}"),
    }
}

fn err(words: &[&str]) -> String {
    match parse(words) {
        Err(e) => {
            let mut out = Vec::new();
            e.encode_reply(&mut out);
            String::from_utf8(out).expect("ASCII")
        }
        other => panic!("{words:?}: {other:?}"),
    }
}

#[test]
fn membership_commands_parse_and_check_their_arguments() {
    use crate::consensus::raft::MembershipChange;
    assert_eq!(
        kv(&["raft.add-learner", "4", "127.0.0.1:7004", "127.0.0.1:6384"]),
        KvRequest::ChangeMembership(MembershipChange::AddLearner {
            id: 4,
            address: "127.0.0.1:7004/127.0.0.1:6384".into()
        })
    );
    assert_eq!(
        kv(&["RAFT.PROMOTE", "4"]),
        KvRequest::ChangeMembership(MembershipChange::Promote(4))
    );
    assert_eq!(
        kv(&["Raft.Remove-Node", "2"]),
        KvRequest::ChangeMembership(MembershipChange::Remove(2))
    );
    assert_eq!(kv(&["RAFT.CONFIG"]), KvRequest::ShowMembership);
    assert_eq!(
        err(&["RAFT.ADD-LEARNER", "4", "nowhere", "127.0.0.1:1"]),
        "-ERR 'nowhere' is not an address (ip:port)\r\n"
    );
    assert_eq!(
        err(&["RAFT.PROMOTE", "65535"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        err(&["RAFT.REMOVE-NODE"]),
        "-ERR wrong number of arguments for 'raft.remove-node' command\r\n"
    );
    assert_eq!(
        err(&["RAFT.CONFIG", "x"]),
        "-ERR wrong number of arguments for 'raft.config' command\r\n"
    );
}

#[test]
fn key_value_commands() {
    assert_eq!(kv(&["GET", "k"]), KvRequest::Get { key: b"k".to_vec() });
    assert_eq!(kv(&["get", "k"]), KvRequest::Get { key: b"k".to_vec() });
    assert_eq!(
        kv(&["sEt", "k", "v"]),
        KvRequest::Set {
            key: b"k".to_vec(),
            value: b"v".to_vec()
        }
    );
    assert_eq!(kv(&["DEL", "k"]), KvRequest::Delete { key: b"k".to_vec() });
    assert_eq!(
        kv(&["cas", "k", "a", "b"]),
        KvRequest::Cas {
            key: b"k".to_vec(),
            expected: Some(b"a".to_vec()),
            new: b"b".to_vec()
        }
    );
    assert_eq!(
        kv(&["CAS", "k", "", "b"]),
        KvRequest::Cas {
            key: b"k".to_vec(),
            expected: Some(Vec::new()),
            new: b"b".to_vec()
        }
    );
    assert_eq!(kv(&["INFO"]), KvRequest::Info);
    assert_eq!(kv(&["info", "replication"]), KvRequest::Info);
}

#[test]
fn local_commands() {
    assert_eq!(local(&["PING"]), Local::Ping(None));
    assert_eq!(local(&["ping", "hi"]), Local::Ping(Some(b"hi".to_vec())));
    assert_eq!(local(&["CONFIG", "GET", "save"]), Local::ConfigGet(0b01));
    assert_eq!(
        local(&["config", "get", "APPENDONLY"]),
        Local::ConfigGet(0b10)
    );
    assert_eq!(local(&["config", "get", "a", "b"]), Local::ConfigGet(0));
    assert_eq!(local(&["config", "get", "*"]), Local::ConfigGet(0b11));
    assert_eq!(
        local(&["config", "get", "s?ve", "*only"]),
        Local::ConfigGet(0b11)
    );
    assert_eq!(local(&["COMMAND"]), Local::CommandDocs);
    assert_eq!(local(&["command", "docs"]), Local::CommandDocs);
    assert_eq!(local(&["SELECT", "0"]), Local::Select);
    assert_eq!(local(&["client", "setname", "x"]), Local::Client);
    assert_eq!(local(&["QUIT"]), Local::Quit);
    let mut out = Vec::new();
    for l in [
        Local::Ping(None),
        Local::Ping(Some(b"hi".to_vec())),
        Local::ConfigGet(0),
        Local::CommandDocs,
        Local::Select,
        Local::Client,
        Local::Quit,
        Local::ConfigGet(0b11),
    ] {
        l.encode_reply(&mut out);
    }
    assert_eq!(
        out,
        b"+PONG\r\n$2\r\nhi\r\n*0\r\n*0\r\n+OK\r\n+OK\r\n+OK\r\n\
          *4\r\n$4\r\nsave\r\n$0\r\n\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n"
    );
}

#[test]
fn auth_parses_both_forms_and_hides_the_password() {
    let one = local(&["AUTH", "pw"]);
    assert_eq!(
        one,
        Local::Auth(AuthArgs {
            user: None,
            password: b"pw".to_vec()
        })
    );
    let two = local(&["auth", "default", "secret-pw"]);
    let Local::Auth(args) = &two else {
        panic!("{two:?}")
    };
    assert_eq!(args.user.as_deref(), Some(&b"default"[..]));
    assert_eq!(args.password, b"secret-pw");
    assert!(args.is_default_user());
    assert!(!format!("{two:?}").contains("secret-pw"));
    assert_eq!(
        err(&["AUTH"]),
        "-ERR wrong number of arguments for 'auth' command\r\n"
    );
    assert_eq!(
        err(&["AUTH", "a", "b", "c"]),
        "-ERR wrong number of arguments for 'auth' command\r\n"
    );
    // Without a password on the server, as Redis's default user: the one-word
    // form is an error, the two-word form of the default user succeeds.
    let mut out = Vec::new();
    one.encode_reply(&mut out);
    two.encode_reply(&mut out);
    local(&["AUTH", "alice", "pw"]).encode_reply(&mut out);
    let out = String::from_utf8(out).expect("text");
    assert!(out.starts_with("-ERR AUTH <password> called without any password configured"));
    assert!(out.ends_with(&format!("+OK\r\n-{WRONGPASS}\r\n")), "{out}");
}

#[test]
fn glob() {
    for (pattern, name, want) in [
        ("*", "save", true),
        ("", "save", false),
        ("", "", true),
        ("save", "SAVE", true),
        ("sav", "save", false),
        ("save*", "save", true),
        ("*ve", "save", true),
        ("*a*e*", "appendonly", true),
        ("a*d*y", "appendonly", true),
        ("a*x*y", "appendonly", false),
        ("?ave", "save", true),
        ("??", "save", false),
        ("*?*?*?*?*", "save", true),
        ("*?*?*?*?*?", "save", false),
    ] {
        assert_eq!(
            glob_match(pattern.as_bytes(), name.as_bytes()),
            want,
            "{pattern} / {name}"
        );
    }
}

#[test]
fn errors() {
    assert_eq!(err(&["FOO", "x"]), "-ERR unknown command 'FOO'\r\n");
    assert_eq!(err(&["a\r\nb"]), "-ERR unknown command 'a\\r\\nb'\r\n");
    assert_eq!(
        err(&["getset", "k", "v"]),
        "-ERR unknown command 'getset'\r\n"
    );
    let long = "x".repeat(300);
    assert_eq!(
        err(&[&long]),
        format!("-ERR unknown command '{}'\r\n", &long[..128])
    );
    assert_eq!(
        err(&["GET"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        err(&["get", "a", "b"]),
        "-ERR wrong number of arguments for 'get' command\r\n"
    );
    assert_eq!(
        err(&["SET", "k"]),
        "-ERR wrong number of arguments for 'set' command\r\n"
    );
    assert_eq!(
        err(&["SET", "k", "v", "EX", "10"]),
        "-ERR SET option 'EX' is not supported\r\n"
    );
    assert_eq!(
        err(&["set", "k", "v", "nx"]),
        "-ERR SET option 'nx' is not supported\r\n"
    );
    assert_eq!(
        err(&["DEL", "a", "b"]),
        "-ERR DEL with more than one key is not supported\r\n"
    );
    assert_eq!(
        err(&["DEL"]),
        "-ERR wrong number of arguments for 'del' command\r\n"
    );
    assert_eq!(
        err(&["CAS", "k", "a"]),
        "-ERR wrong number of arguments for 'cas' command\r\n"
    );
    assert_eq!(
        err(&["PING", "a", "b"]),
        "-ERR wrong number of arguments for 'ping' command\r\n"
    );
    assert_eq!(
        err(&["CONFIG", "GET"]),
        "-ERR wrong number of arguments for 'config|get' command\r\n"
    );
    assert_eq!(
        err(&["CONFIG", "SET", "a", "b"]),
        "-ERR unknown subcommand 'SET' for 'config'\r\n"
    );
    assert_eq!(
        err(&["CONFIG"]),
        "-ERR wrong number of arguments for 'config' command\r\n"
    );
    assert_eq!(err(&["SELECT", "1"]), "-ERR DB index is out of range\r\n");
    assert_eq!(
        err(&["SELECT", "x"]),
        "-ERR value is not an integer or out of range\r\n"
    );
    assert_eq!(
        err(&["CLIENT"]),
        "-ERR wrong number of arguments for 'client' command\r\n"
    );
    assert_eq!(
        Command::parse(Vec::new()),
        Err(CommandError::Unknown(String::new()))
    );
}

#[test]
fn kv_replies() {
    let cases: &[(KvReply, &[u8])] = &[
        (KvReply::Value(Some(b"v".to_vec())), b"$1\r\nv\r\n"),
        (KvReply::Value(None), b"$-1\r\n"),
        (KvReply::Done, b"+OK\r\n"),
        (KvReply::Deleted(true), b":1\r\n"),
        (KvReply::Deleted(false), b":0\r\n"),
        (KvReply::Swapped(true), b":1\r\n"),
        (KvReply::Swapped(false), b":0\r\n"),
        (
            KvReply::Info("role:leader\r\n".into()),
            b"$13\r\nrole:leader\r\n\r\n",
        ),
        (
            KvReply::NotLeader {
                leader: Some("127.0.0.1:7001".into()),
            },
            b"-MOVED 0 127.0.0.1:7001\r\n",
        ),
        (
            KvReply::NotLeader { leader: None },
            b"-TRYAGAIN no leader elected yet\r\n",
        ),
        (
            KvReply::Unavailable("leadership lost\nretry".into()),
            b"-ERR leadership lost retry\r\n",
        ),
        (
            KvReply::OutOfMemory("store full: 1 KiB left".into()),
            b"-OOM store full: 1 KiB left\r\n",
        ),
        (KvReply::Machine(MachineReply::Ok), b"+OK\r\n"),
        (KvReply::Machine(MachineReply::Nil), b"$-1\r\n"),
        (KvReply::Machine(MachineReply::Integer(-7)), b":-7\r\n"),
        (
            KvReply::Machine(MachineReply::Bulk(b"ab".to_vec())),
            b"$2\r\nab\r\n",
        ),
        (
            KvReply::Machine(MachineReply::Error("not a counter".into())),
            b"-ERR not a counter\r\n",
        ),
    ];
    for (reply, bytes) in cases {
        let mut out = Vec::new();
        encode_kv_reply(reply, &mut out);
        assert_eq!(out, *bytes, "{reply:?}");
    }
}

/// A machine with one command, `HELLO name`.
#[derive(Debug)]
struct Hello;

impl StateMachine for Hello {
    fn name(&self) -> &str {
        "hello"
    }
    fn parse(&self, args: &[Vec<u8>]) -> Option<Result<MachineCall, String>> {
        match args {
            [c, name] if c.eq_ignore_ascii_case(b"hello") => {
                Some(Ok(MachineCall::Read(name.clone())))
            }
            [c, ..] if c.eq_ignore_ascii_case(b"hello") => Some(Err("one name".into())),
            _ => None,
        }
    }
    fn apply(
        &self,
        _: &crate::consensus::machine::StateView<'_>,
        _: &[u8],
    ) -> Result<crate::consensus::machine::Applied, crate::storage::error::StoreError> {
        unreachable!("a read-only machine")
    }
    fn query(
        &self,
        _: &crate::consensus::machine::StateView<'_>,
        _: &[u8],
    ) -> Result<MachineReply, crate::storage::error::StoreError> {
        Ok(MachineReply::Ok)
    }
}

#[test]
fn machine_commands_after_the_built_in_ones() {
    let args = |words: &[&str]| words.iter().map(|w| w.as_bytes().to_vec()).collect();
    assert_eq!(
        Command::parse_with(args(&["Hello", "bob"]), Some(&Hello)),
        Ok(Command::Kv(KvRequest::Machine(MachineCall::Read(
            b"bob".to_vec()
        ))))
    );
    assert_eq!(
        Command::parse_with(args(&["HELLO"]), Some(&Hello)),
        Err(CommandError::Machine("one name".into()))
    );
    // Built-in names never reach the machine; unknown ones stay unknown.
    assert_eq!(
        Command::parse_with(args(&["GET", "k"]), Some(&Hello)),
        Ok(Command::Kv(KvRequest::Get { key: b"k".to_vec() }))
    );
    assert_eq!(
        Command::parse_with(args(&["NOPE"]), Some(&Hello)),
        Err(CommandError::Unknown("NOPE".into()))
    );
    assert_eq!(
        Command::parse(args(&["HELLO", "bob"])),
        Err(CommandError::Unknown("HELLO".into()))
    );
}
