//! Report formats. Each is a pure function of a [`RunReport`].

pub mod junit;
pub mod list;
pub mod matrix;
pub mod schema;

use crate::outcome::{CaseResult, Direction, Outcome, RunReport, Verdict};
use clap::ValueEnum;
use std::fmt::Write as _;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    Human,
    Json,
    Junit,
    Markdown,
    /// One self-contained HTML page: no scripts, no external resources.
    Html,
}

/// `--report FORMAT=FILE`: a report written to a file beside the main one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReportFile {
    pub format: Format,
    pub path: std::path::PathBuf,
}

impl std::str::FromStr for ReportFile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (format, path) = s
            .split_once('=')
            .ok_or_else(|| format!("{s:?} is not FORMAT=FILE"))?;
        let format = Format::from_str(format, true)?;
        if path.is_empty() {
            return Err(format!("{s:?} names no file"));
        }
        Ok(ReportFile {
            format,
            path: path.into(),
        })
    }
}

/// Writes the report of `reports` (one target's, or a matrix of several) in
/// `format` to `output`, or standard output.
pub fn emit(
    reports: &[RunReport],
    format: Format,
    with_list: bool,
    output: Option<&std::path::Path>,
) -> Result<(), crate::error::RunError> {
    let text = match (reports, format) {
        ([one], Format::Human) => human(one, with_list),
        ([one], format) => render(one, format),
        (all, format) => matrix::render(all, format, with_list),
    };
    let text = match format {
        // JSON and JUnit escape what they carry; text formats would pass a
        // target's NUL bytes and terminal escapes straight to a terminal.
        Format::Human | Format::Markdown | Format::Html => printable(&text),
        Format::Json | Format::Junit => text,
    };
    match output {
        Some(path) => std::fs::write(path, &text).map_err(|e| {
            crate::error::RunError::Conform(format!("cannot write {}: {e}", path.display()))
        }),
        None => {
            use std::io::Write;
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(text.as_bytes());
            let _ = out.flush();
            Ok(())
        }
    }
}

/// How many transcript entries a human or Markdown report shows per failure.
pub const SHOWN_TRANSCRIPT_ENTRIES: usize = 12;

pub fn render(report: &RunReport, format: Format) -> String {
    match format {
        Format::Human => human(report, true),
        Format::Json => json(report),
        Format::Junit => junit::single(report),
        Format::Markdown => markdown(report),
        Format::Html => html(report),
    }
}

/// The progress line for one finished case.
pub fn progress_line(r: &CaseResult, done: usize, total: usize) -> String {
    let width = total.to_string().len();
    format!(
        "[{done:>width$}/{total}] {:<5} {:<6} {} ({} ms)",
        r.outcome.as_str().to_uppercase(),
        r.level.as_str(),
        r.id,
        r.duration_ms
    )
}

fn summary_line(report: &RunReport) -> String {
    let s = &report.summary;
    format!(
        "{} {} against {}: {} cases, {} passed, {} failed, {} warned, {} info, {} skipped, {} errors{}",
        report.protocol,
        report.role,
        report.target,
        s.total,
        s.passed,
        s.failed,
        s.warned,
        s.info,
        s.skipped,
        s.errors,
        if report.strict { " (strict)" } else { "" }
    ) + &match (s.waived, s.stale) {
        (0, 0) => String::new(),
        (w, st) => format!("; {w} expected failures waived, {st} stale"),
    } + &match (s.unexercised, s.unexercised_waived) {
        (0, 0) => String::new(),
        (n, 0) => format!("; {n} MUST requirements unexercised (incomplete)"),
        (n, w) => format!("; {n} MUST requirements unexercised (incomplete), {w} more waived"),
    } + &match &report.interrupted {
        Some(i) => format!(
            "; INTERRUPTED by {}: {} cases not run",
            i.signal,
            i.not_run.len()
        ),
        None => String::new(),
    }
}

/// A run's verdict in a word: the verdict's, or INTERRUPTED for a run a
/// signal stopped.
fn verdict_word(report: &RunReport) -> &'static str {
    match report.interrupted {
        Some(_) => "INTERRUPTED",
        None => report.verdict.as_str(),
    }
}

