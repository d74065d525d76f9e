//! The sentence audit of the agent-socket sources (issue 18): every
//! sentence of every docstring of the vendored sources, and every
//! module-level constant and type, is in `corpus/agent-socket/audit.json`,
//! mapped to the catalogue requirements that hold it or marked
//! non-normative with a reason; every requirement quoting the sources is
//! reached from the audit; every requirement the audit names has a case or
//! says why the wire cannot show it.
//!
//! The sentences are extracted here from the sources themselves, so a
//! sentence the audit leaves out, or one it quotes that the sources no
//! longer hold, fails the test.

use conform::case::load;
use conform::protocols::agent_socket::{self, scripted};
use conform::suite::{Protocol, Role};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

const SOURCES: &[&str] = &["agent_socket.py", "sandbox.py", "client_provided_tools.py"];

fn root() -> &'static str {
    env!("CARGO_MANIFEST_DIR")
}

fn source(name: &str) -> String {
    std::fs::read_to_string(format!("{}/corpus/agent-socket/sources/{name}", root()))
        .unwrap_or_else(|e| panic!("the vendored {name}: {e}"))
}

fn audit() -> Value {
    let text = std::fs::read_to_string(format!("{}/corpus/agent-socket/audit.json", root()))
        .expect("corpus/agent-socket/audit.json");
    serde_json::from_str(&text).expect("audit.json is JSON")
}

fn ident(s: &str) -> usize {
    s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(s.len())
}

/// The name a line defines: `class X`, `def x`, `async def x` at any
/// indentation, or a constant (see [`constant`]).
fn defines(line: &str) -> Option<&str> {
    let trimmed = line.trim_start();
    for kw in ["class ", "def ", "async def "] {
        if let Some(rest) = trimmed.strip_prefix(kw) {
            let n = ident(rest);
            return (n > 0).then(|| &rest[..n]);
        }
    }
    constant(line)
}

/// The constant or type a line defines: `NAME = ...`, `NAME: T = ...` or
/// `type Name = ...` at the left margin, for a name that starts with a
/// capital (after `_`).
fn constant(line: &str) -> Option<&str> {
    if line.starts_with(' ') {
        return None;
    }
    let rest = line.strip_prefix("type ").unwrap_or(line);
    let n = ident(rest);
    let name = &rest[..n];
    let first_letter = name.trim_start_matches('_').chars().next()?;
    if !first_letter.is_ascii_uppercase() {
        return None;
    }
    let after = rest[n..].trim_start();
    (after.starts_with(':') || (after.starts_with('=') && !after.starts_with("=="))).then_some(name)
}

/// Every docstring of `text` (a triple-quoted string whose opening quotes
/// begin their line) with the name it documents (`module` for the file's).
/// Returns them and the text with every triple-quoted string blanked out.
fn docstrings(text: &str) -> (Vec<(String, String)>, String) {
    let mut out = Vec::new();
    let mut masked = text.to_owned();
    let mut pos = 0;
    while let Some(a) = text[pos..].find("\"\"\"").map(|i| i + pos) {
        let b = text[a + 3..]
            .find("\"\"\"")
            .map(|i| i + a + 3)
            .expect("every triple quote is closed");
        let line_start = text[..a].rfind('\n').map_or(0, |i| i + 1);
        if text[line_start..a].trim().is_empty() {
            let owner = text[..line_start]
                .lines()
                .rev()
                .find_map(defines)
                .unwrap_or("module");
            out.push((owner.to_owned(), text[a + 3..b].to_owned()));
        }
        let blank: String = text[a..b + 3]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        masked.replace_range(a..b + 3, &blank);
        pos = b + 3;
    }
    (out, masked)
}

/// A docstring's sentences: whitespace folded, split after a full stop
/// followed by a space and anything but a lower-case letter.
fn sentences(doc: &str) -> Vec<String> {
    let folded = doc.split_whitespace().collect::<Vec<_>>().join(" ");
    let chars: Vec<char> = folded.chars().collect();
    let mut out = Vec::new();
    let mut current = String::new();
    let mut i = 0;
    while i < chars.len() {
        current.push(chars[i]);
        if chars[i] == '.'
            && chars.get(i + 1) == Some(&' ')
            && chars.get(i + 2).is_some_and(|c| !c.is_ascii_lowercase())
        {
            out.push(std::mem::take(&mut current));
            i += 2;
            continue;
        }
        i += 1;
    }
    if !current.is_empty() {
        out.push(current);
    }
    out
}

