//! Reads Prometheus text back, checking it: test-only (the crate's unit tests, and
//! `tests/metrics.rs`, which includes this file), so no parser is public API.

/// A sample read back by [`parse`].
#[derive(Clone, Debug, PartialEq)]
pub struct Sample {
    /// The sample's name (with `_sum` or `_count` for a summary's).
    pub name: String,
    /// Its family (declared by a `TYPE` line before it).
    pub family: String,
    /// Its labels, in order.
    pub labels: Vec<(String, String)>,
    /// Its value.
    pub value: f64,
}

impl Sample {
    /// The value of label `name`.
    pub fn label(&self, name: &str) -> Option<&str> {
        self.labels
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// Why [`parse`] refused a text.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("line {line}: {reason}: {text}")]
pub struct ExpositionError {
    /// The line (from 1).
    pub line: usize,
    /// What is wrong.
    pub reason: &'static str,
    /// The line's text.
    pub text: String,
}

/// Whether `name` is a valid metric name (`[a-zA-Z_:][a-zA-Z0-9_:]*`).
pub fn valid_metric_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
}

/// Whether `name` is a valid label name (`[a-zA-Z_][a-zA-Z0-9_]*`, not `__*`).
pub fn valid_label_name(name: &str) -> bool {
    let mut chars = name.chars();
    !name.starts_with("__")
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Reads a Prometheus text-format document back, checking what this crate relies
/// on: every sample belongs to the family of the latest `TYPE` line (its name, or
/// `_sum`/`_count` of a summary, whose other samples carry `quantile`), each
/// family is declared once, names and labels are valid, values parse as `f64`.
pub fn parse(text: &str) -> Result<Vec<Sample>, ExpositionError> {
    let mut samples = Vec::new();
    let mut declared: Vec<String> = Vec::new();
    let mut current: Option<(String, String)> = None;
    for (i, line) in text.lines().enumerate() {
        let err = |reason| ExpositionError {
            line: i + 1,
            reason,
            text: line.to_string(),
        };
        if line.trim().is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.trim_start().splitn(3, ' ');
            match words.next() {
                Some("HELP") => {
                    let name = words.next().ok_or_else(|| err("HELP without a name"))?;
                    if !valid_metric_name(name) {
                        return Err(err("invalid metric name"));
                    }
                }
                Some("TYPE") => {
                    let name = words.next().ok_or_else(|| err("TYPE without a name"))?;
                    let kind = words.next().ok_or_else(|| err("TYPE without a type"))?;
                    if !valid_metric_name(name) {
                        return Err(err("invalid metric name"));
                    }
                    if !["counter", "gauge", "summary", "histogram", "untyped"].contains(&kind) {
                        return Err(err("unknown metric type"));
                    }
                    if declared.iter().any(|d| d == name) {
                        return Err(err("family declared twice"));
                    }
                    declared.push(name.to_string());
                    current = Some((name.to_string(), kind.to_string()));
                }
                _ => {}
            }
            continue;
        }
        let (name, rest) = match line.find(['{', ' ']) {
            Some(at) => line.split_at(at),
            None => return Err(err("a sample without a value")),
        };
        if !valid_metric_name(name) {
            return Err(err("invalid metric name"));
        }
        let (labels, rest) = if let Some(body) = rest.strip_prefix('{') {
            parse_labels(body).ok_or_else(|| err("malformed labels"))?
        } else {
            (Vec::new(), rest)
        };
        if labels.iter().any(|(k, _)| !valid_label_name(k)) {
            return Err(err("invalid label name"));
        }
        let mut fields = rest.split_whitespace();
        let value = fields
            .next()
            .ok_or_else(|| err("a sample without a value"))?;
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse::<f64>().map_err(|_| err("value is not a float"))?,
        };
        if let Some(ts) = fields.next() {
            ts.parse::<i64>()
                .map_err(|_| err("timestamp is not an integer"))?;
        }
        if fields.next().is_some() {
            return Err(err("trailing text after the value"));
        }
        let Some((family, kind)) = &current else {
            return Err(err("a sample before any TYPE line"));
        };
        let belongs = if name == family {
            kind != "summary" || labels.iter().any(|(k, _)| k == "quantile")
        } else {
            kind == "summary"
                && name
                    .strip_prefix(family.as_str())
                    .is_some_and(|s| s == "_sum" || s == "_count")
        };
        if !belongs {
            return Err(err("sample outside its family (no TYPE line before it)"));
        }
        samples.push(Sample {
            name: name.to_string(),
            family: family.clone(),
            labels,
            value,
        });
    }
    Ok(samples)
}

/// The labels after `{`: the pairs and the text after `}`.
fn parse_labels(mut s: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start();
        if let Some(rest) = s.strip_prefix('}') {
            return Some((labels, rest));
        }
        let (key, rest) = s.split_once('=')?;
        let body = rest.trim_start().strip_prefix('"')?;
        let mut value = String::new();
        let mut chars = body.char_indices();
        let end = loop {
            let (at, c) = chars.next()?;
            match c {
                '"' => break at,
                '\\' => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c @ ('\\' | '"') => value.push(c),
                    _ => return None,
                },
                c => value.push(c),
            }
        };
        labels.push((key.trim().to_string(), value));
        s = body[end + 1..].trim_start();
        if let Some(rest) = s.strip_prefix(',') {
            s = rest;
        } else if !s.starts_with('}') {
            return None;
        }
    }
}
