//! The requirement catalogue against the cases and against the sources.

use conform::case::load;
use conform::protocols::agent_socket;
use conform::suite::{Protocol, Role};
use std::collections::{BTreeMap, BTreeSet};

#[test]
fn every_server_must_has_a_case_or_says_why_not() {
    let cases = load::<agent_socket::ServerCases>(&[]).expect("the corpus loads");
    assert_musts_covered(Protocol::AgentSocket.catalogue(), &cases, Role::Server);
}

/// Every MUST of `role` has a case or a `no_case` reason, and no
/// requirement with a case says it has none.
fn assert_musts_covered<D: conform::case::Dialect>(
    catalogue: &conform::requirements::Catalogue,
    cases: &[conform::case::Case<D>],
    role: Role,
) {
    let covered: BTreeSet<&str> = cases
        .iter()
        .flat_map(|c| c.requirements.iter().map(String::as_str))
        .collect();
    let mut missing = Vec::new();
    let mut stale = Vec::new();
    for r in &catalogue.requirements {
        let has_case = covered.contains(r.id.as_str());
        if r.role == role
            && r.level == conform::case::Level::Must
            && !has_case
            && r.no_case.is_none()
        {
            missing.push(r.id.clone());
        }
        if has_case && r.no_case.is_some() {
            stale.push(r.id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "{role} MUSTs with no case and no reason: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "requirements that say they have no case but do: {stale:?}"
    );
}

#[test]
fn case_and_requirement_ids_are_unique() {
    let cases = load::<agent_socket::ServerCases>(&[]).unwrap();
    let mut seen = BTreeMap::new();
    for c in &cases {
        assert!(
            seen.insert(c.id.clone(), c.origin.clone()).is_none(),
            "duplicate case id {}",
            c.id
        );
        assert!(c.id.starts_with("agent-socket/"), "{}", c.id);
    }
    let catalogue = Protocol::AgentSocket.catalogue();
    let ids: BTreeSet<&str> = catalogue
        .requirements
        .iter()
        .map(|r| r.id.as_str())
        .collect();
    assert_eq!(ids.len(), catalogue.requirements.len());
}

/// Text with whitespace folded, so a quote may wrap differently.
fn fold(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn every_quote_from_the_vendored_sources_is_in_them() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/agent-socket/sources");
    let mut sources = String::new();
    for e in std::fs::read_dir(dir)
        .expect("the vendored sources")
        .flatten()
    {
        if e.path().extension().is_some_and(|x| x == "py") {
            sources.push_str(&std::fs::read_to_string(e.path()).unwrap());
            sources.push('\n');
        }
    }
    let sources = fold(&sources);
    let mut absent = Vec::new();
    for r in &Protocol::AgentSocket.catalogue().requirements {
        if r.source.starts_with("JSON-RPC") {
            continue;
        }
        // A quote is fragments joined by " / " (several places) and " ... " (elisions).
        for fragment in r.quote.split(" / ").flat_map(|f| f.split("...")) {
            let fragment = fold(fragment.trim().trim_matches(':').trim());
            if fragment.len() < 8 || fragment.starts_with("JSON-RPC") {
                continue;
            }
            if !sources.contains(&fragment) {
                absent.push(format!("{}: {fragment:?}", r.id));
            }
        }
    }
    assert!(
        absent.is_empty(),
        "quotes not found in the sources:\n{}",
        absent.join("\n")
    );
}

/// Whether `quote` has an RFC 2119 word of MUST's level (MUST, REQUIRED,
/// SHALL, with their NOT forms). Case is ignored: the agent-socket
/// docstrings write them in lower case, and they count (docs/levels.md).
fn has_must_word(quote: &str) -> bool {
    quote
        .split(|c: char| !c.is_ascii_alphabetic())
        .any(|w| ["must", "required", "shall"].contains(&w.to_ascii_lowercase().as_str()))
}

/// The one rule of levels (docs/levels.md; issue 26, item 9): a MUST whose
/// quote has no RFC 2119 word of that level is a MUST because the real peer
/// breaks, refuses or misreads, and its reading says so, from the source.
#[test]
fn every_must_without_a_must_word_says_why_it_is_graded_must() {
    let mut unexplained = Vec::new();
    for protocol in [Protocol::AgentSocket, Protocol::Cwx] {
        for r in &protocol.catalogue().requirements {
            if r.level == conform::case::Level::Must
                && !has_must_word(&r.quote)
                && !r
                    .reading
                    .as_deref()
                    .is_some_and(|t| t.contains("Graded MUST: "))
            {
                unexplained.push(r.id.clone());
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "MUSTs whose quote has no MUST word and whose reading has no \"Graded MUST: \": {unexplained:?}"
    );
    assert!(has_must_word("``execute`` must accept concurrent calls"));
    assert!(has_must_word("The \"jsonrpc\" member MUST NOT be absent"));
    assert!(!has_must_word("how long a ``tools/call`` may take"));
    assert!(!has_must_word("the host mustard"));
}

mod acp {
    use conform::case::load;
    use conform::protocols::acp;
    use conform::suite::{Protocol, Role};
    use std::collections::BTreeSet;

    #[test]
    fn every_agent_must_has_a_case_or_says_why_not() {
        let cases = load::<acp::AgentCases>(&[]).expect("the corpus loads");
        super::assert_musts_covered(Protocol::Acp.catalogue(), &cases, Role::Agent);
    }

    #[test]
    fn case_ids_are_unique_and_every_rule_the_monitor_checks_is_catalogued() {
        let cases = load::<acp::AgentCases>(&[]).unwrap();
        let mut seen = BTreeSet::new();
        for c in &cases {
            assert!(seen.insert(c.id.clone()), "duplicate case id {}", c.id);
            assert!(c.id.starts_with("acp/"), "{}", c.id);
        }
        let catalogue = Protocol::Acp.catalogue();
        let ids: BTreeSet<&str> = catalogue
            .requirements
            .iter()
            .map(|r| r.id.as_str())
            .collect();
        assert_eq!(
            ids.len(),
            catalogue.requirements.len(),
            "duplicate requirement ids"
        );
        for rule in acp::monitor::rules::ALL {
            assert!(
                ids.contains(rule),
                "the monitor checks {rule}, which is not catalogued"
            );
        }
        for g in acp::table::CLIENT_GATES
            .iter()
            .chain(acp::table::AGENT_GATES)
        {
            assert!(
                ids.contains(g.requirement),
                "{} names {}",
                g.method,
                g.requirement
            );
        }
        for r in &catalogue.requirements {
            assert!(
                r.role == Role::Agent || r.role == Role::Client,
                "{}: role {}",
                r.id,
                r.role
            );
        }
    }

    #[test]
    fn every_quote_is_in_the_vendored_pages_or_the_schema() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/acp");
        let mut sources = String::new();
        for e in std::fs::read_dir(format!("{dir}/sources"))
            .unwrap()
            .flatten()
        {
            if e.path().extension().is_some_and(|x| x == "mdx") {
                sources.push_str(&std::fs::read_to_string(e.path()).unwrap());
                sources.push('\n');
            }
        }
        sources.push_str(&std::fs::read_to_string(format!("{dir}/schema.json")).unwrap());
        let sources = super::fold(&sources);
        let mut absent = Vec::new();
        for r in &Protocol::Acp.catalogue().requirements {
            if r.source.starts_with("JSON-RPC") {
                continue;
            }
            for fragment in r.quote.split(" / ").flat_map(|f| f.split("...")) {
                let fragment = super::fold(fragment.trim());
                if fragment.len() < 8 {
                    continue;
                }
                if !sources.contains(&fragment) {
                    absent.push(format!("{}: {fragment:?}", r.id));
                }
            }
        }
        assert!(
            absent.is_empty(),
            "quotes not found:\n{}",
            absent.join("\n")
        );
    }

    #[test]
    fn the_vendored_schema_is_the_shared_one() {
        let shared = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/specs/acp");
        let Ok(theirs) = std::fs::read(format!("{shared}/schema.json")) else {
            eprintln!("skipped: ../shared/specs is not beside this checkout");
            return;
        };
        let ours = std::fs::read(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/corpus/acp/schema.json"
        ))
        .unwrap();
        assert!(
            theirs == ours,
            "corpus/acp/schema.json differs from specs/acp/schema.json"
        );
        let meta = std::fs::read(format!("{shared}/meta.json")).unwrap();
        let ours =
            std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/corpus/acp/meta.json")).unwrap();
        assert!(
            meta == ours,
            "corpus/acp/meta.json differs from specs/acp/meta.json"
        );
    }
}

mod cwx {
    use conform::case::load;
    use conform::protocols::cwx;
    use conform::suite::{Protocol, Role};
    use std::collections::{BTreeMap, BTreeSet};

    #[test]
    fn every_host_must_has_a_case_or_says_why_not() {
        let catalogue = Protocol::Cwx.catalogue();
        let cases = load::<cwx::HostCases>(&[]).expect("the corpus loads");
        super::assert_musts_covered(catalogue, &cases, Role::Host);
        let fields = cwx::driver::rules::FIELDS
            .iter()
            .chain(cwx::driver::rules::RESULTS)
            .map(|(_, rule)| rule);
        for rule in cwx::driver::rules::ALL.iter().chain(fields) {
            assert!(
                catalogue.get(rule).is_some(),
                "the driver checks {rule}, which is not catalogued"
            );
        }
        let mut seen = BTreeSet::new();
        for c in &cases {
            assert!(seen.insert(c.id.clone()), "duplicate case {}", c.id);
            assert!(c.id.starts_with("cwx/"), "{}", c.id);
        }
    }

    #[test]
    fn every_quote_is_in_the_seed() {
        let Some(src) = seed() else { return };
        let src = super::fold(&src);
        let absent: Vec<String> = Protocol::Cwx
            .catalogue()
            .requirements
            .iter()
            .filter(|r| !src.contains(&super::fold(&r.quote)))
            .map(|r| r.id.clone())
            .collect();
        assert!(absent.is_empty(), "quotes not in the seed: {absent:?}");
    }

    /// The seed states no licence, so it is read from `../shared/specs/cwx/`
    /// beside the checkout, never vendored. Locally a missing seed skips the
    /// test, saying why; under `CI=true` it fails it: CI must audit.
    fn seed() -> Option<String> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/specs/cwx/protocol.rs.txt"
        );
        match std::fs::read_to_string(path) {
            Ok(src) => Some(src),
            Err(e) if std::env::var("CI").as_deref() == Ok("true") => {
                panic!("CI=true and the cwx seed cannot be read at {path}: {e}")
            }
            Err(e) => {
                eprintln!("skipped: the cwx seed is not beside this checkout ({path}: {e})");
                None
            }
        }
    }

    /// One thing the seed says: a comment sentence or table row, a METHODS
    /// row, a constant, a type, or an error message of its parser.
    #[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
    struct Item {
        kind: &'static str,
        line: u64,
        text: String,
    }

    /// The seed's lines as the code viewer numbered them: `N text`.
    fn numbered(src: &str) -> Vec<(u64, &str)> {
        src.lines()
            .filter_map(|l| {
                let digits = l.bytes().take_while(u8::is_ascii_digit).count();
                let n = l[..digits].parse().ok()?;
                let rest = &l[digits..];
                match rest.strip_prefix(' ') {
                    Some(text) => Some((n, text)),
                    None if rest.is_empty() => Some((n, "")),
                    None => None,
                }
            })
            .collect()
    }

    /// A comment paragraph cut into sentences: after `.`, `!` or `?` and a
    /// space, where the next word starts a sentence (a capital, a code span,
    /// a link, bold, a parenthesis). Each sentence keeps the line it starts on.
    fn sentences(para: &[(u64, &str)], out: &mut Vec<Item>) {
        let mut joined = String::new();
        let mut starts = Vec::new();
        for (n, t) in para {
            if !joined.is_empty() {
                joined.push(' ');
            }
            starts.push((joined.len(), *n));
            joined.push_str(t);
        }
        let chars: Vec<(usize, char)> = joined.char_indices().collect();
        let mut from = 0;
        let mut cuts = Vec::new();
        for i in 1..chars.len().saturating_sub(1) {
            let (at, c) = chars[i];
            let before = chars[i - 1].1;
            let next = chars[i + 1].1;
            if c == ' '
                && matches!(before, '.' | '!' | '?')
                && (next.is_ascii_uppercase() || matches!(next, '`' | '[' | '*' | '('))
            {
                cuts.push((from, at));
                from = at + 1;
            }
        }
        cuts.push((from, joined.len()));
        for (a, b) in cuts {
            let text = joined[a..b].trim();
            if text.is_empty() {
                continue;
            }
            let line = starts
                .iter()
                .take_while(|(o, _)| *o <= a)
                .last()
                .map(|(_, n)| *n)
                .unwrap_or(0);
            out.push(Item {
                kind: "sentence",
                line,
                text: text.to_owned(),
            });
        }
    }

    /// Everything the seed says that the audit must account for.
    fn seed_items(src: &str) -> Vec<Item> {
        let lines = numbered(src);
        let mut items = Vec::new();
        // Comments: consecutive lines of one marker are a block; table rows
        // stand alone; blank lines and rules of dashes end a paragraph.
        let marker = |t: &str| ["//!", "///", "//"].into_iter().find(|m| t.starts_with(m));
        let mut i = 0;
        while i < lines.len() {
            let Some(m) = marker(lines[i].1.trim()) else {
                i += 1;
                continue;
            };
            let mut para: Vec<(u64, &str)> = Vec::new();
            while i < lines.len() && marker(lines[i].1.trim()) == Some(m) {
                let (n, t) = lines[i];
                let text = t.trim()[m.len()..].trim();
                if text.starts_with('|') {
                    sentences(&para, &mut items);
                    para.clear();
                    if !text.chars().all(|c| c == '|' || c == '-') {
                        items.push(Item {
                            kind: "sentence",
                            line: n,
                            text: text.to_owned(),
                        });
                    }
                } else if text.is_empty() || text.chars().all(|c| c == '-') {
                    sentences(&para, &mut items);
                    para.clear();
                } else {
                    para.push((n, text));
                }
                i += 1;
            }
            sentences(&para, &mut items);
        }
        // METHODS rows, as `direction name`.
        let mut in_methods = false;
        for (n, t) in &lines {
            let t = t.trim();
            if t.starts_with("pub const METHODS") {
                in_methods = true;
                continue;
            }
            if in_methods && t == "];" {
                in_methods = false;
            }
            if let Some(rest) = t.split("row(Direction::").nth(1).filter(|_| in_methods) {
                let (dir, rest) = rest.split_once(", \"").expect("a row names its method");
                let name = rest.split('"').next().unwrap_or_default();
                let dir = if dir == "CoreToHost" {
                    "core_to_host"
                } else {
                    "host_to_core"
                };
                items.push(Item {
                    kind: "method",
                    line: *n,
                    text: format!("{dir} {name}"),
                });
            }
        }
        // Constants and types (a type says when its serde attributes deny
        // unknown fields), then every string literal with a space: the
        // messages of the seed's errors, each a rule of its parser.
        let mut attrs = String::new();
        for (n, t) in &lines {
            let t = t.trim();
            if t.starts_with("//") {
                continue;
            }
            if t.starts_with("#[") {
                attrs.push_str(t);
                continue;
            }
            if let Some(rest) = t.strip_prefix("pub const ") {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                items.push(Item {
                    kind: "const",
                    line: *n,
                    text: name,
                });
            }
            let decl = t.strip_prefix("pub ").unwrap_or(t);
            if let Some(rest) = decl
                .strip_prefix("struct ")
                .or_else(|| decl.strip_prefix("enum "))
            {
                let name: String = rest
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect();
                let deny = if attrs.contains("deny_unknown_fields") {
                    " (deny_unknown_fields)"
                } else {
                    ""
                };
                items.push(Item {
                    kind: "type",
                    line: *n,
                    text: format!("{name}{deny}"),
                });
            }
            attrs.clear();
        }
        for (n, t) in &lines {
            if t.trim().starts_with("//") {
                continue;
            }
            let mut chars = t.chars();
            while let Some(c) = chars.next() {
                if c != '"' {
                    continue;
                }
                let mut lit = String::new();
                while let Some(c) = chars.next() {
                    match c {
                        '\\' => {
                            lit.push(c);
                            lit.extend(chars.next());
                        }
                        '"' => break,
                        c => lit.push(c),
                    }
                }
                if lit.contains(' ') {
                    items.push(Item {
                        kind: "rule",
                        line: *n,
                        text: lit,
                    });
                }
            }
        }
        items
    }

    #[derive(serde::Deserialize)]
    struct Audit {
        items: Vec<Audited>,
    }

    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Audited {
        kind: String,
        line: u64,
        text: String,
        host: Judgment,
        core: Judgment,
    }

    /// What one item asks of one role: the requirements that check it, or
    /// why it asks nothing of that role.
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Judgment {
        Checked(Vec<String>),
        NotNormative(String),
    }

    /// The sentence audit (issue 18): every sentence, METHODS row, constant,
    /// type and error message of the seed is in `corpus/cwx/audit.json`
    /// with, for the host and for the core, the requirements that check it
    /// or why it asks nothing of that role; nothing else is there; every
    /// requirement named is catalogued for that role; and every requirement
    /// of the catalogue checks something the audit names.
    #[test]
    fn the_sentence_audit_accounts_for_everything_the_seed_says() {
        let Some(src) = seed() else { return };
        let found = seed_items(&src);
        let audit: Audit = serde_json::from_str(
            &std::fs::read_to_string(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/corpus/cwx/audit.json"
            ))
            .unwrap(),
        )
        .expect("corpus/cwx/audit.json reads");
        let catalogue = Protocol::Cwx.catalogue();
        let key = |kind: &str, line: u64, text: &str| (kind.to_owned(), line, text.to_owned());
        let audited: BTreeSet<_> = audit
            .items
            .iter()
            .map(|a| key(&a.kind, a.line, &a.text))
            .collect();
        let seen: BTreeSet<_> = found.iter().map(|i| key(i.kind, i.line, &i.text)).collect();
        assert_eq!(audited.len(), audit.items.len(), "an item is audited twice");
        let missing: Vec<_> = seen.difference(&audited).collect();
        let stale: Vec<_> = audited.difference(&seen).collect();
        assert!(
            missing.is_empty(),
            "the seed says these and the audit does not account for them:\n{missing:#?}"
        );
        assert!(
            stale.is_empty(),
            "the audit accounts for these and the seed does not say them:\n{stale:#?}"
        );
        let mut cited = BTreeSet::new();
        let mut problems = Vec::new();
        let mut counts = BTreeMap::<(&str, &str), usize>::new();
        for a in &audit.items {
            for (role, judgment) in [(Role::Host, &a.host), (Role::Core, &a.core)] {
                match judgment {
                    Judgment::Checked(ids) if ids.is_empty() => problems.push(format!(
                        "{} {:?}: no requirement for {role}",
                        a.kind, a.text
                    )),
                    Judgment::Checked(ids) => {
                        *counts.entry((a.kind.as_str(), "checked")).or_default() += 1;
                        for id in ids {
                            match catalogue.get(id) {
                                Some(r) if r.role == role => {
                                    cited.insert(id.as_str());
                                }
                                Some(r) => problems.push(format!(
                                    "{} {:?}: {id} binds the {}, not the {role}",
                                    a.kind, a.text, r.role
                                )),
                                None => problems.push(format!(
                                    "{} {:?}: {id} is not catalogued",
                                    a.kind, a.text
                                )),
                            }
                        }
                    }
                    Judgment::NotNormative(why) if why.trim().len() < 12 => {
                        problems.push(format!("{} {:?}: no reason for {role}", a.kind, a.text))
                    }
                    Judgment::NotNormative(_) => {
                        *counts.entry((a.kind.as_str(), "reason")).or_default() += 1;
                    }
                }
            }
        }
        for r in &catalogue.requirements {
            if !cited.contains(r.id.as_str()) {
                problems.push(format!("{} checks nothing the audit names", r.id));
            }
        }
        assert!(problems.is_empty(), "{}", problems.join("\n"));
        let deny = found
            .iter()
            .filter(|i| i.text.ends_with("(deny_unknown_fields)"))
            .count();
        eprintln!(
            "cwx audit: {} items ({deny} deny_unknown_fields types); judgments by kind: {counts:?}",
            found.len()
        );
    }

    #[test]
    fn the_audit_reads_sentences_tables_and_deny_types_from_a_sample() {
        let sample = "header line\n1 //! One sentence. Two `code` here.\n2 //!\n3 /// | a | b |\n4 /// |---|---|\n5 #[serde(deny_unknown_fields)]\n6 pub struct T {\n7 x: \"a b\",\n8 }\n";
        let items = seed_items(sample);
        let texts: Vec<(&str, u64, &str)> = items
            .iter()
            .map(|i| (i.kind, i.line, i.text.as_str()))
            .collect();
        assert_eq!(
            texts,
            [
                ("sentence", 1, "One sentence."),
                ("sentence", 1, "Two `code` here."),
                ("sentence", 3, "| a | b |"),
                ("type", 6, "T (deny_unknown_fields)"),
                ("rule", 7, "a b"),
            ]
        );
    }
}

