//! The step language of agent-socket cases (data in `corpus/agent-socket/`).
//!
//! A step does one thing: `send` a request (or `raw` bytes) on a new
//! connection, `await` a reply started earlier, check that one is still
//! `pending`, `sleep`, `probe` that the server still serves, or check the
//! `socketMode`. Its `expect` says what must come back.

pub use crate::case::Pause;
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

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    #[serde(default)]
    pub send: Option<Send>,
    #[serde(default)]
    pub raw: Option<Raw>,
    /// Raw bytes as hex pairs, for bytes a JSON string cannot hold.
    #[serde(default)]
    pub raw_hex: Option<String>,
    #[serde(default, rename = "await")]
    pub await_conn: Option<String>,
    #[serde(default)]
    pub pending: Option<String>,
    #[serde(default)]
    pub sleep: Option<f64>,
    /// Send `agent/initialize` and expect a reply line: the server still serves.
    #[serde(default)]
    pub probe: bool,
    /// Check the socket file's and its directory's modes.
    #[serde(default)]
    pub socket_mode: bool,
    /// Names the connection, so a later step can `await` it.
    #[serde(default)]
    pub conn: Option<String>,
    /// Read the reply now (true) or leave it to an `await` (false).
    #[serde(default = "yes")]
    pub wait: bool,
    /// Close the connection right after sending, without reading.
    #[serde(default)]
    pub close: bool,
    /// Shut down conform's writing half after sending, then read the reply.
    #[serde(default)]
    pub half_close: bool,
    /// Write the request in pieces: stop after byte `at` for `ms` milliseconds.
    #[serde(default)]
    pub pauses: Vec<Pause>,
    #[serde(default)]
    pub expect: Option<Expect>,
    /// Overrides the method's deadline, in seconds.
    #[serde(default)]
    pub deadline: Option<f64>,
}

/// A JSON-RPC request conform builds and writes as one compact line.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Send {
    pub method: String,
    #[serde(default = "empty_object")]
    pub params: Value,
    /// The request id; by default the next integer of the run.
    #[serde(default)]
    pub id: Option<Value>,
    /// Send without an id (a notification).
    #[serde(default)]
    pub notification: bool,
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// Raw bytes: a literal string (templates expanded), or a generated run.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Raw {
    Text(String),
    Filled {
        #[serde(default)]
        prefix: String,
        fill: String,
        bytes: usize,
        #[serde(default)]
        suffix: String,
    },
}

/// What kind of reply a step needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyRule {
    /// A result (an `error` that is null or absent, a `result` that is not null).
    Result,
    /// An error.
    Error,
    /// A reply line of either kind.
    Any,
    /// Anything, including a close or silence: only recorded.
    Optional,
    /// No reply line at all before the deadline or the close.
    None,
    /// No reply is needed, but a reply line that comes must be a whole,
    /// well-formed JSON-RPC response whose id is null or the request's.
    #[serde(rename = "if-any")]
    IfAny,
    /// As `if-any`, but a reply line is due before the deadline.
    #[serde(rename = "due")]
    Due,
}

/// Checks written once in code and named from the data. A check finds
/// broken rules, and may say what it saw (for INFO cases).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
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
}

impl Expect {
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
        }
    }

    /// The reply rule, by default read from which pattern is given.
    pub fn rule(&self) -> ReplyRule {
        self.reply.unwrap_or(match (&self.result, &self.error) {
            (Some(_), _) => ReplyRule::Result,
            (None, Some(_)) => ReplyRule::Error,
            (None, None) => ReplyRule::Any,
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
            self.await_conn.is_some(),
            self.pending.is_some(),
            self.sleep.is_some(),
            self.probe,
            self.socket_mode,
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if actions != 1 {
            return Err(format!(
                "a step needs exactly one of send, raw, rawHex, await, pending, sleep, probe, socketMode (found {actions})"
            ));
        }
        let sends = self.send.is_some() || self.raw.is_some() || self.raw_hex.is_some();
        if !self.wait && self.conn.is_none() {
            return Err("a step with `wait: false` needs a `conn` name to await".into());
        }
        if (self.close || self.half_close || !self.wait || self.conn.is_some()) && !sends {
            return Err("`conn`, `wait`, `close` and `halfClose` go with send or raw".into());
        }
        crate::case::check_pauses(&self.pauses, sends)?;
        if self.close && self.half_close {
            return Err("a step closes or half-closes, not both".into());
        }
        if let Some(h) = &self.raw_hex
            && crate::case::hex_bytes(h).is_none()
        {
            return Err("rawHex is pairs of hex digits".into());
        }
        if self.close && self.expect.is_some() {
            return Err("a step that closes right away reads no reply to expect".into());
        }
        if let Some(s) = self.sleep
            && !(0.0..=60.0).contains(&s)
        {
            return Err("sleep is between 0 and 60 seconds".into());
        }
        if let Some(d) = self.deadline
            && !(d > 0.0 && d <= 3600.0)
        {
            return Err("deadline is between 0 and 3600 seconds".into());
        }
        if let Some(Raw::Filled { bytes, .. }) = &self.raw
            && *bytes > 256 * 1024 * 1024
        {
            return Err("a generated raw step is at most 256 MiB".into());
        }
        Ok(())
    }
}
