//! Parsing the `SIZE` argument of `pmkit pool create`.
//!
//! A size is a decimal number of bytes, optionally followed by a binary multiple:
//! `K`, `M`, `G`, `T` or `KiB`, `MiB`, `GiB`, `TiB` (case-insensitive, optionally after
//! a space), so `64M`, `64mib` and `67108864` are the same size. Pools are made of
//! 4 KiB pages, so the size must be a positive multiple of 4096.

/// The granularity of pool sizes.
const PAGE: u64 = 4096;

/// Parses `text` as a pool size in bytes, or says in one line why it is not one.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let invalid = |why: &str| format!("invalid size {text:?}: {why}");
    let trimmed = text.trim();
    let digits_end = trimmed
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(trimmed.len());
    let (digits, suffix) = trimmed.split_at(digits_end);
    if digits.is_empty() {
        return Err(invalid("expected a number of bytes, like 64M or 1048576"));
    }
    let shift = match suffix.trim_start().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kib" => 10,
        "m" | "mib" => 20,
        "g" | "gib" => 30,
        "t" | "tib" => 40,
        _ => {
            return Err(invalid(
                "unknown unit (use K, M, G, T or KiB, MiB, GiB, TiB; binary multiples)",
            ))
        }
    };
    let too_large = || invalid("too large");
    let number: u64 = digits.parse().map_err(|_| too_large())?;
    let bytes = number.checked_mul(1u64 << shift).ok_or_else(too_large)?;
    if bytes == 0 {
        return Err(invalid("must be more than zero"));
    }
    if !bytes.is_multiple_of(PAGE) {
        return Err(invalid("must be a multiple of 4096 bytes (4K)"));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn accepts_bytes_and_binary_multiples() {
        assert_eq!(parse_size("8192"), Ok(8192));
        assert_eq!(parse_size("8K"), Ok(8192));
        assert_eq!(parse_size("8k"), Ok(8192));
        assert_eq!(parse_size("8KiB"), Ok(8192));
        assert_eq!(parse_size("8kib"), Ok(8192));
        assert_eq!(parse_size("64M"), Ok(64 << 20));
        assert_eq!(parse_size("64 MiB"), Ok(64 << 20));
        assert_eq!(parse_size("2G"), Ok(2 << 30));
        assert_eq!(parse_size("1gib"), Ok(1 << 30));
        assert_eq!(parse_size("1T"), Ok(1 << 40));
        assert_eq!(parse_size(" 4096 "), Ok(4096));
        assert_eq!(parse_size("4096b"), Ok(4096));
    }

    #[test]
    fn rejects_bad_sizes_with_a_reason() {
        for (text, why) in [
            ("", "expected a number"),
            ("M", "expected a number"),
            ("-4096", "expected a number"),
            ("1.5M", "unknown unit"),
            ("10X", "unknown unit"),
            ("10MB", "unknown unit"),
            ("0", "more than zero"),
            ("0K", "more than zero"),
            ("4097", "multiple of 4096"),
            ("1K", "multiple of 4096"),
            ("99999999999999999999999", "too large"),
            ("16777216T", "too large"),
        ] {
            let err = parse_size(text).expect_err(text);
            assert!(err.contains(why), "{text:?}: {err}");
            assert!(!err.contains('\n'), "{text:?}: {err}");
        }
    }
}