/// The CSS class of a run's verdict.
fn verdict_class(report: &RunReport) -> &'static str {
    match (&report.interrupted, report.verdict) {
        (Some(_), _) | (None, Verdict::Failed) => "fail",
        (None, Verdict::Passed) => "pass",
        (None, Verdict::Incomplete) => "warn",
    }
}

/// The verdict line that ends a report: what the run comes to and its exit
/// status.
fn verdict_line(report: &RunReport) -> String {
    if let Some(i) = &report.interrupted {
        return format!(
            "verdict: INTERRUPTED (exit {}): {} stopped the run with {} selected cases not run; the cases that finished came to {}",
            i.exit_code,
            i.signal,
            i.not_run.len(),
            report.verdict.as_str()
        );
    }
    let why = match report.verdict {
        Verdict::Passed => "no required case failed and every selected MUST was exercised",
        Verdict::Failed => "a required case failed, could not run, or an expected failure is stale",
        Verdict::Incomplete => {
            "nothing failed, but a MUST requirement was never exercised: conform could not test it"
        }
    };
    format!(
        "verdict: {} (exit {}): {why}",
        report.verdict.as_str(),
        report.exit_code()
    )
}

/// The "no vacuous green" lines: each MUST requirement the run did not
/// exercise, with the cases that would have and why they were skipped.
fn unexercised_text(report: &RunReport) -> String {
    let mut out = String::new();
    if report.unexercised.is_empty() {
        return out;
    }
    let _ = writeln!(
        out,
        "\nNOT EXERCISED: {} MUST requirements: every case that checks them was skipped, and not because the target declared it does not support them (the reasons are under \"skipped\"):",
        report.unexercised.len()
    );
    for u in &report.unexercised {
        let cases: Vec<&str> = u.cases.iter().map(|c| c.case.as_str()).collect();
        let _ = write!(out, "  {} ({})", u.requirement, cases.join(", "));
        match &u.waiver {
            Some(reason) => {
                let _ = writeln!(out, ", waived: {reason}");
            }
            None => out.push('\n'),
        }
    }
    out
}

fn transcript_text(r: &CaseResult, out: &mut String, indent: &str) {
    let shown = r.transcript.len().min(SHOWN_TRANSCRIPT_ENTRIES);
    for e in &r.transcript[..shown] {
        let arrow = match e.dir {
            Direction::Sent => "->",
            Direction::Received => "<-",
            Direction::Event => "--",
        };
        let data = e.data.trim_end_matches('\n');
        let _ = writeln!(out, "{indent}{:>6} ms {:<6} {arrow} {data}", e.t_ms, e.conn);
    }
    if r.transcript.len() > shown {
        let _ = writeln!(
            out,
            "{indent}... {} more entries (see --format json)",
            r.transcript.len() - shown
        );
    }
}

/// The human report; `with_list` adds a line per case (left out when the
/// progress lines already showed them).
pub fn human(report: &RunReport, with_list: bool) -> String {
    let mut out = String::new();
    if with_list {
        let total = report.cases.len();
        for (i, c) in report.cases.iter().enumerate() {
            let _ = writeln!(out, "{}", progress_line(c, i + 1, total));
        }
    }
    let notable: Vec<&CaseResult> = report
        .cases
        .iter()
        .filter(|c| {
            matches!(
                c.outcome,
                Outcome::Fail | Outcome::Warn | Outcome::Error | Outcome::Info
            )
        })
        .collect();
    for c in notable {
        let _ = writeln!(
            out,
            "\n{} {} [{}] {}",
            c.outcome.as_str().to_uppercase(),
            c.id,
            c.level.as_str(),
            c.title
        );
        if let Some(reason) = report.waivers.get(&c.id) {
            let _ = writeln!(out, "  expected failure (waived): {reason}");
        }
        let _ = writeln!(out, "  requirements: {}", c.requirements.join(", "));
        for line in c.message.lines() {
            let _ = writeln!(out, "  {line}");
        }
        if matches!(c.outcome, Outcome::Fail | Outcome::Warn | Outcome::Error)
            && !c.transcript.is_empty()
        {
            let _ = writeln!(out, "  exchange:");
            transcript_text(c, &mut out, "    ");
        }
    }
    let skipped: Vec<&CaseResult> = report
        .cases
        .iter()
        .filter(|c| c.outcome == Outcome::Skip)
        .collect();
    if !skipped.is_empty() {
        let _ = writeln!(out, "\nskipped:");
        for c in skipped {
            let _ = writeln!(out, "  {}: {}", c.id, c.message);
        }
    }
    for n in &report.notes {
        let _ = writeln!(out, "\nnote: {n}");
    }
    out.push_str(&unexercised_text(report));
    let _ = writeln!(out, "\n{}", summary_line(report));
    let _ = writeln!(out, "{}", verdict_line(report));
    out
}

