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

use serde::Deserialize;
use serde_json::Value;

fn yes() -> bool {
    true
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Config {
    #[serde(default)]
    pub client: Profile,
    #[serde(default)]
    pub setup: Setup,
    #[serde(default)]
    pub permission: Permission,
    /// Methods of the agent's requests conform holds unanswered until a
    /// `release` step (or a `cancel`, for permission requests).
    #[serde(default)]
    pub withhold: Vec<String>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            client: Profile::All,
            setup: Setup::Session,
            permission: Permission::Allow,
            withhold: vec![],
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    #[serde(default)]
    pub send: Option<Send>,
    #[serde(default)]
    pub raw: Option<String>,
    /// Raw bytes written as hex pairs (for bytes a JSON string cannot hold,
    /// such as invalid UTF-8).
    #[serde(default)]
    pub raw_hex: Option<String>,
    /// Write `raw` or `rawHex` in pieces, with these pauses.
    #[serde(default)]
    pub pauses: Vec<crate::case::Pause>,
    #[serde(default)]
    pub prompt: Option<Prompt>,
    #[serde(default, rename = "await")]
    pub await_name: Option<String>,
    /// Wait until the agent has requested this method in the case; the case
    /// is skipped when it does not (it may not follow conform's script).
    #[serde(default)]
    pub wait_for: Option<String>,
    /// Send `session/cancel` for this session (templates expanded).
    #[serde(default)]
    pub cancel: Option<String>,
    /// Answer every request held back by `withhold`.
    #[serde(default)]
    pub release: bool,
    /// Keep reading (and answering) for this many seconds.
    #[serde(default)]
    pub quiet: Option<f64>,
    /// The agent still answers a request.
    #[serde(default)]
    pub probe: bool,
    /// Close the agent's stdin; `expect.exit` says whether it must exit.
    #[serde(default)]
    pub close_stdin: bool,
    /// Names a request so a later step can `await` it, and keeps its result
    /// as a variable of that name.
    #[serde(default, rename = "as")]
    pub name: Option<String>,
    /// Wait for the answer now (true) or leave it to an `await` (false).
    #[serde(default = "yes")]
    pub wait: bool,
    #[serde(default)]
    pub expect: Option<Expect>,
    /// Overrides the step's deadline, in seconds.
    #[serde(default)]
    pub deadline: Option<f64>,
}

/// A JSON-RPC request (or notification) conform writes as one line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Send {
    pub method: String,
    #[serde(default = "empty_object")]
    pub params: Value,
    /// The request id; by default the next integer of the case.
    #[serde(default)]
    pub id: Option<Value>,
    #[serde(default)]
    pub notification: bool,
}

/// `session/prompt` on a session with one text block (or the given blocks).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prompt {
    #[serde(default)]
    pub text: Option<String>,
    #[serde(default)]
    pub blocks: Option<Value>,
    /// The session id; `${session}` by default.
    #[serde(default)]
    pub session: Option<String>,
}

/// What kind of answer a step needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerRule {
    Result,
    Error,
    Any,
    /// Only recorded.
    Optional,
}

/// Checks written once in code and named from the data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamedCheck {
    /// Every `session/new` of the case returned a different id.
    SessionIdsUnique,
    /// The negotiated version is the requested one when the agent supports
    /// it; otherwise a version the agent answers to its own latest.
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
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Expect {
    #[serde(default)]
    pub reply: Option<AnswerRule>,
    /// A pattern the result must match (see `matcher`).
    #[serde(default)]
    pub result: Option<Value>,
    /// A pattern the error object must match.
    #[serde(default)]
    pub error: Option<Value>,
    /// Patterns each of which some `update` of the turn must match.
    #[serde(default)]
    pub updates: Vec<Value>,
    /// Methods the agent must have requested during the step.
    #[serde(default)]
    pub requests: Vec<String>,
    /// Methods the agent must not have requested during the step.
    #[serde(default)]
    pub no_requests: Vec<String>,
    /// Skip the case when the agent did not request this method in the step
    /// (it does not follow conform's script, so the case cannot apply).
    #[serde(default)]
    pub skip_unless: Option<String>,
    /// Skip the case when no update of the step matches this pattern.
    #[serde(default)]
    pub skip_unless_update: Option<Value>,
    /// For `closeStdin`: the agent exits (true) within the deadline.
    #[serde(default)]
    pub exit: Option<bool>,
    #[serde(default)]
    pub checks: Vec<NamedCheck>,
}

impl Expect {
    pub fn rule(&self) -> AnswerRule {
        self.reply.unwrap_or(match (&self.result, &self.error) {
            (Some(_), _) => AnswerRule::Result,
            (None, Some(_)) => AnswerRule::Error,
            (None, None) => AnswerRule::Any,
        })
    }
}

impl Step {
    /// Checks a step is one action with modifiers that fit it; called at load.
    pub fn validate(&self) -> Result<(), String> {
        let actions = [
            self.send.is_some(),
            self.raw.is_some(),
            self.raw_hex.is_some(),
            self.prompt.is_some(),
            self.await_name.is_some(),
            self.wait_for.is_some(),
            self.cancel.is_some(),
            self.release,
            self.quiet.is_some(),
            self.probe,
            self.close_stdin,
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if actions != 1 {
            return Err(format!(
                "a step needs exactly one of send, raw, rawHex, prompt, await, waitFor, cancel, release, quiet, probe, closeStdin (found {actions})"
            ));
        }
        let requests = self.prompt.is_some() || self.send.as_ref().is_some_and(|s| !s.notification);
        crate::case::check_pauses(&self.pauses, self.raw.is_some() || self.raw_hex.is_some())?;
        if !self.wait && self.name.is_none() {
            return Err("a step with `wait: false` needs an `as` name to await".into());
        }
        if !self.wait && !requests {
            return Err("`wait` goes with a request (send or prompt)".into());
        }
        if let Some(h) = &self.raw_hex
            && crate::case::hex_bytes(h).is_none()
        {
            return Err("rawHex is pairs of hex digits, spaces allowed".into());
        }
        if self.name.is_some() && !requests && self.raw.is_none() && self.raw_hex.is_none() {
            return Err("`as` goes with a request (send or prompt) or raw bytes".into());
        }
        if let Some(p) = &self.prompt
            && p.text.is_some() == p.blocks.is_some()
        {
            return Err("a prompt has exactly one of `text` and `blocks`".into());
        }
        if let Some(s) = &self.send
            && s.notification
            && s.id.is_some()
        {
            return Err("a notification has no id".into());
        }
        if let Some(q) = self.quiet
            && !(0.0..=60.0).contains(&q)
        {
            return Err("quiet is between 0 and 60 seconds".into());
        }
        if let Some(d) = self.deadline
            && !(d > 0.0 && d <= 600.0)
        {
            return Err("deadline is between 0 and 600 seconds".into());
        }
        if let Some(e) = &self.expect
            && e.exit.is_some()
            && !self.close_stdin
        {
            return Err("`expect.exit` goes with closeStdin".into());
        }
        Ok(())
    }
}
