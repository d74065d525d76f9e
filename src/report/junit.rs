//! `--format junit`: one `testsuite` a target, one `testcase` a case, written
//! by `quick-junit` (nextest's JUnit model and writer), which escapes what a
//! target sent and drops the characters XML 1.0 cannot carry.
//!
//! The document must validate against Jenkins' `junit-10.xsd`, which pytest
//! also checks its reports with (`tests/junit_schema.rs`). That schema admits
//! `skipped` on a `testsuite` only; quick-junit writes it on `testsuites` too,
//! so [`document`] takes it off the root element.

use super::transcript_text;
use crate::outcome::{CaseResult, Outcome, RunReport};
use quick_junit::{NonSuccessKind, Property, Report, TestCase, TestCaseStatus, TestSuite};
use std::time::Duration;

/// One run's document: a single testsuite.
pub fn single(report: &RunReport) -> String {
    let name = format!("conform {} {}", report.protocol, report.role);
    document(&name, &[(report, name.clone())])
}

/// A document named `name` of one testsuite a run, each with its own name.
pub fn document(name: &str, runs: &[(&RunReport, String)]) -> String {
    let mut doc = Report::new(name);
    let mut total = Duration::ZERO;
    for (report, suite_name) in runs {
        let suite = suite(report, suite_name);
        total += suite.time.unwrap_or_default();
        doc.add_test_suite(suite);
    }
    doc.set_time(total);
    match doc.to_string() {
        Ok(xml) => without_root_skipped(&xml),
        // The model is built from strings quick-junit has cleaned; writing to
        // memory cannot fail on I/O. Say so in XML rather than panic.
        Err(e) => format!(
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"conform\" tests=\"0\" failures=\"0\" errors=\"1\"><!-- cannot write the report: {} --></testsuites>\n",
            e.to_string().replace("--", "- -")
        ),
    }
}

/// `xml` with the `skipped` attribute removed from its `testsuites` element
/// (junit-10.xsd does not declare it there). Attribute values are escaped,
/// so ` skipped="` inside the root tag can only be the attribute itself.
fn without_root_skipped(xml: &str) -> String {
    let Some(start) = xml.find("<testsuites") else {
        return xml.to_owned();
    };
    let end = xml[start..].find('>').map_or(xml.len(), |e| start + e);
    let tag = &xml[start..end];
    let Some(at) = tag.find(" skipped=\"") else {
        return xml.to_owned();
    };
    let value_start = at + " skipped=\"".len();
    let Some(len) = tag[value_start..].find('"') else {
        return xml.to_owned();
    };
    let cut = start + at..start + value_start + len + 1;
    let mut out = String::with_capacity(xml.len());
    out.push_str(&xml[..cut.start]);
    out.push_str(&xml[cut.end..]);
    out
}

fn millis(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

/// The testsuite of one run: its cases, then a failed test case for each
/// MUST requirement the run did not exercise, so CI readers see the gap (a
/// skipped one when a baseline waives it).
fn suite(report: &RunReport, name: &str) -> TestSuite {
    let mut suite = TestSuite::new(name);
    suite.add_property(Property::new("target", report.target.as_str()));
    if let Some(i) = &report.interrupted {
        suite.add_property(Property::new("interrupted", i.signal));
    }
    let mut time = Duration::ZERO;
    for c in &report.cases {
        time += millis(c.duration_ms);
        suite.add_test_case(case(report, c));
    }
    for u in &report.unexercised {
        let why: Vec<String> = u
            .cases
            .iter()
            .map(|c| format!("{}: {}", c.case, c.why))
            .collect();
        // A baseline may accept the gap: then it is a skip, with the reason.
        let status = match &u.waiver {
            None => {
                let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
                s.set_message(
                    "MUST requirement not exercised: every case that checks it was skipped",
                )
                .set_type("unexercised")
                .set_description(why.join("\n"));
                s
            }
            Some(reason) => {
                let mut s = TestCaseStatus::skipped();
                s.set_message(format!("MUST requirement not exercised, waived: {reason}"));
                s
            }
        };
        let mut t = TestCase::new(u.requirement.as_str(), status);
        t.set_classname(format!("{}.unexercised", report.protocol))
            .set_time(Duration::ZERO);
        suite.add_test_case(t);
    }
    suite.set_time(time);
    suite
}

fn case(report: &RunReport, c: &CaseResult) -> TestCase {
    let first_line = c.message.lines().next().unwrap_or("");
    let mut system_out = None;
    let status = match c.outcome {
        Outcome::Fail => {
            let mut transcript = String::new();
            transcript_text(c, &mut transcript, "");
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Failure);
            s.set_message(first_line)
                .set_type(c.level.as_str())
                .set_description(format!("{}\n\n{transcript}", c.message));
            s
        }
        Outcome::Error => {
            let mut s = TestCaseStatus::non_success(NonSuccessKind::Error);
            s.set_message(first_line)
                .set_description(c.message.as_str());
            s
        }
        Outcome::Skip => {
            let mut s = TestCaseStatus::skipped();
            s.set_message(c.message.as_str());
            s
        }
        // Seen and worth knowing, never a failure: the test passes and says it.
        Outcome::Warn | Outcome::Info => {
            system_out = Some(format!(
                "{}: {}",
                c.outcome.as_str().to_uppercase(),
                c.message
            ));
            TestCaseStatus::success()
        }
        Outcome::Pass => TestCaseStatus::success(),
    };
    let mut t = TestCase::new(c.id.as_str(), status);
    t.set_classname(report.protocol.id())
        .set_time(millis(c.duration_ms));
    if let Some(out) = system_out {
        t.set_system_out(out);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_root_loses_only_its_skipped_attribute() {
        let xml = "<?xml version=\"1.0\"?>\n<testsuites name=\"a skipped=&quot;1&quot;\" tests=\"2\" skipped=\"1\" failures=\"0\">\n    <testsuite name=\"s\" tests=\"2\" skipped=\"1\"/>\n</testsuites>\n";
        assert_eq!(
            without_root_skipped(xml),
            "<?xml version=\"1.0\"?>\n<testsuites name=\"a skipped=&quot;1&quot;\" tests=\"2\" failures=\"0\">\n    <testsuite name=\"s\" tests=\"2\" skipped=\"1\"/>\n</testsuites>\n"
        );
        assert_eq!(without_root_skipped("<a/>"), "<a/>");
    }
}
