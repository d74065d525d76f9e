//! The step language of agent-socket cases (data in `corpus/agent-socket/`),
//! the agent-socket dialect of [`crate::step`].
//!
//! A step does one thing: `send` a request (or `raw` bytes) on a new
//! connection, `await` a reply started earlier, check that one is still
//! `pending`, let time pass (`quiet`), `probe` that the server still
//! serves, or check the `socketMode`. Its `expect` says what must come back.

use crate::step::{self, Action, Language, ReplyRule, key};
use serde::Deserialize;
use serde_json::Value;

fn yes() -> bool {
    true
}

/// What a server case needs the server to declare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Need {
    /// A usable sandbox (`workspace` and `python`).
    Sandbox,
    /// At least one tool.
    Tools,
    /// A handshake that succeeded.
    Handshake,
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Need::Sandbox => "sandbox",
            Need::Tools => "tools",
            Need::Handshake => "handshake",
        })
    }
}

/// The agent-socket dialect of the step language.
#[derive(Debug, Clone)]
pub struct Lang;

pub type Step = step::Step<Lang>;

/// The dialect's own keys: its actions, and how a connection ends.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Extra {
    /// The reply on this connection has not come yet.
    pub pending: Option<String>,
    /// Check the socket file's and its directory's modes.
    pub socket_mode: bool,
    /// Close the connection right after sending, without reading.
    pub close: bool,
    /// Shut down conform's writing half after sending, then read the reply.
    pub half_close: bool,
    /// The step prepares the case in the sandbox: when it does not get what
    /// it expects, the case is skipped as not exercised (the sandbox could
    /// not be prepared), not failed.
    pub setup: bool,
}

/// The dialect's own actions.
#[derive(Debug, Clone, PartialEq)]
pub enum Own {
    Pending(String),
    SocketMode,
}

impl Language for Lang {
    type Extra = Extra;
    type Own = Own;
    type Expect = Expect;
    const COMMON: &'static [&'static str] = &[
        key::SEND,
        key::RAW,
        key::RAW_HEX,
        key::AWAIT,
        key::QUIET,
        key::PROBE,
    ];
    const OWN: &'static [&'static str] = &["pending", "socketMode"];
    const MAX_DEADLINE: f64 = 3600.0;

    fn own(extra: &Extra) -> Result<Option<Own>, String> {
        match (&extra.pending, extra.socket_mode) {
            (Some(name), false) => Ok(Some(Own::Pending(name.clone()))),
            (None, true) => Ok(Some(Own::SocketMode)),
            (None, false) => Ok(None),
            (Some(_), true) => Err("a step is one of pending and socketMode, not both".into()),
        }
    }

    /// Every request or raw write opens a connection a later step may await.
    fn awaitable(action: &Action<Own>) -> bool {
        matches!(action, Action::Send(_) | Action::Write(_))
    }

    fn paced(action: &Action<Own>) -> bool {
        Self::awaitable(action)
    }

    fn check(step: &Step) -> Result<(), String> {
        let e = &step.extra;
        if (e.close || e.half_close) && !Self::awaitable(&step.action) {
            return Err("`close` and `halfClose` go with send or raw".into());
        }
        if e.close && e.half_close {
            return Err("a step closes or half-closes, not both".into());
        }
        if e.close && step.expect.is_some() {
            return Err("a step that closes right away reads no reply to expect".into());
        }
        Ok(())
    }
}

/// Checks written once in code and named from the data. A check finds
/// broken rules, and may say what it saw (for INFO cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamedCheck {
    /// Reserved namespaces, one declaration per `namespace.name`.
    ToolDeclarations,
    /// "`workspace` and `python` come together".
    SandboxPair,
    /// The workspace is an absolute path.
    WorkspaceAbsolute,
    /// A -32001 error's optional `data` is `{"timeoutSeconds": positive}`.
    TimeoutData,
    /// Breaks nothing: says which halves the handshake declares.
    DescribeHalves,
    /// A -32001 to `sandbox/execute` names no limit longer than the
    /// command's `timeout`, and names its limit when it came sooner.
    TimeoutLimit,
    /// A call of a declared tool by `namespace.name` is not answered as the
    /// call of an undeclared tool (kept as `undeclared`) while its bare name
    /// (kept as `bare`) is not.
    FullNameKnown,
    /// A call with a null caller is not refused as invalid params while the
    /// same call with a root caller (kept as `rooted`) is not.
    CallerNullAccepted,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default)]
    pub reply: Option<ReplyRule>,
    /// A pattern the result must match (see `matcher`).
    #[serde(default)]
    pub result: Option<Value>,
    /// A pattern the error object must match.
    #[serde(default)]
    pub error: Option<Value>,
    /// Check the result (or error) against the method's shape in `table`.
    #[serde(default = "yes")]
    pub shape: bool,
    /// Check the JSON-RPC 2.0 response object rules.
    #[serde(default)]
    pub envelope: bool,
    /// The line is compact JSON.
    #[serde(default)]
    pub compact: bool,
    /// Nothing follows the reply line on the connection.
    #[serde(default, rename = "nothingAfter")]
    pub nothing_after: bool,
    #[serde(default)]
    pub checks: Vec<NamedCheck>,
    /// Keep what came (its kind, code, message, result) as the variable of
    /// this name, for a later check to compare with.
    #[serde(default)]
    pub keep: Option<String>,
}

impl Expect {
    /// The own checks this expectation runs, by the names a case's
    /// `charges` gives them.
    pub fn check_names(&self) -> Vec<String> {
        let mut names = vec!["reply".to_owned()];
        for (name, runs) in [
            ("result", self.result.is_some()),
            ("error", self.error.is_some()),
            ("shape", self.shape),
            ("envelope", self.envelope),
            ("compact", self.compact),
            ("nothingAfter", self.nothing_after),
        ] {
            if runs {
                names.push(name.to_owned());
            }
        }
        names.extend(self.checks.iter().map(crate::step::serde_name));
        names
    }

    /// A reply line of either kind, nothing else checked.
    pub fn any_reply() -> Expect {
        Expect {
            reply: Some(ReplyRule::Any),
            result: None,
            error: None,
            shape: false,
            envelope: false,
            compact: false,
            nothing_after: false,
            checks: vec![],
            keep: None,
        }
    }

    /// The reply rule, by default read from which pattern is given.
    pub fn rule(&self) -> ReplyRule {
        ReplyRule::of(self.reply, &self.result, &self.error)
    }
}
