//! The wire format between nodes: a frame is a 4-byte little-endian length followed
//! by that many bytes of a postcard-encoded [`Wire`] value.
//!
//! Every connection is one-way (the dialling node writes, the accepting node reads)
//! and opens with [`Wire::Hello`], which names the dialler; every later frame is a
//! [`Wire::Msg`]. When the cluster has a secret, the acceptor first writes one
//! frame, a [`Wire::Challenge`], and the dialler opens with a [`Wire::AuthHello`]
//! that answers it instead of a plain Hello. [`encode`] appends one frame to a
//! reusable buffer (a writer batches several into one buffer and one `write_all`),
//! and [`read_frame`] reads one frame into a reusable buffer and decodes it,
//! rejecting lengths above a limit before allocating for them.

use std::net::SocketAddr;

use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::consensus::raft::Message;

/// The size of the length prefix in front of every frame.
pub const LEN_PREFIX: usize = 4;

/// The default limit on a frame's length (64 MiB), prefix excluded.
pub const DEFAULT_MAX_FRAME: usize = 64 << 20;

/// Frames up to this length are read straight into a buffer of their size; longer
/// ones grow the buffer as their bytes actually arrive, so a peer that announces a
/// large frame and stalls does not make the reader allocate for all of it at once.
const EAGER_READ: usize = 1 << 20;

/// A budgeted read ([`read_frame_held`]) grows its buffer by at most this much at a
/// time, each step reserved from the budget before the buffer grows.
const BUDGET_STEP: usize = 256 << 10;

/// One frame's content.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Wire {
    /// The first frame of every connection: who dials (`from`), whom it means to
    /// reach (`to`), the cluster it belongs to (`cluster`: the acceptor refuses
    /// a dialler of another cluster), and where it listens (`reply_to`), so that
    /// an acceptor that does not know the dialler yet (a learner hearing from a
    /// leader that joined after it started) can answer it.
    Hello {
        /// The dialling node.
        from: u16,
        /// The node it means to reach.
        to: u16,
        /// The dialler's cluster id.
        cluster: u64,
        /// The dialler's Raft address (an unspecified IP means "the address this
        /// connection comes from").
        reply_to: SocketAddr,
    },
    /// A Raft message (`from` must be the connection's dialler, `to` the acceptor).
    Msg(Message),
    /// The acceptor's first and only frame on a connection, when the cluster has a
    /// secret: a fresh random nonce the dialler must answer.
    Challenge {
        /// 32 random bytes, never reused.
        nonce: [u8; 32],
    },
    /// The dialler's first frame when the cluster has a secret: a Hello with the
    /// answer to the acceptor's [`Wire::Challenge`],
    /// `tag` = HMAC-SHA256(secret, nonce ‖ from ‖ to ‖ cluster ‖ reply_to) with
    /// the integers little-endian (`from`, `to`: 2 bytes; `cluster`: 8) and
    /// `reply_to` as its family (1 byte: 4 or 6), IP octets and port (2 bytes).
    AuthHello {
        /// The dialling node.
        from: u16,
        /// The node it means to reach.
        to: u16,
        /// The dialler's cluster id.
        cluster: u64,
        /// As [`Wire::Hello`]'s.
        reply_to: SocketAddr,
        /// The answer to the challenge.
        tag: [u8; 32],
    },
}

/// Why a frame could not be encoded or read.
#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    /// The frame's length exceeds the limit.
    #[error("frame of {len} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The frame's length (prefix excluded).
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The frame's bytes are not a [`Wire`] value (or have bytes left over after it).
    #[error("malformed frame: {0}")]
    Malformed(String),
    /// Reading failed, or the stream ended inside a frame.
    #[error("i/o error: {0}")]
    Io(#[from] std::io::Error),
}

/// Why [`read_frame_held`] failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HeldReadError {
    /// As [`read_frame`].
    #[error(transparent)]
    Frame(#[from] FrameError),
    /// The bytes held in unfinished frames by all peer connections would exceed
    /// their shared limit (`TransportConfig::frame_budget`).
    #[error("a frame of {len} bytes would take the peers' unfinished frames past their limit of {limit} bytes ({held} held)")]
    OverBudget {
        /// The frame's length.
        len: usize,
        /// The bytes all peer connections held when it was refused.
        held: usize,
        /// The limit.
        limit: usize,
    },
}

impl From<std::io::Error> for HeldReadError {
    fn from(e: std::io::Error) -> Self {
        HeldReadError::Frame(FrameError::Io(e))
    }
}

