//! The commands the RESP front end understands, parsed from a request's arguments,
//! and the encoding of the node's replies.
//!
//! | command | reply |
//! |---|---|
//! | `GET key` | the value as a bulk string, or nil |
//! | `SET key value` | `+OK` (options such as `EX`, `NX` are refused by name) |
//! | `DEL key` | `:1` if the key existed, else `:0` (one key only) |
//! | `CAS key expected new` | `:1` if `key` held `expected` and now holds `new`, else `:0` |
//! | `INFO [section]` | the node's `field:value` text as a bulk string (the section is ignored) |
//! | `PING [message]` | `+PONG`, or the message as a bulk string |
//! | `CONFIG GET pattern...` | the matching [`CONFIG`] parameters as name/value pairs |
//! | `COMMAND [...]` | an empty array (no command table is exposed) |
//! | `SELECT 0` | `+OK` (there is only database 0) |
//! | `CLIENT ...` | `+OK` (names and other client settings are accepted and ignored) |
//! | `QUIT` | `+OK`, then the server closes the connection |
//! | `AUTH [default] password` | `+OK` if the password is the server's (`requirepass`), else `-WRONGPASS ...`; see [`crate::server::resp::server`] |
//! | `RAFT.TRANSFER-LEADER [id]` | `+OK` once the leader started handing its leadership to node `id` (default: the most caught-up follower); `-MOVED` from a follower |
//! | `RAFT.ADD-LEARNER id raft-addr client-addr` | `+OK` once the configuration naming node `id` a learner (reachable at those addresses) is committed |
//! | `RAFT.PROMOTE id` | `+OK` once the joint configuration making learner `id` a voter is committed (the leader then leaves it by itself); it waits for a lagging learner to catch up, `-ERR` if it does not within 20 election timeouts |
//! | `RAFT.REMOVE-NODE id` | `+OK` once the configuration without node `id` (a voter: the joint one) is committed |
//! | `RAFT.CONFIG` | this node's view of the configuration (`voters:`, `outgoing:`, `learners:`, `index:`, `pending:`, `addresses:` lines) as a bulk string |
//!
//! The membership commands are answered by the leader (`-MOVED` elsewhere), one
//! change at a time (`-ERR` while another is under way). Their names, like
//! `RAFT.TRANSFER-LEADER`'s, follow RedisRaft's prefix so that they never collide
//! with a real Redis command (`CLUSTER ...` is Redis Cluster's).
//!
//! `CAS` is not a Redis command; `expected` is always compared as a *present* value:
//! a key that is absent never matches, so `CAS` cannot create a key (use `SET`). The
//! node's [`KvRequest::Cas`] is therefore always sent with `expected: Some(..)`.
//!
//! Command names and subcommands are case-insensitive. Errors use Redis's wording
//! (`ERR unknown command 'X'`, `ERR wrong number of arguments for 'get' command`).
//! `CONFIG GET`, `COMMAND`, `SELECT` and `CLIENT` exist so that `redis-benchmark`'s
//! start-up probe and `redis-cli`'s interactive hints work; they never reach the node.

use super::codec::{write_array_header, write_bulk, write_error, write_integer, write_nil};
use super::codec::{write_simple, Args};
use crate::consensus::machine::{MachineReply, StateMachine};
use crate::consensus::service::{KvReply, KvRequest};

/// A client command.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Command {
    /// A request the node must answer (`GET`, `SET`, `DEL`, `CAS`, `INFO`).
    Kv(KvRequest),
    /// A command the front end answers itself.
    Local(Local),
}

