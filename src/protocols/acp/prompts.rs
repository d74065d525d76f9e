//! The prompt book (`corpus/acp/prompts.json`, and a user's `--prompts`
//! file in front of it): for each directive of the prompt script, the plain
//! English phrasings conform tries in turn (the ladder) and what shows that
//! the agent did what was asked. Sans-IO: the driver sends the rungs and
//! says what it saw.

use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::Path;

pub const BOOK_PATH: &str = "acp/prompts.json";

/// The most phrasings a directive's ladder climbs, the user's included: a
/// turn of a real model can take a minute.
pub const MAX_RUNGS: usize = 6;

/// What shows that the agent did what a directive asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Trigger {
    /// The agent called this client method in the turn.
    Request(String),
    /// The agent sent a session/update of this kind in the turn.
    Update(String),
    /// The turn is still running a moment after the prompt (a long turn).
    Running,
}

impl Trigger {
    pub fn parse(text: &str) -> Trigger {
        match text {
            "running" => Trigger::Running,
            t => match t.strip_prefix("update:") {
                Some(kind) => Trigger::Update(kind.to_owned()),
                None => Trigger::Request(t.to_owned()),
            },
        }
    }
}

impl std::fmt::Display for Trigger {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Trigger::Request(m) => write!(f, "a {m} request"),
            Trigger::Update(k) => write!(f, "a {k} update"),
            Trigger::Running => f.write_str("a turn still running"),
        }
    }
}

/// Where a phrasing comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Origin {
    Conform,
    /// The `--prompts` file.
    User,
}

#[derive(Debug, Clone)]
pub struct Phrasing {
    pub text: String,
    pub origin: Origin,
}

#[derive(Debug, Clone)]
pub struct Directive {
    /// Argument names, in order; a last name ending in `...` takes the rest
    /// of the line.
    pub args: Vec<String>,
    pub until: Vec<Trigger>,
    pub phrasings: Vec<Phrasing>,
    /// When `until` is a step the source leaves to the agent.
    pub optional: Option<Optional>,
}

/// A directive whose `until` is a step the source leaves optional (a
/// permission request: "The Agent **MAY** request permission"). An agent
/// that reaches the action the step is for without taking it took a path
/// the source allows: what a case checks about the step does not apply to
/// it. One that never reaches the action did not follow the prompt.
#[derive(Debug, Clone, PartialEq)]
pub struct Optional {
    /// What shows the agent reached the action (a tool call announced, the
    /// write it was asked for).
    pub reached: Vec<Trigger>,
    /// The catalogue's requirement (a MAY) that leaves the step optional.
    pub requirement: String,
}