fn json(report: &RunReport) -> String {
    let mut s =
        serde_json::to_string_pretty(report).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
    s.push('\n');
    s
}

fn md_cell(s: &str) -> String {
    s.replace('|', "\\|").replace('\n', "<br>")
}

fn markdown(report: &RunReport) -> String {
    let mut out = format!("# conform: {} {}\n\n", report.protocol, report.role);
    let _ = writeln!(
        out,
        "- target: `{}`\n- conform {}\n- {}\n- **{}**\n",
        report.target,
        report.conform_version,
        summary_line(report),
        verdict_line(report)
    );
    out.push_str("| outcome | level | case | requirements | message |\n|---|---|---|---|---|\n");
    for c in &report.cases {
        let _ = writeln!(
            out,
            "| {} | {} | `{}` | {} | {} |",
            c.outcome.as_str(),
            c.level.as_str(),
            c.id,
            c.requirements.join(", "),
            md_cell(&c.message)
        );
    }
    markdown_details(report, "##", &mut out);
    out
}

/// Each failure with its transcript, and what the run did not exercise,
/// under headings of `level` (`##`).
fn markdown_details(report: &RunReport, level: &str, out: &mut String) {
    for c in report
        .cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Fail | Outcome::Warn | Outcome::Error))
    {
        let _ = writeln!(
            out,
            "\n{level} {} `{}`\n\n{}\n\n```",
            c.outcome.as_str(),
            c.id,
            c.message
        );
        transcript_text(c, out, "");
        out.push_str("```\n");
    }
    let unexercised = unexercised_text(report);
    if !unexercised.is_empty() {
        let _ = write!(out, "\n{level} Not exercised\n\n```{unexercised}```\n");
    }
}

/// Writes one JSON file a case into `dir`: its outcome, message and whole
/// recorded transcript, with the bounds the recording keeps.
pub fn write_transcripts(
    report: &RunReport,
    dir: &std::path::Path,
) -> Result<(), crate::error::RunError> {
    let fail = |e: std::io::Error| {
        crate::error::RunError::Conform(format!(
            "cannot write transcripts to {}: {e}",
            dir.display()
        ))
    };
    std::fs::create_dir_all(dir).map_err(fail)?;
    let not_run: &[String] = report.interrupted.as_ref().map_or(&[], |i| &i.not_run);
    for c in report.cases.iter().filter(|c| !not_run.contains(&c.id)) {
        let name: String =
            c.id.chars()
                .map(|ch| {
                    if ch.is_ascii_alphanumeric() || ch == '-' || ch == '_' {
                        ch
                    } else {
                        '.'
                    }
                })
                .collect();
        let body = serde_json::json!({
            "id": c.id,
            "outcome": c.outcome,
            "level": c.level,
            "message": c.message,
            "target": report.target,
            "bound": format!(
                "each entry keeps at most {} characters, and a case at most {} entries; times are milliseconds from the case's start",
                crate::outcome::TRANSCRIPT_ENTRY_LIMIT,
                crate::outcome::TRANSCRIPT_ENTRIES
            ),
            "transcript": c.transcript,
        });
        let text = serde_json::to_string_pretty(&body).unwrap_or_default() + "\n";
        std::fs::write(dir.join(format!("{name}.json")), text).map_err(fail)?;
    }
    Ok(())
}

