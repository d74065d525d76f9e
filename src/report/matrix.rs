//! Several targets in one run: a side-by-side matrix (rows: cases; columns:
//! targets), as Autobahn|Testsuite compares implementations, in every
//! format. Each target keeps its own full report beside the matrix.

use super::*;
use crate::outcome::Summary;
use serde_json::{Value, json};

/// The column label of target `i` (from 0): `[1]`, `[2]`...
fn label(i: usize) -> String {
    format!("[{}]", i + 1)
}

/// Every case id of the runs, in the first run's order (the runs select
/// the same cases; any a later run adds come last).
fn rows(reports: &[RunReport]) -> Vec<(&str, &CaseResult)> {
    let mut seen = std::collections::BTreeSet::new();
    let mut out = Vec::new();
    for r in reports {
        for c in &r.cases {
            if seen.insert(c.id.as_str()) {
                out.push((c.id.as_str(), c));
            }
        }
    }
    out
}

fn cell<'a>(report: &'a RunReport, id: &str) -> Option<&'a CaseResult> {
    report.cases.iter().find(|c| c.id == id)
}

/// A cell's text: the outcome, `*` when an expected failure waives it.
fn cell_text(report: &RunReport, id: &str) -> String {
    match cell(report, id) {
        None => "-".into(),
        Some(c) if report.waivers.contains_key(id) => format!("{}*", c.outcome.as_str()),
        Some(c) => c.outcome.as_str().into(),
    }
}

/// The exit status of runs taken together: the worst of them.
/// A signal's status (130, 143) outranks every verdict.
pub fn exit_code(reports: &[RunReport]) -> i32 {
    if let Some(i) = reports.iter().find_map(|r| r.interrupted.as_ref()) {
        return i.exit_code;
    }
    reports
        .iter()
        .map(|r| r.verdict)
        .max_by_key(|v| v.severity())
        .map_or(2, |v| v.exit_code())
}

pub fn render(reports: &[RunReport], format: Format, with_list: bool) -> String {
    match format {
        Format::Human => human_matrix(reports, with_list),
        Format::Json => json_matrix(reports),
        Format::Junit => {
            let runs: Vec<(&RunReport, String)> = reports
                .iter()
                .enumerate()
                .map(|(i, r)| {
                    let name = format!(
                        "conform {} {} {} {}",
                        r.protocol,
                        r.role,
                        label(i),
                        r.target
                    );
                    (r, name)
                })
                .collect();
            let first = reports.first();
            let name = format!(
                "conform {} {} matrix",
                first.map(|r| r.protocol.id()).unwrap_or(""),
                first.map(|r| r.role.id()).unwrap_or("")
            );
            junit::document(&name, &runs)
        }
        Format::Markdown => markdown_matrix(reports),
        Format::Html => html_matrix(reports),
    }
}

fn title(reports: &[RunReport]) -> String {
    let first = reports.first();
    format!(
        "conform: {} {} matrix of {} targets",
        first.map(|r| r.protocol.id()).unwrap_or(""),
        first.map(|r| r.role.id()).unwrap_or(""),
        reports.len()
    )
}

fn human_matrix(reports: &[RunReport], with_list: bool) -> String {
    let mut out = String::new();
    for (i, r) in reports.iter().enumerate() {
        let _ = writeln!(out, "\n===== {} {} =====", label(i), r.target);
        out.push_str(&human(r, with_list));
    }
    let _ = writeln!(out, "\n{}", title(reports));
    for (i, r) in reports.iter().enumerate() {
        let _ = writeln!(out, "  {} {}", label(i), r.target);
    }
    let width = rows(reports)
        .iter()
        .map(|(id, _)| id.len())
        .max()
        .unwrap_or(4)
        .max(4);
    let _ = write!(out, "\n{:<width$}  level ", "case");
    for i in 0..reports.len() {
        let _ = write!(out, " {:<6}", label(i));
    }
    out.push('\n');
    for (id, c) in rows(reports) {
        let _ = write!(out, "{id:<width$}  {:<6}", c.level.as_str());
        for r in reports {
            let _ = write!(out, " {:<6}", cell_text(r, id));
        }
        out.push('\n');
    }
    if reports.iter().any(|r| !r.waivers.is_empty()) {
        out.push_str("(* an expected failure, waived)\n");
    }
    out.push('\n');
    for (i, r) in reports.iter().enumerate() {
        let verdict = match super::verdict_word(r) {
            "PASSED" => "passed",
            v => v,
        };
        let _ = writeln!(out, "{} {verdict}: {}", label(i), summary_line(r));
    }
    out
}

