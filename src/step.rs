//! The step language of the cases where conform drives the target (the
//! agent-socket server, cwx host and ACP agent suites), one language for
//! the three: a step is one action with the modifiers that fit it. The JSON
//! is an object whose keys name the action (`send`, `raw`, `await`, ...);
//! it is read into [`Step`], whose [`Action`] the drivers match
//! exhaustively. One name per concept: `quiet` (agent-socket's first cases
//! said `sleep`), `as` (they said `conn`).
//!
//! A dialect ([`Language`]) says which of the common actions its driver
//! runs, adds its own keys and actions, and types its `expect`; an action or
//! key it does not have is a bad case file.

use crate::case::Pause;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The most raw bytes one generated `raw` step writes.
const MAX_FILLED: usize = 256 * 1024 * 1024;

/// One step of a case in dialect `L`.
#[derive(Debug, Clone)]
pub struct Step<L: Language> {
    pub action: Action<L::Own>,
    /// Names the request (or connection) so a later `await` finds it; the
    /// answer's result is kept as a variable of that name where the
    /// dialect keeps results.
    pub name: Option<String>,
    /// Read the answer now (true) or leave it to an `await` (false).
    pub wait: bool,
    /// Write the bytes in pieces: after byte `at`, wait `ms`.
    pub pauses: Vec<Pause>,
    pub expect: Option<L::Expect>,
    /// Overrides the step's deadline, in seconds.
    pub deadline: Option<f64>,
    /// The dialect's own keys of this step.
    pub extra: L::Extra,
}

/// What a step does.
#[derive(Debug, Clone, PartialEq)]
pub enum Action<O> {
    /// A JSON-RPC request or notification conform builds.
    Send(Outgoing),
    /// Bytes conform writes as they are.
    Write(Bytes),
    /// Wait for the answer to the request named so.
    Await(String),
    /// Wait until the target has sent a message (or request) of this method.
    WaitFor(String),
    /// Keep watching (and answering) for this many seconds.
    Quiet(f64),
    /// The target still answers a request.
    Probe,
    /// Close the target's stdin.
    CloseStdin,
    /// The target exits by itself within this many seconds.
    ExitsWithin(f64),
    /// One of the dialect's own actions.
    Own(O),
}

/// The common actions by their JSON key, for [`Language::COMMON`].
pub mod key {
    pub const SEND: &str = "send";
    pub const RAW: &str = "raw";
    pub const RAW_HEX: &str = "rawHex";
    pub const AWAIT: &str = "await";
    pub const WAIT_FOR: &str = "waitFor";
    pub const QUIET: &str = "quiet";
    pub const PROBE: &str = "probe";
    pub const CLOSE_STDIN: &str = "closeStdin";
    pub const EXITS_WITHIN: &str = "exitsWithin";
}

/// A JSON-RPC request (or notification) conform writes.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Outgoing {
    pub method: String,
    #[serde(default = "empty_object")]
    pub params: Value,
    /// The request id; by default the driver's next one. `"id": null` is
    /// the id null (a request, JSON-RPC's "MAY be Null"), not an absent id.
    #[serde(default, deserialize_with = "present")]
    pub id: Option<Value>,
    /// Send without an id.
    #[serde(default)]
    pub notification: bool,
}

/// A member that is present, null included.
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Value>, D::Error> {
    Value::deserialize(d).map(Some)
}

fn empty_object() -> Value {
    Value::Object(Map::new())
}

fn yes() -> bool {
    true
}

/// Bytes a step writes.
#[derive(Debug, Clone, PartialEq)]
pub enum Bytes {
    /// A literal string; templates (`${...}`) are expanded.
    Text(String),
    /// `prefix`, then `fill` repeated to `bytes` bytes, then `suffix`.
    Filled {
        prefix: String,
        fill: String,
        bytes: usize,
        suffix: String,
    },
    /// Bytes a JSON string cannot hold, written as hex pairs.
    Hex(Vec<u8>),
}