/// Issue 26, item 12: a case's own check counts against the requirements
/// it checks. A case that lists several requirements and runs several
/// checks says, in `charges`, which requirements each check breaks; one
/// check a case runs alone checks everything it lists.
#[test]
fn a_case_with_several_requirements_and_checks_charges_each_check() {
    fn unsaid<D: conform::case::Dialect>(out: &mut Vec<String>) {
        for c in load::<D>(&[]).expect("the corpus loads") {
            let own = c.own_checks();
            if c.requirements.len() < 2 || own.len() < 2 {
                continue;
            }
            // A check charged part by part (`noRequests:terminal/create`)
            // needs no charge of its own.
            let missing: Vec<&String> = own
                .iter()
                .filter(|k| c.charged_to(k).is_none())
                .filter(|k| {
                    let mut parts = own.iter().filter(|o| o.starts_with(&format!("{k}:")));
                    parts.clone().next().is_none() || parts.any(|p| c.charged_to(p).is_none())
                })
                .collect();
            if !missing.is_empty() {
                out.push(format!(
                    "{} ({:?}): no charges for {missing:?}",
                    c.id, c.requirements
                ));
            }
        }
    }
    let mut out = Vec::new();
    unsaid::<conform::protocols::acp::AgentCases>(&mut out);
    unsaid::<conform::protocols::cwx::HostCases>(&mut out);
    unsaid::<agent_socket::ServerCases>(&mut out);
    assert!(out.is_empty(), "{} cases:\n{}", out.len(), out.join("\n"));
}
