//! The case model shared by every protocol: an addressable record with a
//! stable id, a level, the requirements it checks, and protocol-specific
//! steps. Cases are data: they live in `corpus/<protocol>/cases/*.json`,
//! embedded in the binary, and `--case` adds or overrides them from files.

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// How binding a requirement is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Level {
    #[serde(rename = "MUST")]
    Must,
    #[serde(rename = "SHOULD")]
    Should,
    #[serde(rename = "MAY")]
    May,
    /// Seen and worth knowing; never a failure.
    #[serde(rename = "INFO")]
    Info,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Must => "MUST",
            Level::Should => "SHOULD",
            Level::May => "MAY",
            Level::Info => "INFO",
        }
    }
}

/// When a case runs. Disruptive cases (malformed input, early closes) run
/// one at a time after the others, so a target they break takes down no
/// unrelated case.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    #[default]
    Main,
    Disruptive,
}

/// A suite's case language: the types its steps, needs and config
/// deserialize into, where its cases live, and what else it checks at load.
/// Every field is typed, so an unknown step, need or config key is a bad
/// case file (exit 2), never a case that silently does not apply.
pub trait Dialect: Sized + std::fmt::Debug + Clone + Send + Sync + 'static {
    type Step: DeserializeOwned + std::fmt::Debug + Clone + Send + Sync + 'static;
    type Need: DeserializeOwned
        + std::fmt::Debug
        + std::fmt::Display
        + Clone
        + PartialEq
        + Send
        + Sync
        + 'static;
    type Config: Config;
    /// The protocol whose catalogue the cases cite.
    const PROTOCOL: crate::suite::Protocol;
    /// Where the embedded cases live, under `corpus/`.
    const DIR: &'static str;
    /// Whether a case may repeat its steps (`for_each`) and clean up after
    /// them (`finally`).
    const LOOPS: bool = false;
    /// What serde cannot check: rules across fields of the whole case (by
    /// default, its config's).
    fn check(case: &Case<Self>) -> Result<(), String> {
        case.config.check()
    }
    /// The names of the case's own checks `step` runs, whose findings a
    /// case's `charges` may direct (`reply`, `result`, a named check...).
    fn checks(_step: &Self::Step) -> Vec<String> {
        Vec::new()
    }
}

impl<D: Dialect> Case<D> {
    /// The own checks the case's steps run (see [`Dialect::checks`]).
    pub fn own_checks(&self) -> std::collections::BTreeSet<String> {
        self.steps
            .iter()
            .chain(&self.finally)
            .flat_map(D::checks)
            .collect()
    }

    /// The requirements the case's `charges` give `check`: its own entry,
    /// else, for a check qualified by what it looked at
    /// (`noRequests:fs/read_text_file`), the entry of the check it is a part
    /// of (`noRequests`).
    pub fn charged_to(&self, check: &str) -> Option<&Vec<String>> {
        self.charges.get(check).or_else(|| {
            check
                .split_once(':')
                .and_then(|(whole, _)| self.charges.get(whole))
        })
    }

    /// Whether `key` names a check the case runs: one of its own checks,
    /// or a part of one (`result:protocol`, the mismatches of a pattern in
    /// its field `protocol`) when that check does not list its parts.
    fn runs_check(&self, own: &std::collections::BTreeSet<String>, key: &str) -> bool {
        own.contains(key)
            || key.split_once(':').is_some_and(|(whole, part)| {
                !part.is_empty()
                    && own.contains(whole)
                    && !own.iter().any(|o| o.starts_with(&format!("{whole}:")))
            })
    }