/// Appends `wire` as one frame (length prefix and postcard bytes) to `out`.
///
/// `out` keeps what it held before; on an error it is restored to that length. The
/// only size limit applied is the prefix's (`u32::MAX`); a sender that wants to stay
/// under a receiver's limit checks the appended length itself.
pub fn encode(wire: &Wire, out: &mut Vec<u8>) -> Result<(), FrameError> {
    let start = out.len();
    out.extend_from_slice(&[0; LEN_PREFIX]);
    if let Err(e) = postcard::to_io(wire, &mut *out) {
        out.truncate(start);
        return Err(FrameError::Malformed(e.to_string()));
    }
    let len = out.len() - start - LEN_PREFIX;
    let Ok(prefix) = u32::try_from(len) else {
        out.truncate(start);
        return Err(FrameError::TooLarge {
            len,
            max: u32::MAX as usize,
        });
    };
    out[start..start + LEN_PREFIX].copy_from_slice(&prefix.to_le_bytes());
    Ok(())
}

/// Decodes one frame's payload (the bytes after the length prefix). Every byte must
/// belong to the value.
pub fn decode(payload: &[u8]) -> Result<Wire, FrameError> {
    match postcard::take_from_bytes::<Wire>(payload) {
        Ok((wire, [])) => Ok(wire),
        Ok((_, rest)) => Err(FrameError::Malformed(format!(
            "{} trailing bytes after the value",
            rest.len()
        ))),
        Err(e) => Err(FrameError::Malformed(e.to_string())),
    }
}

/// Reads and decodes one frame from `reader`, using `buf` as scratch space (its
/// capacity is kept for the next frame).
///
/// Returns `Ok(None)` if the stream ends cleanly before a frame's first byte, and
/// [`FrameError::Io`] (`UnexpectedEof`) if it ends inside one. A length above
/// `max_frame` is refused with [`FrameError::TooLarge`] before any of the frame's
/// bytes are read; the stream is then out of step and should be closed.
///
/// Cancel safety: none (a frame may be partly consumed); use it from one task that
/// owns the reader.
pub async fn read_frame<R>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max_frame: usize,
) -> Result<Option<Wire>, FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let Some(len) = read_len(reader, max_frame).await? else {
        return Ok(None);
    };
    buf.clear();
    if len <= EAGER_READ || len <= buf.capacity() {
        buf.resize(len, 0);
        reader.read_exact(buf).await?;
    } else {
        let got = (&mut *reader).take(len as u64).read_to_end(buf).await?;
        if got != len {
            return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    decode(buf).map(Some)
}

/// [`read_frame`], with the frame's bytes counted in `held` (a share of the budget
/// all peer connections draw from) as they arrive: the buffer grows by at most
/// [`BUDGET_STEP`] at a time, each step reserved before the buffer grows, and a
/// step the budget cannot give fails with [`HeldReadError::OverBudget`] (the
/// connection must then be closed). `held` is back to zero when this returns, with a
/// frame or an error: what a connection keeps between frames is its buffer's
/// capacity, which the caller bounds.
pub(crate) async fn read_frame_held<R>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max_frame: usize,
    held: &mut crate::server::budget::Held,
) -> Result<Option<Wire>, HeldReadError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let result = read_frame_held_inner(reader, buf, max_frame, held).await;
    // Lowering never fails.
    let _ = held.set(0);
    result
}

async fn read_frame_held_inner<R>(
    reader: &mut R,
    buf: &mut Vec<u8>,
    max_frame: usize,
    held: &mut crate::server::budget::Held,
) -> Result<Option<Wire>, HeldReadError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let Some(len) = read_len(reader, max_frame).await? else {
        return Ok(None);
    };
    buf.clear();
    while buf.len() < len {
        let have = buf.len();
        let step = (len - have).min(BUDGET_STEP);
        let want = have + step;
        if !held.set(want) {
            return Err(HeldReadError::OverBudget {
                len,
                held: held.budget().used(),
                limit: held.budget().limit(),
            });
        }
        buf.resize(want, 0);
        reader.read_exact(&mut buf[have..]).await?;
    }
    Ok(Some(decode(buf)?))
}

