//! A writer of the Prometheus text exposition format (version 0.0.4): one
//! `# HELP` and `# TYPE` line per family, then its samples.

use std::fmt::Write as _;

/// The type of a metric family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetricType {
    /// A value that only grows (names end in `_total`).
    Counter,
    /// A value that goes up and down.
    Gauge,
    /// Quantiles with `_sum` and `_count` samples.
    Summary,
}

impl MetricType {
    fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
            MetricType::Summary => "summary",
        }
    }
}

/// A Prometheus text-format (0.0.4) document being written: call
/// [`Exposition::family`] before a family's samples, and keep them together.
#[derive(Debug, Default)]
pub struct Exposition {
    text: String,
}

impl Exposition {
    /// An empty document.
    pub fn new() -> Exposition {
        Exposition::default()
    }

    /// Starts the family `name` (a valid metric name) with its `HELP` and `TYPE` lines.
    pub fn family(&mut self, name: &str, kind: MetricType, help: &str) {
        let help = help.replace('\\', "\\\\").replace('\n', "\\n");
        let _ = write!(
            self.text,
            "# HELP {name} {help}\n# TYPE {name} {}\n",
            kind.as_str()
        );
    }

    /// A sample of the current family (`name` is the family's, or its `_sum` or
    /// `_count` for a summary); label values are escaped.
    pub fn sample(&mut self, name: &str, labels: &[(&str, &str)], value: f64) {
        self.text.push_str(name);
        if !labels.is_empty() {
            self.text.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.text.push(',');
                }
                self.text.push_str(k);
                self.text.push_str("=\"");
                for ch in v.chars() {
                    match ch {
                        '\\' => self.text.push_str("\\\\"),
                        '"' => self.text.push_str("\\\""),
                        '\n' => self.text.push_str("\\n"),
                        c => self.text.push(c),
                    }
                }
                self.text.push('"');
            }
            self.text.push('}');
        }
        self.text.push(' ');
        if value.is_nan() {
            self.text.push_str("NaN");
        } else if value.is_infinite() {
            self.text
                .push_str(if value > 0.0 { "+Inf" } else { "-Inf" });
        } else {
            let _ = write!(self.text, "{value}");
        }
        self.text.push('\n');
    }

    /// A family with one unlabelled sample.
    pub fn single(&mut self, name: &str, kind: MetricType, help: &str, value: f64) {
        self.family(name, kind, help);
        self.sample(name, &[], value);
    }

    /// The text.
    pub fn finish(self) -> String {
        self.text
    }
}