#[derive(Debug, Clone)]
pub struct Book {
    pub directives: BTreeMap<String, Directive>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BookFile {
    #[allow(dead_code)]
    note: Option<String>,
    directives: BTreeMap<String, DirectiveFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DirectiveFile {
    args: Vec<String>,
    until: Vec<String>,
    phrasings: Vec<String>,
    #[serde(default)]
    optional: Option<OptionalFile>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct OptionalFile {
    reached: Vec<String>,
    requirement: String,
}

/// A `--prompts` file: phrasings a user's agent understands, each for the
/// directive it serves.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserFile {
    prompts: Vec<UserPhrasing>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserPhrasing {
    directive: String,
    text: String,
}

/// One rung: the whole prompt text conform sends, and what it was.
#[derive(Debug, Clone, PartialEq)]
pub struct Rung {
    pub text: String,
    /// The English phrasing alone (for the report).
    pub phrasing: String,
    pub user: bool,
    /// 1-based, and of how many.
    pub index: usize,
    pub of: usize,
}

/// The ladder of one prompt step.
#[derive(Debug, Clone, PartialEq)]
pub struct Ladder {
    /// The directive's name (`read`).
    pub name: String,
    pub rungs: Vec<Rung>,
    pub until: Vec<Trigger>,
    pub optional: Option<Optional>,
}

impl Book {
    /// The book in the corpus.
    pub fn builtin() -> Result<Book, String> {
        let text = crate::corpus::file(BOOK_PATH).ok_or("corpus/acp/prompts.json is missing")?;
        Book::parse(text).map_err(|e| format!("corpus/acp/prompts.json: {e}"))
    }

    pub fn parse(text: &str) -> Result<Book, String> {
        let file: BookFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let mut directives = BTreeMap::new();
        for (name, d) in file.directives {
            let directive = Directive {
                args: d.args,
                until: d.until.iter().map(|t| Trigger::parse(t)).collect(),
                phrasings: d
                    .phrasings
                    .into_iter()
                    .map(|text| Phrasing {
                        text,
                        origin: Origin::Conform,
                    })
                    .collect(),
                optional: d.optional.map(|o| Optional {
                    reached: o.reached.iter().map(|t| Trigger::parse(t)).collect(),
                    requirement: o.requirement,
                }),
            };
            for p in &directive.phrasings {
                check_names(&name, &directive.args, &p.text)?;
            }
            directives.insert(name, directive);
        }
        Ok(Book { directives })
    }

    /// The book with the phrasings of a `--prompts` file in front of each
    /// directive's own; a phrasing for a directive the book lacks, or naming
    /// an argument its directive has not, is the file's error.
    pub fn with_user(mut self, path: &Path) -> Result<Book, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file: UserFile = serde_json::from_str(&text).map_err(|e| {
            format!(
                "{}: {e} (expected {{\"prompts\": [{{\"directive\": \"read\", \"text\": \"...\"}}]}})",
                path.display()
            )
        })?;
        let mut added: BTreeMap<String, Vec<Phrasing>> = BTreeMap::new();
        for p in file.prompts {
            let Some(d) = self.directives.get(&p.directive) else {
                return Err(format!(
                    "{}: no directive {:?}; the directives are {}",
                    path.display(),
                    p.directive,
                    self.directives
                        .keys()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            };
            check_names(&p.directive, &d.args, &p.text)
                .map_err(|e| format!("{}: {e}", path.display()))?;
            added.entry(p.directive).or_default().push(Phrasing {
                text: p.text,
                origin: Origin::User,
            });
        }
        for (name, mut phrasings) in added {
            let d = self.directives.get_mut(&name).expect("checked above");
            phrasings.append(&mut d.phrasings);
            d.phrasings = phrasings;
        }
        Ok(self)
    }

    /// The ladder for the directive line `line` (`read /w/notes.txt`), the
    /// session's cwd being `cwd`.
    pub fn ladder(&self, line: &str, cwd: &Path) -> Result<Ladder, String> {
        let line = line.trim();
        let (name, rest) = line.split_once(' ').unwrap_or((line, ""));
        let d = self
            .directives
            .get(name)
            .ok_or_else(|| format!("the prompt book has no directive {name:?}"))?;
        let values = arguments(&d.args, rest, cwd);
        let usable: Vec<(&Phrasing, String)> = d
            .phrasings
            .iter()
            .filter_map(|p| fill(&p.text, &values).map(|t| (p, t)))
            .take(MAX_RUNGS)
            .collect();
        let of = usable.len();
        let rungs = usable
            .into_iter()
            .enumerate()
            .map(|(i, (p, english))| Rung {
                text: format!("conform: {line}\n{english}"),
                phrasing: english,
                user: p.origin == Origin::User,
                index: i + 1,
                of,
            })
            .collect::<Vec<_>>();
        if rungs.is_empty() {
            return Err(format!(
                "no phrasing of {name:?} fits the directive line {line:?}"
            ));
        }
        Ok(Ladder {
            name: name.to_owned(),
            rungs,
            until: d.until.clone(),
            optional: d.optional.clone(),
        })
    }
}

/// The names a directive's phrasings may use: its arguments, and `file`.
fn check_names(directive: &str, args: &[String], text: &str) -> Result<(), String> {
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let Some(len) = rest[start..].find('}') else {
            return Err(format!("{directive}: an unclosed ${{ in {text:?}"));
        };
        let name = &rest[start + 2..start + len];
        let known = name == "file" || args.iter().any(|a| a.trim_end_matches("...") == name);
        if !known {
            return Err(format!(
                "{directive}: {text:?} names ${{{name}}}, but the directive's arguments are {args:?} (and file)"
            ));
        }
        rest = &rest[start + len..];
    }
    Ok(())
}

/// The directive line's arguments by name, and `file`: the first argument
/// that is a path, relative to `cwd` when it lies inside it.
fn arguments(names: &[String], rest: &str, cwd: &Path) -> BTreeMap<String, String> {
    let mut values = BTreeMap::new();
    let mut words = rest.trim();
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let value = if last && name.ends_with("...") {
            std::mem::take(&mut words).to_owned()
        } else {
            let (w, more) = words.split_once(' ').unwrap_or((words, ""));
            words = more.trim_start();
            w.to_owned()
        };
        if !value.is_empty() {
            values.insert(name.trim_end_matches("...").to_owned(), value);
        }
    }
    if let Some(path) = values.get("path") {
        let file = Path::new(path)
            .strip_prefix(cwd)
            .map(|p| p.display().to_string())
            .unwrap_or_else(|_| path.clone());
        values.insert("file".into(), file);
    }
    values
}

/// `text` with its `${name}`s filled; `None` when one has no value.
fn fill(text: &str, values: &BTreeMap<String, String>) -> Option<String> {
    let mut out = String::new();
    let mut rest = text;
    while let Some(start) = rest.find("${") {
        let len = rest[start..].find('}')?;
        out.push_str(&rest[..start]);
        out.push_str(values.get(&rest[start + 2..start + len])?);
        rest = &rest[start + len + 1..];
    }
    out.push_str(rest);
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_corpus_book_parses_and_every_directive_has_a_phrasing() {
        let book = Book::builtin().unwrap();
        for name in [
            "echo",
            "read",
            "read-from",
            "write",
            "terminal",
            "permission",
            "tool",
            "plan",
            "wait",
        ] {
            let d = &book.directives[name];
            assert!(!d.phrasings.is_empty(), "{name}");
            assert!(d.phrasings.len() <= MAX_RUNGS, "{name}");
        }
    }

    #[test]
    fn a_ladder_keeps_the_directive_line_above_each_phrasing() {
        let book = Book::builtin().unwrap();
        let l = book
            .ladder("write /w/out.txt hello there", Path::new("/w"))
            .unwrap();
        assert_eq!(l.name, "write");
        assert_eq!(l.until, vec![Trigger::Request("fs/write_text_file".into())]);
        assert!(l.rungs.len() > 1);
        assert_eq!(
            l.rungs[0].text,
            "conform: write /w/out.txt hello there\nWrite the file /w/out.txt with content hello there"
        );
        assert!(
            l.rungs[1]
                .phrasing
                .contains("out.txt in the current directory")
        );
        assert_eq!((l.rungs[1].index, l.rungs[1].of), (2, l.rungs.len()));
    }

    #[test]
    fn user_phrasings_come_first_and_bad_ones_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let good = dir.path().join("good.json");
        std::fs::write(
            &good,
            r#"{"prompts": [{"directive": "read", "text": "cat ${file} for me"}]}"#,
        )
        .unwrap();
        let book = Book::builtin().unwrap().with_user(&good).unwrap();
        let l = book.ladder("read /w/a/b.txt", Path::new("/w")).unwrap();
        assert_eq!(l.rungs[0].phrasing, "cat a/b.txt for me");
        assert!(l.rungs[0].user);
        assert!(!l.rungs[1].user);
        let bad = dir.path().join("bad.json");
        for text in [
            r#"{"prompts": [{"directive": "fly", "text": "go"}]}"#,
            r#"{"prompts": [{"directive": "read", "text": "cat ${command}"}]}"#,
            r#"{"prompts": [{"directive": "read"}]}"#,
        ] {
            std::fs::write(&bad, text).unwrap();
            assert!(Book::builtin().unwrap().with_user(&bad).is_err(), "{text}");
        }
    }

    /// An optional step names a MAY of the catalogue (whose quote the
    /// catalogue test finds in the pages) and what shows the action ran.
    #[test]
    fn an_optional_step_names_a_may_of_the_catalogue() {
        let book = Book::builtin().unwrap();
        let catalogue = crate::suite::Protocol::Acp.catalogue();
        let mut seen = 0;
        for (name, d) in &book.directives {
            let Some(o) = &d.optional else { continue };
            seen += 1;
            let r = catalogue
                .get(&o.requirement)
                .unwrap_or_else(|| panic!("{name}: no requirement {}", o.requirement));
            assert_eq!(r.level, crate::case::Level::May, "{name}");
            assert!(!o.reached.is_empty(), "{name}");
            assert!(!o.reached.iter().any(|t| d.until.contains(t)), "{name}");
        }
        let permission = book.directives["permission"].optional.as_ref();
        assert_eq!(
            permission.map(|o| o.requirement.as_str()),
            Some("acp.tool.request-permission")
        );
        assert_eq!(seen, 1);
    }

    #[test]
    fn a_phrasing_whose_argument_is_missing_is_left_out() {
        let book = Book::builtin().unwrap();
        // `permission` with no path: every phrasing names one.
        assert!(book.ladder("permission", Path::new("/w")).is_err());
        let l = book.ladder("plan", Path::new("/w")).unwrap();
        assert_eq!(l.until, vec![Trigger::Update("plan".into())]);
        assert!(book.ladder("nope x", Path::new("/w")).is_err());
    }
}
