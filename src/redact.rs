//! Secrets out of reports and transcripts. The target inherits conform's
//! environment, so a token in it can come back in what the target writes;
//! reports are attached to CI runs and certification bundles. Two kinds of
//! value are replaced wherever they appear:
//! - the values of environment variables whose names say they are secret
//!   (`*TOKEN*`, `*SECRET*`, `*KEY*`, `*PASSWORD*`, `*CREDENTIAL*`, `*AUTH*`),
//!   as `[redacted:NAME]`;
//! - text shaped like a well-known credential (`Bearer ...`, `sk-...`,
//!   `ghp_...`, `github_pat_...`, `AKIA...`, `xox?-...`), as `[redacted]`.

use crate::outcome::RunReport;

const SECRET_NAMES: &[&str] = &[
    "TOKEN",
    "SECRET",
    "KEY",
    "PASSWORD",
    "PASSWD",
    "CREDENTIAL",
    "AUTH",
];

/// Values shorter than this are not redacted: too likely to be ordinary text.
const MIN_SECRET_LEN: usize = 8;

/// Prefixes of credentials, and the least length of what follows them.
const TOKEN_PREFIXES: &[(&str, usize)] = &[
    ("Bearer ", 12),
    ("sk-", 16),
    ("ghp_", 20),
    ("github_pat_", 20),
    ("AKIA", 16),
    ("xoxb-", 10),
    ("xoxp-", 10),
];

#[derive(Debug, Clone, Default)]
pub struct Redactor {
    /// (value, variable name), longest value first.
    values: Vec<(String, String)>,
}

impl Redactor {
    /// Secrets from `vars` (name, value).
    pub fn new(vars: impl IntoIterator<Item = (String, String)>) -> Redactor {
        let mut values: Vec<(String, String)> = vars
            .into_iter()
            .filter(|(name, value)| {
                let upper = name.to_ascii_uppercase();
                SECRET_NAMES.iter().any(|s| upper.contains(s)) && value.len() >= MIN_SECRET_LEN
            })
            .map(|(name, value)| (value, name))
            .collect();
        values.sort_by(|a, b| b.0.len().cmp(&a.0.len()).then(a.1.cmp(&b.1)));
        Redactor { values }
    }

    /// Secrets from conform's own environment, which the target inherits.
    pub fn from_env() -> Redactor {
        Redactor::new(
            std::env::vars_os()
                .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?))),
        )
    }

    pub fn text(&self, s: &str) -> String {
        let mut out = s.to_owned();
        for (value, name) in &self.values {
            if out.contains(value.as_str()) {
                out = out.replace(value.as_str(), &format!("[redacted:{name}]"));
            }
        }
        redact_tokens(&out)
    }

    /// Redacts every message, transcript entry and note of a report.
    pub fn report(&self, report: &mut RunReport) {
        for c in &mut report.cases {
            c.message = self.text(&c.message);
            for e in &mut c.transcript {
                e.data = self.text(&e.data);
            }
        }
        for n in &mut report.notes {
            *n = self.text(n);
        }
        report.target = self.text(&report.target);
    }
}

fn token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/' | '+' | '=')
}

/// Replaces text shaped like a well-known credential.
fn redact_tokens(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    'scan: while !rest.is_empty() {
        for (prefix, min) in TOKEN_PREFIXES {
            if let Some(after) = rest.strip_prefix(prefix) {
                let len = after.find(|c: char| !token_char(c)).unwrap_or(after.len());
                if len >= *min {
                    out.push_str(prefix);
                    out.push_str("[redacted]");
                    rest = &after[len..];
                    continue 'scan;
                }
            }
        }
        let mut chars = rest.chars();
        if let Some(c) = chars.next() {
            out.push(c);
        }
        rest = chars.as_str();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_environment_values_and_token_shapes_are_replaced() {
        let r = Redactor::new([
            ("MY_API_KEY".into(), "s3cr3t-v4lue-1234".into()),
            ("GH_TOKEN".into(), "short".into()),
            ("HOME".into(), "/root/not-a-secret".into()),
        ]);
        assert_eq!(
            r.text("key=s3cr3t-v4lue-1234; home=/root/not-a-secret; short"),
            "key=[redacted:MY_API_KEY]; home=/root/not-a-secret; short"
        );
        assert_eq!(
            r.text("Authorization: Bearer abcdefghijklmnop and sk-0123456789abcdefXYZ, done"),
            "Authorization: Bearer [redacted] and sk-[redacted], done"
        );
        assert_eq!(r.text("sk-short and Bearer x"), "sk-short and Bearer x");
        assert_eq!(r.text("é sk-0123456789abcdefgh"), "é sk-[redacted]");
    }
}
