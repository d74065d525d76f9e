#!/usr/bin/env python3
"""Independent CWX1 extension host (test double), written from protocol.rs only.

Usage: python3 host.py --tier plugin|builtin [--deviation NAME]
                       [--builtin-modules FILE] [--max-lifetime SECONDS]

Speaks CWX1 frames on stdin/stdout; logs go to stderr only.  Lines starting
with "cwx-host: core violation:" on stderr report something the core did that
the source forbids (used by selftest.py to show core deviations).

Line references "protocol.rs:N" are the line numbers of the code-viewer dump
/work/shared/specs/cwx/protocol.rs.txt.
"""

import argparse
import hashlib
import json
import os
import struct
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# protocol.rs:51 `pub const PROTOCOL_VERSION: u32 = 1;`
PROTOCOL_VERSION = 1
# protocol.rs:52 `pub const MAGIC: [u8; 4] = *b"CWX1";`
MAGIC = b"CWX1"
# protocol.rs:53 `pub const HEADER_LEN: usize = 8;`
HEADER_LEN = 8
# protocol.rs:54 "Enough for base64 screenshots later; anything larger is refused, never truncated."
MAX_FRAME = 32 * 1024 * 1024
# protocol.rs:56 "Requests in flight per direction."
MAX_INFLIGHT = 256
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1

# protocol.rs:59-92 error codes
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL = -32603
EXECUTION_FAILED = -32000
NOT_AVAILABLE = -32001
REFUSED = -32002
DENIED = -32003
CANCELLED = -32800

HOST_VERSION = "0.1.0-independent-double"
MAX_EXTENSION_BYTES = 1 << 20
MAX_ITEMS = 1024
DEADLINE_GRACE_S = 1.0          # how long we wait for the core's $/cancel after a deadline
MAX_SLEEP_MS = 3_600_000

ALL_TIERS = ("plugin", "builtin")
BUILTIN = ("builtin",)

# protocol.rs:142-216 `pub const METHODS` -- name: (request, tiers)
CORE_TO_HOST = {
    "host/initialize": (True, ALL_TIERS),
    "host/ping": (True, ALL_TIERS),
    "host/shutdown": (True, ALL_TIERS),
    "ext/activate": (True, ALL_TIERS),
    "ext/deactivate": (True, ALL_TIERS),
    "tool/call": (True, ALL_TIERS),
    "command/run": (True, ALL_TIERS),
    "hook/evaluate": (True, ALL_TIERS),
    "mcp/open": (True, BUILTIN),
    "mcp/request": (True, BUILTIN),
    "mcp/close": (True, BUILTIN),
    "harness/run": (True, BUILTIN),
    "$/cancel": (False, ALL_TIERS),
}
HOST_TO_CORE = {
    "host/hello": (False, ALL_TIERS),
    "host/ready": (False, ALL_TIERS),
    "registry/register": (True, ALL_TIERS),
    "registry/unregister": (True, ALL_TIERS),
    "core/call": (True, ALL_TIERS),
    "proc/launch": (True, BUILTIN),
    "proc/read": (True, BUILTIN),
    "proc/write": (True, BUILTIN),
    "proc/close": (True, BUILTIN),
    "net/start": (True, BUILTIN),
    "net/fetch": (True, BUILTIN),
    "net/read": (True, BUILTIN),
    "net/release": (True, BUILTIN),
    "net/close": (True, BUILTIN),
    "exec/redeem": (True, BUILTIN),
    "ext/faulted": (False, ALL_TIERS),
    "log": (False, ALL_TIERS),
    "$/cancel": (False, ALL_TIERS),
}

TOOL_BEHAVIOURS = ("echo", "sleep", "fail", "error_result", "big", "relay", "config", "launch")
COMMAND_BEHAVIOURS = ("greet", "submit", "command_error", "unregister", "sleep")
HOOK_BEHAVIOURS = ("rules",)

# One deviation = one broken statement of the source.  Details: deviations.json.
DEVIATIONS = [
    # frames written by the host
    "magic_lowercase", "length_big_endian", "length_in_chars", "latin1_payload",
    "oversize_frame", "truncate_oversize", "limit_in_chars", "ignore_limits_max_frame",
    "stdout_noise",
    # frames read by the host
    "bad_magic_continue", "oversize_incoming_read", "read_length_as_chars", "eof_no_exit",
    "accept_non_utf8",
    # envelope
    "envelope_extra_field", "jsonrpc_wrong", "id_as_float", "wrong_response_id",
    "answer_twice", "answer_notification", "result_and_error", "result_missing",
    "error_extra_field", "params_array", "ready_with_id", "unknown_method_sent",
    "log_extra_field",
    # hello / handshake
    "hello_bad_runtime", "hello_wrong_tier", "hello_extra_field", "hello_memory_limit",
    "hello_protocol_range", "hello_modules_unordered", "no_hello",
    "ready_before_initialize", "ready_extra_params", "accept_wrong_protocol",
    # registrations
    "register_kind_case", "tool_without_schema", "tool_with_hint", "command_with_schema",
    "hook_with_hint", "schema_not_object", "scope_null", "spec_extra_field",
    "register_wrong_generation", "register_before_activate", "register_after_answer",
    "ignore_refusal", "unbounded_inflight", "reuse_request_id", "stale_owner_on_reactivate",
    # result shapes
    "activate_missing_tools", "activate_status_case", "deactivate_missing_leaked",
    "tool_result_no_is_error", "content_not_list", "content_type_markdown",
    "command_result_no_kind", "hook_verdict_allow", "hook_verdict_extra_field",
    "revise_not_object", "extra_result_field",
    # error codes and handles
    "throw_wrong_code", "not_available_wrong_code", "serve_revoked_handle",
    "serve_not_yet_active", "unknown_method_wrong_code",
    # tiers
    "plugin_serves_builtin", "plugin_sends_builtin",
    # cancel and deadlines
    "cancel_ignored", "cancel_wrong_code", "cancel_no_answer", "deadline_ignored",
    "activate_deadline_ignored", "dispose_deadline_ignored",
    # activation, tickets, shutdown
    "skip_sha256_check", "core_call_without_ticket", "shutdown_no_exit", "shutdown_no_answer",
]

# Round 3 (deviations-round3.json): kept apart so that DEVIATIONS and deviations.json stay as
# they were.  --deviation accepts them; --list-deviations lists them after the others.
DEVIATIONS_ROUND3 = [
    "frame_limit_off_by_one", "id_zero_unanswered", "hello_module_dropped", "config_leaks",
    "unregister_handle_still_served", "string_input_refused", "cancel_wrong_call",
    "shutdown_late_answer",
]

DEV = None
_MISSING = object()


def log(msg):
    try:
        sys.stderr.write("cwx-host: %s\n" % msg)
        sys.stderr.flush()
    except Exception:
        pass


def violation(msg):
    log("core violation: %s" % msg)


# ---------------------------------------------------------------------------
# Shape checks for what the core sends (the host's validateMessage).
# Core->host structs without `deny_unknown_fields` are read leniently; the
# ones the source marks `deny_unknown_fields` are read strictly.
# ---------------------------------------------------------------------------

class Invalid(Exception):
    pass


class NotAvailable(Exception):
    pass


class ToolThrew(Exception):
    pass


class Cancelled(Exception):
    pass


class DeadlinePassed(Exception):
    pass


class NotAllowed(Exception):
    pass


def _is_int(v):
    return type(v) is int


def c_any(v, what):
    return v


def c_u64(v, what):
    if not (_is_int(v) and 0 <= v <= U64_MAX):
        raise Invalid("%s: expected an unsigned 64-bit integer" % what)
    return v


def c_u32(v, what):
    if not (_is_int(v) and 0 <= v <= U32_MAX):
        raise Invalid("%s: expected an unsigned 32-bit integer" % what)
    return v


def c_str(v, what):
    if type(v) is not str:
        raise Invalid("%s: expected a string" % what)
    return v


def c_obj(v, what):
    if type(v) is not dict:
        raise Invalid("%s: expected an object" % what)
    return v


def c_struct(v, what, req, opt=None, nonnull=None, strict=False):
    """req: required fields; opt: Option fields (absent or null -> None);
    nonnull: `present_entry` Option fields (absent -> None, null refused)."""
    opt = opt or {}
    nonnull = nonnull or {}
    if type(v) is not dict:
        raise Invalid("%s: expected an object" % what)
    out = {}
    for k, chk in req.items():
        if k not in v:
            raise Invalid("%s: missing field `%s`" % (what, k))
        out[k] = chk(v[k], "%s.%s" % (what, k))
    for k, chk in opt.items():
        if v.get(k) is not None:
            out[k] = chk(v[k], "%s.%s" % (what, k))
    for k, chk in nonnull.items():
        if k in v:
            if v[k] is None:
                raise Invalid("%s.%s: null is not an entry" % (what, k))
            out[k] = chk(v[k], "%s.%s" % (what, k))
    if strict:
        extra = sorted(set(v) - set(req) - set(opt) - set(nonnull))
        if extra:
            raise Invalid("%s: unknown field `%s`" % (what, extra[0]))
    return out