    /// Its `charges` against what it runs and the catalogue: each key a
    /// check the case runs, each charged to known requirements.
    fn check_charges(&self, catalogue: &crate::requirements::Catalogue) -> Result<(), String> {
        let own = self.own_checks();
        for (check, charged) in &self.charges {
            if !self.runs_check(&own, check) {
                return Err(format!(
                    "charges {check}, a check none of its steps runs (they run: {})",
                    own.iter().cloned().collect::<Vec<_>>().join(", ")
                ));
            }
            if charged.is_empty() {
                return Err(format!("charges {check} to no requirement"));
            }
            if let Some(r) = charged.iter().find(|r| catalogue.get(r).is_none()) {
                return Err(format!("charges {check} to unknown requirement {r}"));
            }
        }
        Ok(())
    }
}

/// A case's `config`: typed, so an unknown key is a bad case file.
pub trait Config:
    DeserializeOwned + std::fmt::Debug + Clone + Default + Send + Sync + 'static
{
    /// What serde cannot check, at load.
    fn check(&self) -> Result<(), String> {
        Ok(())
    }
}

/// Needs for a dialect that has none: any need is a bad case file.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub enum NoNeed {}

impl std::fmt::Display for NoNeed {
    fn fmt(&self, _: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {}
    }
}

/// A config for a dialect that takes none: any key is a bad case file.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NoConfig {}

impl Config for NoConfig {}

/// What a case's steps repeat over, inside the one case so its id stays stable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ForEach {
    /// Each tool the agent-socket server declared.
    Tool,
}

/// One conformance case, in the language of dialect `D`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, bound(deserialize = ""))]
pub struct Case<D: Dialect> {
    pub id: String,
    pub title: String,
    pub level: Level,
    pub requirements: Vec<String>,
    /// Capabilities the target must declare for the case to apply; without
    /// them the case is skipped with that reason.
    #[serde(default)]
    pub needs: Vec<D::Need>,
    #[serde(default)]
    pub phase: Phase,
    /// Settings the driver reads for the whole case (for acp: the editor's
    /// capabilities, the session setup, the permission answers).
    #[serde(default)]
    pub config: D::Config,
    /// Repeat the steps for each item of a list the target declared.
    #[serde(default)]
    pub for_each: Option<ForEach>,
    pub steps: Vec<D::Step>,
    /// Steps that always run after `steps`, to clean up; their failures are
    /// reported but do not change the outcome.
    #[serde(default = "Vec::new")]
    pub finally: Vec<D::Step>,
    /// Which requirements each of the case's own checks breaks when it
    /// fails (`{"noRequests": ["acp.fs.no-call-without-capability"]}`): a
    /// check named here counts against these alone, one not named against
    /// every requirement the case lists. A check may be named by what it
    /// looked at (`noRequests:terminal/create`; for a pattern, the field
    /// of the answer a mismatch is in: `result:tier`), which takes
    /// precedence over the check as a whole. The keys are the checks its steps
    /// run ([`Dialect::checks`]); the requirements may be any of the
    /// catalogue's (a prompt's reply breaks the prompt rule, whatever the
    /// case is about).
    #[serde(default)]
    pub charges: std::collections::BTreeMap<String, Vec<String>>,
    /// Why the case reads the source the way it does, where that needs saying.
    #[serde(default)]
    pub note: Option<String>,
    /// Where the case came from: the corpus path or the `--case` file.
    #[serde(skip)]
    pub origin: String,
}

/// What `conform list` and `--dry-run` show of a case, whatever its dialect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    pub id: String,
    pub title: String,
    pub level: Level,
    pub requirements: Vec<String>,
    pub needs: Vec<String>,
}

impl<D: Dialect> Case<D> {
    pub fn listing(&self) -> Listing {
        Listing {
            id: self.id.clone(),
            title: self.title.clone(),
            level: self.level,
            requirements: self.requirements.clone(),
            needs: self.needs.iter().map(ToString::to_string).collect(),
        }
    }
}

/// A pause in the middle of bytes conform writes: after byte `at`, wait
/// `ms` milliseconds (a message split over several writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pause {
    pub at: usize,
    pub ms: u64,
}

