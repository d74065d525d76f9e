//! The agent-socket protocol, version 2, written once: methods, halves,
//! message shapes, error codes, limits and the real client's deadlines.
//! Validators, the suite, the reference server and the docs derive from it;
//! `tests` checks it against `../shared/specs/agent-socket/agent_socket.py`.

use crate::jsonrpc::ErrorCode;

/// "Vibe speaks version 2 only."
pub const PROTOCOL_VERSION: i64 = 2;

/// The `vibeVersion` conform sends: the Vibe release whose sources it models
/// (`mistral-vibe` 3.0.3).
pub const MODELLED_VIBE_VERSION: &str = "3.0.3";

/// "A request that outlives its timeout is answered with the JSON-RPC error code -32001."
pub const TIMEOUT_ERROR: ErrorCode = ErrorCode(-32001);

/// "The JSON-RPC error code -32002, on the reply to any request, aborts the run."
pub const ABORT_ERROR: ErrorCode = ErrorCode(-32002);

/// "One reply line carries a whole tool result": Vibe reads at most this much.
pub const REPLY_LIMIT_BYTES: usize = 64 * 1024 * 1024;

/// "Vibe waits for a command's reply up to 30 seconds past its `timeout`".
pub const EXECUTE_GRACE_SECONDS: f64 = 30.0;

/// "The bound on the handshake and on a file read."
pub const REQUEST_TIMEOUT_SECONDS: f64 = 60.0;

/// "`toolTimeoutSeconds`, positive, is how long a `tools/call` may take, by default 600 seconds".
pub const CLIENT_TOOL_TIMEOUT_SECONDS: f64 = 600.0;

/// "`namespace` defaults to `client`".
pub const DEFAULT_NAMESPACE: &str = "client";

/// "A namespace cannot be Vibe's own": `RESERVED_NAMESPACES = frozenset({"vibe", "ui"})`.
pub const RESERVED_NAMESPACES: &[&str] = &["vibe", "ui"];

/// `"modelAccess": "direct" | "programmatic" | "both"`.
pub const MODEL_ACCESS: &[&str] = &["programmatic", "direct", "both"];

/// The largest request Vibe itself sends: a sandbox helper command carries a
/// request chunk of `REQUEST_CHUNK_BYTES` (64 KiB) in one argument, plus the
/// bootstrap script, shell-quoted, in a JSON string.
pub const HELPER_REQUEST_CHUNK_BYTES: usize = 64 * 1024;

/// Which half of the socket a method belongs to. "The socket has two
/// independent halves ... A server may serve either or both."
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Half {
    Handshake,
    Sandbox,
    Tools,
}

/// A JSON type in a message shape, as the real client's pydantic models read it.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    Int,
    /// A number; `positive` also refuses zero and below.
    Float {
        positive: bool,
    },
    Str,
    /// Any JSON value.
    Json,
    /// Any JSON object.
    Object,
    /// One of these strings.
    Enum(&'static [&'static str]),
    /// An object of these fields; unknown fields are ignored.
    Shape(&'static [Field]),
    /// A list of objects of these fields.
    ListOf(&'static [Field]),
}

/// One field of a message shape.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub ty: Ty,
    /// The field must be present (pydantic: no default).
    pub required: bool,
    /// `null` is allowed (pydantic: `| None`).
    pub nullable: bool,
}

const fn f(name: &'static str, ty: Ty, required: bool, nullable: bool) -> Field {
    Field {
        name,
        ty,
        required,
        nullable,
    }
}

// Requests, as `_InitializeParams`, `_ExecuteParams`, `_ReadFileParams`,
// `_ToolCallParams` and `_ToolCaller` write them.
pub const INITIALIZE_PARAMS: &[Field] = &[
    f("protocolVersion", Ty::Int, true, false),
    f("vibeVersion", Ty::Str, true, false),
];
pub const EXECUTE_PARAMS: &[Field] = &[
    f("command", Ty::Str, true, false),
    f("cwd", Ty::Str, true, false),
    f("timeout", Ty::Float { positive: false }, true, true),
];
pub const READ_FILE_PARAMS: &[Field] = &[
    f("path", Ty::Str, true, false),
    f("maxBytes", Ty::Int, true, false),
];
pub const CALLER: &[Field] = &[
    f("sessionId", Ty::Str, true, false),
    f("rootSessionId", Ty::Str, true, false),
    f("parentSessionId", Ty::Str, true, true),
    f("name", Ty::Str, true, true),
    f("agentType", Ty::Str, true, true),
];
pub const TOOL_CALL_PARAMS: &[Field] = &[
    f("callbackId", Ty::Str, true, false),
    f("name", Ty::Str, true, false),
    f("input", Ty::Json, true, true),
    f("toolCallId", Ty::Str, true, false),
    f("caller", Ty::Shape(CALLER), true, true),
];

