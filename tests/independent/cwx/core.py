#!/usr/bin/env python3
"""Independent CWX1 core (test double), written from protocol.rs only.

Usage: python3 core.py --host 'COMMAND LINE' --tier plugin|builtin [--deviation NAME]
                       [--extension FILE] [--host-log FILE] [--strict]
                       [--activate-deadline-ms N] [--dispose-deadline-ms N]

Launches the host, runs a small workload (hello, initialize, ready, ping,
ext/activate, tool/call, command/run, hook/evaluate, core/call through a
tool, builtin broker calls on the builtin tier, ext/deactivate, a revoked
handle, host/shutdown) and exits 0 when all went well.  Everything the host
writes is read with the strict host->core rules of protocol.rs
(`parse_host_message` and the result shapes); each breach is a finding.

This module is also imported by selftest.py (Channel, parse_host_message).
Line references "protocol.rs:N" are the line numbers of the code-viewer dump.
"""

import argparse
import hashlib
import json
import os
import secrets
import shlex
import struct
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# protocol.rs:51-57
PROTOCOL_VERSION = 1
MAGIC = b"CWX1"
HEADER_LEN = 8
MAX_FRAME = 32 * 1024 * 1024
MAX_INFLIGHT = 256
U64_MAX = (1 << 64) - 1
U32_MAX = (1 << 32) - 1
I64_MIN, I64_MAX = -(1 << 63), (1 << 63) - 1
DRAIN_LIMIT = 80 * 1024 * 1024      # how much of an oversize frame we read to stay in sync

METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600
NOT_AVAILABLE = -32001
CANCELLED = -32800
REFUSED = -32002
DENIED = -32003

HANDSHAKE_DEADLINE_S = 30.0     # protocol.rs:1194
PING_DEADLINE_S = 10.0          # protocol.rs:1195
SHUTDOWN_DEADLINE_S = 2.0       # protocol.rs:1196

ALL_TIERS = ("plugin", "builtin")
BUILTIN = ("builtin",)

# protocol.rs:142-216 (direction, name) -> (request, tiers)
METHODS = {}
for _n, _r, _t in [("host/initialize", True, ALL_TIERS), ("host/ping", True, ALL_TIERS),
                   ("host/shutdown", True, ALL_TIERS), ("ext/activate", True, ALL_TIERS),
                   ("ext/deactivate", True, ALL_TIERS), ("tool/call", True, ALL_TIERS),
                   ("command/run", True, ALL_TIERS), ("hook/evaluate", True, ALL_TIERS),
                   ("mcp/open", True, BUILTIN), ("mcp/request", True, BUILTIN),
                   ("mcp/close", True, BUILTIN), ("harness/run", True, BUILTIN),
                   ("$/cancel", False, ALL_TIERS)]:
    METHODS[("core_to_host", _n)] = (_r, _t)
for _n, _r, _t in [("host/hello", False, ALL_TIERS), ("host/ready", False, ALL_TIERS),
                   ("registry/register", True, ALL_TIERS),
                   ("registry/unregister", True, ALL_TIERS), ("core/call", True, ALL_TIERS),
                   ("proc/launch", True, BUILTIN), ("proc/read", True, BUILTIN),
                   ("proc/write", True, BUILTIN), ("proc/close", True, BUILTIN),
                   ("net/start", True, BUILTIN), ("net/fetch", True, BUILTIN),
                   ("net/read", True, BUILTIN), ("net/release", True, BUILTIN),
                   ("net/close", True, BUILTIN), ("exec/redeem", True, BUILTIN),
                   ("ext/faulted", False, ALL_TIERS), ("log", False, ALL_TIERS),
                   ("$/cancel", False, ALL_TIERS)]:
    METHODS[("host_to_core", _n)] = (_r, _t)

CORE_DEVIATIONS = [
    "init_wrong_protocol", "init_missing_limit", "init_limit_over", "request_before_initialize",
    "bad_magic", "oversize_payload", "core_length_in_chars", "non_utf8_payload", "jsonrpc_version",
    "unknown_method", "request_params_array", "builtin_method_to_plugin", "cancel_as_request",
    "reuse_id_inflight", "id_not_u64", "answer_wrong_id", "answer_host_twice", "register_bad_result",
    "exceed_max_inflight", "no_cancel_past_deadline", "weak_owner_token",
    "generation_not_bumped", "config_not_object", "untrimmed_raw_input", "hook_payload_ticket",
    "leave_host_running", "tool_call_missing_deadline",
]

MUST = "MUST"
SHOULD = "SHOULD"


# ---------------------------------------------------------------------------
# Strict decoding of host->core messages (mirror of parse_host_message)
# ---------------------------------------------------------------------------

class ProtocolError(Exception):
    pass


def _is_int(v):
    return type(v) is int


def t_any(v, w):
    return v


def t_u64(v, w):
    if not (_is_int(v) and 0 <= v <= U64_MAX):
        raise ProtocolError("%s: invalid type, expected u64" % w)
    return v


def t_u32(v, w):
    if not (_is_int(v) and 0 <= v <= U32_MAX):
        raise ProtocolError("%s: invalid type, expected u32" % w)
    return v


def t_i64(v, w):
    if not (_is_int(v) and I64_MIN <= v <= I64_MAX):
        raise ProtocolError("%s: invalid type, expected i64" % w)
    return v


def t_str(v, w):
    if type(v) is not str:
        raise ProtocolError("%s: invalid type, expected a string" % w)
    return v


def t_bool(v, w):
    if type(v) is not bool:
        raise ProtocolError("%s: invalid type, expected a boolean" % w)
    return v


def t_map(v, w):
    if type(v) is not dict:
        raise ProtocolError("%s: invalid type, expected a map" % w)
    return v


def t_list(item):
    def check(v, w):
        if type(v) is not list:
            raise ProtocolError("%s: invalid type, expected a sequence" % w)
        return [item(x, "%s[%d]" % (w, i)) for i, x in enumerate(v)]
    return check


def t_enum(*names):
    def check(v, w):
        if type(v) is not str or v not in names:
            raise ProtocolError("%s: unknown variant %r" % (w, v))
        return v
    return check