/// A command answered by the front end without the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Local {
    /// `PING [message]`.
    Ping(Option<Vec<u8>>),
    /// `CONFIG GET pattern...`: the [`CONFIG`] parameters matching any of the
    /// glob patterns (`*`, `?`; case-insensitive), one bit each, as name/value
    /// pairs; an empty array if none match.
    ConfigGet(u8),
    /// `COMMAND [subcommand ...]` (`COMMAND DOCS` from `redis-cli`): an empty array.
    CommandDocs,
    /// `SELECT 0`: `+OK`.
    Select,
    /// `CLIENT subcommand ...` (`SETNAME`, `SETINFO`, ...): `+OK`.
    Client,
    /// `QUIT`: `+OK`, then the connection is closed.
    Quit,
    /// `AUTH password` or `AUTH username password`. The server checks it against
    /// its password; [`Local::encode_reply`] answers as a server without one
    /// does (as Redis's default user without `requirepass`).
    Auth(AuthArgs),
}

/// The arguments of `AUTH`. Their `Debug` output hides the password.
#[derive(Clone, PartialEq, Eq)]
pub struct AuthArgs {
    /// The user name, if given (only `default` exists).
    pub user: Option<Vec<u8>>,
    /// The password.
    pub password: Vec<u8>,
}

impl std::fmt::Debug for AuthArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthArgs")
            .field("user", &self.user.as_deref().map(String::from_utf8_lossy))
            .field("password", &"<redacted>")
            .finish()
    }
}

impl AuthArgs {
    /// Whether the user is the only one there is, `default` (or none was named).
    pub fn is_default_user(&self) -> bool {
        self.user.as_deref().is_none_or(|u| u == b"default")
    }
}

/// The reply to a wrong password or an unknown user, Redis's words.
pub const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
/// The reply to a command before `AUTH` on a server with a password.
pub const NOAUTH: &str = "NOAUTH Authentication required.";