impl Bytes {
    /// The bytes of a `Filled` run or a `Hex` string; a `Text` is the
    /// driver's to expand first.
    pub fn generated(&self) -> Option<Vec<u8>> {
        match self {
            Bytes::Text(_) => None,
            Bytes::Hex(b) => Some(b.clone()),
            Bytes::Filled {
                prefix,
                fill,
                bytes,
                suffix,
            } => {
                let mut b = Vec::with_capacity(prefix.len() + bytes + suffix.len());
                b.extend_from_slice(prefix.as_bytes());
                let unit = if fill.is_empty() { "x" } else { fill.as_str() };
                while b.len() < prefix.len() + bytes {
                    b.extend_from_slice(unit.as_bytes());
                }
                b.truncate(prefix.len() + bytes);
                b.extend_from_slice(suffix.as_bytes());
                Some(b)
            }
        }
    }
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawBytes {
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

/// What kind of answer a step needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReplyRule {
    /// A result (an `error` that is null or absent, a `result` not null).
    Result,
    /// An error.
    Error,
    /// An answer of either kind.
    Any,
    /// Anything, including silence: only recorded.
    Optional,
    /// No answer at all before the deadline.
    None,
    /// No answer is needed, but one that comes must be a whole,
    /// well-formed JSON-RPC response whose id is null or the request's.
    #[serde(rename = "if-any")]
    IfAny,
    /// As `if-any`, but an answer is due before the deadline.
    #[serde(rename = "due")]
    Due,
}

impl ReplyRule {
    /// The rule an `expect` states, by default read from which pattern it gives.
    pub fn of(
        reply: Option<ReplyRule>,
        result: &Option<Value>,
        error: &Option<Value>,
    ) -> ReplyRule {
        reply.unwrap_or(match (result, error) {
            (Some(_), _) => ReplyRule::Result,
            (None, Some(_)) => ReplyRule::Error,
            (None, None) => ReplyRule::Any,
        })
    }
}

/// A dialect of the step language.
pub trait Language: Sized + std::fmt::Debug + Clone + Send + Sync + 'static {
    /// The dialect's own keys (a struct with `deny_unknown_fields`).
    type Extra: DeserializeOwned + std::fmt::Debug + Clone + Send + Sync;
    /// The dialect's own actions.
    type Own: std::fmt::Debug + Clone + PartialEq + Send + Sync;
    type Expect: DeserializeOwned + std::fmt::Debug + Clone + Send + Sync;
    /// The common actions the dialect's driver runs, by key.
    const COMMON: &'static [&'static str];
    /// The keys of the dialect's own actions.
    const OWN: &'static [&'static str];
    /// The longest `deadline` a step may set, in seconds.
    const MAX_DEADLINE: f64;
    /// The dialect's own action among its keys, if they name one.
    fn own(extra: &Self::Extra) -> Result<Option<Self::Own>, String>;
    /// Whether `action` may be left to an `await` (`wait: false`): by
    /// default, a request.
    fn awaitable(action: &Action<Self::Own>) -> bool {
        matches!(action, Action::Send(s) if !s.notification)
    }
    /// Whether `action` may be named with `as`: by default, what is awaitable.
    fn nameable(action: &Action<Self::Own>) -> bool {
        Self::awaitable(action)
    }
    /// Whether `action` writes bytes that `pauses` may cut: by default, raw bytes.
    fn paced(action: &Action<Self::Own>) -> bool {
        matches!(action, Action::Write(_))
    }
    /// What else the dialect checks of a whole step.
    fn check(_step: &Step<Self>) -> Result<(), String> {
        Ok(())
    }
}

/// Every common action: the stdio dialects (acp, cwx) run them all.
pub const STDIO_COMMON: &[&str] = &[
    key::SEND,
    key::RAW,
    key::RAW_HEX,
    key::AWAIT,
    key::WAIT_FOR,
    key::QUIET,
    key::PROBE,
    key::CLOSE_STDIN,
    key::EXITS_WITHIN,
];