// Replies, as `_InitializeResult`, `_Tool`, `_ExecuteResult`,
// `_ReadFileResult`, `_ToolCallResult`, `_ToolError` and `_ErrorBody` read them.
pub const TOOL_DEFINITION: &[Field] = &[
    f("namespace", Ty::Str, false, false),
    f("name", Ty::Str, true, false),
    f("description", Ty::Str, false, false),
    f("inputSchema", Ty::Object, false, false),
    f("outputSchema", Ty::Object, false, true),
    f("modelAccess", Ty::Enum(MODEL_ACCESS), false, false),
];
pub const INITIALIZE_RESULT: &[Field] = &[
    f("protocolVersion", Ty::Int, true, false),
    f("workspace", Ty::Str, false, true),
    f("python", Ty::Str, false, true),
    f("tools", Ty::ListOf(TOOL_DEFINITION), false, false),
    f(
        "toolTimeoutSeconds",
        Ty::Float { positive: true },
        false,
        true,
    ),
    f("instructions", Ty::Str, false, true),
];
pub const EXECUTE_RESULT: &[Field] = &[
    f("exitCode", Ty::Int, true, false),
    f("stdout", Ty::Str, true, false),
    f("stderr", Ty::Str, true, false),
];
pub const READ_FILE_RESULT: &[Field] = &[f("contentBase64", Ty::Str, true, true)];
pub const TOOL_ERROR: &[Field] = &[
    f("message", Ty::Str, true, false),
    f("code", Ty::Str, false, true),
    f("details", Ty::Json, false, true),
];
pub const TOOL_CALL_RESULT: &[Field] = &[
    f("output", Ty::Json, false, true),
    f("annotations", Ty::Object, false, false),
    f("error", Ty::Shape(TOOL_ERROR), false, true),
];
pub const ERROR_BODY: &[Field] = &[
    f("code", Ty::Int, true, false),
    f("message", Ty::Str, true, false),
    f("data", Ty::Json, false, true),
];

/// How long the real client waits for a method's reply.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Deadline {
    /// A fixed bound in seconds.
    Fixed(f64),
    /// The request's own `timeout` plus the grace; unbounded when it is null.
    CommandTimeoutPlusGrace,
    /// `toolTimeoutSeconds` from the handshake, else the default.
    ToolTimeout,
}

/// One method of the protocol. Every method is a request from Vibe (the
/// client) to the server; the server sends nothing unasked.
#[derive(Debug, Clone, Copy)]
pub struct MethodSpec {
    pub name: &'static str,
    pub half: Half,
    pub params: &'static [Field],
    pub result: &'static [Field],
    pub deadline: Deadline,
}

pub const METHODS: &[MethodSpec] = &[
    MethodSpec {
        name: "agent/initialize",
        half: Half::Handshake,
        params: INITIALIZE_PARAMS,
        result: INITIALIZE_RESULT,
        deadline: Deadline::Fixed(REQUEST_TIMEOUT_SECONDS),
    },
    MethodSpec {
        name: "sandbox/execute",
        half: Half::Sandbox,
        params: EXECUTE_PARAMS,
        result: EXECUTE_RESULT,
        deadline: Deadline::CommandTimeoutPlusGrace,
    },
    MethodSpec {
        name: "sandbox/readFile",
        half: Half::Sandbox,
        params: READ_FILE_PARAMS,
        result: READ_FILE_RESULT,
        deadline: Deadline::Fixed(REQUEST_TIMEOUT_SECONDS),
    },
    MethodSpec {
        name: "tools/call",
        half: Half::Tools,
        params: TOOL_CALL_PARAMS,
        result: TOOL_CALL_RESULT,
        deadline: Deadline::ToolTimeout,
    },
];