def c_owner(v, what):
    # protocol.rs:352-359 OwnerRef, `#[serde(deny_unknown_fields)]`
    return c_struct(v, what, {"plugin_id": c_str, "generation": c_u64, "owner_token": c_str},
                    strict=True)


def c_entry(v, what):
    # protocol.rs:1001-1006 EntryRef {path, sha256} (no deny_unknown_fields)
    return c_struct(v, what, {"path": c_str, "sha256": c_str})


def c_limits(v, what):
    # protocol.rs:985-992 HostLimits
    return c_struct(v, what, {"max_frame": c_u64, "max_inflight": c_u64,
                              "dispose_deadline_ms": c_u64, "activate_deadline_ms": c_u64})


def c_empty(v, what):
    # protocol.rs:429-432 EmptyParams, `#[serde(deny_unknown_fields)]`
    return c_struct(v, what, {}, strict=True)


def c_grant(v, what):
    # protocol.rs:599-609 McpOperationGrant (strict)
    return c_struct(v, what, {"ticket": c_str, "operation_id": c_str, "method": c_str,
                              "params": c_any}, opt={"wire_id": c_str}, strict=True)


def c_hook_dispatch(v, what):
    # protocol.rs:564-574 HookDispatchWire (strict)
    return c_struct(v, what, {"event": c_str, "dialect": c_str, "point": c_str, "query": c_str},
                    opt={"matcher": c_str}, strict=True)


def c_hook_payload(v, what):
    # protocol.rs:1092-1104 HookCallPayload (strict): "No session handle or
    # invocation ticket crosses this boundary."
    return c_struct(v, what, {"name": c_str, "call_id": c_str, "input": c_any, "mode": c_str,
                              "workspace": c_str, "model": c_str}, strict=True)


def _reject_constant(name):
    raise ValueError("not JSON: %s" % name)


# ---------------------------------------------------------------------------
# The host
# ---------------------------------------------------------------------------

class FrameTooLarge(Exception):
    def __init__(self, size):
        Exception.__init__(self, "frame of %d bytes exceeds max_frame" % size)
        self.size = size


class FrameError(Exception):
    def __init__(self, kind, msg):
        Exception.__init__(self, msg)
        self.kind = kind


class Incoming:
    """One core->host request in flight."""

    def __init__(self, rid, method, params):
        self.id = rid
        self.method = method
        self.params = params
        self.start = time.monotonic()
        self.cancel = threading.Event()
        self.answered = False


class Pending:
    """One host->core request in flight."""

    def __init__(self, rid, method):
        self.id = rid
        self.method = method
        self.event = threading.Event()
        self.outcome = None
        self.released = False


class Activation:
    def __init__(self, owner, entry, scope, plugin_name, config, data_dir):
        self.owner = owner
        self.entry = entry
        self.scope = scope
        self.plugin_name = plugin_name
        self.config = config
        self.data_dir = data_dir
        self.ext = None
        self.state = "activating"     # activating | active | failed | disposed
        self.handles = {}             # handle -> Registration

    def key(self):
        return owner_key(self.owner)


class Registration:
    def __init__(self, act, kind, item):
        self.act = act
        self.kind = kind
        self.item = item
        self.handle = None


def owner_key(owner):
    return (owner["plugin_id"], owner["generation"], owner["owner_token"])


