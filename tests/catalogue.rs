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
    use std::collections::BTreeSet;

    #[test]
    fn every_host_must_has_a_case_or_says_why_not() {
        let catalogue = Protocol::Cwx.catalogue();
        let cases = load::<cwx::HostCases>(&[]).expect("the corpus loads");
        super::assert_musts_covered(catalogue, &cases, Role::Host);
        for rule in cwx::driver::rules::ALL {
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
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/specs/cwx/protocol.rs.txt"
        );
        let Ok(src) = std::fs::read_to_string(path) else {
            eprintln!("skipped: ../shared/specs is not beside this checkout");
            return;
        };
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
}