def t_struct(req, opt=None, present=None, nonnull=None, strict=True, extra_sink=None):
    """serde struct: req required; opt `Option` (null -> None); present `deserialize_with =
    "present"` (null is a value); nonnull `present_entry` (null refused)."""
    opt = opt or {}
    present = present or {}
    nonnull = nonnull or {}

    def check(v, w):
        if type(v) is not dict:
            raise ProtocolError("%s: invalid type, expected a struct (object)" % w)
        out = {}
        for k, f in req.items():
            if k not in v:
                raise ProtocolError("%s: missing field `%s`" % (w, k))
            out[k] = f(v[k], "%s.%s" % (w, k))
        for k, f in opt.items():
            if v.get(k) is not None:
                out[k] = f(v[k], "%s.%s" % (w, k))
        for k, f in present.items():
            if k in v:
                out[k] = f(v[k], "%s.%s" % (w, k))
        for k, f in nonnull.items():
            if k in v:
                if v[k] is None:
                    raise ProtocolError("%s.%s: invalid type: null, expected struct EntryRef"
                                        % (w, k))
                out[k] = f(v[k], "%s.%s" % (w, k))
        extra = sorted(set(v) - set(req) - set(opt) - set(present) - set(nonnull))
        if extra:
            if strict:
                raise ProtocolError("%s: unknown field `%s`" % (w, extra[0]))
            if extra_sink is not None:
                extra_sink.append("%s: unknown field `%s` (tolerated)" % (w, extra[0]))
        return out
    return check


OWNER = t_struct({"plugin_id": t_str, "generation": t_u64, "owner_token": t_str})
ENTRY = t_struct({"path": t_str, "sha256": t_str}, strict=False)      # EntryRef: lenient
HELLO = t_struct({
    "protocol": t_struct({"min": t_u32, "max": t_u32}),
    "host_version": t_str, "bundle_sha256": t_str,
    "runtime": t_struct({"name": t_str, "version": t_str}),
    "tier": t_enum("plugin", "builtin"),
    "builtin_modules": t_list(t_struct({"id": t_str, "sha256": t_str})),
}, opt={"memory_limit_mib": t_u64})
EMPTY = t_struct({})
REGISTER = t_struct({
    "owner": OWNER,
    "kind": t_enum("tool", "command", "hook", "prompt_section", "prompt_template", "skill_root",
                   "shell_hook", "mcp_server"),
    "spec": t_struct({"name": t_str, "description": t_str},
                     opt={"input_schema": t_map, "argument_hint": t_str}),
}, nonnull={"scope": ENTRY})
PARAMS = {
    "registry/register": REGISTER,
    "registry/unregister": t_struct({"owner": OWNER, "handle": t_u64}),
    "core/call": t_struct({"owner": OWNER, "ticket": t_str, "name": t_str, "input": t_any}),
    "exec/redeem": t_struct({"owner": OWNER, "execution_id": t_str, "ticket": t_str}),
    "proc/launch": t_struct({"owner": OWNER, "session_id": t_str, "ticket": t_str}),
    "net/start": t_struct({"owner": OWNER, "session_id": t_str, "ticket": t_str}),
    "proc/read": t_struct({"owner": OWNER, "session_id": t_str}),
    "proc/close": t_struct({"owner": OWNER, "session_id": t_str}),
    "net/close": t_struct({"owner": OWNER, "session_id": t_str}),
    "proc/write": t_struct({"owner": OWNER, "session_id": t_str, "frame": t_any},
                           opt={"ticket": t_str, "operation_id": t_str}),
    "net/fetch": t_struct({"owner": OWNER, "session_id": t_str, "url": t_str, "method": t_str,
                           "headers": t_struct({}, opt={"accept": t_str, "content_type": t_str,
                                                        "mcp_session_id": t_str,
                                                        "mcp_protocol_version": t_str})},
                          opt={"frame": t_any, "ticket": t_str, "operation_id": t_str}),
    "net/read": t_struct({"owner": OWNER, "session_id": t_str, "response_id": t_str}),
    "net/release": t_struct({"owner": OWNER, "session_id": t_str, "response_id": t_str}),
    "host/hello": HELLO,
    "host/ready": EMPTY,
    "ext/faulted": t_struct({"owner": OWNER, "error": t_str}),
    "log": t_struct({"level": t_str, "msg": t_str}, opt={"plugin_id": t_str}),
    "$/cancel": t_struct({"id": t_u64}),
}
RPC_ERROR = t_struct({"code": t_i64, "message": t_str}, present={"data": t_any})
ENVELOPE_KEYS = {"jsonrpc", "id", "method", "params", "result", "error"}


def check_spec(reg):
    # protocol.rs:490-512 RegisterParams::check_spec
    kind, spec = reg["kind"], reg["spec"]
    if kind == "tool" and "input_schema" not in spec:
        raise ProtocolError("registry/register: a tool registration needs `spec.input_schema`")
    if kind == "tool" and "argument_hint" in spec:
        raise ProtocolError("registry/register: a tool registration has no `spec.argument_hint`")
    if kind == "command" and "input_schema" in spec:
        raise ProtocolError("registry/register: a command registration has no `spec.input_schema`")
    if kind not in ("tool", "command") and ("input_schema" in spec or "argument_hint" in spec):
        raise ProtocolError("registry/register: a hook, prompt or skill root registration has no "
                            "input schema or argument hint")


def parse_host_message(value, tier):
    """Returns dict(kind, id, method, params, outcome); raises ProtocolError."""
    # protocol.rs:776-799 Envelope, deny_unknown_fields; jsonrpc must be "2.0"
    if type(value) is not dict:
        raise ProtocolError("envelope: invalid type, expected struct Envelope")
    extra = sorted(set(value) - ENVELOPE_KEYS)
    if extra:
        raise ProtocolError("envelope: unknown field `%s`" % extra[0])
    if "jsonrpc" not in value:
        raise ProtocolError("envelope: missing field `jsonrpc`")
    t_str(value["jsonrpc"], "envelope.jsonrpc")
    rid = value.get("id")
    if rid is not None:
        t_u64(rid, "envelope.id")
    method = value.get("method")
    if method is not None:
        t_str(method, "envelope.method")
    err = value.get("error")
    if err is not None:
        err = RPC_ERROR(err, "envelope.error")
    if value["jsonrpc"] != "2.0":
        raise ProtocolError('envelope: jsonrpc must be "2.0"')
    if method is None:
        # protocol.rs:812-824 decode_response
        if rid is None:
            raise ProtocolError("response: missing id")
        if "params" in value:
            raise ProtocolError("response: unexpected params")
        has_result = "result" in value
        if has_result and err is None:
            return {"kind": "response", "id": rid, "outcome": ("ok", value["result"])}
        if err is not None and not has_result:
            return {"kind": "response", "id": rid, "outcome": ("err", err)}
        raise ProtocolError("response: needs exactly one of result or error")
    if "result" in value or err is not None:
        raise ProtocolError("`%s`: a request carries no result or error" % method)
    # protocol.rs:232-254 admit_in
    spec = METHODS.get(("host_to_core", method))
    if spec is None:
        raise ProtocolError("unknown host_to_core method `%s`" % method)
    request, tiers = spec
    if tier not in tiers:
        raise ProtocolError("`%s` is not allowed on the %s tier" % (method, tier))
    if request and rid is None:
        raise ProtocolError("`%s` must be a request (with id)" % method)
    if not request and rid is not None:
        raise ProtocolError("`%s` must be a notification (no id)" % method)
    # protocol.rs:801-810 params
    p = value["params"] if "params" in value else {}
    if type(p) is not dict:
        raise ProtocolError("%s: params must be an object" % method)
    decoded = PARAMS[method](p, method)
    if method == "registry/register":
        check_spec(decoded)
    if method == "host/hello" and decoded["runtime"]["name"] not in ("bun", "node"):
        # protocol.rs:902-907
        raise ProtocolError("host/hello.runtime.name: unknown runtime `%s`"
                            % decoded["runtime"]["name"])
    return {"kind": "request" if request else "notification", "id": rid, "method": method,
            "params": decoded, "raw_params": p}