/// Reads a frame's length prefix: `None` at a clean end of the stream, an error
/// inside the prefix or for a length above `max_frame`.
async fn read_len<R>(reader: &mut R, max_frame: usize) -> Result<Option<usize>, FrameError>
where
    R: AsyncRead + Unpin + ?Sized,
{
    let mut prefix = [0u8; LEN_PREFIX];
    let mut have = 0;
    while have < LEN_PREFIX {
        let n = reader.read(&mut prefix[have..]).await?;
        if n == 0 {
            if have == 0 {
                return Ok(None);
            }
            return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
        have += n;
    }
    let len = u32::from_le_bytes(prefix) as usize;
    if len > max_frame {
        return Err(FrameError::TooLarge {
            len,
            max: max_frame,
        });
    }
    Ok(Some(len))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::consensus::raft::MessageBody;

    fn msg() -> Wire {
        Wire::Msg(Message {
            from: 1,
            to: 2,
            term: 7,
            body: MessageBody::Heartbeat {
                commit: 3,
                ctx: Some(9),
                sent: 11,
            },
        })
    }

    #[test]
    fn encode_appends_and_decode_inverts() {
        let mut out = vec![0xaa];
        encode(
            &Wire::Hello {
                from: 1,
                to: 2,
                cluster: 9,
                reply_to: ([10, 0, 0, 1], 7001).into(),
            },
            &mut out,
        )
        .expect("encode");
        let first = out.len();
        encode(&msg(), &mut out).expect("encode");
        assert_eq!(out[0], 0xaa);
        let len = u32::from_le_bytes(out[1..5].try_into().expect("4 bytes")) as usize;
        assert_eq!(1 + LEN_PREFIX + len, first);
        assert_eq!(
            decode(&out[5..first]).expect("decode"),
            Wire::Hello {
                from: 1,
                to: 2,
                cluster: 9,
                reply_to: ([10, 0, 0, 1], 7001).into(),
            }
        );
        assert_eq!(decode(&out[first + LEN_PREFIX..]).expect("decode"), msg());
    }

    #[test]
    fn decode_refuses_trailing_bytes() {
        let mut out = Vec::new();
        encode(&msg(), &mut out).expect("encode");
        out.push(0);
        assert!(matches!(
            decode(&out[LEN_PREFIX..]),
            Err(FrameError::Malformed(_))
        ));
    }

    #[tokio::test]
    async fn a_budgeted_read_reserves_as_bytes_arrive_and_gives_back() {
        use crate::server::budget::{ByteBudget, Held};
        let big = Wire::Msg(Message {
            from: 1,
            to: 2,
            term: 7,
            body: crate::consensus::raft::MessageBody::Heartbeat {
                commit: 3,
                ctx: None,
                sent: 11,
            },
        });
        let mut bytes = Vec::new();
        encode(&big, &mut bytes).expect("encode");
        let len = bytes.len() - LEN_PREFIX;
        let mut buf = Vec::new();
        // Enough budget: the frame is read, and nothing stays held.
        let budget = ByteBudget::new(len);
        let mut held = Held::new(&budget);
        let mut r = &bytes[..];
        assert_eq!(
            read_frame_held(&mut r, &mut buf, len, &mut held)
                .await
                .expect("read"),
            Some(big)
        );
        assert_eq!(budget.used(), 0);
        // Another connection holds part of the budget: the frame does not fit,
        // and the refusal gives back what it had reserved.
        let mut other = Held::new(&budget);
        assert!(other.set(1));
        let mut r = &bytes[..];
        assert!(matches!(
            read_frame_held(&mut r, &mut buf, len, &mut held).await,
            Err(HeldReadError::OverBudget { held: 1, limit, .. }) if limit == len
        ));
        assert_eq!(budget.used(), 1);
        // A frame cut short gives its reservation back too.
        drop(other);
        let mut r = &bytes[..bytes.len() - 1];
        assert!(matches!(
            read_frame_held(&mut r, &mut buf, len, &mut held).await,
            Err(HeldReadError::Frame(FrameError::Io(_)))
        ));
        assert_eq!(budget.used(), 0);
        // A large frame is reserved step by step as it arrives: a peer that
        // announces 1 MiB and sends 300 KB holds at most two steps.
        let (mut tx, mut rx) = tokio::io::duplex(1 << 16);
        let budget = ByteBudget::new(8 << 20);
        let reader_budget = std::sync::Arc::clone(&budget);
        let reader = tokio::spawn(async move {
            let mut held = Held::new(&reader_budget);
            let mut buf = Vec::new();
            let _ = read_frame_held(&mut rx, &mut buf, 2 << 20, &mut held).await;
        });
        use tokio::io::AsyncWriteExt;
        tx.write_all(&(1u32 << 20).to_le_bytes())
            .await
            .expect("prefix");
        tx.write_all(&vec![0u8; 300_000]).await.expect("part");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let used = budget.used();
        assert!(
            (300_000..=2 * BUDGET_STEP).contains(&used),
            "{used} bytes reserved for 300000 received"
        );
        drop(tx);
        reader.await.expect("reader");
        assert_eq!(budget.used(), 0, "released when the stream ends");
    }

    #[tokio::test]
    async fn read_frame_limits_and_eof() {
        let mut bytes = Vec::new();
        encode(&msg(), &mut bytes).expect("encode");
        let len = bytes.len() - LEN_PREFIX;
        let mut buf = Vec::new();

        let mut r = &bytes[..];
        assert_eq!(
            read_frame(&mut r, &mut buf, len).await.expect("read"),
            Some(msg())
        );
        assert!(read_frame(&mut r, &mut buf, len)
            .await
            .expect("eof")
            .is_none());

        let mut r = &bytes[..];
        assert!(matches!(
            read_frame(&mut r, &mut buf, len - 1).await,
            Err(FrameError::TooLarge { max, .. }) if max == len - 1
        ));

        let mut r = &bytes[..bytes.len() - 1];
        assert!(matches!(
            read_frame(&mut r, &mut buf, len).await,
            Err(FrameError::Io(_))
        ));
        let mut r = &bytes[..2];
        assert!(matches!(
            read_frame(&mut r, &mut buf, len).await,
            Err(FrameError::Io(_))
        ));
    }
}
