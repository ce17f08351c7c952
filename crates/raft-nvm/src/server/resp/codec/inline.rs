//! Inline commands (`SET k "a b"`): one line split into arguments with Redis's
//! quoting rules (`sdssplitargs`).

use super::{Args, RespError, MAX_ARGS};

/// Splits an inline line into arguments the way Redis's `sdssplitargs` does.
pub(super) fn split_args(line: &[u8]) -> Result<Args, RespError> {
    let mut args = Args::new();
    let mut i = 0;
    loop {
        while line.get(i).is_some_and(|b| b.is_ascii_whitespace()) {
            i += 1;
        }
        if i == line.len() {
            return Ok(args);
        }
        if args.len() == MAX_ARGS {
            return Err(RespError::TooManyArgs {
                count: MAX_ARGS as u64 + 1,
            });
        }
        let mut arg = Vec::new();
        match line[i] {
            b'"' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(RespError::UnbalancedQuotes),
                        Some(b'\\') if line.get(i + 1) == Some(&b'x') => {
                            match (hex(line.get(i + 2)), hex(line.get(i + 3))) {
                                (Some(hi), Some(lo)) => {
                                    arg.push(hi << 4 | lo);
                                    i += 4;
                                }
                                _ => {
                                    arg.push(b'x');
                                    i += 2;
                                }
                            }
                        }
                        Some(b'\\') => {
                            let Some(&c) = line.get(i + 1) else {
                                return Err(RespError::UnbalancedQuotes);
                            };
                            arg.push(match c {
                                b'n' => b'\n',
                                b'r' => b'\r',
                                b't' => b'\t',
                                b'b' => 0x08,
                                b'a' => 0x07,
                                other => other,
                            });
                            i += 2;
                        }
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(&c) => {
                            arg.push(c);
                            i += 1;
                        }
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(RespError::UnbalancedQuotes);
                }
            }
            b'\'' => {
                i += 1;
                loop {
                    match line.get(i) {
                        None => return Err(RespError::UnbalancedQuotes),
                        Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                            arg.push(b'\'');
                            i += 2;
                        }
                        Some(b'\'') => {
                            i += 1;
                            break;
                        }
                        Some(&c) => {
                            arg.push(c);
                            i += 1;
                        }
                    }
                }
                if line.get(i).is_some_and(|b| !b.is_ascii_whitespace()) {
                    return Err(RespError::UnbalancedQuotes);
                }
            }
            _ => {
                let end = line[i..]
                    .iter()
                    .position(|b| b.is_ascii_whitespace())
                    .map_or(line.len(), |n| i + n);
                arg.extend_from_slice(&line[i..end]);
                i = end;
            }
        }
        args.push(arg);
    }
}

/// The value of a hexadecimal digit.
fn hex(digit: Option<&u8>) -> Option<u8> {
    char::from(*digit?).to_digit(16).map(|d| d as u8)
}