/// `len` bytes cut at the pauses: each piece, then how long to wait after it.
pub fn paced(len: usize, pauses: &[Pause]) -> Vec<(std::ops::Range<usize>, u64)> {
    let mut out = Vec::with_capacity(pauses.len() + 1);
    let mut from = 0;
    for p in pauses {
        let at = p.at.clamp(from, len);
        out.push((from..at, p.ms));
        from = at;
    }
    out.push((from..len, 0));
    out
}

/// Checks a step's pauses: few, short, and only on a step that writes.
pub fn check_pauses(pauses: &[Pause], writes: bool) -> Result<(), String> {
    if !pauses.is_empty() && !writes {
        return Err("`pauses` go with a step that writes bytes".into());
    }
    if pauses.len() > 64 || pauses.iter().any(|p| p.ms > 60_000) {
        return Err("at most 64 pauses of at most 60 s each".into());
    }
    Ok(())
}

/// A case file that could not be used: the user's (or the corpus's) fault.
#[derive(Debug, thiserror::Error)]
pub enum CaseFileError {
    #[error("{path}: {message}")]
    Invalid { path: String, message: String },
    #[error("{path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
}

/// Parses a case file's text; `origin` names it in errors.
pub fn parse_cases<D: Dialect>(origin: &str, text: &str) -> Result<Vec<Case<D>>, CaseFileError> {
    let invalid = |message: String| CaseFileError::Invalid {
        path: origin.to_owned(),
        message,
    };
    // Parse once as a loose value first, so a bad case names its id.
    let value: serde_json::Value =
        serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?;
    let items: Vec<serde_json::Value> = match value {
        serde_json::Value::Object(ref o) if o.contains_key("cases") => match &o["cases"] {
            serde_json::Value::Array(a) => a.clone(),
            _ => return Err(invalid("`cases` must be a list".into())),
        },
        other => vec![other],
    };
    let mut cases = Vec::with_capacity(items.len());
    for item in items {
        let id = item
            .get("id")
            .and_then(|v| v.as_str())
            .unwrap_or("<no id>")
            .to_owned();
        let mut case: Case<D> = match serde_json::from_value(item.clone()) {
            Ok(c) => c,
            Err(e) => return Err(invalid(format!("case {id}{}: {e}", where_in::<D>(&item)))),
        };
        if case.id.is_empty() || case.id.chars().any(char::is_whitespace) {
            return Err(invalid(format!(
                "case id {:?} is empty or has spaces",
                case.id
            )));
        }
        if case.requirements.is_empty() {
            return Err(invalid(format!("case {id}: names no requirement")));
        }
        case.origin = origin.to_owned();
        cases.push(case);
    }
    Ok(cases)
}

/// Which step of a case that does not read is the one at fault, if one is:
/// ` step N` (or ` finally step N`), so the error points at it.
fn where_in<D: Dialect>(item: &serde_json::Value) -> String {
    for (key, label) in [("steps", " step"), ("finally", " finally step")] {
        let steps = item.get(key).and_then(serde_json::Value::as_array);
        for (i, step) in steps.into_iter().flatten().enumerate() {
            if serde_json::from_value::<D::Step>(step.clone()).is_err() {
                return format!("{label} {i}");
            }
        }
    }
    String::new()
}

/// A suite's embedded cases under `corpus/<D::DIR>/` plus the `extra`
/// files (`--case`), each case checked: its requirements known to the
/// protocol's catalogue, `for_each` and `finally` only where the dialect
/// takes them, and the dialect's own rules.
/// The embedded case `id` of dialect `D`; panics when there is none (for
/// tests, which name cases the corpus has).
pub fn embedded<D: Dialect>(id: &str) -> Case<D> {
    load::<D>(&[])
        .expect("the embedded corpus loads")
        .into_iter()
        .find(|c| c.id == id)
        .unwrap_or_else(|| panic!("no embedded case {id}"))
}

