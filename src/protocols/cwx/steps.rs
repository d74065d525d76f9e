//! The step language of cwx cases (data in `corpus/cwx/cases/`). Each case
//! runs against a fresh host process of the run's tier. Its `config` says
//! how far conform sets the host up (`hello`: only read `host/hello`;
//! `ready`: also `host/initialize` and `host/ready`; `extension`: also
//! activate the extension). Steps `send` a request or notification, write
//! raw bytes (`rawHex`), `await` an answer, `waitFor` a host message,
//! watch (`quiet`), `probe` with `host/ping`, or close the host's stdin.

use serde::Deserialize;
use serde_json::Value;

fn yes() -> bool {
    true
}

fn empty_object() -> Value {
    Value::Object(Default::default())
}

/// What a host case needs of the run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Need {
    /// An extension to activate (`--extension`, or the builtin's toy one).
    Extension,
    /// A host launched for the builtin tier.
    BuiltinTier,
    /// The extension registered a tool (variable `tool_handle`).
    Tool,
    /// The extension registered a command (variable `command_handle`).
    Command,
    /// The extension registered a hook (variable `hook_handle`).
    Hook,
}

impl Need {
    /// A kind of handle the extension registers, for the needs that are one.
    pub fn handle_kind(self) -> Option<&'static str> {
        match self {
            Need::Tool => Some("tool"),
            Need::Command => Some("command"),
            Need::Hook => Some("hook"),
            Need::Extension | Need::BuiltinTier => None,
        }
    }
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Need::Extension => "extension",
            Need::BuiltinTier => "builtin-tier",
            Need::Tool => "tool",
            Need::Command => "command",
            Need::Hook => "hook",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Setup {
    None,
    Hello,
    #[default]
    Ready,
    Extension,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    #[serde(default)]
    pub setup: Setup,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct Step {
    #[serde(default)]
    pub send: Option<Send>,
    #[serde(default)]
    pub raw_hex: Option<String>,
    /// Write `rawHex` in pieces, with these pauses.
    #[serde(default)]
    pub pauses: Vec<crate::case::Pause>,
    #[serde(default, rename = "await")]
    pub await_name: Option<String>,
    #[serde(default)]
    pub wait_for: Option<String>,
    #[serde(default)]
    pub quiet: Option<f64>,
    #[serde(default)]
    pub probe: bool,
    #[serde(default)]
    pub close_stdin: bool,
    /// The host must exit by itself within this many seconds.
    #[serde(default)]
    pub exits_within: Option<f64>,
    #[serde(default, rename = "as")]
    pub name: Option<String>,
    #[serde(default = "yes")]
    pub wait: bool,
    #[serde(default)]
    pub expect: Option<Expect>,
    #[serde(default)]
    pub deadline: Option<f64>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Send {
    pub method: String,
    #[serde(default = "empty_object")]
    pub params: Value,
    #[serde(default)]
    pub notification: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum AnswerRule {
    Result,
    Error,
    Any,
    /// No answer at all within the deadline.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NamedCheck {
    /// The result reads as the method's result type, the way the core reads it.
    ResultShape,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    #[serde(default)]
    pub reply: Option<AnswerRule>,
    #[serde(default)]
    pub result: Option<Value>,
    #[serde(default)]
    pub error: Option<Value>,
    /// For `closeStdin`: the host exits within the deadline.
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
    pub fn validate(&self) -> Result<(), String> {
        let actions = [
            self.send.is_some(),
            self.raw_hex.is_some(),
            self.await_name.is_some(),
            self.wait_for.is_some(),
            self.quiet.is_some(),
            self.probe,
            self.close_stdin,
            self.exits_within.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if actions != 1 {
            return Err(format!(
                "a step needs exactly one of send, rawHex, await, waitFor, quiet, probe, closeStdin, exitsWithin (found {actions})"
            ));
        }
        let request = self.send.as_ref().is_some_and(|s| !s.notification);
        crate::case::check_pauses(&self.pauses, self.raw_hex.is_some())?;
        if (!self.wait || self.name.is_some()) && !request {
            return Err("`as` and `wait` go with a request".into());
        }
        if !self.wait && self.name.is_none() {
            return Err("a step with `wait: false` needs an `as` name".into());
        }
        if let Some(h) = &self.raw_hex
            && crate::case::hex_bytes(h).is_none()
        {
            return Err("rawHex is pairs of hex digits".into());
        }
        if let Some(d) = self.deadline
            && !(d > 0.0 && d <= 600.0)
        {
            return Err("deadline is between 0 and 600 seconds".into());
        }
        Ok(())
    }
}
