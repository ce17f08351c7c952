//! Human-readable sizes, times and file names for the text output.

use std::path::Path;

/// `path` as it can be printed on one line of a terminal: as it is when it is
/// UTF-8 without control characters, else quoted and escaped like Rust's `{:?}`
/// (`"a\nb"`, `"\u{1b}[31m"`), so a name holding a newline cannot break the
/// one-line error and a name holding escape bytes cannot drive the terminal.
pub fn path(path: &Path) -> String {
    match path.to_str() {
        Some(s) if !s.chars().any(char::is_control) => s.to_owned(),
        _ => format!("{path:?}"),
    }
}

/// `text` with every control character escaped (`\n`, `\u{1b}`): a reason that
/// quotes a file name or a byte string prints on one line and harmlessly.
pub fn one_line(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if c.is_control() {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// `n` readably in binary units: exact in the largest unit that divides it while
/// staying under 10000 (`1 MiB`, `1536 MiB`), else truncated to one decimal in the
/// largest unit (`1.4 GiB`), so a size is never rounded up.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let scale = |unit: usize| 1u64 << (10 * unit);
    if n == 0 {
        return "0 B".to_owned();
    }
    if let Some(unit) = (0..UNITS.len())
        .rev()
        .find(|&u| n.is_multiple_of(scale(u)) && n / scale(u) < 10_000)
    {
        return format!("{} {}", n / scale(unit), UNITS[unit]);
    }
    let unit = (0..UNITS.len()).rev().find(|&u| n >= scale(u)).unwrap_or(0);
    let tenths = u128::from(n) * 10 / u128::from(scale(unit));
    format!("{}.{} {}", tenths / 10, tenths % 10, UNITS[unit])
}

/// `n` bytes exactly, then readably: `1048576 bytes (1 MiB)`.
pub fn bytes_exact(n: u64) -> String {
    if n < 1024 {
        format!("{n} bytes")
    } else {
        format!("{n} bytes ({})", bytes(n))
    }
}

/// Seconds since the Unix epoch as an RFC 3339 UTC time: `2024-02-29T13:05:00Z`.
pub fn utc(unix_s: u64) -> String {
    let days = unix_s / 86_400;
    let secs = unix_s % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + u64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_print_on_one_harmless_line() {
        assert_eq!(path(Path::new("/tmp/a.pool")), "/tmp/a.pool");
        assert_eq!(path(Path::new("a\nb")), "\"a\\nb\"");
        assert_eq!(path(Path::new("\u{1b}[31mred")), "\"\\u{1b}[31mred\"");
        let not_utf8 = <std::ffi::OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(b"x\xff");
        assert!(!path(Path::new(not_utf8)).contains('\u{fffd}'));
        assert_eq!(one_line("bad\r\nname \u{7}"), "bad\\r\\nname \\u{7}");
    }

    #[test]
    fn sizes() {
        assert_eq!(bytes(100), "100 B");
        assert_eq!(bytes(8192), "8 KiB");
        assert_eq!(bytes(1 << 20), "1 MiB");
        assert_eq!(bytes(3 << 29), "1536 MiB");
        assert_eq!(bytes((3 << 29) + 1), "1.5 GiB");
        assert_eq!(bytes(67_104_768), "63.9 MiB");
        assert_eq!(bytes(9999 << 10), "9999 KiB");
        assert_eq!(bytes(67_104_769), "63.9 MiB");
        assert_eq!(bytes(u64::MAX), "16383.9 PiB");
        assert_eq!(bytes(0), "0 B");
        assert_eq!(bytes_exact(4096), "4096 bytes (4 KiB)");
        assert_eq!(bytes_exact(0), "0 bytes");
    }

    #[test]
    fn times() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_709_211_900), "2024-02-29T13:05:00Z");
        assert_eq!(utc(4_102_444_799), "2099-12-31T23:59:59Z");
        // Garbage from a header must not overflow.
        assert!(utc(u64::MAX).ends_with('Z'));
    }
}
