//! The official ACP v1 JSON Schema, vendored as `corpus/acp/schema.json`, is
//! the protocol's table: every definition that carries `x-method` and
//! `x-side` names a method, the side that handles it, and the shape of its
//! params, result or notification. conform derives the method list from it
//! (written once, by the protocol's authors) and validates every message the
//! target sends against the definition of its method and direction.

use jsonschema::error::ValidationErrorKind;
use jsonschema::{Registry, ValidationError, Validator};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

pub const SCHEMA_PATH: &str = "acp/schema.json";
pub const META_PATH: &str = "acp/meta.json";

/// Which peer handles a method (the schema's `x-side`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Side {
    /// The client sends it and the agent handles it.
    Agent,
    /// The agent sends it and the client handles it.
    Client,
    /// Either side (`$/cancel_request`).
    Protocol,
}

/// One method of the protocol as the schema defines it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Method {
    pub name: String,
    pub side: Side,
    /// The definition of the params (`...Request` or `...Notification`).
    pub params: String,
    /// The definition of the result, for a request; `None` for a notification.
    pub result: Option<String>,
}

impl Method {
    pub fn is_notification(&self) -> bool {
        self.result.is_none()
    }
}

pub struct Schema {
    root: Value,
    methods: BTreeMap<String, Method>,
    /// The schema as a resource under [`HOME`], indexed once: a definition's
    /// validator refers into it, so compiling one copies nothing.
    registry: Registry<'static>,
    validators: Mutex<HashMap<String, Arc<Validator>>>,
}

/// Where the registry keeps the schema.
const HOME: &str = "urn:conform:acp-schema";

/// The embedded schema, parsed once.
pub fn schema() -> &'static Schema {
    static SCHEMA: OnceLock<Schema> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        let text = crate::corpus::file(SCHEMA_PATH).expect("corpus/acp/schema.json is embedded");
        Schema::parse(text).expect("the vendored schema is valid (a test checks it)")
    })
}

impl Schema {
    pub fn parse(text: &str) -> Result<Schema, String> {
        let root: Value = serde_json::from_str(text).map_err(|e| e.to_string())?;
        let defs = root
            .get("$defs")
            .and_then(Value::as_object)
            .ok_or("the schema has no $defs")?;
        let mut methods: BTreeMap<String, Method> = BTreeMap::new();
        for (name, def) in defs {
            let (Some(method), Some(side)) = (
                def.get("x-method").and_then(Value::as_str),
                def.get("x-side").and_then(Value::as_str),
            ) else {
                continue;
            };
            let side = match side {
                "agent" => Side::Agent,
                "client" => Side::Client,
                "protocol" => Side::Protocol,
                other => return Err(format!("{name}: unknown x-side {other:?}")),
            };
            let entry = methods.entry(method.to_owned()).or_insert(Method {
                name: method.to_owned(),
                side,
                params: String::new(),
                result: None,
            });
            if entry.side != side {
                return Err(format!("{method}: definitions disagree on x-side"));
            }
            if name.ends_with("Response") {
                entry.result = Some(name.clone());
            } else if name.ends_with("Request") || name.ends_with("Notification") {
                entry.params = name.clone();
            } else {
                return Err(format!("{name}: a method definition of unknown kind"));
            }
        }
        if let Some(m) = methods.values().find(|m| m.params.is_empty()) {
            return Err(format!("{}: a result with no params definition", m.name));
        }
        let registry = Registry::new()
            .add(HOME, root.clone())
            .and_then(|b| b.prepare())
            .map_err(|e| format!("the schema does not index: {e}"))?;
        Ok(Schema {
            root,
            methods,
            registry,
            validators: Mutex::new(HashMap::new()),
        })
    }

    pub fn methods(&self) -> impl Iterator<Item = &Method> {
        self.methods.values()
    }

    pub fn method(&self, name: &str) -> Option<&Method> {
        self.methods.get(name)
    }

    /// The definition `name`, if the schema has it.
    pub fn definition(&self, name: &str) -> Option<&Value> {
        self.root.get("$defs")?.get(name)
    }

    /// Whether definition `def` has the property at the dotted `path`
    /// (`sessionCapabilities.list`), following `$ref`s through the properties.
    pub fn has_property(&self, def: &str, path: &str) -> bool {
        let mut node = self.definition(def);
        for part in path.split('.') {
            let Some(prop) = node
                .and_then(|n| n.get("properties"))
                .and_then(|p| p.get(part))
            else {
                return false;
            };
            // A property refers to its definition directly or through anyOf/allOf.
            let refs = std::iter::once(prop)
                .chain(
                    ["anyOf", "allOf"]
                        .iter()
                        .filter_map(|k| prop.get(*k))
                        .flat_map(|a| {
                            a.as_array()
                                .map(|v| v.as_slice())
                                .unwrap_or_default()
                                .iter()
                        }),
                )
                .filter_map(|v| v.get("$ref").and_then(Value::as_str))
                .next();
            node = match refs {
                Some(r) => r.rsplit('/').next().and_then(|name| self.definition(name)),
                None => Some(prop),
            };
        }
        true
    }

