//! The contract of conform's JSON output: a JSON Schema (draft 2020-12) for
//! `--format json` (one target's report, or the matrix of several) and one
//! for the certification bundle, both embedded so an installed conform can
//! print them (`conform schema report|certification`).
//!
//! Every report carries [`VERSION`] as `schema_version`. Fields may be added
//! under the same version (the schema files are updated with them); a field
//! that changes meaning or goes away bumps it.

use serde_json::Value;
use std::sync::OnceLock;

/// The `schema_version` of every report and bundle this conform writes.
pub const VERSION: u32 = 1;

/// The schema of `--format json`.
pub const REPORT: &str = include_str!("../../schemas/report.schema.json");

/// The schema of `certification.json`.
pub const CERTIFICATION: &str = include_str!("../../schemas/certification.schema.json");

/// Which of the two documents.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Document {
    /// `--format json`.
    Report,
    /// `--certify DIR`'s `certification.json`.
    Certification,
}

impl Document {
    /// The schema's text.
    pub fn text(self) -> &'static str {
        match self {
            Document::Report => REPORT,
            Document::Certification => CERTIFICATION,
        }
    }

    fn validator(self) -> &'static jsonschema::Validator {
        static REPORT_V: OnceLock<jsonschema::Validator> = OnceLock::new();
        static CERTIFICATION_V: OnceLock<jsonschema::Validator> = OnceLock::new();
        let cell = match self {
            Document::Report => &REPORT_V,
            Document::Certification => &CERTIFICATION_V,
        };
        cell.get_or_init(|| {
            let schema: Value = serde_json::from_str(self.text())
                .expect("the embedded schema is JSON (a unit test checks it)");
            jsonschema::validator_for(&schema)
                .expect("the embedded schema compiles (a unit test checks it)")
        })
    }

    /// Every way `doc` breaks the schema, each with the JSON pointer of the
    /// offending part (at most 20); empty when it validates.
    pub fn violations(self, doc: &Value) -> Vec<String> {
        self.validator()
            .iter_errors(doc)
            .take(20)
            .map(|e| format!("{}: {e}", e.instance_path()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn both_schemas_compile_and_name_the_version() {
        for d in [Document::Report, Document::Certification] {
            let schema: Value = serde_json::from_str(d.text()).unwrap();
            assert_eq!(
                schema["$schema"],
                "https://json-schema.org/draft/2020-12/schema"
            );
            let _ = d.validator();
        }
        let report: Value = serde_json::from_str(REPORT).unwrap();
        assert_eq!(report["$defs"]["schema_version"]["const"], VERSION);
        let bundle: Value = serde_json::from_str(CERTIFICATION).unwrap();
        assert_eq!(bundle["properties"]["schema_version"]["const"], VERSION);
    }

    fn minimal_run() -> Value {
        json!({
            "schema_version": VERSION, "protocol": "acp", "role": "agent", "target": "builtin",
            "conform_version": "0.1.0", "strict": false, "verdict": "passed",
            "summary": {"total": 1, "passed": 1, "failed": 0, "warned": 0, "info": 0, "skipped": 0, "errors": 0},
            "cases": [{"id": "acp/x", "title": "t", "level": "MUST", "requirements": ["r"],
                       "outcome": "pass", "message": "", "duration_ms": 3}]
        })
    }

    #[test]
    fn the_report_schema_refuses_what_a_reader_could_not_trust() {
        assert_eq!(
            Document::Report.violations(&minimal_run()),
            Vec::<String>::new()
        );
        type Break = fn(&mut Value);
        let broken: [(&str, Break); 7] = [
            ("no version", |v| {
                drop(v.as_object_mut().unwrap().remove("schema_version"))
            }),
            ("another version", |v| v["schema_version"] = json!(2)),
            ("an unknown outcome", |v| {
                v["cases"][0]["outcome"] = json!("passed")
            }),
            ("a count that is not a count", |v| {
                v["summary"]["failed"] = json!(-1)
            }),
            ("no verdict", |v| {
                drop(v.as_object_mut().unwrap().remove("verdict"))
            }),
            ("an unknown verdict", |v| v["verdict"] = json!("ok")),
            ("a field nobody documented", |v| v["grade"] = json!("ok")),
        ];
        for (what, breaks) in broken {
            let mut doc = minimal_run();
            breaks(&mut doc);
            assert!(
                !Document::Report.violations(&doc).is_empty(),
                "{what} passed"
            );
        }
    }
}