/// What a stdio dialect's `expect` says of the answer and of the exit.
pub trait StdioExpect {
    fn reply(&self) -> Option<ReplyRule>;
    /// A pattern the result must match.
    fn result(&self) -> &Option<Value>;
    /// A pattern the error object must match.
    fn error(&self) -> &Option<Value>;
    /// For `closeStdin`: the target exits (true) within the deadline.
    fn exit(&self) -> Option<bool>;
    /// The reply rule, by default read from which pattern is given.
    fn rule(&self) -> ReplyRule {
        ReplyRule::of(self.reply(), self.result(), self.error())
    }
}

/// Implements [`StdioExpect`] for an `expect` type with `reply`, `result`,
/// `error` and `exit` fields: `stdio_expect!(Expect)`.
#[macro_export]
macro_rules! stdio_expect {
    ($expect:ty) => {
        impl $crate::step::StdioExpect for $expect {
            fn reply(&self) -> Option<$crate::step::ReplyRule> {
                self.reply
            }

            fn result(&self) -> &Option<serde_json::Value> {
                &self.result
            }

            fn error(&self) -> &Option<serde_json::Value> {
                &self.error
            }

            fn exit(&self) -> Option<bool> {
                self.exit
            }
        }
    };
}

/// What the stdio dialects (acp, cwx) check of a step's `expect`: `exit`
/// only after `closeStdin`, and no rule about raw bytes on a connection of
/// their own (`if-any`, `due`: agent-socket's).
pub fn check_stdio_expect<L: Language>(step: &Step<L>) -> Result<(), String>
where
    L::Expect: StdioExpect,
{
    let (exit, reply) = match &step.expect {
        Some(e) => (e.exit(), e.reply()),
        None => (None, None),
    };
    if exit.is_some() && !matches!(step.action, Action::CloseStdin) {
        return Err("`expect.exit` goes with closeStdin".into());
    }
    match reply {
        Some(ReplyRule::IfAny | ReplyRule::Due) => {
            Err("if-any and due are agent-socket's rules".into())
        }
        _ => Ok(()),
    }
}

/// The keys every dialect reads itself.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Common {
    #[serde(default)]
    send: Option<Outgoing>,
    #[serde(default)]
    raw: Option<RawBytes>,
    #[serde(default)]
    raw_hex: Option<String>,
    #[serde(default, rename = "await")]
    await_name: Option<String>,
    #[serde(default)]
    wait_for: Option<String>,
    #[serde(default, alias = "sleep")]
    quiet: Option<f64>,
    #[serde(default)]
    probe: bool,
    #[serde(default)]
    close_stdin: bool,
    #[serde(default)]
    exits_within: Option<f64>,
    #[serde(default, rename = "as", alias = "conn")]
    name: Option<String>,
    #[serde(default = "yes")]
    wait: bool,
    #[serde(default)]
    pauses: Vec<Pause>,
    #[serde(default)]
    expect: Option<Value>,
    #[serde(default)]
    deadline: Option<f64>,
}

const COMMON_KEYS: &[&str] = &[
    "send",
    "raw",
    "rawHex",
    "await",
    "waitFor",
    "quiet",
    "sleep",
    "probe",
    "closeStdin",
    "exitsWithin",
    "as",
    "conn",
    "wait",
    "pauses",
    "expect",
    "deadline",
];

/// Splits an object's keys: those named in `keys`, and the rest.
pub fn split_keys(
    map: Map<String, Value>,
    keys: &[&str],
) -> (Map<String, Value>, Map<String, Value>) {
    map.into_iter()
        .partition(|(k, _)| keys.contains(&k.as_str()))
}