    /// The fields definition `def` names at its root (its `properties`),
    /// or `None` when it is no object with properties of its own.
    pub fn root_fields(&self, def: &str) -> Option<Vec<&str>> {
        let props = self.definition(def)?.get("properties")?.as_object()?;
        Some(props.keys().map(String::as_str).collect())
    }

    /// Whether definition `def` is an object with no required field, so
    /// that `null` may stand for it: the pages' own examples answer
    /// `session/load` and `fs/write_text_file` with `null` where the schema
    /// has an empty object, and conform accepts both readings.
    pub fn requires_nothing(&self, def: &str) -> bool {
        self.definition(def).is_some_and(|d| {
            d.get("type").and_then(Value::as_str) == Some("object")
                && d.get("required")
                    .and_then(Value::as_array)
                    .is_none_or(|r| r.is_empty())
        })
    }

    fn validator(&self, def: &str) -> Result<Arc<Validator>, String> {
        if let Some(v) = self.validators.lock().expect("not poisoned").get(def) {
            return Ok(v.clone());
        }
        if self.definition(def).is_none() {
            return Err(format!("the schema has no definition {def}"));
        }
        let mut doc = json!({"$ref": format!("{HOME}#/$defs/{def}")});
        if let Some(s) = self.root.get("$schema") {
            doc["$schema"] = s.clone();
        }
        let validator = Arc::new(
            jsonschema::options()
                .with_registry(&self.registry)
                .build(&doc)
                .map_err(|e| format!("definition {def} does not compile: {e}"))?,
        );
        self.validators
            .lock()
            .expect("not poisoned")
            .insert(def.to_owned(), validator.clone());
        Ok(validator)
    }

    /// Every way `value` breaks definition `def`, each with the JSON pointer
    /// of the offending part (relative to `value`) and what the schema wants.
    /// Where a union (`anyOf`, `oneOf`) fails, the branch the value most
    /// plausibly meant (its discriminator and type match) is explained.
    pub fn violations(&self, def: &str, value: &Value) -> Vec<String> {
        let validator = match self.validator(def) {
            Ok(v) => v,
            Err(e) => return vec![e],
        };
        let mut out = Vec::new();
        for error in validator.iter_errors(value) {
            explain(&error, &mut out, 0);
            if out.len() >= 8 {
                out.push("(more violations not listed)".into());
                break;
            }
        }
        out
    }
}

/// A message as a v1 page shows it where the schema defines it otherwise
/// (found by `scripts/check_doc_examples.py`). Both are sources: conform
/// accepts the page's reading too, and reports the disagreement as
/// information naming both.
pub struct PageReading {
    /// The schema definition the page's example breaks.
    pub def: &'static str,
    /// The page, and what it shows.
    pub page: &'static str,
    /// Whether `value` is the page's reading.
    pub holds: fn(&Value) -> bool,
}

/// Every disagreement between the v1 pages' examples and the schema.
pub const PAGE_READINGS: &[PageReading] = &[
    PageReading {
        def: "WriteTextFileResponse",
        page: "file-system.mdx (\"The Client responds with an empty result on success\", shown as `\"result\": null`)",
        holds: Value::is_null,
    },
    PageReading {
        def: "LoadSessionResponse",
        page: "session-setup.mdx (the response to session/load after the replay, shown as `\"result\": null`)",
        holds: Value::is_null,
    },
    PageReading {
        def: "SessionNotification",
        page: "session-modes.mdx (a current_mode_update with `modeId`, where the schema's CurrentModeUpdate has `currentModeId`)",
        holds: |v| {
            v.pointer("/update/sessionUpdate") == Some(&json!("current_mode_update"))
                && v.pointer("/update/modeId").is_some_and(Value::is_string)
                && v.pointer("/update/currentModeId").is_none()
                && v.get("sessionId").is_some_and(Value::is_string)
        },
    },
    PageReading {
        def: "RequestPermissionRequest",
        page: "session-modes.mdx (a tool call whose `content` holds a content block `{\"type\": \"text\", ...}` itself, where the schema's ToolCallContent wraps it as `{\"type\": \"content\", \"content\": {...}}`)",
        holds: |v| {
            let mut v = v.clone();
            let Some(items) = v
                .pointer_mut("/toolCall/content")
                .and_then(Value::as_array_mut)
            else {
                return false;
            };
            for item in items.iter_mut() {
                if item.get("type") == Some(&json!("text")) {
                    *item = json!({"type": "content", "content": item.clone()});
                }
            }
            schema()
                .violations("RequestPermissionRequest", &v)
                .is_empty()
        },
    },
];