pub fn load<D: Dialect>(extra: &[(String, String)]) -> Result<Vec<Case<D>>, CaseFileError> {
    let catalogue = D::PROTOCOL.catalogue();
    let checked = |origin: &str, text: &str| -> Result<Vec<Case<D>>, CaseFileError> {
        let invalid = |message: String| CaseFileError::Invalid {
            path: origin.into(),
            message,
        };
        let cases: Vec<Case<D>> = parse_cases(origin, text)?;
        for c in &cases {
            if let Some(r) = c.requirements.iter().find(|r| catalogue.get(r).is_none()) {
                return Err(invalid(format!("case {}: unknown requirement {r}", c.id)));
            }
            if !D::LOOPS && (c.for_each.is_some() || !c.finally.is_empty()) {
                return Err(invalid(format!(
                    "case {}: these cases take no for_each or finally",
                    c.id
                )));
            }
            D::check(c).map_err(|m| invalid(format!("case {}: {m}", c.id)))?;
            c.check_charges(catalogue)
                .map_err(|m| invalid(format!("case {}: {m}", c.id)))?;
        }
        Ok(cases)
    };
    let mut base = Vec::new();
    for (path, text) in crate::corpus::files_under(D::DIR) {
        base.extend(checked(&format!("corpus/{path}"), text)?);
    }
    let mut over = Vec::new();
    for (path, text) in extra {
        over.extend(checked(path, text)?);
    }
    Ok(merge(base, over))
}

/// Reads `--case` paths: files, or directories searched for `*.json`.
pub fn read_case_paths(paths: &[PathBuf]) -> Result<Vec<(String, String)>, CaseFileError> {
    let mut out = Vec::new();
    for path in paths {
        collect(path, &mut out)?;
    }
    Ok(out)
}

fn collect(path: &Path, out: &mut Vec<(String, String)>) -> Result<(), CaseFileError> {
    let io = |source| CaseFileError::Io {
        path: path.display().to_string(),
        source,
    };
    if path.is_dir() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
            .map_err(io)?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .collect();
        entries.sort();
        for entry in entries {
            if entry.is_dir() || entry.extension().is_some_and(|e| e == "json") {
                collect(&entry, out)?;
            }
        }
        return Ok(());
    }
    // Case files are small; refuse anything that is not.
    const MAX_CASE_FILE: u64 = 16 * 1024 * 1024;
    let len = std::fs::metadata(path).map_err(io)?.len();
    if len > MAX_CASE_FILE {
        return Err(CaseFileError::Invalid {
            path: path.display().to_string(),
            message: format!("{len} bytes is over the case-file limit of {MAX_CASE_FILE}"),
        });
    }
    let text = std::fs::read_to_string(path).map_err(io)?;
    out.push((path.display().to_string(), text));
    Ok(())
}

/// Merges cases: a later case with an id already seen replaces the earlier
/// one in place; ids that are new are appended. Duplicate ids inside the
/// embedded corpus are an error (see the corpus tests).
pub fn merge<D: Dialect>(base: Vec<Case<D>>, overrides: Vec<Case<D>>) -> Vec<Case<D>> {
    let mut out = base;
    let mut index: BTreeMap<String, usize> = out
        .iter()
        .enumerate()
        .map(|(i, c)| (c.id.clone(), i))
        .collect();
    for case in overrides {
        match index.get(&case.id) {
            Some(&i) => out[i] = case,
            None => {
                index.insert(case.id.clone(), out.len());
                out.push(case);
            }
        }
    }
    out
}

/// Matches a case id against `--filter`: comma-separated patterns, each a
/// glob (`*`, `?`) or, without wildcards, an id prefix.
pub fn filter_matches(filter: &str, id: &str) -> bool {
    filter
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .any(|p| {
            if p.contains(['*', '?']) {
                glob(p.as_bytes(), id.as_bytes())
            } else {
                id.starts_with(p)
            }
        })
}

/// `--shard K/N`: the K-th (from 1) of N shards of the selected cases.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub k: usize,
    pub n: usize,
}

