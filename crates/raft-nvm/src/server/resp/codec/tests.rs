//! The decoder against whole, split and random input, and the encoder.

use super::*;
use crate::consensus::raft::rng::Rng;

/// Every complete request in `input`, decoded with all of it at once.
fn decode_all(input: &[u8]) -> Result<Vec<Args>, RespError> {
    decode_chunked_lenient(input, input.len())
}

/// Every request in `input`, fed to the decoder in the given chunk sizes the way
/// a server does (unconsumed bytes stay in its buffer).
fn decode_chunked(input: &[u8], cuts: &[usize]) -> Result<Vec<Args>, RespError> {
    let mut dec = Decoder::new();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    let mut fed = 0;
    let mut bounds = cuts.to_vec();
    bounds.push(input.len());
    for &cut in &bounds {
        buf.extend_from_slice(&input[fed..cut]);
        fed = cut;
        loop {
            let (used, req) = dec.decode(&buf)?;
            buf.drain(..used);
            match req {
                Some(args) => out.push(args),
                None => break,
            }
        }
    }
    assert!(buf.is_empty() && !dec.is_mid_request());
    Ok(out)
}

fn args(items: &[&str]) -> Args {
    items.iter().map(|s| s.as_bytes().to_vec()).collect()
}

fn array(items: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    write_array_header(&mut out, items.len());
    for item in items {
        write_bulk(&mut out, item);
    }
    out
}

const PIPELINE: &[u8] = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nva\r\nl\r\n\
    *2\r\n$3\r\nGET\r\n$3\r\nkey\r\n\
    PING\r\n\
    *0\r\n\
    \r\n\
    *1\r\n$0\r\n\r\n\
    set  k \"it''s\"\n\
    *1\r\n$4\r\nPING\r\n";

fn pipeline_expected() -> Vec<Args> {
    vec![
        vec![b"SET".to_vec(), b"key".to_vec(), b"va\r\nl".to_vec()],
        args(&["GET", "key"]),
        args(&["PING"]),
        vec![Vec::new()],
        vec![b"set".to_vec(), b"k".to_vec(), b"it''s".to_vec()],
        args(&["PING"]),
    ]
}

#[test]
fn pipeline_whole() {
    assert_eq!(decode_all(PIPELINE).expect("valid"), pipeline_expected());
    // 'it''s' is two single-quoted strings run together: unbalanced for Redis.
    assert_eq!(
        decode_all(b"set k 'it''s'\n"),
        Err(RespError::UnbalancedQuotes)
    );
}

#[test]
fn pipeline_split_at_every_boundary() {
    let input = PIPELINE;
    let expected = pipeline_expected();
    for cut in 0..=input.len() {
        assert_eq!(
            decode_chunked(input, &[cut]).expect("valid"),
            expected,
            "cut at {cut}"
        );
    }
    for a in 0..=input.len() {
        for b in a..=input.len() {
            assert_eq!(
                decode_chunked(input, &[a, b]).expect("valid"),
                expected,
                "cuts at {a}, {b}"
            );
        }
    }
    // One byte at a time.
    let cuts: Vec<usize> = (1..input.len()).collect();
    assert_eq!(decode_chunked(input, &cuts).expect("valid"), expected);
}

#[test]
fn inline_commands() {
    assert_eq!(decode_all(b"PING\r\n").expect("ok"), vec![args(&["PING"])]);
    assert_eq!(decode_all(b"PING\n").expect("ok"), vec![args(&["PING"])]);
    assert_eq!(
        decode_all(b"  set\tk   v  \r\n\r\n\n").expect("ok"),
        vec![args(&["set", "k", "v"])]
    );
    assert_eq!(
        decode_all(b"SET k \"a b\\r\\n\\x41\\\"\\\\\\t\\xzz\"\r\n").expect("ok"),
        vec![vec![
            b"SET".to_vec(),
            b"k".to_vec(),
            b"a b\r\nA\"\\\txzz".to_vec()
        ]]
    );
    assert_eq!(
        decode_all(b"SET k 'it\\'s \"x\"' \"\"\r\n").expect("ok"),
        vec![args(&["SET", "k", "it's \"x\"", ""])]
    );
    assert_eq!(decode_all(b"PING").expect("incomplete"), Vec::<Args>::new());
    for bad in [
        &b"SET k \"abc\r\n"[..],
        b"SET k 'abc\r\n",
        b"SET k \"a\"b\r\n",
        b"SET k 'a'b\r\n",
        b"SET k \"a\\\r\n",
    ] {
        assert_eq!(decode_all(bad), Err(RespError::UnbalancedQuotes), "{bad:?}");
    }
}