/// How a value stands against a definition and the pages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    Valid,
    /// The schema's violations; no page shows the value so either.
    Broken(Vec<String>),
    /// The schema refuses it, a page shows it: accepted, with a note
    /// naming both sources.
    PageReading(String),
}

impl Schema {
    /// `value` against `def`, a page's reading accepted (see [`PAGE_READINGS`]).
    /// Where `value` breaks definition `def`: each offending part's path
    /// under `root`, as the matcher writes paths (`result.a[0].b` for the
    /// pointer `/a/0/b`; `root` itself for the whole value).
    pub fn broken_at(&self, def: &str, value: &Value, root: &str) -> Vec<String> {
        let Ok(validator) = self.validator(def) else {
            return vec![root.to_owned()];
        };
        validator
            .iter_errors(value)
            .take(8)
            .map(|e| {
                let mut at = root.to_owned();
                // A missing property is the fault of that property.
                let missing = match e.kind() {
                    ValidationErrorKind::Required { property } => {
                        property.as_str().map(|p| format!("/{p}"))
                    }
                    _ => None,
                };
                let pointer = path(&e) + missing.as_deref().unwrap_or("");
                for part in pointer.split('/').skip(1) {
                    let part = part.replace("~1", "/").replace("~0", "~");
                    if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
                        at.push_str(&format!("[{part}]"));
                    } else {
                        at.push('.');
                        at.push_str(&part);
                    }
                }
                at
            })
            .collect()
    }

    pub fn judge(&self, def: &str, value: &Value) -> Judged {
        let errors = self.violations(def, value);
        if errors.is_empty() {
            return Judged::Valid;
        }
        match PAGE_READINGS
            .iter()
            .find(|r| r.def == def && (r.holds)(value))
        {
            Some(r) => Judged::PageReading(format!(
                "the sources disagree: the v1 page {} and the schema (schema.json {def}: {}) give two readings; conform accepts both",
                r.page,
                errors.join("; ")
            )),
            None => Judged::Broken(errors),
        }
    }
}

/// The instance path of an error as a JSON pointer ("" for the whole value).
fn path(e: &ValidationError<'_>) -> String {
    e.instance_path().to_string()
}

fn shown(path: &str) -> &str {
    if path.is_empty() { "/" } else { path }
}

/// Whether a union branch's errors say "not the branch meant": a wrong type
/// or constant at the union's own location, or a wrong discriminator constant
/// just below it (`sessionUpdate`, `type`, `outcome`).
fn rules_out(errors: &[ValidationError<'_>], at: &str) -> bool {
    errors.iter().any(|e| {
        let here = path(e);
        match e.kind() {
            ValidationErrorKind::Type { .. }
            | ValidationErrorKind::Enum { .. }
            | ValidationErrorKind::Constant { .. }
                if here == at =>
            {
                true
            }
            ValidationErrorKind::Constant { .. } => {
                here.rsplit_once('/').map(|(parent, _)| parent) == Some(at)
            }
            _ => false,
        }
    })
}

fn explain(e: &ValidationError<'_>, out: &mut Vec<String>, depth: usize) {
    let context = match e.kind() {
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            Some(context)
        }
        _ => None,
    };
    if let Some(branches) = context
        && depth < 6
    {
        let at = path(e);
        let plausible: Vec<&Vec<ValidationError<'static>>> = branches
            .iter()
            .filter(|b| !b.is_empty() && !rules_out(b, &at))
            .collect();
        if let Some(best) = plausible.iter().min_by_key(|b| b.len()) {
            for sub in best.iter() {
                explain(sub, out, depth + 1);
            }
            return;
        }
    }
    out.push(format!("at {}: {}", shown(&path(e)), brief_message(e)));
}