/// A sentence of the sources: (source, the name its docstring documents, text).
type Sentence = (String, String, String);
/// A constant of the sources: (source, name).
type Constant = (String, String);

/// Every sentence and constant of the sources.
fn extracted() -> (Vec<Sentence>, Vec<Constant>) {
    let mut sents = Vec::new();
    let mut consts = Vec::new();
    for name in SOURCES {
        let text = source(name);
        let (docs, masked) = docstrings(&text);
        for (owner, doc) in docs {
            for s in sentences(&doc) {
                sents.push((name.to_string(), owner.clone(), s));
            }
        }
        for c in masked.lines().filter_map(constant) {
            consts.push((name.to_string(), c.to_owned()));
        }
    }
    (sents, consts)
}

/// An audit entry's verdict: the requirement ids, or why it binds nothing.
fn verdict(e: &Value, what: &str, problems: &mut Vec<String>) -> Vec<String> {
    let reqs: Vec<String> = e["requirements"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|r| r.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let reason = e["non_normative"].as_str().unwrap_or("").trim();
    match (reqs.is_empty(), reason.is_empty()) {
        (false, true) => {}
        (true, false) if reason.len() >= 10 => {}
        (true, false) => problems.push(format!("{what}: the reason says too little: {reason:?}")),
        (true, true) => problems.push(format!(
            "{what}: neither requirements nor a non_normative reason"
        )),
        (false, false) => problems.push(format!(
            "{what}: both requirements and a non_normative reason"
        )),
    }
    reqs
}

#[test]
fn the_vendored_sources_are_the_shared_ones() {
    let shared = format!("{}/../shared/specs/agent-socket", root());
    if !std::path::Path::new(&shared).is_dir() {
        // The vendored copy is what every test reads; the shared copy is
        // only the one the project was handed, beside a developer checkout.
        eprintln!("skipped: ../shared/specs is not beside this checkout");
        return;
    }
    for name in SOURCES {
        let theirs = std::fs::read(format!("{shared}/{name}")).unwrap();
        assert!(
            theirs == source(name).into_bytes(),
            "corpus/agent-socket/sources/{name} differs from ../shared/specs/agent-socket/{name}"
        );
    }
}

#[test]
fn every_sentence_and_constant_of_the_sources_is_audited_and_every_requirement_is_reached() {
    let audit = audit();
    let catalogue = Protocol::AgentSocket.catalogue();
    let ids: BTreeSet<&str> = catalogue
        .requirements
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    let words: Vec<String> = audit["normative_words"]
        .as_array()
        .expect("normative_words")
        .iter()
        .map(|w| w.as_str().unwrap().to_owned())
        .collect();
    let (sents, consts) = extracted();
    let mut problems = Vec::new();
    let mut reached: BTreeSet<String> = BTreeSet::new();

    // The sentences, both ways.
    let mut audited: BTreeMap<(String, String), &Value> = BTreeMap::new();
    for e in audit["sentences"].as_array().expect("sentences") {
        let key = (
            e["source"].as_str().unwrap_or("").to_owned(),
            e["sentence"].as_str().unwrap_or("").to_owned(),
        );
        if audited.insert(key.clone(), e).is_some() {
            problems.push(format!("audited twice: {}: {:?}", key.0, key.1));
        }
    }
    let mut normative = 0;
    let mut normative_without = Vec::new();
    let mut seen = BTreeSet::new();
    for (src, owner, s) in &sents {
        let key = (src.clone(), s.clone());
        seen.insert(key.clone());
        let lower = s.to_lowercase();
        let is_normative = words.iter().any(|w| {
            lower
                .match_indices(w.as_str())
                .any(|(i, _)| !lower[..i].ends_with(|c: char| c.is_ascii_alphabetic()))
        });
        normative += usize::from(is_normative);
        let Some(e) = audited.get(&key) else {
            problems.push(format!(
                "not audited ({src}, {owner}{}): {s:?}",
                if is_normative { ", normative" } else { "" }
            ));
            continue;
        };
        if e["in"].as_str() != Some(owner) {
            problems.push(format!(
                "{src}: {s:?} is in {owner}'s docstring, the audit says {}",
                e["in"]
            ));
        }
        let reqs = verdict(e, &format!("{src}: {s:?}"), &mut problems);
        if is_normative && reqs.is_empty() {
            normative_without.push(s.clone());
        }
        reached.extend(reqs);
    }
    for key in audited.keys() {
        if !seen.contains(key) {
            problems.push(format!(
                "audited, but no longer a sentence of {}: {:?}",
                key.0, key.1
            ));
        }
    }

    // The constants, both ways.
    let mut audited_consts: BTreeMap<(String, String), &Value> = BTreeMap::new();
    for e in audit["constants"].as_array().expect("constants") {
        let key = (
            e["source"].as_str().unwrap_or("").to_owned(),
            e["constant"].as_str().unwrap_or("").to_owned(),
        );
        audited_consts.insert(key, e);
    }
    let const_keys: BTreeSet<(String, String)> = consts.iter().cloned().collect();
    for key in &const_keys {
        match audited_consts.get(key) {
            None => problems.push(format!("constant not audited: {} {}", key.0, key.1)),
            Some(e) => reached.extend(verdict(e, &format!("{} {}", key.0, key.1), &mut problems)),
        }
    }
    for key in audited_consts.keys() {
        if !const_keys.contains(key) {
            problems.push(format!(
                "audited, but no longer a constant: {} {}",
                key.0, key.1
            ));
        }
    }

    // Every id the audit names exists; every requirement quoting the
    // sources is reached from a sentence or a constant.
    for r in &reached {
        if !ids.contains(r.as_str()) {
            problems.push(format!(
                "the audit names {r}, which is not in the catalogue"
            ));
        }
    }
    for r in &catalogue.requirements {
        let from_sources = SOURCES
            .iter()
            .any(|s| r.source.contains(s.trim_end_matches(".py")));
        if from_sources && !reached.contains(&r.id) {
            problems.push(format!(
                "{} quotes the sources but no audited sentence or constant names it",
                r.id
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
    eprintln!(
        "audit: {} sentences ({normative} with a normative word, {} of them non-normative: {:?}), {} constants, {} requirements reached",
        sents.len(),
        normative_without.len(),
        normative_without,
        consts.len(),
        reached.len()
    );
}

#[test]
fn every_audited_requirement_has_a_case_or_says_why_not() {
    let catalogue = Protocol::AgentSocket.catalogue();
    let server = load::<agent_socket::ServerCases>(&[]).expect("the server corpus loads");
    let client = load::<agent_socket::ClientCases>(&[]).expect("the client corpus loads");
    let mut covered: BTreeMap<Role, BTreeSet<String>> = BTreeMap::new();
    covered
        .entry(Role::Server)
        .or_default()
        .extend(server.iter().flat_map(|c| c.requirements.iter().cloned()));
    let client_covered = covered.entry(Role::Client).or_default();
    client_covered.extend(client.iter().flat_map(|c| c.requirements.iter().cloned()));
    client_covered.extend(scripted::rules::EVERY_MESSAGE.iter().map(|r| r.to_string()));
    let mut missing = Vec::new();
    let mut counts: BTreeMap<(Role, &str), usize> = BTreeMap::new();
    for r in &catalogue.requirements {
        let has_case = covered.get(&r.role).is_some_and(|c| c.contains(&r.id));
        let kind = match (has_case, &r.no_case) {
            (true, None) => "case",
            (false, Some(_)) => "no_case",
            (true, Some(_)) => {
                missing.push(format!("{} has a case and says it has none", r.id));
                "both"
            }
            (false, None) => {
                missing.push(format!(
                    "{} ({}, {:?}) has no case and no reason",
                    r.id, r.role, r.level
                ));
                "neither"
            }
        };
        *counts.entry((r.role, kind)).or_default() += 1;
    }
    assert!(missing.is_empty(), "{}", missing.join("\n"));
    eprintln!(
        "catalogue: {} requirements, {counts:?}",
        catalogue.requirements.len()
    );
}

#[test]
fn the_extraction_reads_docstrings_sentences_and_constants() {
    let text = "\"\"\"Title. Second one: a.b and ``x``. Third\nline.\"\"\"\nX = 1\n\
                \"\"\"X's doc.\"\"\"\nY: int = f\"\"\"\nnot a docstring\n\"\"\"\n\
                class Z:\n    \"\"\"Z's doc. It must.\"\"\"\n    def go(\n        self,\n    ):\n        \"\"\"Go.\"\"\"\n";
    let (docs, masked) = docstrings(text);
    let owners: Vec<&str> = docs.iter().map(|(o, _)| o.as_str()).collect();
    assert_eq!(owners, ["module", "X", "Z", "go"]);
    assert_eq!(
        sentences(&docs[0].1),
        ["Title.", "Second one: a.b and ``x``.", "Third line."]
    );
    let consts: Vec<&str> = masked.lines().filter_map(constant).collect();
    assert_eq!(consts, ["X", "Y"]);
}