def check_result(method, result):
    """The core reads every result (protocol.rs:20-21 "the core validates what it reads").
    Returns a list of (level, text)."""
    found = []
    tolerated = []

    def run(check):
        try:
            check(result, "%s result" % method)
        except ProtocolError as e:
            found.append((MUST, str(e)))
    if method == "ext/activate":
        # protocol.rs:1239-1251 ActivateResult, tag "status"
        if type(result) is not dict or "status" not in result:
            found.append((MUST, "ext/activate result: missing field `status`"))
        elif result["status"] == "ok":
            run(t_struct({"status": t_str, "tools": t_list(t_str)}, present={"commands": t_list(t_str)},
                         strict=False, extra_sink=tolerated))
        elif result["status"] == "failed":
            run(t_struct({"status": t_str, "diagnostic": t_str}, strict=False,
                         extra_sink=tolerated))
        else:
            found.append((MUST, "ext/activate result: unknown variant %r" % (result["status"],)))
    elif method == "ext/deactivate":
        # protocol.rs:1253-1258 DeactivateResult
        run(t_struct({"disposed": t_bool, "leaked": t_list(t_str)}, strict=False,
                     extra_sink=tolerated))
    elif method == "tool/call":
        # protocol.rs:1260-1278 ToolResultWire / ContentBlockWire
        block = t_struct({"type": t_enum("text"), "text": t_str}, strict=False,
                         extra_sink=tolerated)
        run(t_struct({"content": t_list(block), "is_error": t_bool}, present={"structured": t_any},
                     strict=False, extra_sink=tolerated))
    elif method == "command/run":
        # protocol.rs:1280-1301 CommandResultWire, tag "kind"
        variants = {
            "success": t_struct({"kind": t_str}, opt={"text": t_str}, strict=False,
                                extra_sink=tolerated),
            "error": t_struct({"kind": t_str, "text": t_str}, strict=False, extra_sink=tolerated),
            "submit": t_struct({"kind": t_str, "prompt": t_str}, opt={"text": t_str},
                               strict=False, extra_sink=tolerated),
        }
        kind = result.get("kind") if type(result) is dict else None
        if kind not in variants:
            found.append((MUST, "command/run result: missing or unknown `kind` %r" % (kind,)))
        else:
            run(variants[kind])
    elif method == "hook/evaluate":
        # protocol.rs:1116-1127 HookVerdictWire, tag "kind", deny_unknown_fields
        variants = {
            "abstain": t_struct({"kind": t_str}),
            "deny": t_struct({"kind": t_str, "reason": t_str}),
            "ask": t_struct({"kind": t_str, "reason": t_str}),
            "annotate": t_struct({"kind": t_str, "text": t_str}),
            "revise": t_struct({"kind": t_str, "input": t_map}),
        }
        kind = result.get("kind") if type(result) is dict else None
        if kind not in variants:
            found.append((MUST, "hook/evaluate result: missing or unknown `kind` %r" % (kind,)))
        else:
            run(variants[kind])
    for t in tolerated:
        found.append((SHOULD, t))
    return found


def encode_frame(obj, magic=MAGIC):
    payload = json.dumps(obj, ensure_ascii=False, separators=(",", ":"),
                         allow_nan=False).encode("utf-8")
    return magic + struct.pack("<I", len(payload)) + payload, len(payload)


def _reject_constant(name):
    raise ValueError("not JSON: %s" % name)


# ---------------------------------------------------------------------------
# The channel: one launched host, read strictly
# ---------------------------------------------------------------------------

class Req:
    def __init__(self, rid, method, params):
        self.id = rid
        self.method = method
        self.params = params
        self.event = threading.Event()
        self.outcome = None
        self.sent = time.monotonic()
        self.answered = None


