//! The step language of ACP cases (data in `corpus/acp/cases/`).
//!
//! A case runs against a fresh agent process. Its `config` says what editor
//! conform plays (capabilities, how far to set up, how to answer permission
//! requests, which of the agent's requests to hold back); its steps `send`
//! requests or notifications, write `raw` bytes, `prompt` the session,
//! `await` an answer, wait for the agent to make a request (`waitFor`),
//! `cancel` the turn, `release` held requests, watch the stream (`quiet`),
//! `probe` that the agent still answers, or close its stdin (`closeStdin`).
//! While any step waits, conform answers the agent's requests as the
//! configured editor and checks every line the agent writes.

use crate::step::{self, Action, Language, ReplyRule};
use serde::Deserialize;
use serde_json::Value;

/// What an agent case needs the agent to offer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Need {
    /// A session `session/new` creates.
    Session,
    /// Modes in the `session/new` result.
    Modes,
    /// Config options in the `session/new` result.
    ConfigOptions,
    /// `authMethods` in the `initialize` result.
    AuthMethods,
    /// An `agentCapabilities` entry, by its dotted path in the schema's
    /// `AgentCapabilities` (`loadSession`, `sessionCapabilities.list`).
    Capability(String),
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Need::Session => "session",
            Need::Modes => "modes",
            Need::ConfigOptions => "configOptions",
            Need::AuthMethods => "authMethods",
            Need::Capability(path) => path,
        })
    }
}

impl<'de> Deserialize<'de> for Need {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        Ok(match name.as_str() {
            "session" => Need::Session,
            "modes" => Need::Modes,
            "configOptions" => Need::ConfigOptions,
            "authMethods" => Need::AuthMethods,
            path if super::schema::schema().has_property("AgentCapabilities", path) => {
                Need::Capability(path.to_owned())
            }
            other => {
                return Err(serde::de::Error::custom(format!(
                    "unknown need {other:?}: session, modes, configOptions, authMethods, or an agentCapabilities path of the schema"
                )));
            }
        })
    }
}

/// The client capabilities conform advertises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Profile {
    /// No capability at all (`clientCapabilities: {}`).
    None,
    FsRead,
    FsWrite,
    /// Both fs methods.
    Fs,
    Terminal,
    /// fs read and write, and terminals.
    #[default]
    All,
    /// Every capability present and `false`: `{"fs": {"readTextFile":
    /// false, "writeTextFile": false}, "terminal": false}`.
    FsFalse,
    /// `{"fs": {}}`: the fs object with nothing in it.
    FsEmpty,
}

impl Profile {
    pub fn capabilities(self) -> Value {
        let fs = |r: bool, w: bool| serde_json::json!({"readTextFile": r, "writeTextFile": w});
        match self {
            Profile::None => serde_json::json!({}),
            Profile::FsRead => serde_json::json!({"fs": fs(true, false), "terminal": false}),
            Profile::FsWrite => serde_json::json!({"fs": fs(false, true), "terminal": false}),
            Profile::Fs => serde_json::json!({"fs": fs(true, true), "terminal": false}),
            Profile::Terminal => serde_json::json!({"fs": fs(false, false), "terminal": true}),
            Profile::All => serde_json::json!({"fs": fs(true, true), "terminal": true}),
            Profile::FsFalse => serde_json::json!({"fs": fs(false, false), "terminal": false}),
            Profile::FsEmpty => serde_json::json!({"fs": {}}),
        }
    }
}

/// How far conform sets the connection up before the steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Setup {
    /// Nothing: the steps start with a fresh process.
    None,
    /// `initialize` only.
    Initialize,
    /// `initialize` and `session/new` (variable `session`).
    #[default]
    Session,
}

/// How conform answers `session/request_permission`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Permission {
    /// The first option of kind `allow_once` or `allow_always`.
    #[default]
    Allow,
    /// The first option of kind `reject_once` or `reject_always`.
    Reject,
    /// The `cancelled` outcome.
    Cancelled,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    pub client: Profile,
    pub setup: Setup,
    pub permission: Permission,
    /// Methods of the agent's requests conform may hold back (`*` for any):
    /// the first request of the agent among them is held unanswered until a
    /// `cancel` (a permission then gets the `cancelled` outcome, any other
    /// request its answer) or a `release`; later ones are answered.
    pub withhold: Vec<String>,
    /// Give the steps `${mcpStub}`: a stdio MCP server (conform's own stub)
    /// to put in `mcpServers`, which records what the agent sends it.
    pub mcp: bool,
}

impl crate::case::Config for Config {}

/// The ACP dialect of the step language.
#[derive(Debug, Clone)]
pub struct Lang;

pub type Step = step::Step<Lang>;