/// The validator's message without the whole offending value in it.
fn brief_message(e: &ValidationError<'_>) -> String {
    match e.kind() {
        ValidationErrorKind::Required { property } => format!("{property} is required"),
        ValidationErrorKind::AnyOf { .. } | ValidationErrorKind::OneOfNotValid { .. } => {
            format!(
                "{} matches none of the forms the schema allows",
                crate::matcher::brief(e.instance())
            )
        }
        _ => crate::matcher::truncate(&e.to_string(), 240),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capability_paths_follow_the_refs() {
        let s = schema();
        assert!(s.has_property("AgentCapabilities", "loadSession"));
        assert!(s.has_property("AgentCapabilities", "sessionCapabilities.list"));
        assert!(s.has_property("AgentCapabilities", "promptCapabilities.image"));
        assert!(!s.has_property("AgentCapabilities", "sessionCapabilities.lst"));
        assert!(!s.has_property("AgentCapabilities", "loadSessions"));
    }

    #[test]
    fn the_method_table_comes_from_the_schema_and_agrees_with_meta() {
        let s = schema();
        let meta: Value = serde_json::from_str(crate::corpus::file(META_PATH).unwrap()).unwrap();
        for (group, side) in [
            ("agentMethods", Side::Agent),
            ("clientMethods", Side::Client),
            ("protocolMethods", Side::Protocol),
        ] {
            for name in meta[group].as_object().unwrap().values() {
                let name = name.as_str().unwrap();
                let m = s
                    .method(name)
                    .unwrap_or_else(|| panic!("{name} not in schema"));
                assert_eq!(m.side, side, "{name}");
            }
        }
        let prompt = s.method("session/prompt").unwrap();
        assert_eq!(prompt.params, "PromptRequest");
        assert_eq!(prompt.result.as_deref(), Some("PromptResponse"));
        assert!(s.method("session/update").unwrap().is_notification());
        assert!(s.method("session/cancel").unwrap().is_notification());
    }

    #[test]
    fn a_tool_call_without_title_names_the_missing_field() {
        let v =
            json!({"sessionId": "s", "update": {"sessionUpdate": "tool_call", "toolCallId": "c"}});
        let errors = schema().violations("SessionNotification", &v);
        assert_eq!(
            errors,
            vec!["at /update: \"title\" is required"],
            "{errors:?}"
        );
    }

    #[test]
    fn a_wrong_type_deep_inside_is_located() {
        let v = json!({"protocolVersion": 1, "agentCapabilities": {"loadSession": "yes"}});
        let errors = schema().violations("InitializeResponse", &v);
        assert!(
            errors
                .iter()
                .any(|e| e.starts_with("at /agentCapabilities/loadSession:")),
            "{errors:?}"
        );
    }

    #[test]
    fn every_page_reading_is_one_the_schema_refuses_and_only_it_passes() {
        let s = schema();
        let examples = [
            ("WriteTextFileResponse", json!(null)),
            ("LoadSessionResponse", json!(null)),
            (
                "SessionNotification",
                json!({"sessionId": "s", "update": {"sessionUpdate": "current_mode_update", "modeId": "code"}}),
            ),
            (
                "RequestPermissionRequest",
                json!({"sessionId": "s", "toolCall": {"toolCallId": "c", "title": "t",
                    "kind": "switch_mode", "status": "pending",
                    "content": [{"type": "text", "text": "## Plan"}]},
                    "options": [{"optionId": "a", "name": "Yes", "kind": "allow_once"}]}),
            ),
        ];
        assert_eq!(examples.len(), PAGE_READINGS.len());
        for (def, v) in examples {
            assert!(
                !s.violations(def, &v).is_empty(),
                "{def}: the schema refuses it"
            );
            assert!(
                matches!(s.judge(def, &v), Judged::PageReading(ref n) if n.contains(".mdx") && n.contains(def)),
                "{def}"
            );
        }
        // What neither source shows still breaks the schema.
        assert!(matches!(
            s.judge("WriteTextFileResponse", &json!(7)),
            Judged::Broken(_)
        ));
        let wrong = json!({"sessionId": "s", "update": {"sessionUpdate": "current_mode_update", "modeId": 7}});
        assert!(matches!(
            s.judge("SessionNotification", &wrong),
            Judged::Broken(_)
        ));
    }

    #[test]
    fn valid_messages_have_no_violations() {
        let s = schema();
        assert!(
            s.violations("PromptResponse", &json!({"stopReason": "end_turn"}))
                .is_empty()
        );
        assert!(
            !s.violations("PromptResponse", &json!({"stopReason": "done"}))
                .is_empty()
        );
        let update = json!({"sessionId": "s", "update": {"sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hi"}}});
        assert!(s.violations("SessionNotification", &update).is_empty());
    }

    #[test]
    fn a_broken_result_names_the_fields_it_breaks() {
        let s = schema();
        assert_eq!(
            s.broken_at(
                "InitializeResponse",
                &json!({"protocolVersion": "1"}),
                "result"
            ),
            ["result.protocolVersion"]
        );
        assert_eq!(
            s.broken_at("NewSessionResponse", &json!({}), "result"),
            ["result.sessionId"]
        );
        assert!(
            s.broken_at("NewSessionResponse", &json!({"sessionId": "s"}), "result")
                .is_empty()
        );
    }
}