fn html_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

const OUTCOMES: [Outcome; 6] = [
    Outcome::Fail,
    Outcome::Error,
    Outcome::Warn,
    Outcome::Info,
    Outcome::Skip,
    Outcome::Pass,
];

/// A self-contained HTML report: a summary by level, a table of the
/// requirements the cases check with their worst outcome, every case, and
/// for each failure its message and transcript. Inline CSS only.
fn html(report: &RunReport) -> String {
    let title = format!(
        "conform: {} {} against {}",
        report.protocol, report.role, report.target
    );
    let mut out = html_head(&title);
    html_body(report, "", &mut out);
    out.push_str("</body></html>\n");
    out
}

/// The page's head, its style and its title heading.
fn html_head(title: &str) -> String {
    let mut out = String::new();
    let _ = write!(
        out,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n<title>{}</title>\n<style>\n\
body{{font:14px/1.45 system-ui,sans-serif;margin:2em;color:#222}}\n\
table{{border-collapse:collapse;margin:1em 0}}td,th{{border:1px solid #ccc;padding:3px 8px;text-align:left;vertical-align:top}}\n\
th{{background:#f3f3f3}}code,pre{{font:12px ui-monospace,monospace}}pre{{background:#f7f7f7;padding:8px;overflow-x:auto;white-space:pre-wrap}}\n\
.fail,.error{{background:#fdd}}.warn{{background:#ffe9b3}}.info{{background:#e6f0ff}}.skip{{background:#eee}}.pass{{background:#dfd}}\n\
.verdict{{font-size:1.3em;font-weight:bold}}\n</style></head><body>\n<h1>{}</h1>\n",
        html_escape(title),
        html_escape(title)
    );
    out
}

/// One run's verdict, summaries, cases and failures; every anchor starts
/// with `anchor` so several runs fit on one page.
fn html_body(report: &RunReport, anchor: &str, out: &mut String) {
    use crate::case::Level;
    let _ = writeln!(
        *out,
        "<p class=\"verdict {}\">{}</p>\n<p>conform {} &middot; {}</p>",
        verdict_class(report),
        html_escape(&verdict_line(report)),
        html_escape(&report.conform_version),
        html_escape(&summary_line(report))
    );
    // Summary by level.
    out.push_str("<h2>Summary by level</h2>\n<table><tr><th>level</th>");
    for o in OUTCOMES {
        let _ = write!(out, "<th class=\"{0}\">{0}</th>", o.as_str());
    }
    out.push_str("</tr>\n");
    for level in [Level::Must, Level::Should, Level::May, Level::Info] {
        let cases: Vec<&CaseResult> = report.cases.iter().filter(|c| c.level == level).collect();
        if cases.is_empty() {
            continue;
        }
        let _ = write!(out, "<tr><td>{}</td>", level.as_str());
        for o in OUTCOMES {
            let n = cases.iter().filter(|c| c.outcome == o).count();
            let _ = write!(out, "<td>{n}</td>");
        }
        out.push_str("</tr>\n");
    }
    out.push_str("</table>\n");
    // Requirements.
    let catalogue = report.protocol.catalogue();
    let mut reqs: std::collections::BTreeMap<&str, Vec<&CaseResult>> = Default::default();
    for c in &report.cases {
        for r in &c.requirements {
            reqs.entry(r.as_str()).or_default().push(c);
        }
    }
    out.push_str("<h2>Requirements</h2>\n<table><tr><th>requirement</th><th>level</th><th>worst outcome</th><th>cases</th><th>source says</th></tr>\n");
    for (id, cases) in &reqs {
        let worst = cases
            .iter()
            .map(|c| c.outcome)
            .filter(|o| *o != Outcome::Skip)
            .max_by_key(|o| o.severity())
            .unwrap_or(Outcome::Skip);
        let req = catalogue.get(id);
        let _ = writeln!(
            out,
            "<tr><td><code>{}</code></td><td>{}</td><td class=\"{w}\">{w}</td><td>{}</td><td>{}</td></tr>",
            html_escape(id),
            req.map(|r| r.level.as_str()).unwrap_or(""),
            cases
                .iter()
                .map(|c| format!(
                    "<a href=\"#{anchor}{0}\"><code>{0}</code></a>",
                    html_escape(&c.id)
                ))
                .collect::<Vec<_>>()
                .join("<br>"),
            html_escape(req.map(|r| r.quote.as_str()).unwrap_or("")),
            w = worst.as_str()
        );
    }
    out.push_str("</table>\n");
    // Cases.
    out.push_str("<h2>Cases</h2>\n<table><tr><th>outcome</th><th>level</th><th>case</th><th>message</th></tr>\n");
    for c in &report.cases {
        let _ = writeln!(
            out,
            "<tr id=\"{anchor}{id}\"><td class=\"{o}\">{o}</td><td>{}</td><td><code>{id}</code><br>{}</td><td>{}</td></tr>",
            c.level.as_str(),
            html_escape(&c.title),
            html_escape(&c.message).replace('\n', "<br>"),
            id = html_escape(&c.id),
            o = c.outcome.as_str()
        );
    }
    out.push_str("</table>\n");
    // Failures with their transcripts.
    let failures: Vec<&CaseResult> = report
        .cases
        .iter()
        .filter(|c| matches!(c.outcome, Outcome::Fail | Outcome::Warn | Outcome::Error))
        .collect();
    if !failures.is_empty() {
        let _ = writeln!(
            out,
            "<h2>Failures</h2>\n<p>Each transcript shows both directions with times from the case's start; an entry keeps at most {} characters, a case at most {} entries.</p>",
            crate::outcome::TRANSCRIPT_ENTRY_LIMIT,
            crate::outcome::TRANSCRIPT_ENTRIES
        );
    }
    for c in failures {
        let _ = writeln!(
            out,
            "<h3 class=\"{}\">{} <code>{}</code></h3>\n<p>requirements: {}</p>\n<pre>{}</pre>",
            c.outcome.as_str(),
            c.outcome.as_str().to_uppercase(),
            html_escape(&c.id),
            html_escape(&c.requirements.join(", ")),
            html_escape(&c.message)
        );
        if let Some(reason) = report.waivers.get(&c.id) {
            let _ = writeln!(
                out,
                "<p>expected failure (waived): {}</p>",
                html_escape(reason)
            );
        }
        if !c.transcript.is_empty() {
            out.push_str("<pre>");
            for e in &c.transcript {
                let arrow = match e.dir {
                    Direction::Sent => "->",
                    Direction::Received => "<-",
                    Direction::Event => "--",
                };
                let _ = writeln!(
                    out,
                    "{:>6} ms {:<8} {} {}",
                    e.t_ms,
                    html_escape(&e.conn),
                    html_escape(arrow),
                    html_escape(e.data.trim_end_matches('\n'))
                );
            }
            out.push_str("</pre>\n");
        }
    }
    for n in &report.notes {
        let _ = writeln!(out, "<p>note: {}</p>", html_escape(n).replace('\n', "<br>"));
    }
    let unexercised = unexercised_text(report);
    if !unexercised.is_empty() {
        let _ = writeln!(
            out,
            "<h2 class=\"fail\">Not exercised</h2>\n<pre>{}</pre>",
            html_escape(unexercised.trim())
        );
    }
}

/// `text` with every control character but newline and tab shown as its
/// Unicode control picture (U+2400 block) or U+FFFD, so bytes a target
/// wrote cannot act on the terminal or the page that shows a report.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '\n' | '\t' => c,
            '\u{0}'..='\u{1f}' => char::from_u32(0x2400 + c as u32).unwrap_or('\u{fffd}'),
            '\u{7f}' => '\u{2421}',
            '\u{80}'..='\u{9f}' => '\u{fffd}',
            _ => c,
        })
        .collect()
}
