//! The JSON reports recorded as snapshots hold to the report schema
//! (`schemas/report.schema.json`): one target's report and the matrix of
//! several, from passing, failing and unexercised runs of every protocol.
//! The format tests check each fresh report too (`support::report_from`);
//! this test keeps the reviewed snapshots honest, so a schema change that
//! they would break is seen without running every suite.

mod support;

use serde_json::Value;
use support::schema_violations;

/// The body of an insta snapshot: what follows its second `---` line.
fn body(snap: &str) -> Option<&str> {
    let rest = snap.strip_prefix("---\n")?;
    let end = rest.find("\n---\n")?;
    Some(&rest[end + "\n---\n".len()..])
}

#[test]
fn every_json_snapshot_validates_against_the_report_schema() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/snapshots");
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "snap"))
        .collect();
    names.sort();
    let mut checked = Vec::new();
    let mut broken = Vec::new();
    for path in names {
        let snap = std::fs::read_to_string(&path).unwrap();
        let Some(text) = body(&snap) else {
            broken.push(format!("{}: not an insta snapshot", path.display()));
            continue;
        };
        if !text.trim_start().starts_with('{') {
            continue;
        }
        // Durations are redacted as a bare `[ms]`; a number is what was there.
        let text = text.replace(": [ms]", ": 0");
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        match serde_json::from_str::<Value>(&text) {
            Err(e) => broken.push(format!("{name}: not JSON after redaction: {e}")),
            Ok(report) => {
                let why = schema_violations(conform::report::schema::Document::Report, &report);
                if !why.is_empty() {
                    broken.push(format!("{name}:\n  {}", why.join("\n  ")));
                }
                checked.push((name, report.get("runs").is_some()));
            }
        }
    }
    assert!(broken.is_empty(), "{}", broken.join("\n"));
    // Both shapes are among them: single reports and a matrix.
    assert!(
        checked.iter().filter(|(_, m)| !m).count() >= 7,
        "{checked:?}"
    );
    assert!(checked.iter().any(|(_, matrix)| *matrix), "{checked:?}");
}

/// Issue 27: the schemas' protocol and role lists are the crate's, so a
/// fourth protocol or a new role cannot leave a schema behind.
#[test]
fn the_schemas_list_every_protocol_and_role_and_no_other() {
    use conform::suite::{Protocol, Role};
    let protocols: Vec<Value> = Protocol::ALL.iter().map(|p| p.id().into()).collect();
    let roles: Vec<Value> = Role::ALL.iter().map(|r| r.id().into()).collect();
    for name in ["report.schema.json", "certification.schema.json"] {
        let path = format!("{}/schemas/{name}", env!("CARGO_MANIFEST_DIR"));
        let schema: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        // The report defines them once under `$defs`; the bundle inline.
        let listed = |key: &str| {
            let at = if schema["$defs"][key].is_object() {
                &schema["$defs"][key]
            } else {
                &schema["properties"][key]
            };
            let mut v = at["enum"].as_array().cloned().unwrap_or_default();
            v.sort_by_key(|x| x.to_string());
            v
        };
        let sorted = |mut v: Vec<Value>| {
            v.sort_by_key(|x| x.to_string());
            v
        };
        assert_eq!(listed("protocol"), sorted(protocols.clone()), "{name}");
        assert_eq!(listed("role"), sorted(roles.clone()), "{name}");
    }
}
