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