impl std::str::FromStr for Shard {
    type Err = String;

    fn from_str(s: &str) -> Result<Shard, String> {
        let bad = || format!("a shard is K/N with 1 <= K <= N, not {s:?}");
        let (k, n) = s.split_once('/').ok_or_else(bad)?;
        let (k, n): (usize, usize) = (
            k.trim().parse().map_err(|_| bad())?,
            n.trim().parse().map_err(|_| bad())?,
        );
        if k == 0 || n == 0 || k > n {
            return Err(bad());
        }
        Ok(Shard { k, n })
    }
}

/// Which of the cases with these ids `--filter` and `--shard` select, one
/// flag a case; selecting none is a usage error.
pub fn select(
    ids: &[&str],
    filter: Option<&str>,
    shard: Option<Shard>,
) -> Result<Vec<bool>, crate::error::RunError> {
    let mut keep: Vec<bool> = ids
        .iter()
        .map(|id| filter.is_none_or(|f| filter_matches(f, id)))
        .collect();
    if let Some(Shard { k, n }) = shard {
        // Dealt in turn over the corpus's order, which every shard of a CI
        // matrix loads the same way: each case lands in exactly one shard.
        for (nth, flag) in keep.iter_mut().filter(|f| **f).enumerate() {
            *flag = nth % n == k - 1;
        }
    }
    if !keep.contains(&true) {
        return Err(crate::error::RunError::Usage(
            "no case selected: a run of zero cases proves nothing".into(),
        ));
    }
    Ok(keep)
}