/// The dialect's own keys.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Extra {
    pub prompt: Option<Prompt>,
    /// Send `session/cancel` for this session (templates expanded).
    pub cancel: Option<String>,
    /// Answer every request held back by `withhold`.
    pub release: bool,
    /// Wait at most this many seconds for the agent to connect to the MCP
    /// stub (`initialize` and `tools/list`); not connecting fails the case.
    pub mcp_connected: Option<f64>,
}

/// The dialect's own actions.
#[derive(Debug, Clone, PartialEq)]
pub enum Own {
    Prompt(Prompt),
    Cancel(String),
    Release,
    McpConnected(f64),
}

impl Language for Lang {
    type Extra = Extra;
    type Own = Own;
    type Expect = Expect;
    const COMMON: &'static [&'static str] = step::STDIO_COMMON;
    const OWN: &'static [&'static str] = &["prompt", "cancel", "release", "mcpConnected"];
    const MAX_DEADLINE: f64 = 600.0;

    fn own(extra: &Extra) -> Result<Option<Own>, String> {
        let mut own: Vec<Own> = Vec::new();
        if let Some(p) = &extra.prompt {
            let given = [p.text.is_some(), p.blocks.is_some(), p.directive.is_some()];
            if given.iter().filter(|g| **g).count() != 1 {
                return Err("a prompt has exactly one of `text`, `blocks` and `directive`".into());
            }
            if p.until.is_some() && p.directive.is_none() {
                return Err("`until` goes with a `directive`".into());
            }
            if p.control.is_some() && p.directive.is_none() {
                return Err("`control` goes with a `directive`".into());
            }
            own.push(Own::Prompt(p.clone()));
        }
        own.extend(extra.cancel.clone().map(Own::Cancel));
        if extra.release {
            own.push(Own::Release);
        }
        if let Some(secs) = extra.mcp_connected {
            if !(secs > 0.0 && secs <= Self::MAX_DEADLINE) {
                return Err("`mcpConnected` is a number of seconds".into());
            }
            own.push(Own::McpConnected(secs));
        }
        match <[Own; 1]>::try_from(own) {
            Ok([one]) => Ok(Some(one)),
            Err(v) if v.is_empty() => Ok(None),
            Err(_) => Err("a step is one of prompt, cancel and release".into()),
        }
    }

    fn awaitable(action: &Action<Own>) -> bool {
        matches!(action, Action::Send(s) if !s.notification)
            || matches!(action, Action::Own(Own::Prompt(_)))
    }

    /// Raw bytes too: an answer to bytes that are no request has a null id.
    fn nameable(action: &Action<Own>) -> bool {
        Self::awaitable(action) || matches!(action, Action::Write(_))
    }

    fn check(step: &Step) -> Result<(), String> {
        if let Action::Own(Own::Prompt(p)) = &step.action {
            let forbids = step
                .expect
                .as_ref()
                .is_some_and(|e| !e.no_requests.is_empty());
            if p.control.is_some() && !(step.wait && forbids) {
                return Err(
                    "`control` goes with a prompt that waits for its turn and forbids a call (`noRequests`)"
                        .into(),
                );
            }
        }
        step::check_stdio_expect(step)
    }
}

/// `session/prompt` on a session with one text block (or the given blocks),
/// or a directive of the prompt script whose phrasings conform tries in
/// turn until the agent does what it asks (corpus/acp/prompts.json).
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(default, deny_unknown_fields)]
pub struct Prompt {
    pub text: Option<String>,
    pub blocks: Option<Value>,
    /// A directive line (`read ${workspace}/notes.txt`), templates expanded.
    pub directive: Option<String>,
    /// What shows the agent did it, instead of the directive's own `until`
    /// (`fs/read_text_file`, `update:tool_call`, `running`).
    pub until: Option<Vec<String>>,
    /// The session id; `${session}` by default.
    pub session: Option<String>,
    /// For a prompt whose case forbids the action the directive asks for
    /// (`noRequests`, a capability withheld): the client profile of a
    /// control run that offers the capability. conform first proves the
    /// directive provokes the action (its own `until`) on an agent
    /// initialized with this profile, then sends the phrasing that did it
    /// here, where the capability is withheld, and judges the turn
    /// whatever it provokes: an agent that refrains passes. A control that
    /// provokes nothing leaves the case unexercised (the prompt does not
    /// work on this agent), unless the agent makes the forbidden call here.
    pub control: Option<Profile>,
}