#[test]
fn inline_limits() {
    let mut line = vec![b'a'; MAX_INLINE_LEN];
    line.extend_from_slice(b"\r\n");
    assert_eq!(decode_all(&line).expect("at the limit").len(), 1);
    let mut lf = vec![b'a'; MAX_INLINE_LEN];
    lf.push(b'\n');
    assert_eq!(decode_all(&lf).expect("at the limit, bare LF").len(), 1);
    let mut long = vec![b'a'; MAX_INLINE_LEN + 1];
    long.extend_from_slice(b"\r\n");
    assert_eq!(decode_all(&long), Err(RespError::InlineTooLong));
    // Without a line end: an error as soon as the line cannot fit.
    assert_eq!(
        decode_all(&vec![b'a'; MAX_INLINE_LEN + 1]).expect("may still end"),
        Vec::<Args>::new()
    );
    assert_eq!(
        decode_all(&vec![b'a'; MAX_INLINE_LEN + 2]),
        Err(RespError::InlineTooLong)
    );
    // Fed in pieces (the scanned prefix is remembered).
    let cuts: Vec<usize> = (1..line.len()).step_by(4093).collect();
    assert_eq!(decode_chunked(&line, &cuts).expect("ok").len(), 1);
    assert_eq!(decode_chunked(&long, &cuts), Err(RespError::InlineTooLong));
    // Argument count.
    let mut many = b"x".repeat(MAX_ARGS * 2 - 1);
    for i in (1..many.len()).step_by(2) {
        many[i] = b' ';
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(decode_all(&many).expect("at the limit")[0].len(), MAX_ARGS);
    let mut too_many = many.clone();
    too_many.splice(0..0, b"x ".iter().copied());
    assert!(matches!(
        decode_all(&too_many),
        Err(RespError::TooManyArgs { .. })
    ));
}

#[test]
fn array_limits() {
    let items: Vec<&[u8]> = vec![b"x"; MAX_ARGS];
    assert_eq!(
        decode_all(&array(&items)).expect("at the limit")[0].len(),
        MAX_ARGS
    );
    assert_eq!(
        decode_all(b"*1025\r\n"),
        Err(RespError::TooManyArgs { count: 1025 })
    );
    assert_eq!(
        decode_all(b"*9223372036854775807\r\n"),
        Err(RespError::TooManyArgs {
            count: i64::MAX as u64
        })
    );
    assert_eq!(
        decode_all(b"*99999999999999999999\r\n"),
        Err(RespError::InvalidMultibulkLength)
    );
    let big = vec![b'v'; MAX_BULK_LEN];
    let got = decode_all(&array(&[b"SET", b"k", &big])).expect("at the limit");
    assert_eq!(got[0][2].len(), MAX_BULK_LEN);
    assert_eq!(
        decode_all(format!("*1\r\n${}\r\n", MAX_BULK_LEN + 1).as_bytes()),
        Err(RespError::BulkTooLong {
            len: MAX_BULK_LEN as u64 + 1
        })
    );
    // A header without its line end is refused once it cannot be a number.
    assert_eq!(
        decode_all(b"*123456789").expect("incomplete"),
        Vec::<Args>::new()
    );
    assert_eq!(
        decode_all(&[b'*'; MAX_HEADER_LEN + 1]),
        Err(RespError::HeaderTooLong)
    );
    assert_eq!(
        decode_all(format!("*1\r\n${}", "1".repeat(40)).as_bytes()),
        Err(RespError::HeaderTooLong)
    );
}

#[test]
fn a_request_is_capped_as_a_whole_before_its_bulks_arrive() {
    // "*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$10\r\n0123456789\r\n" is 4 + 9 + 7 + 17 = 37 bytes.
    let req = array(&[b"SET", b"k", b"0123456789"]);
    assert_eq!(req.len(), 37);
    let mut exact = Decoder::with_max_request(37);
    assert_eq!(exact.decode(&req).expect("at the limit").0, 37);
    // One byte less: refused at the last header, before its payload is there.
    let mut dec = Decoder::with_max_request(36);
    assert_eq!(
        dec.decode(&req[..25]),
        Err(RespError::RequestTooLarge { len: 37, max: 36 })
    );
    // Every bulk counts, not only the largest: two bulks under the limit each
    // but over it together.
    let mut dec = Decoder::with_max_request(100);
    let cas = array(&[b"CAS", b"k", &[b'a'; 40], &[b'b'; 40]]);
    let head = 4 + 9 + 7 + 4;
    let err = dec.decode(&cas).expect_err("over the limit");
    assert!(
        matches!(err, RespError::RequestTooLarge { len, max: 100 } if len > 100),
        "{err:?}"
    );
    // The limit is per request: many requests of the limit's size pass.
    let mut dec = Decoder::with_max_request(37);
    let many = req.repeat(10);
    let mut pos = 0;
    for _ in 0..10 {
        let (used, got) = dec.decode(&many[pos..]).expect("each fits");
        assert!(got.is_some());
        pos += used;
    }
    // The decoder reports the bytes of the arguments it took.
    let mut dec = Decoder::new();
    let (used, got) = dec.decode(&cas[..head + 44]).expect("partial");
    assert_eq!(got, None);
    assert_eq!(dec.held_bytes(), 3 + 1 + 40);
    assert!(used <= head + 44);
    let (_, got) = dec.decode(&cas[used..]).expect("rest");
    assert!(got.is_some());
    assert_eq!(dec.held_bytes(), 0);
    // Inline lines are capped too, complete or not.
    let mut dec = Decoder::with_max_request(8);
    assert!(matches!(
        dec.decode(b"PING 12345678\r\n"),
        Err(RespError::RequestTooLarge { max: 8, .. })
    ));
    let mut dec = Decoder::with_max_request(8);
    assert!(matches!(
        dec.decode(b"PING 1234"),
        Err(RespError::RequestTooLarge { max: 8, .. })
    ));
    assert!(Decoder::with_max_request(8).decode(b"PING\r\n").is_ok());
    // The default fits a SET of the largest bulk (see array_limits), and a
    // request of many large bulks is refused at its second one's header.
    let mut dec = Decoder::new();
    let huge = format!("*4\r\n$3\r\nCAS\r\n$1\r\nk\r\n${MAX_BULK_LEN}\r\n");
    let (used, _) = dec
        .decode(huge.as_bytes())
        .expect("first large bulk announced");
    assert_eq!(used, huge.len());
    let mut dec2 = Decoder::new();
    let two = format!("{huge}{}\r\n${MAX_BULK_LEN}\r\n", "v".repeat(MAX_BULK_LEN));
    assert!(matches!(
        dec2.decode(two.as_bytes()),
        Err(RespError::RequestTooLarge {
            max: DEFAULT_MAX_REQUEST,
            ..
        })
    ));
}

#[test]
fn malformed_arrays() {
    let cases: &[(&[u8], RespError)] = &[
        (b"*x\r\n", RespError::InvalidMultibulkLength),
        (b"*\r\n", RespError::InvalidMultibulkLength),
        (b"*-\r\n", RespError::InvalidMultibulkLength),
        (b"*+1\r\n", RespError::InvalidMultibulkLength),
        (b"*1 \r\n", RespError::InvalidMultibulkLength),
        (b"*1\rx", RespError::ExpectedCrlf),
        (b"*1\r\n+OK\r\n", RespError::ExpectedBulk(b'+')),
        (b"*2\r\n$1\r\na\r\n:1\r\n", RespError::ExpectedBulk(b':')),
        (b"*1\r\n$x\r\n", RespError::InvalidBulkLength),
        (b"*1\r\n$-1\r\n", RespError::InvalidBulkLength),
        (b"*1\r\n$\r\n", RespError::InvalidBulkLength),
        (b"*1\r\n$1\r\nab\r\n", RespError::ExpectedCrlf),
        (b"*1\r\n$1\r\na\n\r", RespError::ExpectedCrlf),
    ];
    for (input, err) in cases {
        assert_eq!(decode_all(input).as_ref(), Err(err), "{input:?}");
        // The same error however the input is split.
        for cut in 0..input.len() {
            assert_eq!(
                decode_chunked(input, &[cut]).as_ref(),
                Err(err),
                "{input:?} / {cut}"
            );
        }
    }
    assert_eq!(
        RespError::ExpectedBulk(b'\n').to_string(),
        "expected '$', got '\\n'"
    );
    // Empty and nil arrays are skipped, as Redis does.
    assert_eq!(
        decode_all(b"*0\r\n*-1\r\n*-5\r\n").expect("ok"),
        Vec::<Args>::new()
    );
}

#[test]
fn random_bytes_never_panic() {
    const ALPHABET: &[u8] = b"*$:+-0123456789\r\n \"'\\xaZ";
    let mut rng = Rng::new(0x5eed_cafe_f00d_0001);
    for round in 0..20_000 {
        let len = rng.index(64);
        let input: Vec<u8> = (0..len)
            .map(|_| {
                if round % 2 == 0 {
                    ALPHABET[rng.index(ALPHABET.len())]
                } else {
                    rng.next_u64() as u8
                }
            })
            .collect();
        let whole = decode_all(&input);
        let cut = rng.index(len + 1);
        let split = decode_chunked_lenient(&input, cut);
        // Splitting never changes the outcome.
        assert_eq!(whole.is_ok(), split.is_ok(), "{input:?} / {cut}");
        if let (Ok(a), Ok(b)) = (&whole, &split) {
            assert_eq!(a, b, "{input:?} / {cut}");
        }
    }
}

/// Like [`decode_chunked`] with one cut, without requiring the input to end at a
/// request boundary.
fn decode_chunked_lenient(input: &[u8], cut: usize) -> Result<Vec<Args>, RespError> {
    let mut dec = Decoder::new();
    let mut buf = Vec::new();
    let mut out = Vec::new();
    for part in [&input[..cut], &input[cut..]] {
        buf.extend_from_slice(part);
        loop {
            let (used, req) = dec.decode(&buf)?;
            buf.drain(..used);
            match req {
                Some(args) => out.push(args),
                None => break,
            }
        }
    }
    Ok(out)
}

#[test]
fn random_requests_round_trip() {
    let mut rng = Rng::new(42);
    for _ in 0..500 {
        let mut input = Vec::new();
        let mut expected = Vec::new();
        for _ in 0..rng.index(8) + 1 {
            let n = rng.index(5) + 1;
            let req: Args = (0..n)
                .map(|_| (0..rng.index(12)).map(|_| rng.next_u64() as u8).collect())
                .collect();
            let refs: Vec<&[u8]> = req.iter().map(Vec::as_slice).collect();
            input.extend_from_slice(&array(&refs));
            expected.push(req);
        }
        let cut = rng.index(input.len() + 1);
        assert_eq!(decode_all(&input).expect("valid"), expected);
        assert_eq!(decode_chunked(&input, &[cut]).expect("valid"), expected);
    }
}

#[test]
fn encoder() {
    let mut out = Vec::new();
    write_simple(&mut out, b"OK");
    write_error(&mut out, b"ERR bad\r\nthing");
    write_integer(&mut out, 0);
    write_integer(&mut out, -42);
    write_integer(&mut out, i64::MIN);
    write_bulk(&mut out, b"a\r\nb");
    write_bulk(&mut out, b"");
    write_nil(&mut out);
    write_array_header(&mut out, 0);
    assert_eq!(
        out,
        b"+OK\r\n-ERR bad  thing\r\n:0\r\n:-42\r\n:-9223372036854775808\r\n\
          $4\r\na\r\nb\r\n$0\r\n\r\n$-1\r\n*0\r\n"
    );
    let reply = Reply::Array(vec![
        Reply::Simple("PONG".into()),
        Reply::Integer(7),
        Reply::Nil,
        Reply::Bulk(b"x".to_vec()),
        Reply::Error("MOVED 0 127.0.0.1:7000".into()),
        Reply::Array(vec![]),
    ]);
    assert_eq!(
        reply.to_bytes(),
        b"*6\r\n+PONG\r\n:7\r\n$-1\r\n$1\r\nx\r\n-MOVED 0 127.0.0.1:7000\r\n*0\r\n"
    );
}