pub fn method(name: &str) -> Option<&'static MethodSpec> {
    METHODS.iter().find(|m| m.name == name)
}

#[cfg(test)]
mod tests {
    //! The table against the protocol's source.
    use super::*;

    fn source() -> Option<String> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/specs/agent-socket/agent_socket.py"
        );
        std::fs::read_to_string(path).ok()
    }

    fn tools_source() -> Option<String> {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../shared/specs/agent-socket/client_provided_tools.py"
        );
        std::fs::read_to_string(path).ok()
    }

    #[test]
    fn constants_match_the_source() {
        let Some(src) = source() else {
            eprintln!("skipped: ../shared/specs is not beside this checkout");
            return;
        };
        for needle in [
            format!("PROTOCOL_VERSION = {PROTOCOL_VERSION}"),
            format!("TIMEOUT_ERROR_CODE = {}", TIMEOUT_ERROR.0),
            format!("ABORT_ERROR_CODE = {}", ABORT_ERROR.0),
            "REPLY_LIMIT_BYTES = 64 * 1024 * 1024".to_owned(),
            format!("EXECUTE_GRACE_SECONDS = {EXECUTE_GRACE_SECONDS:.1}"),
            format!("REQUEST_TIMEOUT_SECONDS = {REQUEST_TIMEOUT_SECONDS:.1}"),
        ] {
            assert!(
                src.contains(&needle),
                "agent_socket.py no longer says {needle:?}"
            );
        }
        assert_eq!(REPLY_LIMIT_BYTES, 64 * 1024 * 1024);
        let tools = tools_source().expect("client_provided_tools.py");
        assert!(tools.contains(&format!(
            "CLIENT_TOOL_TIMEOUT_SECONDS = {CLIENT_TOOL_TIMEOUT_SECONDS:.1}"
        )));
        assert!(tools.contains(&format!("DEFAULT_NAMESPACE = \"{DEFAULT_NAMESPACE}\"")));
        assert!(tools.contains("RESERVED_NAMESPACES = frozenset({\"vibe\", \"ui\"})"));
        assert!(tools.contains("Literal[\"programmatic\", \"direct\", \"both\"]"));
    }

    #[test]
    fn every_method_the_client_calls_is_in_the_table_and_no_other() {
        let Some(src) = source() else {
            eprintln!("skipped: ../shared/specs is not beside this checkout");
            return;
        };
        // Every `_call(path, "<method>", ...)` of the client.
        let mut called: Vec<String> = Vec::new();
        let mut rest = src.as_str();
        while let Some(i) = rest.find("_call(") {
            rest = &rest[i + 6..];
            let window = &rest[..rest.len().min(200)];
            if let Some(q) = window.find('"') {
                let after = &window[q + 1..];
                if let Some(end) = after.find('"') {
                    called.push(after[..end].to_owned());
                }
            }
        }
        called.sort();
        called.dedup();
        let mut ours: Vec<String> = METHODS.iter().map(|m| m.name.to_owned()).collect();
        ours.sort();
        assert_eq!(called, ours);
    }

    #[test]
    fn every_shape_field_is_a_field_of_the_source_models() {
        let Some(src) = source() else {
            eprintln!("skipped: ../shared/specs is not beside this checkout");
            return;
        };
        // The models use snake_case; the wire is camelCase.
        let snake = |camel: &str| {
            let mut s = String::new();
            for c in camel.chars() {
                if c.is_ascii_uppercase() {
                    s.push('_');
                    s.push(c.to_ascii_lowercase());
                } else {
                    s.push(c);
                }
            }
            s
        };
        for shape in [
            INITIALIZE_PARAMS,
            EXECUTE_PARAMS,
            READ_FILE_PARAMS,
            CALLER,
            TOOL_CALL_PARAMS,
            TOOL_DEFINITION,
            INITIALIZE_RESULT,
            EXECUTE_RESULT,
            READ_FILE_RESULT,
            TOOL_ERROR,
            TOOL_CALL_RESULT,
            ERROR_BODY,
        ] {
            for field in shape {
                let declared = format!("    {}:", snake(field.name));
                assert!(
                    src.contains(&declared),
                    "no model field {declared:?} in the source"
                );
            }
        }
    }
}