/// Checks written once in code and named from the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamedCheck {
    /// Every `session/new` of the case returned a different id.
    SessionIdsUnique,
    /// Asked for a version no release defines, the agent answers a version
    /// it can support: not the one asked for, not one no release defines.
    VersionNegotiated,
    /// A `session/load` replayed the earlier turns' messages.
    HistoryReplayed,
    /// Every terminal the agent created was released.
    TerminalsReleased,
    /// The file the agent was told to write holds the text.
    FileWritten,
    /// No `authMethods` entry of type `terminal` (the client did not
    /// advertise `auth.terminal`).
    NoTerminalAuthMethod,
    /// No config option of type `boolean` in the setup's session/new result.
    NoBooleanConfig,
    /// The result lists as many config options as session/new offered.
    AllConfigOptions,
    /// Every listed session has the workspace as `cwd`.
    ListedByCwd,
    /// The case's session is not listed.
    SessionNotListed,
    /// `notes.txt` in the workspace still holds what conform put there.
    NotesUnchanged,
    /// Information: the entries of each plan update of the step.
    PlanUpdates,
    /// Information: fields at the root of the results of the case that the
    /// vendored schema does not define.
    RootFields,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    pub reply: Option<ReplyRule>,
    /// A pattern the result must match (see `matcher`).
    pub result: Option<Value>,
    /// A pattern the error object must match.
    pub error: Option<Value>,
    /// Patterns each of which some `update` of the turn must match.
    pub updates: Vec<Value>,
    /// Methods the agent must have requested during the step.
    pub requests: Vec<String>,
    /// Methods the agent must not have requested during the step.
    pub no_requests: Vec<String>,
    /// Skip the case when the agent did not request this method in the step
    /// (it does not follow conform's script, so the case cannot apply).
    pub skip_unless: Option<String>,
    /// Skip the case when no update of the step matches this pattern.
    pub skip_unless_update: Option<Value>,
    /// For `closeStdin`: the agent exits (true) within the deadline.
    pub exit: Option<bool>,
    pub checks: Vec<NamedCheck>,
}

impl Expect {
    /// The own checks this expectation runs, by the names a case's
    /// `charges` gives them.
    pub fn check_names(&self) -> Vec<String> {
        let mut names = vec!["reply".to_owned()];
        for (name, runs) in [
            ("result", self.result.is_some()),
            ("error", self.error.is_some()),
            ("updates", !self.updates.is_empty()),
            ("requests", !self.requests.is_empty()),
            ("noRequests", !self.no_requests.is_empty()),
        ] {
            if runs {
                names.push(name.to_owned());
            }
        }
        // Each method a request check looks for is a check of its own
        // (`noRequests:fs/read_text_file`), for a case that forbids several.
        for (check, methods) in [
            ("requests", &self.requests),
            ("noRequests", &self.no_requests),
        ] {
            names.extend(methods.iter().map(|m| format!("{check}:{m}")));
        }
        names.extend(self.checks.iter().map(crate::step::serde_name));
        names
    }
}

crate::stdio_expect!(Expect);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocols::acp::AgentCases;

    /// Issue 26: a prompt that forbids the call its directive asks for is
    /// proven by a control, or a correct agent that refrains can never
    /// exercise its requirement.
    #[test]
    fn every_prompt_that_forbids_a_call_has_a_control() {
        let mut seen = 0;
        for case in crate::case::load::<AgentCases>(&[]).unwrap() {
            for step in &case.steps {
                if let Action::Own(Own::Prompt(p)) = &step.action
                    && p.directive.is_some()
                    && step
                        .expect
                        .as_ref()
                        .is_some_and(|e| !e.no_requests.is_empty())
                {
                    assert!(
                        p.control.is_some(),
                        "{}: a prompt with noRequests and no control",
                        case.id
                    );
                    seen += 1;
                }
            }
        }
        assert!(seen >= 7, "{seen}");
    }

    #[test]
    fn a_control_goes_with_a_directive_that_forbids_a_call() {
        let case = |step: &str| {
            format!(
                r#"{{"id":"t/c","title":"t","level":"MUST","requirements":["acp.fs.no-call-without-capability"],"steps":[{step}]}}"#
            )
        };
        let good = r#"{"prompt":{"directive":"read x","control":"all"},"expect":{"noRequests":["fs/read_text_file"]}}"#;
        assert!(crate::case::parse_cases::<AgentCases>("t", &case(good)).is_ok());
        for bad in [
            r#"{"prompt":{"text":"hi","control":"all"},"expect":{"noRequests":["fs/read_text_file"]}}"#,
            r#"{"prompt":{"directive":"read x","control":"all"},"expect":{"reply":"result"}}"#,
            r#"{"prompt":{"directive":"read x","control":"all"},"wait":false,"expect":{"noRequests":["fs/read_text_file"]}}"#,
        ] {
            assert!(
                crate::case::parse_cases::<AgentCases>("t", &case(bad)).is_err(),
                "{bad}"
            );
        }
    }
}