impl<L: Language> Step<L> {
    /// Reads a step from its JSON object, checked.
    pub fn from_object(map: Map<String, Value>) -> Result<Step<L>, String> {
        let (common, extra) = split_keys(map, COMMON_KEYS);
        let c: Common = serde_json::from_value(Value::Object(common)).map_err(|e| e.to_string())?;
        let extra: L::Extra =
            serde_json::from_value(Value::Object(extra)).map_err(|e| e.to_string())?;
        let own = L::own(&extra)?;
        let mut actions: Vec<(&str, Action<L::Own>)> = Vec::new();
        if let Some(s) = c.send {
            actions.push((key::SEND, Action::Send(s)));
        }
        if let Some(r) = c.raw {
            let bytes = match r {
                RawBytes::Text(t) => Bytes::Text(t),
                RawBytes::Filled {
                    prefix,
                    fill,
                    bytes,
                    suffix,
                } => {
                    if bytes > MAX_FILLED {
                        return Err("a generated raw step is at most 256 MiB".into());
                    }
                    Bytes::Filled {
                        prefix,
                        fill,
                        bytes,
                        suffix,
                    }
                }
            };
            actions.push((key::RAW, Action::Write(bytes)));
        }
        if let Some(h) = c.raw_hex {
            let bytes = crate::case::hex_bytes(&h)
                .ok_or("rawHex is pairs of hex digits, spaces allowed")?;
            actions.push((key::RAW_HEX, Action::Write(Bytes::Hex(bytes))));
        }
        if let Some(n) = c.await_name {
            actions.push((key::AWAIT, Action::Await(n)));
        }
        if let Some(m) = c.wait_for {
            actions.push((key::WAIT_FOR, Action::WaitFor(m)));
        }
        if let Some(q) = c.quiet {
            if !(0.0..=60.0).contains(&q) {
                return Err("quiet is between 0 and 60 seconds".into());
            }
            actions.push((key::QUIET, Action::Quiet(q)));
        }
        if c.probe {
            actions.push((key::PROBE, Action::Probe));
        }
        if c.close_stdin {
            actions.push((key::CLOSE_STDIN, Action::CloseStdin));
        }
        if let Some(x) = c.exits_within {
            if !(x > 0.0 && x <= 600.0) {
                return Err("exitsWithin is between 0 and 600 seconds".into());
            }
            actions.push((key::EXITS_WITHIN, Action::ExitsWithin(x)));
        }
        let own_count = usize::from(own.is_some());
        if actions.len() + own_count != 1 {
            let names: Vec<&str> = L::COMMON.iter().chain(L::OWN).copied().collect();
            return Err(format!(
                "a step needs exactly one action of {} (found {})",
                names.join(", "),
                actions.len() + own_count
            ));
        }
        let action = match (actions.pop(), own) {
            (Some((key, action)), None) => {
                if !L::COMMON.contains(&key) {
                    return Err(format!("`{key}` is not a step of these cases"));
                }
                action
            }
            (None, Some(own)) => Action::Own(own),
            _ => return Err("a step needs exactly one action".into()),
        };
        if let Action::Send(s) = &action
            && s.notification
            && s.id.is_some()
        {
            return Err("a notification has no id".into());
        }
        if !c.wait && c.name.is_none() {
            return Err("a step with `wait: false` needs an `as` name to await".into());
        }
        if !c.wait && !L::awaitable(&action) {
            return Err("`wait` goes with a request".into());
        }
        if c.name.is_some() && !L::nameable(&action) {
            return Err("`as` goes with a request".into());
        }
        crate::case::check_pauses(&c.pauses, L::paced(&action))?;
        if let Some(d) = c.deadline
            && !(d > 0.0 && d <= L::MAX_DEADLINE)
        {
            return Err(format!(
                "deadline is between 0 and {} seconds",
                L::MAX_DEADLINE
            ));
        }
        let expect = match c.expect {
            None => None,
            Some(v) => Some(serde_json::from_value(v).map_err(|e| format!("expect: {e}"))?),
        };
        let step = Step {
            action,
            name: c.name,
            wait: c.wait,
            pauses: c.pauses,
            expect,
            deadline: c.deadline,
            extra,
        };
        L::check(&step)?;
        Ok(step)
    }