fn json_matrix(reports: &[RunReport]) -> String {
    let mut summary = Summary::default();
    for r in reports {
        let s = &r.summary;
        summary.total += s.total;
        summary.passed += s.passed;
        summary.failed += s.failed;
        summary.warned += s.warned;
        summary.info += s.info;
        summary.skipped += s.skipped;
        summary.errors += s.errors;
        summary.waived += s.waived;
        summary.stale += s.stale;
        summary.unexercised += s.unexercised;
        summary.unexercised_waived += s.unexercised_waived;
    }
    let verdict = reports
        .iter()
        .map(|r| r.verdict)
        .max_by_key(|v| v.severity());
    let targets: Vec<&str> = reports.iter().map(|r| r.target.as_str()).collect();
    let cases: Vec<Value> = rows(reports)
        .into_iter()
        .map(|(id, c)| {
            let by_target: Vec<Value> = reports
                .iter()
                .map(|r| match cell(r, id) {
                    Some(x) => json!({
                        "target": r.target,
                        "outcome": x.outcome,
                        "message": x.message,
                        "waived": r.waivers.contains_key(id),
                    }),
                    None => json!({"target": r.target, "outcome": Value::Null}),
                })
                .collect();
            // The worst outcome of the row, so a reader of `cases` alone
            // sees every case that failed somewhere.
            let worst = reports
                .iter()
                .filter_map(|r| cell(r, id))
                .map(|x| x.outcome)
                .max_by_key(|o| o.severity())
                .unwrap_or(Outcome::Skip);
            let message: Vec<String> = reports
                .iter()
                .enumerate()
                .filter_map(|(i, r)| {
                    cell(r, id)
                        .filter(|x| x.outcome != Outcome::Pass && !x.message.is_empty())
                        .map(|x| format!("{} {}: {}", label(i), x.outcome.as_str(), x.message))
                })
                .collect();
            json!({
                "id": id,
                "title": c.title,
                "level": c.level,
                "requirements": c.requirements,
                "outcome": worst,
                "message": message.join("\n"),
                "by_target": by_target,
            })
        })
        .collect();
    let first = reports.first();
    let mut doc = json!({
        "schema_version": super::schema::VERSION,
        "protocol": first.map(|r| r.protocol.id()),
        "role": first.map(|r| r.role.id()),
        "target": targets.join(" | "),
        "targets": targets,
        "conform_version": env!("CARGO_PKG_VERSION"),
        "strict": first.is_some_and(|r| r.strict),
        "verdict": verdict,
        "summary": summary,
        "cases": cases,
        "runs": reports,
    });
    // A signal stops every target at once: the first stopped run names it,
    // and the rows some target did not finish are listed.
    if let Some(i) = reports.iter().find_map(|r| r.interrupted.as_ref()) {
        let not_run: Vec<&str> = rows(reports)
            .into_iter()
            .map(|(id, _)| id)
            .filter(|id| {
                reports.iter().any(|r| {
                    r.interrupted
                        .as_ref()
                        .is_some_and(|x| x.not_run.iter().any(|n| n == id))
                })
            })
            .collect();
        doc["interrupted"] = json!({
            "signal": i.signal,
            "exit_code": i.exit_code,
            "not_run": not_run,
        });
    }
    let mut s = serde_json::to_string_pretty(&doc).unwrap_or_default();
    s.push('\n');
    s
}

fn markdown_matrix(reports: &[RunReport]) -> String {
    let mut out = format!("# {}\n\n", title(reports));
    for (i, r) in reports.iter().enumerate() {
        let _ = writeln!(out, "- {} `{}`: {}", label(i), r.target, summary_line(r));
    }
    out.push_str("\n| case | level |");
    for i in 0..reports.len() {
        let _ = write!(out, " {} |", label(i));
    }
    out.push_str("\n|---|---|");
    for _ in reports {
        out.push_str("---|");
    }
    out.push('\n');
    for (id, c) in rows(reports) {
        let _ = write!(out, "| `{id}` | {} |", c.level.as_str());
        for r in reports {
            let _ = write!(out, " {} |", cell_text(r, id));
        }
        out.push('\n');
    }
    if reports.iter().any(|r| !r.waivers.is_empty()) {
        out.push_str("\n\\* an expected failure, waived\n");
    }
    for (i, r) in reports.iter().enumerate() {
        let _ = writeln!(out, "\n## {} `{}`", label(i), r.target);
        markdown_details(r, "###", &mut out);
    }
    out
}

fn html_matrix(reports: &[RunReport]) -> String {
    let mut out = html_head(&title(reports));
    out.push_str("<table><tr><th>target</th><th>verdict</th><th>summary</th></tr>\n");
    for (i, r) in reports.iter().enumerate() {
        let _ = writeln!(
            out,
            "<tr><td><a href=\"#t{n}\">{}</a> <code>{}</code></td><td class=\"{}\">{}</td><td>{}</td></tr>",
            label(i),
            html_escape(&r.target),
            super::verdict_class(r),
            super::verdict_word(r),
            html_escape(&summary_line(r)),
            n = i + 1
        );
    }
    out.push_str("</table>\n<h2>Matrix</h2>\n<table><tr><th>case</th><th>level</th>");
    for i in 0..reports.len() {
        let _ = write!(out, "<th>{}</th>", label(i));
    }
    out.push_str("</tr>\n");
    for (id, c) in rows(reports) {
        let _ = write!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td>",
            html_escape(id),
            c.level.as_str()
        );
        for (i, r) in reports.iter().enumerate() {
            let class = cell(r, id).map(|x| x.outcome.as_str()).unwrap_or("");
            let _ = write!(
                out,
                "<td class=\"{class}\"><a href=\"#t{}-{}\">{}</a></td>",
                i + 1,
                html_escape(id),
                html_escape(&cell_text(r, id))
            );
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    for (i, r) in reports.iter().enumerate() {
        let _ = writeln!(
            out,
            "<h1 id=\"t{}\">{} {}</h1>",
            i + 1,
            label(i),
            html_escape(&r.target)
        );
        html_body(r, &format!("t{}-", i + 1), &mut out);
    }
    out.push_str("</body></html>\n");
    out
}