class Host:
    def __init__(self, tier, builtin_modules):
        self.tier = tier
        self.builtin_modules = builtin_modules
        self.in_fd = 0
        # stdout carries frames only: keep a private copy of fd 1 and point
        # fd 1 (and sys.stdout) at stderr so that nothing else can reach it.
        self.out_fd = os.dup(1)
        os.dup2(2, 1)
        sys.stdout = sys.stderr
        self.wlock = threading.Lock()
        self.lock = threading.Lock()
        self.cv = threading.Condition(self.lock)
        self.initialized = False
        self.ready_sent = False
        self.max_frame_out = MAX_FRAME
        self.max_frame_in = MAX_FRAME
        self.max_inflight_out = MAX_INFLIGHT
        self.max_inflight_in = MAX_INFLIGHT
        self.activate_deadline_ms = 10_000
        self.dispose_deadline_ms = 5_000
        self.incoming = {}            # id -> Incoming
        self.pending = {}             # id -> Pending
        self.cancelled_ids = set()    # host requests we cancelled (one late answer allowed)
        self.outstanding = 0
        self.next_id = 1
        self.activations = {}         # (owner key, entry path) -> Activation
        self.handles = {}             # handle -> Registration
        self.top_generation = {}      # plugin_id -> highest generation seen
        self.first_owner = {}         # plugin_id -> first owner seen (deviation only)
        self.sessions = {}            # mcp session id -> owner key
        self.shutting_down = False

    # -- output -----------------------------------------------------------

    def _write(self, data):
        with self.wlock:
            view = memoryview(data)
            try:
                while view:
                    n = os.write(self.out_fd, view)
                    view = view[n:]
            except OSError as e:
                log("stdout closed (%s); exiting" % e)
                self.exit(1)

    def write_message(self, msg):
        if DEV == "envelope_extra_field":
            # breaks protocol.rs:777 `#[serde(deny_unknown_fields)]` on Envelope
            msg = dict(msg)
            msg["ts"] = int(time.time() * 1000)
        if DEV == "jsonrpc_wrong":
            msg = dict(msg)
            msg["jsonrpc"] = "2"
        text = json.dumps(msg, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        # protocol.rs:3 "Frame: 4-byte magic `CWX1`, u32 little-endian payload length, UTF-8 JSON."
        payload = text.encode("utf-8")          # raises on lone surrogates: never non-UTF-8
        if DEV == "latin1_payload":
            payload = text.encode("latin-1", errors="replace")
        size = len(payload)
        limit = self.max_frame_out
        if DEV == "ignore_limits_max_frame":
            limit = MAX_FRAME
        measured = len(text) if DEV == "limit_in_chars" else size
        # protocol.rs:54 "anything larger is refused, never truncated."
        # protocol.rs:298 `if payload.len() > MAX_FRAME {`
        over = measured > limit
        if DEV == "frame_limit_off_by_one" and measured == limit:
            over = True         # breaks protocol.rs:298 `>`: a frame of exactly the limit is legal
        if over and DEV != "oversize_frame":
            raise FrameTooLarge(size)
        length = len(text) if DEV == "length_in_chars" else size
        magic = b"cwx1" if DEV == "magic_lowercase" else MAGIC
        fmt = ">I" if DEV == "length_big_endian" else "<I"
        self._write(magic + struct.pack(fmt, length & U32_MAX) + payload)

    def notify(self, method, params):
        msg = {"jsonrpc": "2.0", "method": method, "params": params}
        self.write_message(msg)

    def _error_obj(self, code, message, data=_MISSING):
        # protocol.rs:361-373 RpcErrorWire {code, message, data?} (deny_unknown_fields)
        err = {"code": code, "message": message}
        if data is not _MISSING:
            err["data"] = data
        if DEV == "error_extra_field":
            err["stack"] = "host.py"
        return err

    def respond_raw(self, rid, result=_MISSING, error=None, method=None):
        """Write one response.  `error` is (code, message)."""
        wire_id = float(rid) if DEV == "id_as_float" else rid
        if DEV == "wrong_response_id" and method == "tool/call":
            wire_id = rid + 1
        msg = {"jsonrpc": "2.0", "id": wire_id}
        if error is not None:
            msg["error"] = self._error_obj(*error)
        else:
            msg["result"] = {} if result is _MISSING else result
        if method == "host/ping" and DEV == "result_and_error":
            # breaks protocol.rs:822 "response: needs exactly one of result or error"
            msg["error"] = self._error_obj(INTERNAL, "also an error")
        if method == "host/ping" and DEV == "result_missing":
            msg.pop("result", None)
        try:
            self.write_message(msg)
        except FrameTooLarge as e:
            if DEV == "truncate_oversize" and error is None and _truncatable(result):
                self.write_message(_truncated(msg, e.size - self.max_frame_out + 256))
                return
            # protocol.rs:54 "anything larger is refused, never truncated."
            log("response to %s id %s is %d bytes, over max_frame %d: refused"
                % (method, rid, e.size, self.max_frame_out))
            msg = {"jsonrpc": "2.0", "id": wire_id,
                   "error": self._error_obj(INTERNAL, "result of %d bytes exceeds max_frame %d; "
                                            "refused, not truncated" % (e.size, self.max_frame_out))}
            self.write_message(msg)
        except (UnicodeEncodeError, ValueError) as e:
            msg = {"jsonrpc": "2.0", "id": wire_id,
                   "error": self._error_obj(INTERNAL, "result is not encodable as UTF-8 JSON: %s"
                                            % type(e).__name__)}
            self.write_message(msg)
        if DEV == "answer_twice" and method == "tool/call":
            self.write_message(msg)

    def respond(self, inc, result=_MISSING, error=None):
        """Answer a tracked request exactly once."""
        with self.lock:
            if inc.answered:
                log("suppressed a second answer to id %s" % inc.id)
                return
            inc.answered = True
            self.incoming.pop(inc.id, None)
        self.respond_raw(inc.id, result=result, error=error, method=inc.method)

    def exit(self, code):
        try:
            sys.stderr.flush()
        except Exception:
            pass
        os._exit(code)

    # -- input ------------------------------------------------------------

    def read_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = os.read(self.in_fd, min(n - len(buf), 1 << 20))
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
        return bytes(buf)

    def read_frame(self):
        # protocol.rs:308 "`Ok(None)` is a clean EOF at a frame boundary."
        header = self.read_exact(HEADER_LEN)
        if not header:
            return None
        if len(header) < HEADER_LEN:
            raise FrameError("eof", "end of input inside a frame header")
        length = struct.unpack("<I", header[4:8])[0]
        # protocol.rs:5-6 "bad magic or length ends the host instead of desynchronising it."
        if header[:4] != MAGIC:
            if DEV == "bad_magic_continue":
                if length <= self.max_frame_in:
                    self.read_exact(length)
                raise FrameError("skip", "bad frame magic %r: skipped" % header[:4])
            raise FrameError("magic", "bad frame magic %r" % header[:4])
        # protocol.rs:308-309 "The payload buffer is allocated only after the length is checked against `MAX_FRAME`."
        if length > self.max_frame_in:
            if not (DEV == "oversize_incoming_read" and length <= 2 * MAX_FRAME):
                raise FrameError("length", "frame of %d bytes exceeds max_frame %d"
                                 % (length, self.max_frame_in))
        if DEV == "read_length_as_chars":
            payload = self.read_chars(length)
        else:
            payload = self.read_exact(length)
        if len(payload) < length:
            raise FrameError("eof", "end of input inside a frame payload")
        try:
            text = payload.decode("utf-8")
        except UnicodeDecodeError:
            if DEV != "accept_non_utf8":
                raise FrameError("utf8", "frame payload is not UTF-8")
            text = payload.decode("utf-8", errors="replace")
        try:
            return json.loads(text, parse_constant=_reject_constant)
        except ValueError as e:
            # protocol.rs:281 "frame payload is not JSON: {0}"
            raise FrameError("json", "frame payload is not JSON: %s" % e)

    def read_chars(self, length):
        """Deviation read_length_as_chars: takes the length as characters."""
        buf = self.read_exact(length)
        while len(buf) < 4 * length:
            chars = len(buf.decode("utf-8", errors="ignore"))
            if chars >= length:
                break
            more = self.read_exact(length - chars)
            if not more:
                break
            buf += more
        return buf

    # -- lifecycle ----------------------------------------------------------

    def hello_params(self):
        # protocol.rs:387-409 HelloParams
        modules = sorted(self.builtin_modules, key=lambda m: m["id"])
        if DEV == "hello_modules_unordered":
            modules = list(reversed(modules))
        if DEV == "hello_module_dropped" and len(modules) >= 2:
            # breaks protocol.rs:401 "one row per module": the last module's row is missing
            modules = modules[:-1]
        params = {
            "protocol": {"min": PROTOCOL_VERSION, "max": PROTOCOL_VERSION},
            "host_version": HOST_VERSION,
            "bundle_sha256": bundle_sha256(),
            # protocol.rs:902 `if !matches!(hello.runtime.name.as_str(), "bun" | "node") {`
            "runtime": {"name": "node", "version": "v22.0.0"},
            # protocol.rs:397-398 "The core refuses a host that reports any tier but the one it launched."
            "tier": self.tier,
            # protocol.rs:401 "(`dist/builtin-modules.json`), one row per module, in id order."
            "builtin_modules": modules,
        }
        if DEV == "hello_bad_runtime":
            params["runtime"]["name"] = "python"
        if DEV == "hello_wrong_tier":
            params["tier"] = "builtin" if self.tier == "plugin" else "plugin"
        if DEV == "hello_extra_field":
            params["pid"] = os.getpid()
        if DEV == "hello_memory_limit":
            # breaks protocol.rs:406 "(`supervisor::MemoryEnforcement::Jetsam`). Absent otherwise."
            params["memory_limit_mib"] = 512
        if DEV == "hello_protocol_range":
            params["protocol"] = {"min": PROTOCOL_VERSION + 1, "max": PROTOCOL_VERSION + 1}
        return params

    def send_ready(self):
        if self.ready_sent:
            return
        self.ready_sent = True
        msg = {"jsonrpc": "2.0", "method": "host/ready", "params": {}}
        if DEV == "ready_with_id":
            # breaks protocol.rs:252 "must be a notification (no id)"
            msg["id"] = self.take_id()
        if DEV == "ready_extra_params":
            msg["params"] = {"tools": 0}
        if DEV == "params_array":
            # breaks protocol.rs:801 "Params are always named"
            msg["params"] = []
        self.write_message(msg)

    def run(self):
        if DEV != "no_hello":
            self.notify("host/hello", self.hello_params())
        if DEV == "ready_before_initialize":
            self.send_ready()
        while True:
            try:
                obj = self.read_frame()
            except FrameError as e:
                if e.kind == "skip":
                    log(str(e))
                    continue
                log("fatal frame error: %s; exiting" % e)
                self.exit(2)
            if obj is None:
                if DEV == "eof_no_exit":
                    time.sleep(30)
                log("end of input; exiting")
                self.exit(0)
            self.dispatch(obj)

    # -- dispatch -----------------------------------------------------------

    def dispatch(self, obj):
        if type(obj) is not dict:
            violation("message is not a JSON object")
            return
        rid = obj.get("id")
        id_ok = _is_int(rid) and 0 <= rid <= U64_MAX
        if rid is not None and not id_ok:
            # protocol.rs:781 `id: Option<u64>` -- an answer could not carry it back
            violation("id %r is not an unsigned 64-bit integer; message dropped" % (rid,))
            return
        method = obj.get("method")
        extra = sorted(set(obj) - {"jsonrpc", "id", "method", "params", "result", "error"})
        # protocol.rs:777 Envelope `#[serde(deny_unknown_fields)]`; :795 jsonrpc must be "2.0"
        if extra or obj.get("jsonrpc") != "2.0":
            violation("bad envelope (%s)" % ("unknown field `%s`" % extra[0] if extra
                                              else "jsonrpc must be \"2.0\""))
            if method is not None and rid is not None:
                self.respond_raw(rid, error=(INVALID_REQUEST, "invalid envelope"))
            return
        if method is None:
            self.on_response(obj, rid)
            return
        if type(method) is not str:
            violation("method is not a string")
            if rid is not None:
                self.respond_raw(rid, error=(INVALID_REQUEST, "method must be a string"))
            return
        # protocol.rs:834-838 "a request carries no result or error"
        if "result" in obj or "error" in obj:
            violation("`%s` carries a result or error" % method)
            if rid is not None:
                self.respond_raw(rid, error=(INVALID_REQUEST, "a request carries no result or error"))
            return
        # protocol.rs:140-141 "A method missing here is refused by both parsers"
        spec = CORE_TO_HOST.get(method)
        if spec is None:
            violation("unknown core_to_host method `%s`" % method)
            if rid is not None:
                code = INVALID_REQUEST if DEV == "unknown_method_wrong_code" else METHOD_NOT_FOUND
                # protocol.rs:61 "A method the receiver has no handler for"
                self.respond_raw(rid, error=(code, "unknown method `%s`" % method))
            return
        is_request, tiers = spec
        # protocol.rs:24-26 "a plugin-tier host is never sent, and a plugin-tier host's frame is
        # never admitted for, a method reserved for the built-in tier."
        if self.tier not in tiers and DEV != "plugin_serves_builtin":
            violation("`%s` is not allowed on the %s tier" % (method, self.tier))
            if rid is not None:
                self.respond_raw(rid, error=(METHOD_NOT_FOUND, "`%s` is not allowed on the %s tier"
                                             % (method, self.tier)))
            return
        # protocol.rs:118 "A request carries an id and gets a response; a notification does not."
        if is_request and rid is None:
            violation("`%s` must be a request (with id); dropped" % method)
            return
        if not is_request and rid is not None:
            violation("`%s` must be a notification (no id)" % method)
            self.respond_raw(rid, error=(INVALID_REQUEST, "`%s` must be a notification" % method))
            return
        # protocol.rs:804-807 params absent -> {}; "params must be an object"
        params = obj["params"] if "params" in obj else {}
        if type(params) is not dict:
            violation("`%s`: params must be an object" % method)
            if rid is not None:
                self.respond_raw(rid, error=(INVALID_PARAMS, "%s: params must be an object" % method),
                                 method=method)
            return
        if not is_request:
            self.on_cancel(params)
            return
        self.on_request(rid, method, params)

    def on_request(self, rid, method, params):
        # protocol.rs:118 "A request carries an id and gets a response" -- id 0 is an id (u64)
        if DEV == "id_zero_unanswered" and rid == 0:
            log("request id 0 taken for a notification; not answered")
            return
        problem = None
        with self.lock:
            if rid in self.incoming:
                problem = "id %d is already in flight" % rid
            elif len(self.incoming) >= self.max_inflight_in:
                # protocol.rs:56-57 MAX_INFLIGHT "Requests in flight per direction."
                problem = "more than max_inflight %d requests in flight" % self.max_inflight_in
            else:
                inc = Incoming(rid, method, params)
                self.incoming[rid] = inc
        if problem:
            violation(problem)
            self.respond_raw(rid, error=(INVALID_REQUEST, problem), method=method)
            return
        if self.shutting_down:
            self.respond(inc, error=(INVALID_REQUEST, "host is shutting down"))
            return
        if not self.initialized and method not in ("host/initialize", "host/ping", "host/shutdown"):
            violation("`%s` before host/initialize" % method)
            self.respond(inc, error=(INVALID_REQUEST, "host is not initialized"))
            return
        if method in ("host/initialize", "host/ping", "host/shutdown"):
            self.run_handler(inc)
        else:
            threading.Thread(target=self.run_handler, args=(inc,), daemon=True).start()

    def run_handler(self, inc):
        handler = HANDLERS[inc.method]
        try:
            out = handler(self, inc)
        except Invalid as e:
            violation("invalid params: %s" % e)
            out = ("err", INVALID_PARAMS, str(e))
        except NotAvailable as e:
            # protocol.rs:65 "Unknown, revoked, or not-yet-active handle."
            code = INVALID_PARAMS if DEV == "not_available_wrong_code" else NOT_AVAILABLE
            out = ("err", code, str(e))
        except ToolThrew as e:
            # protocol.rs:78 "`ExecutionFailed` (a tool body threw)"
            code = INTERNAL if DEV == "throw_wrong_code" else EXECUTION_FAILED
            out = ("err", code, str(e))
        except Cancelled:
            out = self.cancelled_outcome()
        except DeadlinePassed as e:
            out = ("err", EXECUTION_FAILED, str(e))
        except Exception as e:  # noqa: BLE001 - a bug must still answer once
            log("handler %s failed: %r" % (inc.method, e))
            out = ("err", INTERNAL, "internal error: %s" % type(e).__name__)
        if out is None:
            return
        if out[0] == "ok":
            self.respond(inc, result=out[1])
        else:
            self.respond(inc, error=(out[1], out[2]))

    def cancelled_outcome(self):
        # protocol.rs:67 "Cancelled by `$/cancel`."
        if DEV == "cancel_no_answer":
            return None
        if DEV == "cancel_wrong_code":
            return ("err", EXECUTION_FAILED, "cancelled")
        return ("err", CANCELLED, "cancelled by $/cancel")

    def on_cancel(self, params):
        try:
            # protocol.rs:557-562 CancelParams {id} (deny_unknown_fields)
            p = c_struct(params, "$/cancel", {"id": c_u64}, strict=True)
        except Invalid as e:
            violation(str(e))
            return
        if DEV == "answer_notification":
            self.write_message({"jsonrpc": "2.0", "id": None, "result": None})
        with self.lock:
            inc = self.incoming.get(p["id"])
            if DEV == "cancel_wrong_call" and inc is not None:
                # breaks protocol.rs:561 CancelParams `pub id: u64,`: with two calls in flight,
                # the other (the latest one started) is cancelled instead of the named one
                others = [i for i in self.incoming.values()
                          if i.id != p["id"] and i.method == inc.method and not i.answered]
                if others:
                    inc = max(others, key=lambda i: i.start)
        if inc is None:
            log("$/cancel for id %d, which is not in flight" % p["id"])
            return
        inc.cancel.set()

    def on_response(self, obj, rid):
        # protocol.rs:812-824 decode_response
        if rid is None:
            violation("response: missing id")
            return
        bad = None
        if "params" in obj:
            bad = "response: unexpected params"
        has_result = "result" in obj
        err = obj.get("error")
        if has_result == (err is not None):
            bad = "response: needs exactly one of result or error"
        if err is not None:
            try:
                c_struct(err, "error", {"code": c_any, "message": c_str}, opt={"data": c_any},
                         strict=True)
                if not (_is_int(err["code"]) and I64_MIN <= err["code"] <= I64_MAX):
                    raise Invalid("error.code: expected an i64")
            except Invalid as e:
                bad = str(e)
        with self.cv:
            pend = self.pending.pop(rid, None)
            if pend is None:
                if rid in self.cancelled_ids:
                    self.cancelled_ids.discard(rid)
                    return
                late = True
            else:
                late = False
                self._release(pend)
        if late:
            violation("response for id %d, which the host has not got in flight" % rid)
            return
        if bad:
            violation(bad)
            pend.outcome = ("err", INTERNAL, bad)
        elif err is not None:
            pend.outcome = ("err", err["code"], err["message"])
        else:
            pend.outcome = ("ok", obj["result"])
        pend.event.set()

    # -- host->core requests --------------------------------------------------

    def take_id(self):
        with self.lock:
            rid = self.next_id
            self.next_id += 1
            return rid

    def _release(self, pend):
        # caller holds self.cv
        if not pend.released:
            pend.released = True
            self.outstanding -= 1
            self.cv.notify_all()

    def send_request(self, method, params, deadline, cancel):
        request, tiers = HOST_TO_CORE[method]
        # protocol.rs:25-26 "a plugin-tier host's frame is never admitted for, a method reserved
        # for the built-in tier."
        if self.tier not in tiers and DEV != "plugin_sends_builtin":
            raise NotAllowed("`%s` is reserved for the builtin tier" % method)
        with self.cv:
            # protocol.rs:56 "Requests in flight per direction."
            while self.outstanding >= self.max_inflight_out and DEV != "unbounded_inflight":
                if cancel is not None and cancel.is_set():
                    raise Cancelled()
                left = deadline - time.monotonic()
                if left <= 0:
                    raise DeadlinePassed("no request slot before the deadline")
                self.cv.wait(min(left, 0.05))
            self.outstanding += 1
            rid = self.next_id
            if DEV != "reuse_request_id":
                self.next_id += 1
            pend = Pending(rid, method)
            self.pending[rid] = pend
        try:
            self.write_message({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        except (FrameTooLarge, UnicodeEncodeError, ValueError):
            with self.cv:
                self.pending.pop(rid, None)
                self._release(pend)
            raise
        return pend

    def abandon(self, pend):
        """Stop waiting for a host request: tell the core with $/cancel."""
        with self.cv:
            if self.pending.get(pend.id) is pend:
                del self.pending[pend.id]
                self._release(pend)
                if len(self.cancelled_ids) < 4096:
                    self.cancelled_ids.add(pend.id)
            else:
                return
        try:
            self.notify("$/cancel", {"id": pend.id})
        except Exception:
            pass

    def wait_pending(self, pend, deadline, cancel):
        while not pend.event.is_set():
            if cancel is not None and cancel.is_set():
                self.abandon(pend)
                raise Cancelled()
            left = deadline - time.monotonic()
            if left <= 0:
                self.abandon(pend)
                raise DeadlinePassed("%s: no answer before the deadline" % pend.method)
            pend.event.wait(min(left, 0.05))
        return pend.outcome

    def call_core(self, method, params, deadline, cancel):
        pend = self.send_request(method, params, deadline, cancel)
        return self.wait_pending(pend, deadline, cancel)

    # -- handles ------------------------------------------------------------

    def lookup(self, handle, kind):
        # protocol.rs:65 "Unknown, revoked, or not-yet-active handle."
        with self.lock:
            reg = self.handles.get(handle)
        if reg is None or reg.kind != kind:
            raise NotAvailable("unknown %s handle %d" % (kind, handle))
        state = reg.act.state
        if state == "active":
            return reg
        if state == "activating" and DEV == "serve_not_yet_active":
            return reg
        if state in ("failed", "disposed") and DEV == "serve_revoked_handle":
            return reg
        raise NotAvailable("%s handle %d is %s" % (kind, handle,
                                                   "not yet active" if state == "activating"
                                                   else "revoked"))

    def active_owner(self, owner):
        key = owner_key(owner)
        with self.lock:
            for act in self.activations.values():
                if act.key() == key and act.state == "active":
                    return act
        raise NotAvailable("owner %s/%d is not active" % (owner["plugin_id"], owner["generation"]))


def _truncatable(result):
    try:
        return isinstance(result["content"][0]["text"], str)
    except Exception:
        return False


def _truncated(msg, over):
    msg = json.loads(json.dumps(msg))
    text = msg["result"]["content"][0]["text"]
    msg["result"]["content"][0]["text"] = text[:max(0, len(text) - over)]
    return msg


_BUNDLE_SHA = None


def bundle_sha256():
    global _BUNDLE_SHA
    if _BUNDLE_SHA is None:
        with open(os.path.abspath(__file__), "rb") as f:
            _BUNDLE_SHA = hashlib.sha256(f.read(8 << 20)).hexdigest()
    return _BUNDLE_SHA


# ---------------------------------------------------------------------------
# Results
# ---------------------------------------------------------------------------

def tool_result(text, is_error=False, structured=_MISSING):
    # protocol.rs:1267-1278 ToolResultWire {content: [ContentBlockWire], is_error, structured?}
    block = {"type": "text", "text": text}
    if DEV == "content_type_markdown":
        # breaks protocol.rs:1262 `#[serde(tag = "type", rename_all = "snake_case")]` (only `text`)
        block["type"] = "markdown"
    result = {"content": [block], "is_error": is_error}
    if structured is not _MISSING:
        result["structured"] = structured
    if DEV == "tool_result_no_is_error":
        del result["is_error"]
    if DEV == "content_not_list":
        result["content"] = text
    if DEV == "extra_result_field":
        result["meta"] = {"host": "independent"}
    return result


def command_result(kind, **fields):
    # protocol.rs:1284-1301 CommandResultWire, tag "kind"
    result = {"kind": kind}
    result.update(fields)
    if DEV == "command_result_no_kind":
        del result["kind"]
    return result


# ---------------------------------------------------------------------------
# Handlers (core -> host requests)
# ---------------------------------------------------------------------------

def h_initialize(host, inc):
    # protocol.rs:994-999 InitializeParams {protocol, limits}
    p = c_struct(inc.params, "host/initialize", {"protocol": c_u32, "limits": c_limits})
    if host.initialized:
        violation("second host/initialize")
        return ("err", INVALID_REQUEST, "already initialized")
    # protocol.rs:51 `pub const PROTOCOL_VERSION: u32 = 1;` -- the only version hello offers
    if p["protocol"] != PROTOCOL_VERSION and DEV != "accept_wrong_protocol":
        violation("host/initialize protocol %d, hello offered %d..%d"
                  % (p["protocol"], PROTOCOL_VERSION, PROTOCOL_VERSION))
        return ("err", INVALID_PARAMS, "protocol %d is outside 1..1" % p["protocol"])
    lim = p["limits"]
    if lim["max_frame"] > MAX_FRAME:
        violation("limits.max_frame %d is over MAX_FRAME %d" % (lim["max_frame"], MAX_FRAME))
    if lim["max_inflight"] > MAX_INFLIGHT:
        violation("limits.max_inflight %d is over MAX_INFLIGHT %d"
                  % (lim["max_inflight"], MAX_INFLIGHT))
    with host.lock:
        # protocol.rs:987-991 HostLimits: the bounds this session runs under
        host.max_frame_out = min(MAX_FRAME, lim["max_frame"])
        host.max_frame_in = min(MAX_FRAME, lim["max_frame"])
        host.max_inflight_out = min(MAX_INFLIGHT, lim["max_inflight"])
        host.max_inflight_in = min(MAX_INFLIGHT, lim["max_inflight"])
        host.activate_deadline_ms = lim["activate_deadline_ms"]
        host.dispose_deadline_ms = lim["dispose_deadline_ms"]
        host.initialized = True
    host.respond(inc, result={})
    host.send_ready()
    if DEV == "register_before_activate":
        threading.Thread(target=_register_early, args=(host,), daemon=True).start()
    return None


def _register_early(host):
    owner = {"plugin_id": "toy", "generation": 0, "owner_token": "0" * 32}
    params = {"owner": owner, "kind": "tool",
              "spec": {"name": "echo", "description": "early", "input_schema": {"type": "object"}}}
    try:
        host.call_core("registry/register", params, time.monotonic() + 2.0, None)
    except Exception:
        pass


def h_ping(host, inc):
    # protocol.rs:1340-1342 host/ping takes EmptyParams
    c_empty(inc.params, "host/ping")
    return ("ok", {})


def h_shutdown(host, inc):
    # protocol.rs:1336-1338 host/shutdown takes EmptyParams
    c_empty(inc.params, "host/shutdown")
    if DEV == "shutdown_late_answer":
        # breaks protocol.rs:1196 "| `host/shutdown` | 2 s | tests only |": answered after 2.5 s
        time.sleep(2.5)
    # protocol.rs:1196 "| `host/shutdown` | 2 s | tests only |" -- answer, then exit at once
    if DEV == "shutdown_no_answer":
        log("shutdown: exiting without an answer")
        host.exit(0)
    host.respond(inc, result={})
    if DEV == "shutdown_no_exit":
        log("shutdown answered; staying up")
        return None
    host.shutting_down = True
    log("shutdown answered; exiting")
    host.exit(0)


def load_extension(path, sha256):
    """Read, verify and parse an extension file.  Returns (ext, diagnostic)."""
    try:
        st = os.stat(path)
    except OSError as e:
        return None, "cannot read entry %s: %s" % (path, e.strerror)
    if not os.path.isfile(path):
        return None, "entry %s is not a regular file" % path
    if st.st_size > MAX_EXTENSION_BYTES:
        return None, "entry %s is larger than %d bytes" % (path, MAX_EXTENSION_BYTES)
    try:
        with open(path, "rb") as f:
            data = f.read(MAX_EXTENSION_BYTES + 1)
    except OSError as e:
        return None, "cannot read entry %s: %s" % (path, e.strerror)
    if len(data) > MAX_EXTENSION_BYTES:
        return None, "entry %s is larger than %d bytes" % (path, MAX_EXTENSION_BYTES)
    digest = hashlib.sha256(data).hexdigest()
    # protocol.rs:1003-1005 EntryRef {path, sha256}: load only the file the core pinned
    if digest != sha256.strip().lower() and DEV != "skip_sha256_check":
        return None, "entry %s has sha256 %s, the core pinned %s" % (path, digest, sha256)
    try:
        ext = json.loads(data.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError) as e:
        return None, "entry %s is not a JSON extension: %s" % (path, e)
    try:
        return validate_extension(ext), None
    except Invalid as e:
        return None, "entry %s: %s" % (path, e)


def _list_of(v, what, item_check):
    if v is None:
        return []
    if type(v) is not list or len(v) > MAX_ITEMS:
        raise Invalid("%s: expected a list of at most %d items" % (what, MAX_ITEMS))
    return [item_check(x, "%s[%d]" % (what, i)) for i, x in enumerate(v)]


def _ms(v, what):
    if v is None:
        return 0
    if not (_is_int(v) and 0 <= v <= MAX_SLEEP_MS):
        raise Invalid("%s: expected milliseconds" % what)
    return v


def validate_extension(ext):
    if type(ext) is not dict or ext.get("cwx_extension") != 1:
        raise Invalid("not a cwx_extension 1 file")

    def tool(v, w):
        t = c_struct(v, w, {"name": c_str, "behaviour": c_str},
                     opt={"description": c_str, "input_schema": c_obj})
        if t["behaviour"] not in TOOL_BEHAVIOURS:
            raise Invalid("%s: unknown behaviour %s" % (w, t["behaviour"]))
        t.setdefault("description", "")
        t.setdefault("input_schema", {"type": "object"})
        return t

    def command(v, w):
        c = c_struct(v, w, {"name": c_str, "behaviour": c_str},
                     opt={"description": c_str, "argument_hint": c_str, "target": c_str})
        if c["behaviour"] not in COMMAND_BEHAVIOURS:
            raise Invalid("%s: unknown behaviour %s" % (w, c["behaviour"]))
        c.setdefault("description", "")
        return c

    def hook(v, w):
        h = c_struct(v, w, {"name": c_str, "behaviour": c_str},
                     opt={"description": c_str, "deny": c_any, "ask": c_any, "annotate": c_obj,
                          "revise": c_obj})
        if h["behaviour"] not in HOOK_BEHAVIOURS:
            raise Invalid("%s: unknown behaviour %s" % (w, h["behaviour"]))
        h.setdefault("description", "")
        for k in ("deny", "ask"):
            h[k] = _list_of(h.get(k), "%s.%s" % (w, k), c_str)
        h.setdefault("annotate", {})
        h.setdefault("revise", {})
        return h

    out = {
        "name": ext.get("name") if type(ext.get("name")) is str else "extension",
        "activate_ms": _ms(ext.get("activate_ms"), "activate_ms"),
        "dispose_ms": _ms(ext.get("dispose_ms"), "dispose_ms"),
        "tools": _list_of(ext.get("tools"), "tools", tool),
        "commands": _list_of(ext.get("commands"), "commands", command),
        "hooks": _list_of(ext.get("hooks"), "hooks", hook),
    }
    names = [t["name"] for t in out["tools"]] + [c["name"] for c in out["commands"]]
    if len(set(names)) != len(names):
        raise Invalid("duplicate tool or command names")
    return out


def spec_for(kind, item):
    # protocol.rs:451-454 "a tool has an `input_schema` and no `argument_hint`; a command has
    # no `input_schema` and may have an `argument_hint`."
    spec = {"name": item["name"], "description": item["description"]}
    if kind == "tool":
        spec["input_schema"] = item["input_schema"]
        if DEV == "tool_without_schema":
            del spec["input_schema"]
        if DEV == "tool_with_hint":
            spec["argument_hint"] = "<input>"
        if DEV == "schema_not_object":
            # breaks protocol.rs:463 `pub input_schema: Option<Map<String, Value>>,`
            spec["input_schema"] = "object"
    elif kind == "command":
        if item.get("argument_hint") is not None:
            spec["argument_hint"] = item["argument_hint"]
        if DEV == "command_with_schema":
            spec["input_schema"] = {"type": "object"}
    else:
        # protocol.rs:506 "a hook, prompt or skill root registration has no input schema or argument hint"
        if DEV == "hook_with_hint":
            spec["argument_hint"] = "<event>"
    if DEV == "spec_extra_field":
        spec["title"] = item["name"]
    return spec


def h_activate(host, inc):
    # protocol.rs:1008-1028 ActivateParams
    p = c_struct(inc.params, "ext/activate",
                 {"owner": c_owner, "plugin_name": c_str, "entry": c_entry},
                 opt={"data_dir": c_str}, nonnull={"scope": c_entry})
    # protocol.rs:1021 "Always an object; `{}` when none."
    config = inc.params.get("config", {})
    if type(config) is not dict:
        violation("ext/activate config is not an object")
        raise Invalid("ext/activate.config: expected an object")
    if DEV == "config_leaks":
        # breaks protocol.rs:1021 "Always an object; `{}` when none." -- an activation without
        # settings gets the settings of the previous activation that had some
        if config == {} and getattr(host, "last_config", None):
            config = host.last_config
        elif config:
            host.last_config = config
    owner = p["owner"]
    # protocol.rs:349 "`owner_token` is 128+ random bits minted by the core"
    if len(owner["owner_token"].encode("utf-8")) < 16:
        violation("owner_token %r cannot hold 128 random bits" % owner["owner_token"])
    # protocol.rs:348 "`generation` bumps on every (re)activation"
    with host.lock:
        top = host.top_generation.get(owner["plugin_id"])
        if top is not None and owner["generation"] <= top:
            violation("generation %d for %s does not bump %d"
                      % (owner["generation"], owner["plugin_id"], top))
        host.top_generation[owner["plugin_id"]] = max(owner["generation"], top or 0)
        first = host.first_owner.setdefault(owner["plugin_id"], dict(owner))
        entry_path = p["entry"]["path"]
        # a reactivation supersedes what an older generation of the plugin left for the entry
        for act in list(host.activations.values()):
            if act.owner["plugin_id"] == owner["plugin_id"] and act.entry["path"] == entry_path \
                    and act.state in ("activating", "active"):
                if act.key() == owner_key(owner):
                    return ("ok", {"status": "failed",
                                   "diagnostic": "entry %s is already active for this owner"
                                   % entry_path})
                act.state = "disposed"
        act = Activation(owner, p["entry"], p.get("scope"), p["plugin_name"], config,
                         p.get("data_dir"))
        host.activations[(owner_key(owner), entry_path)] = act

    deadline = inc.start + host.activate_deadline_ms / 1000.0
    # protocol.rs:1197 "the host enforces activation's own deadline"
    if DEV == "activate_deadline_ignored":
        deadline = inc.start + 120.0

    def failed(diag):
        act.state = "failed"
        log("activation of %s failed: %s" % (p["plugin_name"], diag))
        return ("ok", activate_failed(diag))

    ext, diag = load_extension(p["entry"]["path"], p["entry"]["sha256"])
    if ext is None:
        return failed(diag)
    act.ext = ext
    items = [("tool", t) for t in ext["tools"]] + [("command", c) for c in ext["commands"]] \
        + [("hook", h) for h in ext["hooks"]]
    tools = [t["name"] for t in ext["tools"]]
    commands = [c["name"] for c in ext["commands"]]

    reg_owner = dict(owner)
    if DEV == "register_wrong_generation":
        reg_owner["generation"] = owner["generation"] + 1
    if DEV == "stale_owner_on_reactivate":
        reg_owner = dict(first)

    if DEV == "register_after_answer":
        act.state = "active"
        host.respond(inc, result=activate_ok(tools, commands))

    # protocol.rs:474-484 RegisterParams {owner, scope?, kind, spec}; pipelined up to max_inflight
    sent = []
    try:
        for kind, item in items:
            params = {"owner": reg_owner, "kind": kind.capitalize() if DEV == "register_kind_case"
                      else kind, "spec": spec_for(kind, item)}
            if act.scope is not None:
                params["scope"] = act.scope
            elif DEV == "scope_null":
                # breaks protocol.rs:335 "`Some(value)` even for an explicit JSON `null`"
                params["scope"] = None
            reg = Registration(act, kind, item)
            sent.append((reg, host.send_request("registry/register", params, deadline, inc.cancel)))
        refused = []
        for reg, pend in sent:
            outcome = host.wait_pending(pend, deadline, inc.cancel)
            if outcome[0] != "ok":
                refused.append("%s `%s`: error %s %s" % (reg.kind, reg.item["name"], outcome[1],
                                                         outcome[2]))
                continue
            res = outcome[1]
            # protocol.rs:1229-1237 RegisterResult: `{handle}` or `{refused}` (untagged)
            if type(res) is dict and _is_int(res.get("handle")) and 0 <= res["handle"] <= U64_MAX:
                reg.handle = res["handle"]
                with host.lock:
                    host.handles[reg.handle] = reg
                    act.handles[reg.handle] = reg
            elif type(res) is dict and type(res.get("refused")) is str:
                refused.append("%s `%s` refused: %s" % (reg.kind, reg.item["name"], res["refused"]))
            else:
                violation("registry/register answer is neither {handle} nor {refused}: %r" % (res,))
                refused.append("%s `%s`: unreadable answer" % (reg.kind, reg.item["name"]))
    except Cancelled:
        for _, pend in sent:
            host.abandon(pend)
        act.state = "failed"
        raise
    except DeadlinePassed:
        for _, pend in sent:
            host.abandon(pend)
        if DEV == "register_after_answer":
            return None
        return failed("activation did not finish within activate_deadline_ms %d"
                      % host.activate_deadline_ms)
    if DEV == "register_after_answer":
        return None
    # protocol.rs:1229-1230 "a handle, or a refusal the host reports as a failed activation."
    if refused and DEV != "ignore_refusal":
        return failed("; ".join(refused))
    # the extension's own start-up work, bounded by the activation deadline
    end = time.monotonic() + ext["activate_ms"] / 1000.0
    if end > deadline:
        if inc.cancel.wait(max(0.0, deadline - time.monotonic())):
            act.state = "failed"
            raise Cancelled()
        return failed("activation did not finish within activate_deadline_ms %d"
                      % host.activate_deadline_ms)
    if inc.cancel.wait(max(0.0, end - time.monotonic())):
        act.state = "failed"
        raise Cancelled()
    act.state = "active"
    host.send_log("info", "activated %s (%d tools, %d commands, %d hooks)"
                  % (p["plugin_name"], len(tools), len(commands), len(ext["hooks"])),
                  owner["plugin_id"])
    return ("ok", activate_ok(tools, commands))


def activate_ok(tools, commands):
    # protocol.rs:1242-1247 `Ok { tools: Vec<String>, #[serde(default)] commands: Vec<String> }`
    result = {"status": "ok", "tools": tools, "commands": commands}
    if DEV == "activate_missing_tools":
        del result["tools"]
    if DEV == "activate_status_case":
        result["status"] = "OK"
    return result


def activate_failed(diag):
    # protocol.rs:1248-1250 `Failed { diagnostic: String }`
    result = {"status": "failed", "diagnostic": diag}
    if DEV == "activate_status_case":
        result["status"] = "Failed"
    return result


def send_log(host, level, msg, plugin_id=None):
    # protocol.rs:547-555 LogParams {level, msg, plugin_id?} (deny_unknown_fields)
    params = {"level": level, "msg": msg}
    if plugin_id is not None:
        params["plugin_id"] = plugin_id
    if DEV == "log_extra_field":
        params["ts"] = int(time.time())
    method = "host/log" if DEV == "unknown_method_sent" else "log"
    host.notify(method, params)


Host.send_log = send_log


def h_deactivate(host, inc):
    # protocol.rs:1034-1044 DeactivateParams {owner, entry?}
    p = c_struct(inc.params, "ext/deactivate", {"owner": c_owner}, nonnull={"entry": c_entry})
    key = owner_key(p["owner"])
    with host.lock:
        acts = [a for a in host.activations.values()
                if a.key() == key and a.state in ("activating", "active")
                and ("entry" not in p or a.entry["path"] == p["entry"]["path"])]
        # revoke first: from here on the handles are "revoked" (protocol.rs:65)
        for a in acts:
            a.state = "disposed"
    if not acts:
        raise NotAvailable("owner %s/%d has no active entry to deactivate"
                           % (p["owner"]["plugin_id"], p["owner"]["generation"]))
    dispose_ms = max((a.ext or {}).get("dispose_ms", 0) for a in acts)
    deadline = inc.start + host.dispose_deadline_ms / 1000.0
    end = time.monotonic() + dispose_ms / 1000.0
    # protocol.rs:1198 "| `ext/deactivate` | `DISPOSE_DEADLINE` + 500 ms | the same, for disposal |"
    if DEV == "dispose_deadline_ignored":
        deadline = end
    if inc.cancel.wait(max(0.0, min(end, deadline) - time.monotonic())):
        raise Cancelled()
    leaked = []
    if end > deadline:
        leaked = ["%s: dispose did not finish within dispose_deadline_ms %d"
                  % (a.plugin_name, host.dispose_deadline_ms) for a in acts]
    # protocol.rs:1255-1258 DeactivateResult {disposed, leaked}
    result = {"disposed": not leaked, "leaked": leaked}
    if DEV == "deactivate_missing_leaked":
        del result["leaked"]
    return ("ok", result)


def wait_work(host, inc, until, deadline):
    """Wait until `until` (the work is done), the deadline or $/cancel.
    Returns "done"; raises Cancelled or DeadlinePassed."""
    stop = until if DEV == "deadline_ignored" else min(until, deadline)
    if DEV == "cancel_ignored":
        time.sleep(max(0.0, stop - time.monotonic()))
        if until <= deadline or DEV == "deadline_ignored":
            return "done"
        raise DeadlinePassed("deadline_ms passed")
    if inc.cancel.wait(max(0.0, stop - time.monotonic())):
        raise Cancelled()
    if until <= deadline or DEV == "deadline_ignored":
        return "done"
    # protocol.rs:1189 the core "sends `$/cancel`, forgets the call" at the deadline: give its
    # $/cancel a moment to arrive, then stop the work ourselves.
    if inc.cancel.wait(DEADLINE_GRACE_S):
        raise Cancelled()
    violation("no $/cancel for id %d within %.1f s after its deadline" % (inc.id, DEADLINE_GRACE_S))
    raise DeadlinePassed("deadline_ms passed")


def h_tool_call(host, inc):
    # protocol.rs:1046-1070 ToolCallParams
    opt = {k: c_str for k in ("workspace", "ticket", "session_id", "agent_id", "origin_turn_id")}
    p = c_struct(inc.params, "tool/call", {"handle": c_u64, "call_id": c_str, "input": c_any,
                                           "deadline_ms": c_u64}, opt=opt)
    reg = host.lookup(p["handle"], "tool")
    tool = reg.item
    deadline = inc.start + p["deadline_ms"] / 1000.0
    inp = p["input"]
    if DEV == "string_input_refused" and type(inp) is str:
        # breaks protocol.rs:1051 `pub input: Value,` -- a JSON string is a Value
        raise Invalid("tool/call.input: expected an object")
    beh = tool["behaviour"]
    if beh == "echo":
        if type(inp) is dict and type(inp.get("text")) is str:
            text = inp["text"]
        else:
            text = json.dumps(inp, ensure_ascii=False)
        return ("ok", tool_result(text, structured=inp))
    if beh == "sleep":
        ms = inp.get("ms", MAX_SLEEP_MS) if type(inp) is dict else MAX_SLEEP_MS
        if not (_is_int(ms) and 0 <= ms <= MAX_SLEEP_MS):
            ms = MAX_SLEEP_MS
        wait_work(host, inc, inc.start + ms / 1000.0, deadline)
        return ("ok", tool_result("slept %d ms" % ms))
    if beh == "fail":
        raise ToolThrew("toy tool `%s` threw" % tool["name"])
    if beh == "error_result":
        return ("ok", tool_result("toy tool `%s` reports an error" % tool["name"], is_error=True))
    if beh == "big":
        n = inp.get("bytes", 0) if type(inp) is dict else 0
        ch = inp.get("char", "x") if type(inp) is dict else "x"
        if not (_is_int(n) and 0 <= n <= 2 * MAX_FRAME) or type(ch) is not str or len(ch) != 1:
            raise Invalid("big: input needs bytes (<= 64 MiB) and a one-character char")
        return ("ok", tool_result(ch * (n // len(ch.encode("utf-8")))))
    if beh == "config":
        data = {"plugin_name": reg.act.plugin_name, "config": reg.act.config,
                "data_dir": reg.act.data_dir}
        return ("ok", tool_result(json.dumps(data, ensure_ascii=False), structured=data))
    if beh == "relay":
        ticket = p.get("ticket")
        # protocol.rs:1059-1060 "Absent for a call with no gate ..., whose tool then has no way
        # to ask the core for anything."
        if ticket is None and DEV != "core_call_without_ticket":
            return ("ok", tool_result("no invocation ticket: this call cannot ask the core",
                                      is_error=True))
        name = inp.get("name", "read") if type(inp) is dict else "read"
        params = {"owner": reg.act.owner, "ticket": ticket if ticket is not None else "",
                  "name": name if type(name) is str else "read",
                  "input": inp.get("input", {}) if type(inp) is dict else {}}
        outcome = host.call_core("core/call", params, deadline, inc.cancel)
        if outcome[0] == "ok":
            res = outcome[1]
            if type(res) is dict and type(res.get("content")) is list \
                    and type(res.get("is_error")) is bool:
                return ("ok", tool_result(_content_text(res), is_error=res["is_error"],
                                          structured=res.get("structured", _MISSING)))
            return ("ok", tool_result("core/call answered with an unreadable result", True))
        word = {REFUSED: "refused", DENIED: "denied"}.get(outcome[1], "failed")
        return ("ok", tool_result("core/call %s %s: %s" % (name, word, outcome[2]), is_error=True))
    if beh == "launch":
        params = {"owner": reg.act.owner,
                  "session_id": inp.get("session_id", "toy-session") if type(inp) is dict
                  else "toy-session",
                  "ticket": inp.get("ticket", "") if type(inp) is dict else ""}
        try:
            outcome = host.call_core("proc/launch", params, deadline, inc.cancel)
        except NotAllowed as e:
            return ("ok", tool_result(str(e), is_error=True))
        if outcome[0] == "ok":
            return ("ok", tool_result(json.dumps(outcome[1], ensure_ascii=False)))
        return ("ok", tool_result("proc/launch failed: %s" % outcome[2], is_error=True))
    raise ToolThrew("unknown behaviour")


def _content_text(res):
    parts = []
    for block in res.get("content", []):
        if type(block) is dict and type(block.get("text")) is str:
            parts.append(block["text"])
    return "".join(parts)


def h_command_run(host, inc):
    # protocol.rs:1072-1090 CommandRunParams
    opt = {k: c_str for k in ("workspace", "session_id", "agent_id", "origin_turn_id")}
    p = c_struct(inc.params, "command/run", {"handle": c_u64, "command_id": c_str,
                                             "raw_input": c_str, "deadline_ms": c_u64}, opt=opt)
    # protocol.rs:1072-1073 "`raw_input` is what follows the command name, trimmed"
    if p["raw_input"] != p["raw_input"].strip():
        violation("command/run raw_input %r is not trimmed" % p["raw_input"])
    reg = host.lookup(p["handle"], "command")
    cmd = reg.item
    deadline = inc.start + p["deadline_ms"] / 1000.0
    arg = p["raw_input"].strip()
    beh = cmd["behaviour"]
    if beh == "greet":
        return ("ok", command_result("success", text="hello, %s" % (arg or "world")))
    if beh == "submit":
        return ("ok", command_result("submit", prompt="Please summarise: %s" % (arg or "this session"),
                                     text="submitting a prompt"))
    if beh == "command_error":
        return ("ok", command_result("error", text="toy command `%s` failed" % cmd["name"]))
    if beh == "sleep":
        wait_work(host, inc, inc.start + MAX_SLEEP_MS / 1000.0, deadline)
        return ("ok", command_result("success"))
    if beh == "unregister":
        target = cmd.get("target") or arg
        with host.lock:
            regs = [r for r in reg.act.handles.values()
                    if r.item["name"] == target and r.kind == "tool"]
        if not regs:
            return ("ok", command_result("error", text="no tool `%s` to unregister" % target))
        victim = regs[0]
        # protocol.rs:515-521 UnregisterParams {owner, handle}
        outcome = host.call_core("registry/unregister",
                                 {"owner": reg.act.owner, "handle": victim.handle},
                                 deadline, inc.cancel)
        if outcome[0] != "ok":
            return ("ok", command_result("error", text="unregister failed: %s" % outcome[2]))
        if DEV != "unregister_handle_still_served":
            # protocol.rs:65 "Unknown, revoked, or not-yet-active handle." -- unregistered = revoked
            with host.lock:
                host.handles.pop(victim.handle, None)
                reg.act.handles.pop(victim.handle, None)
        return ("ok", command_result("success", text="unregistered `%s`" % target))
    raise ToolThrew("unknown behaviour")


def h_hook_evaluate(host, inc):
    # protocol.rs:1106-1114 HookEvaluateParams (deny_unknown_fields)
    p = c_struct(inc.params, "hook/evaluate", {"handle": c_u64, "event": c_str,
                                               "payload": c_hook_payload, "deadline_ms": c_u64},
                 strict=True)
    reg = host.lookup(p["handle"], "hook")
    rules = reg.item
    name = p["payload"]["name"]
    # protocol.rs:1116-1127 HookVerdictWire, tag "kind", deny_unknown_fields
    if name in rules["deny"]:
        verdict = {"kind": "deny", "reason": "toy guard denies `%s`" % name}
        if DEV == "hook_verdict_extra_field":
            verdict["rule"] = "deny-list"
    elif name in rules["ask"]:
        verdict = {"kind": "ask", "reason": "toy guard asks before `%s`" % name}
    elif name in rules["revise"]:
        new = dict(p["payload"]["input"]) if type(p["payload"]["input"]) is dict else {}
        if type(rules["revise"][name]) is dict:
            new.update(rules["revise"][name])
        verdict = {"kind": "revise", "input": new}
        if DEV == "revise_not_object":
            verdict["input"] = json.dumps(new)
    elif name in rules["annotate"]:
        verdict = {"kind": "annotate", "text": str(rules["annotate"][name])}
    else:
        verdict = {"kind": "abstain"}
        if DEV == "hook_verdict_allow":
            # breaks protocol.rs:33 "There is deliberately no method that expresses approval."
            verdict = {"kind": "allow"}
    return ("ok", verdict)


# --- builtin-tier broker methods (protocol.rs:576-712) ----------------------

def _rpc_from_grant(grant):
    msg = {"jsonrpc": "2.0", "method": grant["method"], "params": grant["params"]}
    if grant.get("wire_id") is not None:
        msg["id"] = grant["wire_id"]
    return msg


def _ok_or_raise(outcome, what):
    if outcome[0] == "ok":
        return outcome[1]
    raise _PassError(outcome[1], "%s: %s" % (what, outcome[2]))


class _PassError(Exception):
    def __init__(self, code, msg):
        Exception.__init__(self, msg)
        self.code = code


def _broker(fn):
    def wrapped(host, inc):
        try:
            return fn(host, inc)
        except _PassError as e:
            code = e.code if _is_int(e.code) else INTERNAL
            return ("err", code, str(e))
        except NotAllowed as e:
            return ("err", REFUSED, str(e))
    return wrapped


@_broker
def h_mcp_open(host, inc):
    # protocol.rs:611-623 McpOpenParams (deny_unknown_fields)
    p = c_struct(inc.params, "mcp/open",
                 {"owner": c_owner, "session_id": c_str, "launch_ticket": c_str, "transport": c_str,
                  "initialize_grant": c_grant, "initialized_grant": c_grant,
                  "client_version": c_str, "deadline_ms": c_u64}, strict=True)
    act = host.active_owner(p["owner"])
    deadline = inc.start + p["deadline_ms"] / 1000.0
    sid = p["session_id"]
    owner = act.owner
    # protocol.rs:644-651 ProcLaunchParams {owner, session_id, ticket}
    _ok_or_raise(host.call_core("proc/launch", {"owner": owner, "session_id": sid,
                                                "ticket": p["launch_ticket"]}, deadline, inc.cancel),
                 "proc/launch")
    g = p["initialize_grant"]
    _ok_or_raise(host.call_core("proc/write", {"owner": owner, "session_id": sid,
                                               "frame": _rpc_from_grant(g), "ticket": g["ticket"],
                                               "operation_id": g["operation_id"]},
                                deadline, inc.cancel), "proc/write")
    init = _ok_or_raise(host.call_core("proc/read", {"owner": owner, "session_id": sid},
                                       deadline, inc.cancel), "proc/read")
    g = p["initialized_grant"]
    _ok_or_raise(host.call_core("proc/write", {"owner": owner, "session_id": sid,
                                               "frame": _rpc_from_grant(g), "ticket": g["ticket"],
                                               "operation_id": g["operation_id"]},
                                deadline, inc.cancel), "proc/write")
    with host.lock:
        host.sessions[sid] = owner_key(owner)
    return ("ok", {"session_id": sid, "initialize": init})


def _session(host, p):
    with host.lock:
        key = host.sessions.get(p["session_id"])
    if key is None or key != owner_key(p["owner"]):
        raise NotAvailable("unknown mcp session %s" % p["session_id"])
    return host.active_owner(p["owner"])


@_broker
def h_mcp_request(host, inc):
    # protocol.rs:625-633 McpRequestParams (deny_unknown_fields)
    p = c_struct(inc.params, "mcp/request", {"owner": c_owner, "session_id": c_str,
                                             "grant": c_grant, "deadline_ms": c_u64}, strict=True)
    act = _session(host, p)
    deadline = inc.start + p["deadline_ms"] / 1000.0
    g = p["grant"]
    sid = p["session_id"]
    _ok_or_raise(host.call_core("proc/write", {"owner": act.owner, "session_id": sid,
                                               "frame": _rpc_from_grant(g), "ticket": g["ticket"],
                                               "operation_id": g["operation_id"]},
                                deadline, inc.cancel), "proc/write")
    if g.get("wire_id") is None:
        return ("ok", {"session_id": sid})
    resp = _ok_or_raise(host.call_core("proc/read", {"owner": act.owner, "session_id": sid},
                                       deadline, inc.cancel), "proc/read")
    return ("ok", {"session_id": sid, "response": resp})


@_broker
def h_mcp_close(host, inc):
    # protocol.rs:635-642 McpCloseParams (deny_unknown_fields)
    p = c_struct(inc.params, "mcp/close", {"owner": c_owner, "session_id": c_str,
                                           "deadline_ms": c_u64}, strict=True)
    act = _session(host, p)
    deadline = inc.start + p["deadline_ms"] / 1000.0
    _ok_or_raise(host.call_core("proc/close", {"owner": act.owner, "session_id": p["session_id"]},
                                deadline, inc.cancel), "proc/close")
    with host.lock:
        host.sessions.pop(p["session_id"], None)
    return ("ok", {"session_id": p["session_id"], "closed": True})


@_broker
def h_harness_run(host, inc):
    # protocol.rs:576-587 HarnessRunParams (deny_unknown_fields)
    p = c_struct(inc.params, "harness/run", {"owner": c_owner, "execution_id": c_str,
                                             "ticket": c_str, "deadline_ms": c_u64},
                 opt={"hook": c_hook_dispatch}, strict=True)
    act = host.active_owner(p["owner"])
    deadline = inc.start + p["deadline_ms"] / 1000.0
    # protocol.rs:588-595 ExecutionRedeemParams {owner, execution_id, ticket}
    res = _ok_or_raise(host.call_core("exec/redeem", {"owner": act.owner,
                                                      "execution_id": p["execution_id"],
                                                      "ticket": p["ticket"]}, deadline, inc.cancel),
                       "exec/redeem")
    return ("ok", {"execution_id": p["execution_id"], "redeemed": res})


HANDLERS = {
    "host/initialize": h_initialize,
    "host/ping": h_ping,
    "host/shutdown": h_shutdown,
    "ext/activate": h_activate,
    "ext/deactivate": h_deactivate,
    "tool/call": h_tool_call,
    "command/run": h_command_run,
    "hook/evaluate": h_hook_evaluate,
    "mcp/open": h_mcp_open,
    "mcp/request": h_mcp_request,
    "mcp/close": h_mcp_close,
    "harness/run": h_harness_run,
}


def load_modules(path):
    if not path:
        return []
    with open(path, "rb") as f:
        data = f.read(1 << 20)
    rows = json.loads(data.decode("utf-8"))
    if type(rows) is not list:
        raise SystemExit("--builtin-modules: expected a JSON list")
    return [c_struct(r, "builtin_modules[%d]" % i, {"id": c_str, "sha256": c_str}, strict=True)
            for i, r in enumerate(rows)]


def main():
    global DEV
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tier", choices=ALL_TIERS, required=True)
    ap.add_argument("--deviation", default=None)
    ap.add_argument("--builtin-modules", default=None,
                    help="JSON list of {id, sha256}: the built-in modules this bundle embeds")
    ap.add_argument("--max-lifetime", type=float, default=3600.0)
    ap.add_argument("--list-deviations", action="store_true")
    args = ap.parse_args()
    if args.list_deviations:
        print("\n".join(DEVIATIONS + DEVIATIONS_ROUND3))
        return
    if args.deviation is not None and args.deviation not in DEVIATIONS + DEVIATIONS_ROUND3:
        sys.stderr.write("unknown deviation %s\n" % args.deviation)
        sys.exit(64)
    DEV = args.deviation
    host = Host(args.tier, load_modules(args.builtin_modules))

    def watchdog():
        time.sleep(max(1.0, args.max_lifetime))
        log("max lifetime reached; exiting")
        host.exit(3)
    threading.Thread(target=watchdog, daemon=True).start()
    if DEV:
        log("deviation %s" % DEV)
    if DEV == "stdout_noise":
        os.write(host.out_fd, b"cwx host starting\n")
    host.run()


if __name__ == "__main__":
    main()