fn glob(p: &[u8], s: &[u8]) -> bool {
    // Iterative wildcard match with one backtrack point: linear in practice.
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() && (p[pi] == b'?' || p[pi] == s[si]) {
            pi += 1;
            si += 1;
        } else if pi < p.len() && p[pi] == b'*' {
            star = Some((pi, si));
            pi += 1;
        } else if let Some((sp, ss)) = star {
            pi = sp + 1;
            si = ss + 1;
            star = Some((sp, ss + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// The bytes of a `rawHex` string: pairs of hex digits, spaces ignored.
pub fn hex_bytes(text: &str) -> Option<Vec<u8>> {
    /// Each byte's digit value, or `NONE`.
    const NONE: u8 = 0xff;
    const VALUE: [u8; 256] = {
        let mut t = [NONE; 256];
        let mut i = 0;
        while i < 10 {
            t[b'0' as usize + i] = i as u8;
            i += 1;
        }
        let mut i = 0;
        while i < 6 {
            t[b'a' as usize + i] = 10 + i as u8;
            t[b'A' as usize + i] = 10 + i as u8;
            i += 1;
        }
        t
    };
    let bytes = text.as_bytes();
    // Pairs of digits and nothing else, as conform writes them: read a pair
    // at a time; anything else (spaces, a bad digit) is read below.
    if bytes.len() % 2 == 0 {
        let mut out = Vec::with_capacity(bytes.len() / 2);
        for pair in bytes.chunks_exact(2) {
            let (high, low) = (VALUE[usize::from(pair[0])], VALUE[usize::from(pair[1])]);
            if (high | low) >= 16 {
                break;
            }
            out.push(high << 4 | low);
        }
        if out.len() * 2 == bytes.len() {
            return Some(out);
        }
    }
    let mut out = Vec::with_capacity(bytes.len() / 2);
    let mut high: Option<u8> = None;
    for &c in bytes {
        let d = VALUE[usize::from(c)];
        if d == NONE {
            if c.is_ascii_whitespace() {
                continue;
            }
            return None;
        }
        match high.take() {
            None => high = Some(d),
            Some(h) => out.push(h << 4 | d),
        }
    }
    high.is_none().then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_takes_prefixes_and_globs() {
        assert!(filter_matches(
            "agent-socket/sandbox",
            "agent-socket/sandbox/execute/exit-code"
        ));
        assert!(filter_matches(
            "*/execute/*",
            "agent-socket/sandbox/execute/exit-code"
        ));
        assert!(filter_matches(
            "x,agent-socket/hand*",
            "agent-socket/handshake/version"
        ));
        assert!(!filter_matches(
            "agent-socket/tools",
            "agent-socket/sandbox/execute/exit-code"
        ));
        assert!(!filter_matches("*/read?", "a/readFile"));
        assert!(filter_matches("*/read????", "a/readFile"));
    }

    #[test]
    fn hex_strings_read_as_the_case_files_write_them() {
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(
            hex_bytes(&crate::fuzz::strategies::hex(&all)),
            Some(all.clone())
        );
        assert_eq!(hex_bytes("0A ff\n0b"), Some(vec![0x0a, 0xff, 0x0b]));
        assert_eq!(hex_bytes(""), Some(vec![]));
        assert_eq!(hex_bytes("abc"), None, "an odd digit");
        assert_eq!(hex_bytes("0g"), None);
        assert_eq!(hex_bytes("é0"), None);
    }

    /// A dialect for the tests: steps are numbers.
    #[derive(Debug, Clone)]
    struct Numbers;

    impl Dialect for Numbers {
        type Step = u8;
        type Need = NoNeed;
        type Config = NoConfig;
        const PROTOCOL: crate::suite::Protocol = crate::suite::Protocol::AgentSocket;
        const DIR: &'static str = "none";
    }

    #[test]
    fn shards_deal_the_selected_cases_in_turn() {
        let ids = ["a/1", "b/1", "a/2", "a/3"];
        let one = select(&ids, Some("a/"), Some("1/2".parse().unwrap())).unwrap();
        let two = select(&ids, Some("a/"), Some("2/2".parse().unwrap())).unwrap();
        assert_eq!(one, [true, false, false, true]);
        assert_eq!(two, [false, false, true, false]);
        assert!(select(&ids, Some("c/"), None).is_err());
        assert!("0/2".parse::<Shard>().is_err());
        assert!("3/2".parse::<Shard>().is_err());
        assert!("x".parse::<Shard>().is_err());
    }

    #[test]
    fn a_need_or_config_key_the_dialect_lacks_is_refused() {
        let need = r#"{"id":"a","title":"A","level":"MUST","requirements":["r"],"steps":[],"needs":["x"]}"#;
        assert!(parse_cases::<Numbers>("f", need).is_err());
        let config = r#"{"id":"a","title":"A","level":"MUST","requirements":["r"],"steps":[],"config":{"x":1}}"#;
        assert!(parse_cases::<Numbers>("f", config).is_err());
    }

    #[test]
    fn a_later_case_replaces_one_with_the_same_id() {
        let text = r#"{"cases":[{"id":"a","title":"A","level":"MUST","requirements":["r"],"steps":[1]},
                                 {"id":"b","title":"B","level":"MAY","requirements":["r"],"steps":[]}]}"#;
        let base: Vec<Case<Numbers>> = parse_cases("base", text).unwrap();
        let over: Vec<Case<Numbers>> = parse_cases(
            "over",
            r#"{"id":"a","title":"A2","level":"SHOULD","requirements":["r"],"steps":[2]}"#,
        )
        .unwrap();
        let merged = merge(base, over);
        assert_eq!(merged.len(), 2);
        assert_eq!(merged[0].title, "A2");
        assert_eq!(merged[0].origin, "over");
    }

    #[test]
    fn unknown_fields_and_missing_requirements_are_refused() {
        let bad =
            r#"{"id":"a","title":"A","level":"MUST","requirements":["r"],"steps":[],"stpes":[]}"#;
        assert!(parse_cases::<Numbers>("f", bad).is_err());
        let none = r#"{"id":"a","title":"A","level":"MUST","requirements":[],"steps":[]}"#;
        assert!(parse_cases::<Numbers>("f", none).is_err());
    }
}