    /// The step's deadline, or `default`.
    pub fn deadline_or(&self, default: std::time::Duration) -> std::time::Duration {
        self.deadline
            .map(std::time::Duration::from_secs_f64)
            .unwrap_or(default)
    }
}

impl<'de, L: Language> Deserialize<'de> for Step<L> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let map = Map::<String, Value>::deserialize(d)?;
        Step::from_object(map).map_err(serde::de::Error::custom)
    }
}

/// The name serde gives a unit variant (a named check's name in the case
/// files), for saying which check found something.
pub fn serde_name<T: serde::Serialize>(v: &T) -> String {
    match serde_json::to_value(v) {
        Ok(Value::String(s)) => s,
        _ => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[derive(Debug, Clone)]
    struct Test;

    #[derive(Debug, Clone, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct TestExtra {
        #[serde(default)]
        ping: bool,
    }

    impl Language for Test {
        type Extra = TestExtra;
        type Own = &'static str;
        type Expect = Value;
        const COMMON: &'static [&'static str] = &[key::SEND, key::RAW, key::QUIET];
        const OWN: &'static [&'static str] = &["ping"];
        const MAX_DEADLINE: f64 = 600.0;
        fn own(extra: &TestExtra) -> Result<Option<&'static str>, String> {
            Ok(extra.ping.then_some("ping"))
        }
    }

    fn step(v: Value) -> Result<Step<Test>, String> {
        serde_json::from_value(v).map_err(|e| e.to_string())
    }

    #[test]
    fn a_step_is_one_action_the_dialect_has() {
        let s = step(json!({"send": {"method": "m"}, "as": "x", "wait": false})).unwrap();
        assert!(matches!(&s.action, Action::Send(send) if send.method == "m"));
        assert_eq!(s.name.as_deref(), Some("x"));
        assert!(!s.wait);
        assert_eq!(
            step(json!({"ping": true})).unwrap().action,
            Action::Own("ping")
        );
        assert_eq!(
            step(json!({"sleep": 1.5})).unwrap().action,
            Action::Quiet(1.5)
        );
        let two = step(json!({"send": {"method": "m"}, "ping": true}));
        assert!(two.unwrap_err().contains("exactly one"));
        assert!(step(json!({})).is_err());
        let other = step(json!({"probe": true})).unwrap_err();
        assert!(other.contains("`probe` is not a step"), "{other}");
        let unknown = step(json!({"quiet": 1, "quite": 2})).unwrap_err();
        assert!(unknown.contains("quite"), "{unknown}");
    }

    #[test]
    fn modifiers_go_with_the_actions_they_fit() {
        assert!(step(json!({"quiet": 1, "as": "x"})).is_err());
        assert!(step(json!({"send": {"method": "m"}, "wait": false})).is_err());
        assert!(step(json!({"send": {"method": "m", "notification": true}, "as": "n"})).is_err());
        assert!(step(json!({"send": {"method": "m", "notification": true, "id": 1}})).is_err());
        let null = step(json!({"send": {"method": "m", "id": null}})).unwrap();
        assert!(matches!(&null.action, Action::Send(send) if send.id == Some(Value::Null)));
        assert!(step(json!({"send": {"method": "m"}, "pauses": [{"at": 1, "ms": 1}]})).is_err());
        assert!(step(json!({"raw": "x", "pauses": [{"at": 1, "ms": 1}]})).is_ok());
        assert!(step(json!({"quiet": 61})).is_err());
        assert!(step(json!({"send": {"method": "m"}, "deadline": 601})).is_err());
    }

    #[test]
    fn filled_bytes_are_generated_to_their_length() {
        let s = step(json!({"raw": {"prefix": "a", "fill": "xy", "bytes": 5, "suffix": "\n"}}))
            .unwrap();
        let Action::Write(b) = s.action else {
            panic!("not a write")
        };
        assert_eq!(b.generated().unwrap(), b"axyxyx\n");
    }
}