class Channel:
    def __init__(self, argv, tier, host_log=None, expected_modules=(), deviation=None,
                 lifetime=120.0, keep_stdin_holder=False):
        self.tier = tier
        self.deviation = deviation
        # None: no pinned table, only the order is checked
        self.expected_modules = None if expected_modules is None else list(expected_modules)
        self.findings = []
        self.events = []                 # (t, direction, kind, method, id, obj)
        self.lock = threading.RLock()
        self.wlock = threading.Lock()
        self.pending = {}
        self.forgotten = set()
        self.next_id = 1
        self.host_inflight = {}          # id -> method
        self.max_host_inflight = 0
        self.limit_frame = MAX_FRAME
        self.limit_inflight = MAX_INFLIGHT
        self.hello = None
        self.hello_event = threading.Event()
        self.ready_event = threading.Event()
        self.init_answered = False
        self.eof = threading.Event()
        self.dead = None
        self.acts = {}                   # owner_token -> {owner, state, entry, scope}
        self.handles = {}                # handle -> (owner tuple, kind, name)
        self.next_handle = 100
        self.tickets = {}                # ticket -> owner tuple (tool/call in flight)
        self.refuse = set()              # names the core refuses to register
        self.hold = set()                # host methods whose answers are held
        self.held = []
        self.last_host_request = 0.0
        self.register_answer = None      # hook: fn(rid, params) -> answered? (deviations)
        self.frames_in = 0
        self.started = time.monotonic()
        self.holder = None
        self.log_fp = open(host_log, "ab") if host_log else None
        if keep_stdin_holder:
            r, w = os.pipe()
            self.proc = subprocess.Popen(argv, stdin=r, stdout=subprocess.PIPE,
                                         stderr=self.log_fp)
            os.close(r)
            # a detached process holding the write end keeps the host's stdin open
            self.holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)"],
                                           pass_fds=(w,), start_new_session=True,
                                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                           stderr=subprocess.DEVNULL)
            self.win = os.fdopen(w, "wb")
        else:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=self.log_fp)
            self.win = self.proc.stdin
        self.rout = self.proc.stdout
        self.reader = threading.Thread(target=self._read_loop, daemon=True)
        self.reader.start()
        self.flusher = threading.Thread(target=self._flush_loop, args=(lifetime,), daemon=True)
        self.flusher.start()

    # -- findings ---------------------------------------------------------------

    def find(self, level, text):
        with self.lock:
            self.findings.append((level, text))

    def must_findings(self):
        return [f for f in self.findings if f[0] == MUST]

    def record(self, direction, kind, method, rid, obj):
        with self.lock:
            self.events.append((time.monotonic(), direction, kind, method, rid, obj))

    # -- reading ----------------------------------------------------------------

    def _read_exact(self, n):
        buf = bytearray()
        while len(buf) < n:
            try:
                chunk = self.rout.read1(min(n - len(buf), 1 << 20))
            except (OSError, ValueError):
                chunk = b""
            if not chunk:
                break
            buf += chunk
        return bytes(buf)

    def _read_loop(self):
        while True:
            header = self._read_exact(HEADER_LEN)
            if not header:
                break
            if len(header) < HEADER_LEN:
                self.find(MUST, "host output ends inside a frame header")
                break
            # protocol.rs:323-325 bad magic
            if header[:4] != MAGIC:
                self.find(MUST, "bad frame magic %r from the host (stdout noise or a broken "
                                "frame)" % header[:4])
                self.dead = "bad magic"
                break
            length = struct.unpack("<I", header[4:])[0]
            # protocol.rs:326-329 / the limit the core put in host/initialize
            if length > self.limit_frame:
                self.find(MUST, "host frame of %d bytes exceeds max_frame %d"
                          % (length, self.limit_frame))
                if length > DRAIN_LIMIT:
                    self.dead = "frame too large"
                    break
            payload = self._read_exact(length)
            if len(payload) < length:
                self.find(MUST, "host output ends inside a frame payload")
                break
            self.frames_in += 1
            try:
                text = payload.decode("utf-8")
            except UnicodeDecodeError:
                self.find(MUST, "host frame payload is not UTF-8")
                continue
            try:
                obj = json.loads(text, parse_constant=_reject_constant)
            except ValueError as e:
                self.find(MUST, "host frame payload is not JSON: %s" % e)
                continue
            try:
                self.on_message(obj)
            except Exception as e:  # noqa: BLE001
                self.find(MUST, "core double failed on a host message: %r" % e)
        self.eof.set()

    def on_message(self, obj):
        try:
            msg = parse_host_message(obj, self.tier)
        except ProtocolError as e:
            self.find(MUST, "refused host message: %s -- %s" % (e, _snip(obj)))
            self.record("in", "refused", obj.get("method") if type(obj) is dict else None,
                        obj.get("id") if type(obj) is dict else None, obj)
            # keep the host from hanging on a refused request
            if type(obj) is dict and type(obj.get("method")) is str and _is_int(obj.get("id")) \
                    and 0 <= obj["id"] <= U64_MAX:
                self.respond(obj["id"], error={"code": INVALID_REQUEST,
                                               "message": "refused: %s" % e})
            return
        self.record("in", msg["kind"], msg.get("method"), msg.get("id"), obj)
        if not self.hello_event.is_set() and msg.get("method") != "host/hello":
            self.find(SHOULD, "host sent %s before host/hello" % (msg.get("method") or "a response"))
        if msg["kind"] == "response":
            self.on_response(msg)
        elif msg["kind"] == "request":
            self.on_host_request(msg)
        else:
            self.on_notification(msg)

    def on_notification(self, msg):
        m, p = msg["method"], msg["params"]
        if m == "host/hello":
            if self.hello_event.is_set():
                self.find(SHOULD, "a second host/hello")
                return
            # protocol.rs:397-398 "The core refuses a host that reports any tier but the one it
            # launched."
            if p["tier"] != self.tier:
                self.find(MUST, "host/hello reports tier %s, launched %s" % (p["tier"], self.tier))
            if not (p["protocol"]["min"] <= PROTOCOL_VERSION <= p["protocol"]["max"]):
                self.find(MUST, "host/hello protocol range %d..%d excludes %d"
                          % (p["protocol"]["min"], p["protocol"]["max"], PROTOCOL_VERSION))
            # protocol.rs:400-402 "The core refuses a host whose list is not the one its own
            # table pins."
            if self.expected_modules is None:
                ids = [m["id"] for m in p["builtin_modules"]]
                if ids != sorted(ids):
                    self.find(MUST, "host/hello builtin_modules are not in id order: %r" % ids)
            elif p["builtin_modules"] != self.expected_modules:
                self.find(MUST, "host/hello builtin_modules %r are not the pinned %r"
                          % (p["builtin_modules"], self.expected_modules))
            # protocol.rs:404-406 memory_limit_mib "... when the core asked for one ... Absent
            # otherwise."  This core never asks.
            if "memory_limit_mib" in p:
                self.find(SHOULD, "host/hello carries memory_limit_mib the core did not ask for")
            self.hello = p
            self.hello_event.set()
        elif m == "host/ready":
            if not self.init_answered:
                self.find(SHOULD, "host/ready before host/initialize was answered")
            if self.ready_event.is_set():
                self.find(SHOULD, "a second host/ready")
            self.ready_event.set()
        elif m == "$/cancel":
            with self.lock:
                if p["id"] in self.host_inflight:
                    self.held = [h for h in self.held if h[0] != p["id"]]
                    self.host_inflight.pop(p["id"], None)

    def on_response(self, msg):
        rid = msg["id"]
        with self.lock:
            req = self.pending.pop(rid, None)
            if req is None:
                if rid in self.forgotten:
                    self.forgotten.discard(rid)
                    return
                self.find(MUST, "response for id %d, which the core has not got in flight "
                                "(a second answer, or a wrong id)" % rid)
                return
        req.answered = time.monotonic()
        if msg["outcome"][0] == "ok":
            for level, text in check_result(req.method, msg["outcome"][1]):
                self.find(level, text)
        req.outcome = msg["outcome"]
        if req.method == "host/initialize":
            self.init_answered = True
        if req.method == "tool/call":
            with self.lock:
                self.tickets.pop(req.params.get("ticket"), None)
        if req.method == "ext/activate":
            with self.lock:
                act = self.acts.get(req.params["owner"]["owner_token"])
                if act is not None and act["state"] == "activating":
                    ok = msg["outcome"][0] == "ok" and type(msg["outcome"][1]) is dict and \
                        msg["outcome"][1].get("status") == "ok"
                    act["state"] = "active" if ok else "failed"
        if req.method == "ext/deactivate" and msg["outcome"][0] == "ok":
            with self.lock:
                act = self.acts.get(req.params["owner"]["owner_token"])
                if act is not None:
                    act["state"] = "deactivated"
        req.event.set()

    def on_host_request(self, msg):
        rid, m = msg["id"], msg["method"]
        with self.lock:
            if rid in self.host_inflight:
                self.find(MUST, "host reused request id %d while it is in flight" % rid)
            self.host_inflight[rid] = m
            n = len(self.host_inflight)
            self.max_host_inflight = max(self.max_host_inflight, n)
            self.last_host_request = time.monotonic()
            # protocol.rs:56-57 "Requests in flight per direction."
            if n > self.limit_inflight:
                self.find(MUST, "host has %d requests in flight, over max_inflight %d"
                          % (n, self.limit_inflight))
            if m in self.hold:
                self.held.append((rid, msg))
                return
        self.answer_host_request(rid, msg)

    def _flush_loop(self, lifetime):
        end = time.monotonic() + lifetime
        while time.monotonic() < end and not self.eof.is_set():
            time.sleep(0.05)
            with self.lock:
                if not self.held or time.monotonic() - self.last_host_request < 0.3:
                    continue
                held, self.held = self.held, []
            for rid, msg in held:
                self.answer_host_request(rid, msg)

    def owner_tuple(self, owner):
        return (owner["plugin_id"], owner["generation"], owner["owner_token"])

    def answer_host_request(self, rid, msg):
        m, p = msg["method"], msg["params"]
        if m == "registry/register":
            result = self.admit_registration(p)
            if self.register_answer is not None and self.register_answer(rid, result):
                return
            self.respond(rid, result=result)
        elif m == "registry/unregister":
            with self.lock:
                h = self.handles.get(p["handle"])
                ok = h is not None and h[0] == self.owner_tuple(p["owner"])
                if ok:
                    del self.handles[p["handle"]]
            if ok:
                self.respond(rid, result={})
            else:
                self.respond(rid, error={"code": NOT_AVAILABLE, "message": "unknown handle"})
        elif m == "core/call":
            # protocol.rs:523-528 "The `ticket` is the invocation ticket the core put in this
            # call's `tool/call`; the core checks it against its own row"
            with self.lock:
                owner = self.tickets.get(p["ticket"])
            if owner is None or owner != self.owner_tuple(p["owner"]):
                self.find(MUST, "core/call with ticket %r that the core did not issue to a call "
                                "in flight for this owner" % p["ticket"])
                self.respond(rid, error={"code": REFUSED, "message": "invalid ticket"})
            else:
                self.respond(rid, result={"content": [{"type": "text",
                                                       "text": "core ran %s" % p["name"]}],
                                          "is_error": False})
        elif m == "exec/redeem":
            self.respond(rid, result={"execution_id": p["execution_id"], "redeemed": True})
        elif m in ("proc/launch", "net/start"):
            self.respond(rid, result={"session_id": p["session_id"]})
        elif m == "proc/read":
            self.respond(rid, result={"frame": {"jsonrpc": "2.0", "id": "1",
                                                "result": {"serverInfo": {"name": "toy-mcp"}}}})
        else:
            self.respond(rid, result={})

    def admit_registration(self, p):
        owner = p["owner"]
        with self.lock:
            act = self.acts.get(owner["owner_token"])
            if act is None or act["owner"] != owner:
                # protocol.rs:349-350 owner_token "handed over only in `ext/activate`"
                self.find(MUST, "registry/register for owner %r, which no ext/activate handed "
                                "over" % (owner,))
                return {"refused": "unknown owner"}
            if act["state"] in ("deactivated", "failed"):
                # protocol.rs:348-350 a stale owner: "It catches bugs and stale fibers"
                self.find(MUST, "registry/register for %s with a revoked owner (generation %d)"
                          % (p["spec"]["name"], owner["generation"]))
                return {"refused": "the owner is revoked"}
            if act["state"] != "activating":
                # protocol.rs:1229-1230 registrations belong to the activation they fail or pass
                self.find(SHOULD, "registry/register for %s after its ext/activate was answered"
                          % p["spec"]["name"])
                return {"refused": "the activation is over"}
            name = p["spec"]["name"]
            if name in self.refuse:
                return {"refused": "the core's policy refuses `%s`" % name}
            handle = self.next_handle
            self.next_handle += 1
            self.handles[handle] = (self.owner_tuple(owner), p["kind"], name)
            return {"handle": handle}

    # -- writing ----------------------------------------------------------------

    def write(self, data):
        with self.wlock:
            try:
                self.win.write(data)
                self.win.flush()
                return True
            except (OSError, ValueError):
                return False

    def send(self, obj):
        frame, size = encode_frame(obj)
        # protocol.rs:54 "anything larger is refused, never truncated."
        if size > MAX_FRAME:
            raise ValueError("refusing to send a %d-byte frame" % size)
        self.record("out", "msg", obj.get("method"), obj.get("id"), obj)
        return self.write(frame)

    def respond(self, rid, result=None, error=None):
        with self.lock:
            self.host_inflight.pop(rid, None)
        if error is not None:
            msg = {"jsonrpc": "2.0", "id": rid, "error": error}
        else:
            msg = {"jsonrpc": "2.0", "id": rid, "result": result}
        self.send(msg)

    def take_id(self):
        with self.lock:
            rid = self.next_id
            self.next_id += 1
            return rid

    def request(self, method, params, rid=None):
        if rid is None:
            rid = self.take_id()
        req = Req(rid, method, params)
        with self.lock:
            self.pending[rid] = req
            if method == "tool/call" and params.get("ticket") is not None:
                # the owner of the handle gets the ticket
                h = self.handles.get(params.get("handle"))
                if h is not None:
                    self.tickets[params["ticket"]] = h[0]
            if method == "ext/activate":
                self.acts[params["owner"]["owner_token"]] = {
                    "owner": dict(params["owner"]), "state": "activating",
                    "entry": params["entry"], "scope": params.get("scope")}
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        return req

    def notify(self, method, params):
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def deadline_of(self, method, params, activate_ms, dispose_ms):
        # protocol.rs:1187-1221 CoreRequest::deadline
        if method == "host/initialize":
            return HANDSHAKE_DEADLINE_S
        if method == "host/ping":
            return PING_DEADLINE_S
        if method == "host/shutdown":
            return SHUTDOWN_DEADLINE_S
        if method == "ext/activate":
            return activate_ms / 1000.0 + 1.0
        if method == "ext/deactivate":
            return dispose_ms / 1000.0 + 0.5
        return params.get("deadline_ms", 0) / 1000.0

    def wait(self, req, timeout):
        end = time.monotonic() + timeout
        while not req.event.is_set():
            left = end - time.monotonic()
            if left <= 0 or (self.eof.is_set() and not req.event.is_set()):
                return False
            req.event.wait(min(left, 0.05))
        return True

    def forget(self, req, cancel=True):
        """The deadline passed: send $/cancel, forget the call (protocol.rs:1187-1189)."""
        with self.lock:
            if self.pending.pop(req.id, None) is None:
                return
            self.forgotten.add(req.id)
            if req.method == "tool/call":
                self.tickets.pop(req.params.get("ticket"), None)
        if cancel:
            self.notify("$/cancel", {"id": req.id})

    def call(self, method, params, timeout, cancel=True, rid=None):
        req = self.request(method, params, rid=rid)
        if self.wait(req, timeout):
            return req.outcome
        if req.event.is_set():
            return req.outcome
        if self.eof.is_set():
            return ("dead", None)
        self.forget(req, cancel)
        return ("timeout", None)

    def wait_for(self, event, timeout):
        end = time.monotonic() + timeout
        while not event.is_set():
            left = end - time.monotonic()
            if left <= 0 or self.eof.is_set():
                return event.is_set()
            event.wait(min(left, 0.05))
        return True

    def returncode_after(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def close(self, grace=2.0):
        """Close the host's stdin (EOF), wait, kill if it is still there."""
        try:
            self.win.close()
        except Exception:
            pass
        rc = self.returncode_after(grace)
        if rc is None:
            self.proc.kill()
            rc = self.proc.wait(timeout=5)
            rc = ("killed", rc)
        self.reader.join(timeout=2)
        try:
            self.rout.close()
        except Exception:
            pass
        if self.holder is not None and self.holder.poll() is None:
            self.holder.kill()
            self.holder.wait(timeout=5)
        if self.log_fp:
            self.log_fp.close()
        return rc


def _snip(obj, n=300):
    try:
        s = json.dumps(obj, ensure_ascii=False)
    except Exception:
        s = repr(obj)
    return s if len(s) <= n else s[:n] + "..."


def sha256_file(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read(1 << 20)).hexdigest()


def new_owner(plugin_id, generation):
    # protocol.rs:349 "`owner_token` is 128+ random bits minted by the core"
    return {"plugin_id": plugin_id, "generation": generation,
            "owner_token": secrets.token_hex(16)}


# ---------------------------------------------------------------------------
# The workload
# ---------------------------------------------------------------------------

def workload(args):
    dev = args.deviation
    modules = None
    if args.builtin_modules:
        with open(args.builtin_modules, "rb") as f:
            modules = json.loads(f.read(1 << 20).decode("utf-8"))
    ch = Channel(shlex.split(args.host), args.tier, host_log=args.host_log,
                 expected_modules=modules, deviation=dev,
                 keep_stdin_holder=(dev == "leave_host_running"))
    failures = []

    def fail(text):
        failures.append(text)
        sys.stderr.write("core: FAIL %s\n" % text)

    def step(text):
        sys.stderr.write("core: %s\n" % text)

    act_ms, disp_ms = args.activate_deadline_ms, args.dispose_deadline_ms

    def call(method, params, cancel=True, rid=None, timeout=None):
        t = timeout if timeout is not None else ch.deadline_of(method, params, act_ms, disp_ms)
        return ch.call(method, params, t, cancel=cancel, rid=rid)

    def raw(obj, magic=MAGIC, length=None, encoding="utf-8"):
        text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
        payload = text.encode(encoding, errors="replace")
        n = len(payload) if length is None else length
        ch.write(magic + struct.pack("<I", n) + payload)

    try:
        if dev == "request_before_initialize":
            # the lifecycle: hello, initialize, ready, then the rest
            call("ext/activate", {"owner": new_owner("toy", 1), "plugin_name": "toy",
                                  "entry": {"path": args.extension,
                                            "sha256": sha256_file(args.extension)},
                                  "config": {}}, timeout=3.0)

        step("waiting for host/hello")
        if not ch.wait_for(ch.hello_event, 10.0):
            fail("no host/hello")
            return ch, failures

        # protocol.rs:985-999 InitializeParams {protocol, limits}
        limits = {"max_frame": MAX_FRAME, "max_inflight": MAX_INFLIGHT,
                  "dispose_deadline_ms": disp_ms, "activate_deadline_ms": act_ms}
        protocol = PROTOCOL_VERSION
        if dev == "init_wrong_protocol":
            protocol = PROTOCOL_VERSION + 1
        if dev == "init_missing_limit":
            del limits["activate_deadline_ms"]
        if dev == "init_limit_over":
            limits["max_frame"] = 2 * MAX_FRAME
        ch.limit_frame = min(MAX_FRAME, limits["max_frame"])
        ch.limit_inflight = limits["max_inflight"]
        out = call("host/initialize", {"protocol": protocol, "limits": limits})
        if out[0] != "ok":
            fail("host/initialize: %r" % (out,))
            return ch, failures
        if not ch.wait_for(ch.ready_event, 5.0):
            fail("no host/ready")
            return ch, failures
        step("handshake done")

        # -- frame-level probes (deviations only) --------------------------------
        ping_id = None
        if dev == "bad_magic":
            ping_id = ch.take_id()
            raw({"jsonrpc": "2.0", "id": ping_id, "method": "host/ping", "params": {}},
                magic=b"CWX0")
        elif dev == "oversize_payload":
            ping_id = ch.take_id()
            head = json.dumps({"jsonrpc": "2.0", "id": ping_id, "method": "host/ping",
                               "params": {}}).encode()
            ch.write(MAGIC + struct.pack("<I", MAX_FRAME + 1) + head)
            ch.write(b" " * (MAX_FRAME + 1 - len(head)))
        elif dev == "core_length_in_chars":
            ping_id = ch.take_id()
            obj = {"jsonrpc": "2.0", "id": ping_id, "method": "tool/call",
                   "params": {"handle": 1, "call_id": "c0", "input": {"text": "héllo ✓"},
                              "deadline_ms": 1000}}
            text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
            raw(obj, length=len(text))
        elif dev == "non_utf8_payload":
            ping_id = ch.take_id()
            raw({"jsonrpc": "2.0", "id": ping_id, "method": "tool/call",
                 "params": {"handle": 1, "call_id": "c0", "input": {"text": "héllo"},
                            "deadline_ms": 1000}}, encoding="latin-1")
        elif dev == "jsonrpc_version":
            ping_id = ch.take_id()
            raw({"jsonrpc": "1.0", "id": ping_id, "method": "host/ping", "params": {}})
        elif dev == "unknown_method":
            ping_id = ch.take_id()
            raw({"jsonrpc": "2.0", "id": ping_id, "method": "host/reload", "params": {}})
        elif dev == "request_params_array":
            ping_id = ch.take_id()
            raw({"jsonrpc": "2.0", "id": ping_id, "method": "host/ping", "params": []})
        elif dev == "id_not_u64":
            raw({"jsonrpc": "2.0", "id": "7", "method": "host/ping", "params": {}})
        elif dev == "builtin_method_to_plugin" and args.tier == "plugin":
            # protocol.rs:24-25 "a plugin-tier host is never sent ... a method reserved for the
            # built-in tier."
            ping_id = ch.take_id()
            raw({"jsonrpc": "2.0", "id": ping_id, "method": "harness/run",
                 "params": {"owner": new_owner("toy", 1), "execution_id": "e1", "ticket": "t",
                            "deadline_ms": 1000}})
        if ping_id is not None:
            ch.forgotten.add(ping_id)
        if dev in ("bad_magic", "oversize_payload", "core_length_in_chars", "non_utf8_payload"):
            time.sleep(0.5)

        out = call("host/ping", {})
        if out[0] != "ok":
            fail("host/ping: %r" % (out,))
            return ch, failures

        # -- activation ----------------------------------------------------------
        owner = new_owner("toy", 1)
        if dev == "weak_owner_token":
            owner["owner_token"] = "t1"
        entry = {"path": args.extension, "sha256": sha256_file(args.extension)}
        config = {}
        if dev == "config_not_object":
            config = []
        if dev == "answer_wrong_id" or dev == "answer_host_twice" or dev == "register_bad_result":
            first = {"done": False}

            def register_answer(rid, result):
                if first["done"]:
                    return False
                first["done"] = True
                if dev == "answer_wrong_id":
                    ch.respond(rid + 1000, result=result)
                elif dev == "answer_host_twice":
                    ch.respond(rid, result=result)
                    ch.respond(rid, result=result)
                else:
                    ch.respond(rid, result={"ok": True})
                return True
            ch.register_answer = register_answer
        out = call("ext/activate", {"owner": owner, "plugin_name": "toy", "entry": entry,
                                    "config": config, "data_dir": "/tmp/cwx-toy-data"})
        ch.register_answer = None
        if out[0] != "ok":
            fail("ext/activate: %r" % (out,))
            return ch, failures
        act_ok = out[1].get("status") == "ok"
        if not act_ok:
            # the entry is our own extension format; a host that cannot load it says so
            text = "ext/activate failed: %s" % out[1].get("diagnostic")
            if args.require_tools:
                fail(text)
                return ch, failures
            step(text + " -- no tool calls")
        names = {}
        for h, (own, kind, name) in ch.handles.items():
            if own == ch.owner_tuple(owner):
                names[(kind, name)] = h
        listed = set(out[1].get("tools", [])) if act_ok else set()
        # "toy mode": the host loaded toy_extension.json as this directory describes it
        toy = act_ok and {"echo", "sleep", "relay"} <= listed and ("tool", "echo") in names
        if args.require_tools and not toy:
            fail("the host did not register the toy extension's tools: %r" % (out[1],))
            return ch, failures
        step("activated: %d handles%s" % (len(names), " (toy extension)" if toy else ""))
        tools = [n for (k, n) in names if k == "tool"]

        def handle(kind, name):
            if (kind, name) in names:
                return names[(kind, name)]
            any_of_kind = [h for (k, n), h in names.items() if k == kind]
            return any_of_kind[0] if any_of_kind else 0

        # -- calls ---------------------------------------------------------------
        text = "héllo ✓ 😀 CWX1"
        params = {"handle": handle("tool", "echo"), "call_id": "call-echo",
                  "input": {"text": text} if toy else {}, "deadline_ms": 5000,
                  "session_id": "s1", "agent_id": "a1", "workspace": "/tmp"}
        if dev == "tool_call_missing_deadline":
            del params["deadline_ms"]
        rid = None
        if dev == "reuse_id_inflight":
            rid = ch.take_id()
            ch.request("tool/call", {"handle": handle("tool", "sleep"), "call_id": "call-s0",
                                     "input": {"ms": 300}, "deadline_ms": 5000}, rid=rid)
        if tools or dev:
            out = call("tool/call", params, rid=rid, timeout=5.0)
            if toy and (out[0] != "ok" or out[1].get("content") != [{"type": "text", "text": text}]
                        or out[1].get("is_error") is not False):
                fail("tool/call echo: %r" % (out,))
            elif out[0] in ("timeout", "dead"):
                fail("tool/call: %r" % (out,))

        if dev == "exceed_max_inflight":
            reqs = [ch.request("tool/call", {"handle": handle("tool", "sleep"),
                                             "call_id": "c%d" % i, "input": {"ms": 500},
                                             "deadline_ms": 5000})
                    for i in range(MAX_INFLIGHT + 20)]
            for r in reqs:
                ch.wait(r, 6.0)

        # the core's deadline: at deadline_ms it sends $/cancel and forgets the call
        sleep_params = {"handle": handle("tool", "sleep"), "call_id": "call-sleep",
                        "input": {"ms": 60000}, "deadline_ms": 300}
        if dev == "no_cancel_past_deadline":
            out = call("tool/call", sleep_params, timeout=3.0)
        elif toy:
            out = call("tool/call", sleep_params)
            if out[0] != "timeout":
                fail("tool/call sleep past its deadline: %r" % (out,))
        if dev == "cancel_as_request":
            req = ch.request("tool/call", {"handle": handle("tool", "sleep"), "call_id": "c-c",
                                           "input": {"ms": 60000}, "deadline_ms": 2000})
            time.sleep(0.1)
            cid = ch.take_id()
            ch.forgotten.add(cid)
            ch.send({"jsonrpc": "2.0", "id": cid, "method": "$/cancel", "params": {"id": req.id}})
            ch.wait(req, 3.5)

        raw_input = "world"
        if dev == "untrimmed_raw_input":
            raw_input = "  world "
        if any(k == "command" for k, _ in names) or dev:
            out = call("command/run", {"handle": handle("command", "greet"),
                                       "command_id": "cmd-1", "raw_input": raw_input,
                                       "deadline_ms": 5000})
            if toy and (out[0] != "ok" or out[1].get("kind") != "success"):
                fail("command/run greet: %r" % (out,))

        # protocol.rs:1092-1093 "No session handle or invocation ticket crosses this boundary."
        payload = {"name": "rm", "call_id": "call-rm", "input": {"path": "/"}, "mode": "agent",
                   "workspace": "/tmp", "model": "toy-model"}
        if dev == "hook_payload_ticket":
            payload["ticket"] = "tk-0"
        if any(k == "hook" for k, _ in names) or dev:
            out = call("hook/evaluate", {"handle": handle("hook", "guard"),
                                         "event": "pre_tool_use", "payload": payload,
                                         "deadline_ms": 5000})
            if toy and (out[0] != "ok" or out[1].get("kind") != "deny"):
                fail("hook/evaluate guard: %r" % (out,))

        if toy:
            ticket = "tk-" + secrets.token_hex(8)
            out = call("tool/call", {"handle": handle("tool", "relay"), "call_id": "call-relay",
                                     "input": {"name": "read", "input": {"path": "README"}},
                                     "deadline_ms": 5000, "ticket": ticket})
            if out[0] != "ok" or out[1].get("is_error") is not False:
                fail("tool/call relay (core/call): %r" % (out,))

        if args.tier == "builtin" and act_ok:
            outs = []
            outs.append(("harness/run", call("harness/run", {
                "owner": owner, "execution_id": "exec-1",
                "ticket": "xt-" + secrets.token_hex(8), "deadline_ms": 5000})))
            grant = {"ticket": "g1", "operation_id": "op-1", "method": "initialize",
                     "wire_id": "1", "params": {}}
            grant2 = {"ticket": "g2", "operation_id": "op-2",
                      "method": "notifications/initialized", "params": {}}
            outs.append(("mcp/open", call("mcp/open", {
                "owner": owner, "session_id": "mcp-1", "launch_ticket": "lt", "transport": "stdio",
                "initialize_grant": grant, "initialized_grant": grant2, "client_version": "1",
                "deadline_ms": 5000})))
            outs.append(("mcp/request", call("mcp/request", {
                "owner": owner, "session_id": "mcp-1",
                "grant": {"ticket": "g3", "operation_id": "op-3", "method": "tools/list",
                          "wire_id": "2", "params": {}}, "deadline_ms": 5000})))
            outs.append(("mcp/close", call("mcp/close", {"owner": owner, "session_id": "mcp-1",
                                                         "deadline_ms": 5000})))
            for m, o in outs:
                # result shapes of the broker methods are not in protocol.rs: with a foreign
                # host only an answer is required
                if o[0] in ("timeout", "dead") or (toy and o[0] != "ok"):
                    fail("%s: %r" % (m, o))

        if act_ok:
            out = call("ext/deactivate", {"owner": owner})
            if out[0] != "ok" or (toy and out[1].get("disposed") is not True):
                fail("ext/deactivate: %r" % (out,))
            if tools:
                out = call("tool/call", {"handle": handle("tool", "echo"), "call_id": "call-late",
                                         "input": {"text": "late"}, "deadline_ms": 5000})
                if out[0] != "err" or out[1].get("code") != NOT_AVAILABLE:
                    fail("tool/call on a revoked handle: %r (wanted error %d)"
                         % (out, NOT_AVAILABLE))

        if dev == "generation_not_bumped":
            # protocol.rs:348 "`generation` bumps on every (re)activation"
            again = dict(owner)
            again["owner_token"] = secrets.token_hex(16)
            out = call("ext/activate", {"owner": again, "plugin_name": "toy", "entry": entry,
                                        "config": {}})
            call("ext/deactivate", {"owner": again})

        if dev == "leave_host_running":
            step("leaving host pid %d running (holder pid %d)" % (ch.proc.pid, ch.holder.pid))
            sys.stderr.write("core: host-pid %d holder-pid %d\n" % (ch.proc.pid, ch.holder.pid))
            return ch, failures

        # protocol.rs:1196 "| `host/shutdown` | 2 s | tests only |"
        t0 = time.monotonic()
        out = call("host/shutdown", {})
        if out[0] != "ok":
            fail("host/shutdown: %r" % (out,))
        rc = ch.returncode_after(max(0.1, SHUTDOWN_DEADLINE_S - (time.monotonic() - t0)))
        if rc is None:
            fail("host still running 2 s after host/shutdown")
        step("host exited with %r" % (rc,))
        return ch, failures
    except Exception as e:  # noqa: BLE001
        fail("core double error: %r" % e)
        return ch, failures


def main():
    ap = argparse.ArgumentParser(description="independent CWX1 core double")
    ap.add_argument("--host", required=True, help="host command line")
    ap.add_argument("--tier", choices=ALL_TIERS, required=True)
    ap.add_argument("--deviation", default=None)
    ap.add_argument("--extension", default=os.path.join(HERE, "toy_extension.json"))
    ap.add_argument("--builtin-modules", default=None,
                    help="JSON list of {id, sha256} the host must report in host/hello")
    ap.add_argument("--host-log", default=None, help="file for the host's stderr")
    ap.add_argument("--activate-deadline-ms", type=int, default=5000)
    ap.add_argument("--dispose-deadline-ms", type=int, default=3000)
    ap.add_argument("--strict", action="store_true", help="SHOULD findings fail too")
    ap.add_argument("--require-tools", action="store_true",
                    help="fail unless the host registers the toy extension's tools")
    ap.add_argument("--list-deviations", action="store_true")
    args = ap.parse_args()
    if args.list_deviations:
        print("\n".join(CORE_DEVIATIONS))
        return 0
    if args.deviation is not None and args.deviation not in CORE_DEVIATIONS:
        sys.stderr.write("unknown deviation %s\n" % args.deviation)
        return 64
    args.extension = os.path.abspath(args.extension)

    def watchdog():
        time.sleep(300)
        sys.stderr.write("core: watchdog: giving up\n")
        os._exit(4)
    threading.Thread(target=watchdog, daemon=True).start()

    ch, failures = workload(args)
    if args.deviation == "leave_host_running":
        os._exit(0)
    rc = ch.close()
    for level, text in ch.findings:
        sys.stderr.write("core: finding [%s] %s\n" % (level, text))
    bad = failures + [t for lv, t in ch.findings if lv == MUST or args.strict]
    sys.stderr.write("core: %s (host exit %r)\n" % ("FAILED" if bad else "ok", rc))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