/// A command that cannot be run; the reply is `-ERR <message>` and the connection
/// stays open.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    /// The command name is not one of ours (shown escaped, at most 128 bytes).
    #[error("unknown command '{0}'")]
    Unknown(String),
    /// The command (lower case, `parent|sub` for subcommands) got too few or too many
    /// arguments.
    #[error("wrong number of arguments for '{0}' command")]
    WrongArity(&'static str),
    /// An option this front end does not implement (`SET k v EX 10`).
    #[error("{command} option '{option}' is not supported")]
    UnsupportedOption {
        /// The command (upper case).
        command: &'static str,
        /// The option as given (escaped).
        option: String,
    },
    /// A command given several keys where only one is supported (`DEL a b`).
    #[error("{0} with more than one key is not supported")]
    OneKeyOnly(&'static str),
    /// A subcommand this front end does not implement (`CONFIG SET`).
    #[error("unknown subcommand '{sub}' for '{command}'")]
    UnknownSubcommand {
        /// The command (lower case).
        command: &'static str,
        /// The subcommand as given (escaped).
        sub: String,
    },
    /// `SELECT` of a database other than 0.
    #[error("DB index is out of range")]
    DbIndexOutOfRange,
    /// An argument that must be an integer is not one.
    #[error("value is not an integer or out of range")]
    NotAnInteger,
    /// The node's state machine took the command and refused its arguments.
    #[error("{0}")]
    Machine(String),
    /// An argument that must be an address (`host:port`, an IP) is not one.
    #[error("'{0}' is not an address (ip:port)")]
    NotAnAddress(String),
}

/// A node id argument.
fn node_id(arg: &[u8]) -> Result<u16, CommandError> {
    std::str::from_utf8(arg)
        .ok()
        .and_then(|s| s.parse::<u16>().ok())
        .filter(|&id| id != u16::MAX)
        .ok_or(CommandError::NotAnInteger)
}

/// An address argument (`ip:port`).
fn address(arg: &[u8]) -> Result<std::net::SocketAddr, CommandError> {
    let text = String::from_utf8_lossy(arg);
    text.parse()
        .map_err(|_| CommandError::NotAnAddress(text.chars().take(128).collect()))
}

/// The membership commands (`RAFT.ADD-LEARNER`, `RAFT.PROMOTE`,
/// `RAFT.REMOVE-NODE`, `RAFT.CONFIG`); `None` for any other command.
fn parse_membership(args: &[Vec<u8>]) -> Result<Option<Command>, CommandError> {
    use crate::consensus::raft::MembershipChange;
    let name = args.first().map(Vec::as_slice).unwrap_or_default();
    let argc = args.len();
    let change = if name.eq_ignore_ascii_case(b"raft.add-learner") {
        arity(argc == 4, "raft.add-learner")?;
        let (raft, client) = (address(&args[2])?, address(&args[3])?);
        MembershipChange::AddLearner {
            id: node_id(&args[1])?,
            address: format!("{raft}/{client}"),
        }
    } else if name.eq_ignore_ascii_case(b"raft.promote") {
        arity(argc == 2, "raft.promote")?;
        MembershipChange::Promote(node_id(&args[1])?)
    } else if name.eq_ignore_ascii_case(b"raft.remove-node") {
        arity(argc == 2, "raft.remove-node")?;
        MembershipChange::Remove(node_id(&args[1])?)
    } else if name.eq_ignore_ascii_case(b"raft.config") {
        arity(argc == 1, "raft.config")?;
        return Ok(Some(Command::Kv(KvRequest::ShowMembership)));
    } else {
        return Ok(None);
    };
    Ok(Some(Command::Kv(KvRequest::ChangeMembership(change))))
}

/// The parameters `CONFIG GET` reports: what `redis-benchmark` asks for at start-up.
///
/// `save` is empty (there are no RDB snapshots); `appendonly` is `yes` because every
/// write is in the node's persistent Raft log before it is acknowledged.
pub const CONFIG: [(&str, &str); 2] = [("save", ""), ("appendonly", "yes")];

/// Whether `name` matches the glob `pattern` (`*` any run, `?` any one byte; ASCII
/// case-insensitive). Linear-time backtracking over the last `*` only.
fn glob_match(pattern: &[u8], name: &[u8]) -> bool {
    let (mut p, mut n) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while n < name.len() {
        match pattern.get(p) {
            Some(b'*') => {
                star = Some((p, n));
                p += 1;
            }
            Some(&c) if c == b'?' || c.eq_ignore_ascii_case(&name[n]) => {
                p += 1;
                n += 1;
            }
            _ => match star {
                Some((sp, sn)) => {
                    p = sp + 1;
                    n = sn + 1;
                    star = Some((sp, sn + 1));
                }
                None => return false,
            },
        }
    }
    pattern[p.min(pattern.len())..].iter().all(|&c| c == b'*')
}

/// The longest command name shown in an error.
const MAX_SHOWN: usize = 128;

/// `bytes` printable: escaped as Rust escapes bytes, at most [`MAX_SHOWN`] of them.
fn shown(bytes: &[u8]) -> String {
    bytes[..bytes.len().min(MAX_SHOWN)]
        .escape_ascii()
        .to_string()
}

/// `WrongArity(name)` unless `ok`.
fn arity(ok: bool, name: &'static str) -> Result<(), CommandError> {
    if ok {
        Ok(())
    } else {
        Err(CommandError::WrongArity(name))
    }
}

impl Command {
    /// Parses a request's arguments (the command name first), taking the key and
    /// value buffers over without copying.
    ///
    /// # Errors
    ///
    /// A [`CommandError`] for unknown commands, wrong arity and unsupported options
    /// or values.
    pub fn parse(args: Args) -> Result<Command, CommandError> {
        Self::parse_with(args, None)
    }

    /// [`Command::parse`], and a command that is not a built-in one goes to
    /// `machine`'s [`StateMachine::parse`] before it is called unknown.
    ///
    /// # Errors
    ///
    /// As [`Command::parse`]; [`CommandError::Machine`] when the machine refuses
    /// the arguments of one of its commands.
    pub fn parse_with(
        mut args: Args,
        machine: Option<&dyn StateMachine>,
    ) -> Result<Command, CommandError> {
        let argc = args.len();
        let Some(name) = args.first() else {
            return Err(CommandError::Unknown(String::new()));
        };
        let mut lower = [0u8; 8];
        let name_lc = match lower.get_mut(..name.len()) {
            Some(dst) => {
                dst.copy_from_slice(name);
                dst.make_ascii_lowercase();
                &*dst
            }
            // Longer than any of our command names.
            None => &[],
        };
        if name.eq_ignore_ascii_case(b"raft.transfer-leader") {
            arity(argc <= 2, "raft.transfer-leader")?;
            let to = match args.get(1) {
                None => None,
                Some(id) => Some(
                    std::str::from_utf8(id)
                        .ok()
                        .and_then(|s| s.parse::<u16>().ok())
                        .ok_or(CommandError::NotAnInteger)?,
                ),
            };
            return Ok(Command::Kv(KvRequest::TransferLeader { to }));
        }
        if let Some(cmd) = parse_membership(&args)? {
            return Ok(cmd);
        }
        if let Some(cmd) = parse_kv(name_lc, &mut args)? {
            return Ok(cmd);
        }
        if let Some(local) = parse_local(name_lc, &mut args)? {
            return Ok(Command::Local(local));
        }
        match machine.and_then(|m| m.parse(&args)) {
            Some(Ok(call)) => Ok(Command::Kv(KvRequest::Machine(call))),
            Some(Err(message)) => Err(CommandError::Machine(message)),
            None => Err(CommandError::Unknown(shown(&args[0]))),
        }
    }
}

/// The key-value commands (`GET`, `SET`, `DEL`, `CAS`, `INFO`; `name` is the
/// command's name in lower case), taking the key and value buffers out of `args`;
/// `None` if `name` is none of them.
fn parse_kv(name: &[u8], args: &mut Args) -> Result<Option<Command>, CommandError> {
    let argc = args.len();
    let mut take = |i: usize| std::mem::take(&mut args[i]);
    let request = match name {
        b"get" => {
            arity(argc == 2, "get")?;
            KvRequest::Get { key: take(1) }
        }
        b"set" => {
            arity(argc >= 3, "set")?;
            if argc > 3 {
                return Err(CommandError::UnsupportedOption {
                    command: "SET",
                    option: shown(&args[3]),
                });
            }
            let value = take(2);
            KvRequest::Set {
                key: take(1),
                value,
            }
        }
        b"del" => {
            arity(argc >= 2, "del")?;
            if argc > 2 {
                return Err(CommandError::OneKeyOnly("DEL"));
            }
            KvRequest::Delete { key: take(1) }
        }
        b"cas" => {
            arity(argc == 4, "cas")?;
            let new = take(3);
            let expected = Some(take(2));
            KvRequest::Cas {
                key: take(1),
                expected,
                new,
            }
        }
        b"info" => KvRequest::Info,
        _ => return Ok(None),
    };
    Ok(Some(Command::Kv(request)))
}

/// The commands the connection answers itself (`PING`, `CONFIG GET`, `COMMAND`,
/// `SELECT`, `CLIENT`, `QUIT`, `AUTH`; `name` in lower case); `None` if `name` is
/// none of them.
fn parse_local(name: &[u8], args: &mut Args) -> Result<Option<Local>, CommandError> {
    let argc = args.len();
    let mut take = |i: usize| std::mem::take(&mut args[i]);
    let local = match name {
        b"ping" => {
            arity(argc <= 2, "ping")?;
            Local::Ping((argc == 2).then(|| take(1)))
        }
        b"config" => {
            arity(argc >= 2, "config")?;
            if !args[1].eq_ignore_ascii_case(b"get") {
                return Err(CommandError::UnknownSubcommand {
                    command: "config",
                    sub: shown(&args[1]),
                });
            }
            arity(argc >= 3, "config|get")?;
            let mut matched = 0u8;
            for (bit, (name, _)) in CONFIG.iter().enumerate() {
                if args[2..].iter().any(|pat| glob_match(pat, name.as_bytes())) {
                    matched |= 1 << bit;
                }
            }
            Local::ConfigGet(matched)
        }
        b"command" => Local::CommandDocs,
        b"select" => {
            arity(argc == 2, "select")?;
            let db = std::str::from_utf8(&args[1])
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or(CommandError::NotAnInteger)?;
            if db != 0 {
                return Err(CommandError::DbIndexOutOfRange);
            }
            Local::Select
        }
        b"client" => {
            arity(argc >= 2, "client")?;
            Local::Client
        }
        b"quit" => Local::Quit,
        b"auth" => {
            arity(argc == 2 || argc == 3, "auth")?;
            let password = take(argc - 1);
            let user = (argc == 3).then(|| take(1));
            Local::Auth(AuthArgs { user, password })
        }
        _ => return Ok(None),
    };
    Ok(Some(local))
}

impl Local {
    /// Appends the reply to `out`.
    pub fn encode_reply(&self, out: &mut Vec<u8>) {
        match self {
            Local::Ping(None) => write_simple(out, b"PONG"),
            Local::Ping(Some(msg)) => write_bulk(out, msg),
            Local::ConfigGet(matched) => {
                write_array_header(out, 2 * matched.count_ones() as usize);
                for (bit, (name, value)) in CONFIG.iter().enumerate() {
                    if matched & (1 << bit) != 0 {
                        write_bulk(out, name.as_bytes());
                        write_bulk(out, value.as_bytes());
                    }
                }
            }
            Local::CommandDocs => write_array_header(out, 0),
            Local::Select | Local::Client | Local::Quit => write_simple(out, b"OK"),
            Local::Auth(AuthArgs { user: None, .. }) => write_error(
                out,
                b"ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
            ),
            Local::Auth(args) if args.is_default_user() => write_simple(out, b"OK"),
            Local::Auth(_) => write_error(out, WRONGPASS.as_bytes()),
        }
    }
}

impl CommandError {
    /// Appends the reply `-ERR <message>` to `out`.
    pub fn encode_reply(&self, out: &mut Vec<u8>) {
        write_error(out, format!("ERR {self}").as_bytes());
    }
}

/// Appends the RESP encoding of a node's reply to `out`.
///
/// | reply | encoding |
/// |---|---|
/// | `Value(Some(v))` / `Value(None)` | bulk string / nil |
/// | `Done` | `+OK` |
/// | `Deleted(b)`, `Swapped(b)` | `:1` / `:0` |
/// | `Info(text)` | bulk string |
/// | `NotLeader { leader: Some(addr) }` | `-MOVED 0 <addr>` |
/// | `NotLeader { leader: None }` | `-TRYAGAIN no leader elected yet` |
/// | `Rejected(reason)` | `-ERR <reason>` |
/// | `Unavailable(reason)` | `-ERR <reason>` |
/// | `OutOfMemory(reason)` | `-OOM <reason>` |
pub fn encode_kv_reply(reply: &KvReply, out: &mut Vec<u8>) {
    match reply {
        KvReply::Value(Some(value)) => write_bulk(out, value),
        KvReply::Value(None) => write_nil(out),
        KvReply::Done => write_simple(out, b"OK"),
        KvReply::Deleted(yes) | KvReply::Swapped(yes) => write_integer(out, i64::from(*yes)),
        KvReply::Info(text) => write_bulk(out, text.as_bytes()),
        KvReply::NotLeader { leader: Some(addr) } => {
            write_error(out, format!("MOVED 0 {addr}").as_bytes());
        }
        KvReply::NotLeader { leader: None } => write_error(out, b"TRYAGAIN no leader elected yet"),
        KvReply::Rejected(reason) | KvReply::Unavailable(reason) => {
            write_error(out, format!("ERR {reason}").as_bytes())
        }
        KvReply::OutOfMemory(reason) => write_error(out, format!("OOM {reason}").as_bytes()),
        KvReply::Machine(reply) => match reply {
            MachineReply::Ok => write_simple(out, b"OK"),
            MachineReply::Nil => write_nil(out),
            MachineReply::Integer(n) => write_integer(out, *n),
            MachineReply::Bulk(bytes) => write_bulk(out, bytes),
            MachineReply::Error(message) => write_error(out, format!("ERR {message}").as_bytes()),
        },
    }
}

#[cfg(test)]
mod tests;
