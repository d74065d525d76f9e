#!/usr/bin/env python3
"""selftest.py -- a small stdlib ACP client that drives agent.py and checks it.

    python3 selftest.py                     # reference agent: every scenario, no findings allowed
    python3 selftest.py --deviation NAME    # NAME's scenario: reference clean, variant shows NAME
    python3 selftest.py --all-deviations    # the above for every deviation in deviations.json
    python3 selftest.py --scenario NAME     # one scenario against the reference (debugging)

The client validates every message the agent writes against schema.json, plays a fake
editor for every agent -> client request (fs, terminals, permissions, elicitation), and
records "findings": short codes for rules it saw broken.  Every wait is bounded.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
AGENT = os.path.join(HERE, "agent.py")
SCHEMA_PATH = os.environ.get("ACP_SCHEMA", "/work/shared/specs/acp/schema.json")
DEVIATIONS_JSON = os.path.join(HERE, "deviations.json")

TOOL_STATUSES = {"pending", "in_progress", "completed", "failed"}
PLAN_STATUSES = {"pending", "in_progress", "completed"}
PLAN_PRIORITIES = {"high", "medium", "low"}
PERMISSION_KINDS = {"allow_once", "allow_always", "reject_once", "reject_always"}
HISTORY_KINDS = {"user_message_chunk", "agent_message_chunk", "agent_thought_chunk"}


# ---------------------------------------------------------------------------
# A minimal JSON Schema (2020-12 subset) validator for schema.json
# ---------------------------------------------------------------------------

class SchemaValidator:
    def __init__(self, path: str):
        with open(path, encoding="utf-8") as fh:
            self.schema = json.load(fh)
        self.defs = self.schema["$defs"]
        self.request_defs = {}   # (side, method) -> def name for params
        self.response_defs = {}  # (side, method) -> def name for results
        for name, d in self.defs.items():
            method, side = d.get("x-method"), d.get("x-side")
            if not method:
                continue
            if name.endswith("Response"):
                self.response_defs[(side, method)] = name
            else:
                self.request_defs[(side, method)] = name

    @staticmethod
    def _is_type(value, t: str) -> bool:
        if t == "null":
            return value is None
        if t == "boolean":
            return isinstance(value, bool)
        if t == "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        if t == "number":
            return isinstance(value, (int, float)) and not isinstance(value, bool)
        if t == "string":
            return isinstance(value, str)
        if t == "object":
            return isinstance(value, dict)
        if t == "array":
            return isinstance(value, list)
        return True

    @staticmethod
    def _equal(a, b) -> bool:
        return type(a) is type(b) and a == b if isinstance(a, bool) or isinstance(b, bool) else a == b

    def errors(self, value, schema, path: str = "$", depth: int = 0) -> list[str]:
        if depth > 60 or schema is True or not isinstance(schema, dict):
            return []
        errs: list[str] = []
        if "$ref" in schema:
            errs += self.errors(value, self.defs[schema["$ref"].split("/")[-1]], path, depth + 1)
        t = schema.get("type")
        if t is not None:
            types = t if isinstance(t, list) else [t]
            if not any(self._is_type(value, x) for x in types):
                return errs + [f"{path}: expected {types}, got {type(value).__name__}"]
        if "const" in schema and not self._equal(value, schema["const"]):
            errs.append(f"{path}: expected const {schema['const']!r}, got {value!r}")
        if "enum" in schema and not any(self._equal(value, e) for e in schema["enum"]):
            errs.append(f"{path}: {value!r} not in enum")
        if isinstance(value, dict):
            for key in schema.get("required", []):
                if key not in value:
                    errs.append(f"{path}: missing required {key!r}")
            props = schema.get("properties", {})
            for key, sub in value.items():
                if key in props:
                    errs += self.errors(sub, props[key], f"{path}.{key}", depth + 1)
                elif isinstance(schema.get("additionalProperties"), dict):
                    errs += self.errors(sub, schema["additionalProperties"], f"{path}.{key}", depth + 1)
                elif schema.get("additionalProperties") is False:
                    errs.append(f"{path}: unexpected property {key!r}")
        if isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, item in enumerate(value):
                errs += self.errors(item, schema["items"], f"{path}[{i}]", depth + 1)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if "minimum" in schema and value < schema["minimum"]:
                errs.append(f"{path}: {value} < minimum {schema['minimum']}")
            if "maximum" in schema and value > schema["maximum"]:
                errs.append(f"{path}: {value} > maximum {schema['maximum']}")
        for sub in schema.get("allOf", []):
            errs += self.errors(value, sub, path, depth + 1)
        if "anyOf" in schema:
            results = [self.errors(value, sub, path, depth + 1) for sub in schema["anyOf"]]
            if all(results):
                best = min(results, key=len)
                errs.append(f"{path}: matches none of anyOf ({best[0] if best else ''})")
        if "oneOf" in schema:
            results = [self.errors(value, sub, path, depth + 1) for sub in schema["oneOf"]]
            ok = sum(1 for r in results if not r)
            if ok != 1:
                best = min(results, key=len)
                errs.append(f"{path}: matches {ok} of oneOf ({best[0] if best else ''})")
        if "not" in schema and not self.errors(value, schema["not"], path, depth + 1):
            errs.append(f"{path}: matches a 'not' schema")
        return errs

    def check_def(self, name: str, value) -> list[str]:
        return self.errors(value, self.defs[name])


VALIDATOR = SchemaValidator(SCHEMA_PATH)


# ---------------------------------------------------------------------------
# The fake client
# ---------------------------------------------------------------------------

class AgentExited(Exception):
    pass


SKIP = object()


class ClientTerminal:
    def __init__(self, argv: list[str], cwd: str | None):
        self.output = bytearray()
        self.proc = subprocess.Popen(argv, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self):
        while True:
            chunk = self.proc.stdout.read1(65536)
            if not chunk:
                break
            self.output.extend(chunk[:65536])

    def exit_status(self):
        rc = self.proc.poll()
        if rc is None:
            return None
        if rc < 0:
            try:
                name = signal.Signals(-rc).name
            except ValueError:
                name = str(-rc)
            return {"exitCode": None, "signal": name}
        return {"exitCode": rc, "signal": None}

    def kill(self):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                self.proc.kill()
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass


class AgentProc:
    """One agent process plus a fake editor answering its requests."""

    def __init__(self, deviation: str | None = None, extra_args=(), label: str = ""):
        cmd = [sys.executable, AGENT] + (["--deviation", deviation] if deviation else []) + list(extra_args)
        self.label = label
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE)
        self.raw: queue.Queue = queue.Queue()
        self.stderr = bytearray()
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()
        self.write_lock = threading.Lock()
        self.findings: dict[str, str] = {}
        self.next_id = 0
        self.methods: dict[str, str] = {}       # json(id) -> method of our requests
        self.busy_key: dict[str, str] = {}      # json(id) -> sessionId for prompt/load/resume
        self.busy: dict[str, int] = {}          # sessionId -> in-flight prompt/load/resume count
        self.responses: dict[str, dict] = {}
        self.null_id_responses: list[dict] = []
        self.messages: list[dict] = []          # every message received, in order
        self.client_caps: dict = {}
        self.permission_policy = "allow"
        self.held: list[dict] = []
        self.terminals: dict[str, ClientTerminal] = {}
        self.released: set[str] = set()
        self.announced: dict[str, set] = {}
        self.known_sessions: set[str] = set()
        self.partial: str | None = None
        self.exited = False
        self.term_seq = 0

    # -- io -------------------------------------------------------------------

    def _read_stdout(self):
        out = self.proc.stdout
        while True:
            try:
                line = out.readline(16 * 1024 * 1024)
            except Exception:
                break
            if not line:
                break
            self.raw.put(line)
        self.raw.put(None)

    def _read_stderr(self):
        while True:
            chunk = self.proc.stderr.read1(65536)
            if not chunk:
                break
            if len(self.stderr) < 512 * 1024:
                self.stderr.extend(chunk)

    def find(self, code: str, detail="") -> None:
        if code not in self.findings:
            self.findings[code] = str(detail)[:300]

    def send_raw(self, data: bytes) -> None:
        with self.write_lock:
            try:
                self.proc.stdin.write(data)
                self.proc.stdin.flush()
            except (BrokenPipeError, OSError, ValueError):
                pass

    def send(self, obj) -> None:
        self.send_raw((json.dumps(obj) + "\n").encode("utf-8"))

    def request(self, method: str, params, rid=None) -> object:
        if rid is None:
            self.next_id += 1
            rid = self.next_id
        key = json.dumps(rid)
        self.methods[key] = method
        if method in ("session/prompt", "session/load", "session/resume") and isinstance(params, dict):
            sid = params.get("sessionId")
            self.busy_key[key] = sid
            self.busy[sid] = self.busy.get(sid, 0) + 1
        msg = {"jsonrpc": "2.0", "id": rid, "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)
        return rid

    def notify(self, method: str, params=None) -> None:
        msg = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self.send(msg)

    def pump(self, timeout: float):
        """Read and process one line; returns the message, SKIP, or None on timeout."""
        try:
            raw = self.raw.get(timeout=max(0.0, timeout))
        except queue.Empty:
            return None
        if raw is None:
            self.raw.put(None)
            self.exited = True
            raise AgentExited()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            self.find("invalid_utf8", raw[:80])
            text = raw.decode("utf-8", errors="replace")
        text = text.rstrip("\r\n")
        if self.partial is not None:
            self.partial += "\n" + text
            try:
                msg = json.loads(self.partial)
            except ValueError:
                if len(self.partial) > 1024 * 1024:
                    self.partial = None
                return SKIP
            self.partial = None
            self.find("embedded_newline", "a JSON message spanning several lines")
        else:
            try:
                msg = json.loads(text)
            except ValueError:
                if text.lstrip().startswith(("{", "[")):
                    self.partial = text
                else:
                    self.find("non_json_stdout", text[:80])
                return SKIP
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
            self.find("bad_envelope", text[:120])
            return SKIP
        self.messages.append(msg)
        self.handle_incoming(msg)
        return msg

    def wait_for(self, predicate, timeout: float):
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            msg = self.pump(remaining)
            if msg is None:
                return None
            if msg is SKIP:
                continue
            if predicate(msg):
                return msg

    def response_for(self, rid, timeout: float = 10.0):
        key = json.dumps(rid)
        if key in self.responses:
            return self.responses[key]
        try:
            self.wait_for(lambda m: json.dumps(m.get("id")) == key and "method" not in m, timeout)
        except AgentExited:
            pass
        return self.responses.get(key)

    def call(self, method: str, params, rid=None, timeout: float = 10.0):
        rid = self.request(method, params, rid)
        return self.response_for(rid, timeout)

    def quiet(self, seconds: float) -> list[dict]:
        got = []
        deadline = time.monotonic() + seconds
        try:
            while time.monotonic() < deadline:
                msg = self.pump(deadline - time.monotonic())
                if msg is None:
                    break
                if msg is not SKIP:
                    got.append(msg)
        except AgentExited:
            pass
        return got

    def alive(self, cwd: str, timeout: float = 4.0) -> bool:
        if self.exited or self.proc.poll() is not None:
            return False
        r = self.call("session/new", {"cwd": cwd, "mcpServers": []}, timeout=timeout)
        return r is not None

    def close(self, timeout: float = 4.0) -> int | None:
        for term in self.terminals.values():
            term.kill()
        try:
            self.proc.stdin.close()
        except Exception:
            pass
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=2)
            return None

    # -- incoming messages --------------------------------------------------------

    def validate(self, def_name: str | None, value, what: str) -> None:
        if def_name is None:
            return
        errs = VALIDATOR.check_def(def_name, value)
        if errs:
            self.find("schema", f"{what}: {errs[0]}")

    def handle_incoming(self, msg: dict) -> None:
        if "method" in msg:
            method = msg["method"]
            params = msg.get("params")
            self.validate(VALIDATOR.request_defs.get(("client", method)), params, method)
            if "id" in msg:
                self.answer(msg)
            elif method == "session/update" and isinstance(params, dict):
                self.check_update(params)
            return
        key = json.dumps(msg.get("id"))
        if msg.get("id") is None:
            self.null_id_responses.append(msg)
            return
        if key not in self.methods:
            self.find("response_unknown_id", msg.get("id"))
            return
        method = self.methods[key]
        self.responses[key] = msg
        if ("result" in msg) == ("error" in msg):
            self.find("bad_envelope", "result xor error")
        if "result" in msg:
            self.validate(VALIDATOR.response_defs.get(("agent", method)), msg["result"], method + " result")
            if method in ("session/new",) and isinstance(msg["result"], dict):
                sid = msg["result"].get("sessionId")
                if isinstance(sid, str):
                    self.known_sessions.add(sid)
        else:
            self.validate("Error", msg["error"], method + " error")
        if key in self.busy_key:
            sid = self.busy_key.pop(key)
            self.busy[sid] = self.busy.get(sid, 1) - 1

    def check_update(self, params: dict) -> None:
        sid = params.get("sessionId")
        update = params.get("update") or {}
        kind = update.get("sessionUpdate")
        if self.busy.get(sid, 0) <= 0:
            self.find("update_outside_turn", f"{kind} for {sid}")
        ids = self.announced.setdefault(sid, set())
        if kind == "tool_call":
            tid = update.get("toolCallId")
            if tid in ids:
                self.find("reused_tool_call_id", tid)
            ids.add(tid)
        if kind == "tool_call_update" and update.get("toolCallId") not in ids:
            self.find("unannounced_tool_call", update.get("toolCallId"))
        if kind in ("tool_call", "tool_call_update"):
            status = update.get("status")
            if status is not None and status not in TOOL_STATUSES:
                self.find("invalid_tool_status", status)
            for item in update.get("content") or []:
                if isinstance(item, dict) and item.get("type") == "terminal" \
                        and item.get("terminalId") in self.released:
                    self.find("terminal_embedded_after_release", item.get("terminalId"))
        if kind == "plan":
            for entry in update.get("entries") or []:
                if entry.get("status") not in PLAN_STATUSES:
                    self.find("plan_invalid_status", entry.get("status"))
                if entry.get("priority") not in PLAN_PRIORITIES:
                    self.find("plan_invalid_priority", entry.get("priority"))
        if kind == "current_mode_update" and "currentModeId" not in update:
            self.find("mode_update_field", update)

    # -- the fake editor ----------------------------------------------------------

    def reply(self, rid, result=None, error=None) -> None:
        msg = {"jsonrpc": "2.0", "id": rid}
        if error is not None:
            msg["error"] = error
        else:
            msg["result"] = result
        self.send(msg)

    def cap(self, *path):
        node = self.client_caps
        for key in path:
            if not isinstance(node, dict):
                return None
            node = node.get(key)
        return node

    def answer(self, msg: dict) -> None:
        rid, method = msg["id"], msg["method"]
        p = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        if p.get("sessionId") not in self.known_sessions:
            self.find("request_unknown_session", f"{method} for {p.get('sessionId')!r}")
        if method == "session/request_permission":
            tool_id = (p.get("toolCall") or {}).get("toolCallId")
            if tool_id not in self.announced.get(p.get("sessionId"), set()):
                self.find("permission_for_unannounced_tool", tool_id)
        if method == "session/request_permission":
            options = p.get("options") or []
            if not options:
                self.find("permission_no_options")
            for option in options:
                if option.get("kind") not in PERMISSION_KINDS:
                    self.find("permission_invalid_kind", option.get("kind"))
            if self.permission_policy == "hold":
                self.held.append(msg)
                return
            wanted = "allow" if self.permission_policy == "allow" else "reject"
            chosen = next((o for o in options if str(o.get("kind", "")).startswith(wanted)), None)
            if chosen is None:
                chosen = next((o for o in options if wanted in str(o.get("optionId", ""))), None)
            if chosen is None:
                self.reply(rid, {"outcome": {"outcome": "cancelled"}})
            else:
                self.reply(rid, {"outcome": {"outcome": "selected", "optionId": chosen["optionId"]}})
            return
        if method in ("fs/read_text_file", "fs/write_text_file"):
            flag_name = "readTextFile" if method == "fs/read_text_file" else "writeTextFile"
            flag = self.cap("fs", flag_name)
            if flag is not True:
                if method == "fs/write_text_file":
                    self.find("fs_write_without_cap", flag)
                else:
                    self.find("fs_read_when_false" if flag is False else "fs_read_when_absent", flag)
            path = p.get("path", "")
            if not os.path.isabs(path):
                self.find("relative_path", path)
                self.reply(rid, error={"code": -32602, "message": "path must be absolute"})
                return
            if method == "fs/write_text_file":
                try:
                    with open(path, "w", encoding="utf-8") as fh:
                        fh.write(p.get("content", ""))
                except OSError as exc:
                    self.reply(rid, error={"code": -32603, "message": str(exc)})
                    return
                self.reply(rid, {})
                return
            line, limit = p.get("line"), p.get("limit")
            if line is not None and (not isinstance(line, int) or line < 1):
                self.find("zero_based_line", line)
            try:
                with open(path, encoding="utf-8") as fh:
                    rows = fh.read().splitlines(keepends=True)
            except OSError as exc:
                self.reply(rid, error={"code": -32002, "message": str(exc)})
                return
            start = max(0, (line or 1) - 1)
            rows = rows[start:start + limit] if limit else rows[start:]
            self.reply(rid, {"content": "".join(rows)})
            return
        if method.startswith("terminal/"):
            if self.cap("terminal") is not True:
                self.find("terminal_without_cap", method)
            tid = p.get("terminalId")
            if method != "terminal/create" and tid in self.released:
                self.find("terminal_used_after_release", method)
            if method == "terminal/create":
                self.term_seq += 1
                tid = f"term_{self.term_seq}"
                argv = [p.get("command", "")] + list(p.get("args") or [])
                try:
                    self.terminals[tid] = ClientTerminal(argv, p.get("cwd") if os.path.isdir(p.get("cwd") or "") else None)
                except OSError as exc:
                    self.reply(rid, error={"code": -32603, "message": str(exc)})
                    return
                self.reply(rid, {"terminalId": tid})
                return
            term = self.terminals.get(tid)
            if term is None:
                self.reply(rid, error={"code": -32002, "message": "unknown terminal"})
                return
            if method == "terminal/output":
                result = {"output": term.output.decode("utf-8", "replace"), "truncated": False}
                if term.exit_status() is not None:
                    result["exitStatus"] = term.exit_status()
                self.reply(rid, result)
            elif method == "terminal/wait_for_exit":
                def waiter():
                    try:
                        term.proc.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        term.kill()
                    term.thread.join(timeout=2)
                    self.reply(rid, term.exit_status())
                threading.Thread(target=waiter, daemon=True).start()
            elif method == "terminal/kill":
                term.kill()
                self.reply(rid, {})
            elif method == "terminal/release":
                term.kill()
                self.released.add(tid)
                self.reply(rid, {})
            else:
                self.reply(rid, error={"code": -32601, "message": "Method not found"})
            return
        if method == "elicitation/create":
            if not isinstance(self.cap("elicitation", "form"), dict):
                self.find("elicitation_unadvertised")
            self.reply(rid, {"action": "accept", "content": {"choice": "Option B"}})
            return
        self.reply(rid, error={"code": -32601, "message": "Method not found"})

    # -- conveniences ---------------------------------------------------------------

    def initialize(self, caps: dict, version: int = 1):
        self.client_caps = caps
        return self.call("initialize", {"protocolVersion": version, "clientCapabilities": caps,
                                        "clientInfo": {"name": "selftest", "version": "1.0"}})

    def new_session(self, cwd: str, servers=None, timeout: float = 10.0) -> str | None:
        r = self.call("session/new", {"cwd": cwd, "mcpServers": servers or []}, timeout=timeout)
        if r is None or not isinstance(r.get("result"), dict):
            return None
        sid = r["result"].get("sessionId")
        return sid if isinstance(sid, str) else None

    def prompt(self, sid, content, timeout: float = 20.0):
        """Run one turn; returns (response, messages of this turn, messages in 0.6 s after)."""
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        start = len(self.messages)
        rid = self.request("session/prompt", {"sessionId": sid, "prompt": blocks})
        response = self.response_for(rid, timeout)
        during = self.messages[start:]
        after = self.quiet(0.6)
        return response, during, after


def updates_of(messages, sid=None, kind=None):
    out = []
    for m in messages:
        if m.get("method") != "session/update":
            continue
        params = m.get("params") or {}
        if sid is not None and params.get("sessionId") != sid:
            continue
        update = params.get("update") or {}
        if kind is not None and update.get("sessionUpdate") != kind:
            continue
        out.append(update)
    return out


def requests_of(messages, method):
    return [m for m in messages if m.get("method") == method and "id" in m]


def text_of(messages, sid=None) -> str:
    return "".join(u.get("content", {}).get("text", "") for u in updates_of(messages, sid, "agent_message_chunk"))


def stop_reason(response):
    if response is None or not isinstance(response.get("result"), dict):
        return None
    return response["result"].get("stopReason")


# ---------------------------------------------------------------------------
# Scenarios: each returns a dict of findings (code -> detail)
# ---------------------------------------------------------------------------

class Scenario:
    def __init__(self, dev):
        self.dev = dev
        self.tmp = tempfile.mkdtemp(prefix="acp-selftest-")
        self.findings: dict[str, str] = {}
        self.procs: list[AgentProc] = []

    def agent(self, *extra_args) -> AgentProc:
        a = AgentProc(self.dev, extra_args)
        self.procs.append(a)
        return a

    def find(self, code, detail=""):
        self.findings.setdefault(code, str(detail)[:300])

    def finish(self) -> dict:
        for a in self.procs:
            if a.proc.poll() is None:
                a.close()
            for code, detail in a.findings.items():
                self.findings.setdefault(code, detail)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return self.findings

    def path(self, *parts) -> str:
        return os.path.join(self.tmp, *parts)

    def write(self, name: str, text: str) -> str:
        p = self.path(name)
        with open(p, "w", encoding="utf-8") as fh:
            fh.write(text)
        return p


def scen_init(s: Scenario):
    a = s.agent()
    r = a.call("initialize", {"protocolVersion": 1, "clientCapabilities": {},
                              "clientInfo": {"name": "selftest", "version": "1"}}, rid=424242)
    if r is None:
        s.find("no_initialize_response")
        return
    res = r.get("result") or {}
    if res.get("protocolVersion") != 1:
        s.find("version_not_1", res.get("protocolVersion"))
    if not isinstance(res.get("agentInfo"), dict):
        s.find("no_agent_info")
    if any(isinstance(m, dict) and m.get("type") == "terminal" for m in res.get("authMethods") or []):
        s.find("terminal_auth_unadvertised")
    for rid in ("abc-1", "42"):
        if a.call("session/new", {"cwd": s.tmp, "mcpServers": []}, rid=rid, timeout=2.0) is None:
            s.find("id_mismatch", f"no response carrying id {rid!r}")
    b = s.agent()
    r = b.call("initialize", {"protocolVersion": 65535, "clientCapabilities": {}})
    if r is None or (r.get("result") or {}).get("protocolVersion") != 1:
        s.find("version_echo", r)
    c = s.agent()
    r = c.initialize({"auth": {"terminal": True}})
    if not any(m.get("type") == "terminal" for m in (r or {}).get("result", {}).get("authMethods", [])):
        s.find("terminal_auth_missing_when_allowed")


def scen_jsonrpc(s: Scenario):
    # malformed line
    a = s.agent()
    a.initialize({})
    a.send_raw(b"{this is not json\n")
    err = a.wait_for(lambda m: "method" not in m and "error" in m, 3.0) if not a.exited else None
    if err is None and a.null_id_responses:
        err = a.null_id_responses[-1]
    if err is None:
        err = next((m for m in a.messages if "error" in m and m["error"].get("code") == -32700), None)
    if err is None:
        s.find("no_parse_error_response")
    else:
        if err["error"].get("code") != -32700:
            s.find("parse_error_code", err)
        if err.get("id") is not None:
            s.find("parse_error_id", err.get("id"))
    if not a.alive(s.tmp):
        s.find("died_after_parse_error")
    # invalid params
    b = s.agent()
    b.initialize({})
    r = b.call("session/new", {"mcpServers": []}, timeout=3.0)
    if r is None or (r.get("error") or {}).get("code") != -32602:
        s.find("invalid_params_code", r)
    if not b.alive(s.tmp):
        s.find("died_after_invalid_params")
    # unknown methods, notifications, odd messages
    c = s.agent()
    c.initialize({})
    sid = c.new_session(s.tmp)
    r = c.call("foo/bar", {}, timeout=3.0)
    if r is None or (r.get("error") or {}).get("code") != -32601:
        s.find("unknown_method_code", r)
    r = c.call("_fake/unknown", {}, timeout=3.0)
    if r is None:
        s.find("custom_no_response")
    elif (r.get("error") or {}).get("code") != -32601:
        s.find("unknown_method_code", r)
    c.notify("session/cancel", {"sessionId": sid})
    c.notify("_fake/notify", {"x": 1})
    c.notify("foo/notify")
    for m in c.quiet(0.7):
        if "method" not in m:
            s.find("answered_notification", m)
    before = len(c.null_id_responses)
    c.send_raw(b'[{"jsonrpc":"2.0","id":900,"method":"foo/bar"}]\n')
    c.send_raw(b'{"foo":"bar"}\n')
    c.quiet(0.7)
    codes = [m.get("error", {}).get("code") for m in c.null_id_responses[before:]]
    if codes.count(-32600) < 2:
        s.find("invalid_request_handling", codes)
    r = c.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "video"}]}, timeout=3.0)
    if r is None or (r.get("error") or {}).get("code") != -32602:
        s.find("invalid_params_code", r)
    r = c.call("session/prompt", {"sessionId": "sess_unknown", "prompt": []}, timeout=3.0)
    if r is None or "error" not in r:
        s.find("unknown_session_accepted", r)
    if not c.alive(s.tmp):
        s.find("died")
    # exit when stdin closes
    d = s.agent()
    d.initialize({})
    if d.close(timeout=3.0) is None:
        s.find("no_exit_on_eof")


def scen_session(s: Scenario):
    a = s.agent()
    a.initialize({})
    r1 = a.call("session/new", {"cwd": s.tmp, "mcpServers": []})
    r2 = a.call("session/new", {"cwd": s.tmp, "mcpServers": []})
    res1 = (r1 or {}).get("result") or {}
    res2 = (r2 or {}).get("result") or {}
    sid1, sid2 = res1.get("sessionId"), res2.get("sessionId")
    if not isinstance(sid1, str) or not isinstance(sid2, str):
        s.find("missing_session_id", res1)
    elif sid1 == sid2:
        s.find("duplicate_session_id", sid1)
    if any(o.get("type") == "boolean" for o in res1.get("configOptions") or []):
        s.find("boolean_config_unadvertised")
    modes = res1.get("modes") or {}
    if modes.get("currentModeId") not in [m.get("id") for m in modes.get("availableModes") or []]:
        s.find("bad_modes", modes)
    r = a.call("session/set_config_option", {"sessionId": sid1, "configId": "model", "value": "fake-thorough"})
    opts = ((r or {}).get("result") or {}).get("configOptions") or []
    if not {"mode", "model"} <= {o.get("id") for o in opts}:
        s.find("set_config_partial", opts)
    if next((o.get("currentValue") for o in opts if o.get("id") == "model"), None) != "fake-thorough":
        s.find("set_config_not_applied", opts)
    r = a.call("session/set_mode", {"sessionId": sid1, "modeId": "ask"})
    if r is None or not isinstance(r.get("result"), dict):
        s.find("set_mode_failed", r)
    r = a.call("session/set_mode", {"sessionId": sid1, "modeId": "nonsense"})
    if r is None or (r.get("error") or {}).get("code") != -32602:
        s.find("set_mode_bad_value_accepted", r)
    r = a.call("session/list", {})
    listed = [x.get("sessionId") for x in ((r or {}).get("result") or {}).get("sessions") or []]
    if isinstance(sid1, str) and sid1 not in listed:
        s.find("list_incomplete", listed)
    os.makedirs(s.path("elsewhere"), exist_ok=True)
    r = a.call("session/list", {"cwd": s.path("elsewhere")})
    if r is None or not isinstance(r.get("result"), dict) or r["result"].get("sessions") != []:
        s.find("list_missing_array", r)
    r = a.call("session/delete", {"sessionId": "sess_never_existed"})
    if r is None or "result" not in r:
        s.find("delete_unknown_error", r)
    if isinstance(sid2, str) and sid2 != sid1:
        r = a.call("session/close", {"sessionId": sid2})
        if r is None or r.get("result") != {}:
            s.find("close_failed", r)
        r = a.call("session/prompt", {"sessionId": sid2, "prompt": [{"type": "text", "text": "hi"}]})
        if r is None or "error" not in r:
            s.find("prompt_on_closed_session", r)
    b = s.agent()
    b.initialize({"session": {"configOptions": {"boolean": {}}}})
    r = b.call("session/new", {"cwd": s.tmp, "mcpServers": []})
    if not any(o.get("type") == "boolean" for o in ((r or {}).get("result") or {}).get("configOptions") or []):
        s.find("boolean_missing_when_allowed")


def scen_prompt_text(s: Scenario):
    a = s.agent()
    a.initialize({})
    sid_a = a.new_session(s.tmp)
    sid_b = a.new_session(s.tmp)
    response, during, after = a.prompt(sid_b, "hello \u00e9\u4e2d\u6587 \U0001f600")
    if stop_reason(response) != "end_turn":
        s.find("text_turn_failed", response)
    if "\u4e2d\u6587" not in text_of(during, sid_b):
        s.find("no_text_reply", text_of(during))
    if updates_of(during, sid_a):
        s.find("wrong_session", updates_of(during, sid_a)[0])
    if updates_of(after, sid_b):
        s.find("update_after_response", updates_of(after, sid_b)[0])
    result = (response or {}).get("result") or {}
    if set(result) - {"stopReason", "_meta"}:
        s.find("custom_root_field", sorted(result))
    response, _, _ = a.prompt(sid_b, [{"type": "text", "text": "have a look at this"},
                                      {"type": "resource_link", "uri": "file:///tmp/x.txt", "name": "x.txt"}])
    if stop_reason(response) is None:
        s.find("resource_link_rejected", response)
    response, _, _ = a.prompt(sid_b, [{"type": "text", "text": "use this context"},
                                      {"type": "resource", "resource": {"uri": "file:///tmp/c.txt", "text": "ctx"}},
                                      {"type": "image", "mimeType": "image/png", "data": "iVBORw0KGgo="}])
    if stop_reason(response) != "end_turn":
        s.find("rich_content_failed", response)


def scen_fs_read(s: Scenario):
    notes = s.write("notes.txt", "alpha\nbeta\ngamma\n")
    a = s.agent()
    a.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
    sid = a.new_session(s.tmp)
    response, during, _ = a.prompt(sid, "Read the file notes.txt from line 2")
    reads = requests_of(during, "fs/read_text_file")
    if len(reads) != 1:
        s.find("fs_read_not_called", len(reads))
    else:
        p = reads[0]["params"]
        if p.get("path") != notes and os.path.isabs(p.get("path", "")):
            s.find("wrong_path", p.get("path"))
        if p.get("line") != 2:
            s.find("zero_based_line", p.get("line"))
    calls = updates_of(during, sid, "tool_call")
    if not calls or calls[0].get("kind") != "read":
        s.find("no_read_tool_call", calls)
    finals = [u for u in updates_of(during, sid, "tool_call_update") if u.get("status") == "completed"]
    if not finals or "beta" not in json.dumps(finals[-1].get("content")):
        s.find("read_not_completed", finals)
    if stop_reason(response) != "end_turn":
        s.find("read_turn_failed", response)
    response, during, _ = a.prompt(sid, "read notes.txt")
    if not requests_of(during, "fs/read_text_file"):
        s.find("fs_read_not_called")
    for caps in ({"fs": {"readTextFile": False, "writeTextFile": False}, "terminal": False}, {}):
        b = s.agent()
        b.initialize(caps)
        sid2 = b.new_session(s.tmp)
        response, during, _ = b.prompt(sid2, "Read the file README.md in the current directory and summarize it.")
        response, during, _ = b.prompt(sid2, "Please read the file notes.txt")
        finals = [u for u in updates_of(during, sid2, "tool_call_update") if u.get("status") == "completed"]
        if not finals or "alpha" not in json.dumps(finals[-1].get("content")):
            s.find("local_read_failed", during[-3:])


def scen_tools(s: Scenario):
    s.write("notes.txt", "alpha\nbeta\n")
    a = s.agent()
    a.initialize({"fs": {"readTextFile": True}})
    sid = a.new_session(s.tmp)
    for _ in range(2):
        response, during, _ = a.prompt(sid, "read the file notes.txt")
        if stop_reason(response) != "end_turn":
            s.find("turn_failed", response)
        statuses = [u.get("status") for u in updates_of(during, sid, "tool_call_update")]
        if not statuses or statuses[-1] not in ("completed", "done"):
            s.find("tool_not_finished", statuses)


def scen_write(s: Scenario):
    a = s.agent()
    a.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
    sid = a.new_session(s.tmp)
    response, during, _ = a.prompt(sid, "Write the file out.txt with content hello world and ask me for "
                                        "permission first")
    if not requests_of(during, "session/request_permission"):
        s.find("no_permission_request")
    writes = requests_of(during, "fs/write_text_file")
    if a.permission_policy == "allow" and "permission_no_options" not in a.findings \
            and "permission_invalid_kind" not in a.findings:
        if len(writes) != 1 or writes[0]["params"].get("content") != "hello world":
            s.find("write_not_done", [w.get("params") for w in writes])
    a.permission_policy = "reject"
    response, during, _ = a.prompt(sid, "Create the file rejected.txt with content nope, but ask me for "
                                        "permission first")
    if requests_of(during, "fs/write_text_file") or os.path.exists(s.path("rejected.txt")):
        s.find("tool_ran_after_reject")
    statuses = [u.get("status") for u in updates_of(during, sid, "tool_call_update")]
    if "failed" not in statuses:
        s.find("rejected_tool_not_failed", statuses)
    b = s.agent()
    b.initialize({"fs": {"readTextFile": True}})
    sid2 = b.new_session(s.tmp)
    response, during, _ = b.prompt(sid2, "write the file local.txt with content written-locally")
    if not os.path.exists(s.path("local.txt")):
        s.find("local_write_failed")
    c = s.agent()
    c.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
    sid3 = c.new_session(s.tmp)
    c.call("session/set_mode", {"sessionId": sid3, "modeId": "ask"})
    response, during, _ = c.prompt(sid3, "edit the file out.txt: replace 'hello' with 'bye'")
    if not requests_of(during, "session/request_permission"):
        s.find("ask_mode_no_permission")
    try:
        with open(s.path("out.txt"), encoding="utf-8") as fh:
            replaced = fh.read()
    except OSError:
        replaced = None
    if replaced != "bye world" and "permission_no_options" not in c.findings:
        s.find("replace_not_done", replaced)


def scen_cancel(s: Scenario):
    a = s.agent()
    a.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
    sid = a.new_session(s.tmp)
    a.permission_policy = "hold"
    start = len(a.messages)
    rid = a.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text":
                    "Write the file c.txt with content data and ask me for permission first"}]})
    got = a.wait_for(lambda m: m.get("method") == "session/request_permission", 5.0)
    if got is None:
        s.find("no_permission_request")
    a.notify("session/cancel", {"sessionId": sid})
    time.sleep(0.1)
    for held in a.held:
        a.reply(held["id"], {"outcome": {"outcome": "cancelled"}})
    a.held.clear()
    response = a.response_for(rid, 10.0)
    after = a.quiet(0.6)
    if response is None:
        s.find("cancel_no_response")
    elif "error" in response:
        s.find("cancel_error", response["error"])
    elif stop_reason(response) != "cancelled":
        s.find("cancel_stop_reason", stop_reason(response))
    if requests_of(a.messages[start:], "fs/write_text_file") or os.path.exists(s.path("c.txt")):
        s.find("tool_ran_after_cancel")
    if updates_of(after, sid):
        s.find("update_after_cancel_response", updates_of(after, sid)[0])
    # cancelling a long streamed answer (acp-tck's default cancel prompt)
    a.permission_policy = "allow"
    rid = a.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text":
                    "Write a very long, detailed step-by-step explanation of how a compiler works, "
                    "at least 2000 words."}]})
    a.wait_for(lambda m: m.get("method") == "session/update", 5.0)
    t0 = time.monotonic()
    a.notify("session/cancel", {"sessionId": sid})
    response = a.response_for(rid, 8.0)
    if stop_reason(response) != "cancelled" or time.monotonic() - t0 > 2.0:
        if response is not None and "error" in response:
            s.find("cancel_error", response["error"])
        else:
            s.find("cancel_stop_reason", stop_reason(response))
    a.quiet(0.3)
    # $/cancel_request naming the session/prompt request
    rid = a.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text":
                    "please wait 10 seconds"}]})
    time.sleep(0.3)
    a.notify("$/cancel_request", {"requestId": rid})
    response = a.response_for(rid, 8.0)
    if response is None or (stop_reason(response) != "cancelled"
                            and (response.get("error") or {}).get("code") != -32800):
        s.find("cancel_request_ignored", response)
    a.quiet(0.3)


def scen_terminal(s: Scenario):
    a = s.agent()
    a.initialize({"terminal": True})
    sid = a.new_session(s.tmp)
    response, during, _ = a.prompt(sid, "Run the command `echo hello-terminal` in a terminal")
    created = requests_of(during, "terminal/create")
    if len(created) != 1:
        s.find("terminal_not_created", len(created))
    for name in ("terminal/wait_for_exit", "terminal/output"):
        if not requests_of(during, name):
            s.find("terminal_flow_incomplete", name)
    if set(a.terminals) - a.released:
        s.find("terminal_not_released", sorted(set(a.terminals) - a.released))
    if "hello-terminal" not in text_of(during, sid):
        s.find("terminal_output_missing", text_of(during, sid))
    t0 = time.monotonic()
    response, during, _ = a.prompt(sid, "run `sleep 20` in a terminal with a timeout of 1 second")
    if not requests_of(during, "terminal/kill") or time.monotonic() - t0 > 6:
        s.find("terminal_timeout_not_enforced")
    if set(a.terminals) - a.released:
        s.find("terminal_not_released", sorted(set(a.terminals) - a.released))
    b = s.agent()
    b.initialize({})
    sid2 = b.new_session(s.tmp)
    response, during, _ = b.prompt(sid2, "Run `echo hi-local` in a shell and show me the output.")
    if "hi-local" not in json.dumps(updates_of(during, sid2)):
        s.find("local_command_failed")


def scen_plan(s: Scenario):
    a = s.agent()
    a.initialize({})
    sid = a.new_session(s.tmp)
    response, during, _ = a.prompt(sid, "Make a plan with 3 steps")
    plans = updates_of(during, sid, "plan")
    if not plans:
        s.find("no_plan")
        return
    for plan in plans:
        if len(plan.get("entries") or []) != 3:
            s.find("plan_partial", len(plan.get("entries") or []))
    if any(e.get("status") != "completed" for e in plans[-1].get("entries") or []) \
            and "plan_partial" not in s.findings:
        s.find("plan_not_finished", plans[-1])


def scen_mode(s: Scenario):
    a = s.agent()
    a.initialize({"fs": {"readTextFile": True, "writeTextFile": True}})
    sid = a.new_session(s.tmp)
    response, during, _ = a.prompt(sid, "switch to ask mode")
    if not updates_of(during, sid, "current_mode_update"):
        s.find("no_mode_update")
    if not updates_of(during, sid, "config_option_update"):
        s.find("no_config_update")
    response, during, _ = a.prompt(sid, "write the file m.txt with content x")
    if not requests_of(during, "session/request_permission"):
        s.find("ask_mode_no_permission")


def scen_elicit(s: Scenario):
    a = s.agent()
    a.initialize({})
    sid = a.new_session(s.tmp)
    a.prompt(sid, "Before you continue, ask me which of two options I'd prefer.")
    b = s.agent()
    b.initialize({"elicitation": {"form": {}}})
    sid2 = b.new_session(s.tmp)
    response, during, _ = b.prompt(sid2, "Before you continue, ask me which of two options I'd prefer.")
    if not requests_of(during, "elicitation/create") or "Option B" not in text_of(during, sid2):
        s.find("elicitation_not_used")


def scen_load(s: Scenario):
    state = s.path("state")
    a = s.agent("--state-dir", state)
    a.initialize({})
    sid = a.new_session(s.tmp)
    a.prompt(sid, "hello there")
    start = len(a.messages)
    rid = a.request("session/load", {"sessionId": sid, "cwd": s.tmp, "mcpServers": []})
    response = a.response_for(rid, 5.0)
    before = a.messages[start:]
    after = a.quiet(0.6)
    if response is None or not isinstance(response.get("result"), dict):
        s.find("load_failed", response)
    kinds = [u.get("sessionUpdate") for u in updates_of(before, sid)]
    if "user_message_chunk" not in kinds or "agent_message_chunk" not in kinds:
        s.find("load_no_replay", kinds)
    if updates_of(after, sid):
        s.find("load_replay_after_response", updates_of(after, sid)[0])
    start = len(a.messages)
    rid = a.request("session/resume", {"sessionId": sid, "cwd": s.tmp})
    response = a.response_for(rid, 5.0)
    if response is None or not isinstance(response.get("result"), dict):
        s.find("resume_failed", response)
    if [u for u in updates_of(a.messages[start:], sid) if u.get("sessionUpdate") in HISTORY_KINDS]:
        s.find("resume_replayed")
    a.close()
    b = s.agent("--state-dir", state)
    b.initialize({})
    r = b.call("session/list", {})
    if sid not in [x.get("sessionId") for x in ((r or {}).get("result") or {}).get("sessions") or []]:
        s.find("not_persisted", r)
    start = len(b.messages)
    r = b.call("session/load", {"sessionId": sid, "cwd": s.tmp, "mcpServers": []})
    if r is None or "result" not in r:
        s.find("load_after_restart_failed", r)
    response, during, _ = b.prompt(sid, "hello again")
    if stop_reason(response) != "end_turn":
        s.find("prompt_after_load_failed", response)


def scen_close(s: Scenario):
    a = s.agent()
    a.initialize({})
    sid = a.new_session(s.tmp)
    rid = a.request("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text":
                    "Write a very long explanation, at least 2000 words."}]})
    a.wait_for(lambda m: m.get("method") == "session/update", 5.0)
    close = a.call("session/close", {"sessionId": sid}, rid="close-1", timeout=12.0)
    response = a.response_for(rid, 12.0)
    if close is None or close.get("result") != {}:
        s.find("close_failed", close)
    if stop_reason(response) != "cancelled":
        s.find("close_no_cancel", stop_reason(response))


FAKE_MCP_SERVER = r'''
import json, os, sys
log = open(sys.argv[1], "a")
with open(sys.argv[2], "w") as fh:
    fh.write(str(os.getpid()))
for line in sys.stdin:
    try:
        msg = json.loads(line)
    except ValueError:
        continue
    log.write(msg.get("method", "response") + " " + os.environ.get("FAKE_MCP_TAG", "") + "\n"); log.flush()
    if "id" not in msg:
        continue
    method = msg.get("method")
    if method == "initialize":
        result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                  "serverInfo": {"name": "fake-mcp", "version": "0"}}
    elif method == "tools/list":
        result = {"tools": [{"name": "echo", "description": "echo", "inputSchema": {"type": "object"}}]}
    elif method == "tools/call":
        text = (msg.get("params") or {}).get("arguments", {}).get("text", "")
        result = {"content": [{"type": "text", "text": "echo: " + text}]}
    else:
        print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "nope"}}), flush=True)
        continue
    print(json.dumps({"jsonrpc": "2.0", "id": msg["id"], "result": result}), flush=True)
'''

GARBAGE_MCP_SERVER = r'''
import os, sys, time
with open(sys.argv[1], "w") as fh:
    fh.write(str(os.getpid()))
print("this is not json", flush=True)
time.sleep(30)
'''


def pid_alive(pid_file: str) -> bool:
    try:
        with open(pid_file) as fh:
            pid = int(fh.read().strip())
    except (OSError, ValueError):
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as fh:
            if fh.read().split(") ")[-1].startswith("Z"):
                return False
    except OSError:
        pass
    return True


def wait_dead(pid_file: str, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if not pid_alive(pid_file):
            return True
        time.sleep(0.05)
    return not pid_alive(pid_file)


def scen_mcp(s: Scenario):
    server = s.write("fake_mcp.py", FAKE_MCP_SERVER)
    garbage = s.write("garbage_mcp.py", GARBAGE_MCP_SERVER)
    log_file, pid_file = s.path("mcp.log"), s.path("mcp.pid")
    a = s.agent()
    a.initialize({})
    spec = {"name": "fake", "command": sys.executable, "args": [server, log_file, pid_file],
            "env": [{"name": "FAKE_MCP_TAG", "value": "tagged"}]}
    r = a.call("session/new", {"cwd": s.tmp, "mcpServers": [spec]}, timeout=12.0)
    sid = ((r or {}).get("result") or {}).get("sessionId")
    if r is None or "error" in r:
        s.find("stdio_mcp_rejected", r)
        return
    try:
        with open(log_file) as fh:
            logged = fh.read()
    except OSError:
        logged = ""
    if "initialize" not in logged or "tools/list" not in logged:
        s.find("mcp_not_connected", logged)
        return
    if "tagged" not in logged:
        s.find("mcp_env_not_passed")
    response, during, _ = a.prompt(sid, "list the MCP tools")
    if "echo" not in text_of(during, sid):
        s.find("mcp_tools_missing", text_of(during, sid))
    response, during, _ = a.prompt(sid, 'call the MCP tool echo with arguments {"text": "ping"}')
    if "echo: ping" not in text_of(during, sid):
        s.find("mcp_call_failed", text_of(during, sid))
    a.call("session/close", {"sessionId": sid})
    if not wait_dead(pid_file, 3.0):
        s.find("mcp_not_killed_on_close")
    # misbehaving servers must neither block nor break session/new
    g_pid = s.path("garbage.pid")
    bad = [{"name": "exits", "command": sys.executable, "args": ["-c", "import sys; sys.exit(3)"], "env": []},
           {"name": "garbage", "command": sys.executable, "args": [garbage, g_pid], "env": []},
           {"name": "missing", "command": "/nonexistent/mcp-server", "args": [], "env": []}]
    t0 = time.monotonic()
    r = a.call("session/new", {"cwd": s.tmp, "mcpServers": bad}, timeout=15.0)
    if r is None or "result" not in r or time.monotonic() - t0 > 9.0:
        s.find("mcp_misbehaving_blocked", r)
    if a.close(timeout=5.0) is None:
        s.find("no_exit_on_eof")
    if not wait_dead(g_pid, 3.0):
        s.find("mcp_not_killed_on_exit")


SCENARIOS = {
    "init": scen_init, "jsonrpc": scen_jsonrpc, "session": scen_session, "prompt_text": scen_prompt_text,
    "fs_read": scen_fs_read, "tools": scen_tools, "write": scen_write, "cancel": scen_cancel,
    "terminal": scen_terminal, "plan": scen_plan, "mode": scen_mode, "elicit": scen_elicit,
    "load": scen_load, "close": scen_close, "mcp": scen_mcp,
}

# deviation -> (scenario, the finding that must appear)
EXPECT = {
    "stdout_banner": ("init", "non_json_stdout"),
    "pretty_printed_json": ("init", "embedded_newline"),
    "non_utf8_output": ("init", "invalid_utf8"),
    "exit_on_parse_error": ("jsonrpc", "died_after_parse_error"),
    "exit_on_invalid_params": ("jsonrpc", "died_after_invalid_params"),
    "parse_error_nonnull_id": ("jsonrpc", "parse_error_id"),
    "answer_notification": ("jsonrpc", "answered_notification"),
    "wrong_unknown_method_code": ("jsonrpc", "unknown_method_code"),
    "string_id_as_number": ("init", "id_mismatch"),
    "custom_request_no_response": ("jsonrpc", "custom_no_response"),
    "invalid_params_wrong_code": ("jsonrpc", "invalid_params_code"),
    "custom_root_field": ("prompt_text", "custom_root_field"),
    "echo_unsupported_version": ("init", "version_echo"),
    "terminal_auth_unadvertised": ("init", "terminal_auth_unadvertised"),
    "missing_session_id": ("session", "missing_session_id"),
    "duplicate_session_id": ("session", "duplicate_session_id"),
    "reject_stdio_mcp": ("mcp", "stdio_mcp_rejected"),
    "mcp_not_connected": ("mcp", "mcp_not_connected"),
    "load_no_replay": ("load", "load_no_replay"),
    "load_replays_after_response": ("load", "load_replay_after_response"),
    "resume_replays_history": ("load", "resume_replayed"),
    "close_no_cancel": ("close", "close_no_cancel"),
    "list_no_match_missing_array": ("session", "list_missing_array"),
    "delete_unknown_errors": ("session", "delete_unknown_error"),
    "cancel_end_turn": ("cancel", "cancel_stop_reason"),
    "cancel_error_response": ("cancel", "cancel_error"),
    "update_after_response": ("prompt_text", "update_after_response"),
    "update_after_cancel_response": ("cancel", "update_after_cancel_response"),
    "tool_runs_after_cancel": ("cancel", "tool_ran_after_cancel"),
    "reject_resource_link": ("prompt_text", "resource_link_rejected"),
    "update_wrong_session": ("prompt_text", "wrong_session"),
    "reuse_tool_call_id": ("tools", "reused_tool_call_id"),
    "update_unannounced_tool_call": ("tools", "unannounced_tool_call"),
    "invalid_tool_status": ("tools", "invalid_tool_status"),
    "write_after_reject": ("write", "tool_ran_after_reject"),
    "permission_no_options": ("write", "permission_no_options"),
    "permission_invalid_option_kind": ("write", "permission_invalid_kind"),
    "zero_based_line": ("fs_read", "zero_based_line"),
    "fs_read_when_false": ("fs_read", "fs_read_when_false"),
    "fs_read_when_absent": ("fs_read", "fs_read_when_absent"),
    "fs_write_without_cap": ("write", "fs_write_without_cap"),
    "relative_path_in_fs": ("fs_read", "relative_path"),
    "terminal_without_cap": ("terminal", "terminal_without_cap"),
    "terminal_not_released": ("terminal", "terminal_not_released"),
    "terminal_embedded_after_release": ("terminal", "terminal_embedded_after_release"),
    "plan_invalid_status": ("plan", "plan_invalid_status"),
    "plan_invalid_priority": ("plan", "plan_invalid_priority"),
    "plan_partial_update": ("plan", "plan_partial"),
    "boolean_config_unadvertised": ("session", "boolean_config_unadvertised"),
    "set_config_partial": ("session", "set_config_partial"),
    "mode_update_modeId": ("mode", "mode_update_field"),
    "elicitation_unadvertised": ("elicit", "elicitation_unadvertised"),
}


def run_scenario(name: str, dev: str | None, budget: float = 90.0) -> dict:
    scenario = Scenario(dev)
    result: dict = {}

    def body():
        try:
            SCENARIOS[name](scenario)
        except AgentExited:
            scenario.find("agent_exited")
        except Exception as exc:
            scenario.find("selftest_error", f"{type(exc).__name__}: {exc}")

    worker = threading.Thread(target=body, daemon=True)
    worker.start()
    worker.join(budget)
    if worker.is_alive():
        scenario.find("scenario_timeout", f"{name} exceeded {budget}s")
    result = scenario.finish()
    return result


def check_deviations_json() -> list[str]:
    problems = []
    sys.path.insert(0, HERE)
    import agent  # noqa: E402  (just for the list of names)
    try:
        with open(DEVIATIONS_JSON, encoding="utf-8") as fh:
            entries = json.load(fh)
    except (OSError, ValueError) as exc:
        return [f"cannot read deviations.json: {exc}"]
    names = [e.get("name") for e in entries]
    if sorted(names) != sorted(agent.DEVIATIONS):
        problems.append(f"deviations.json and agent.DEVIATIONS differ: "
                        f"{sorted(set(names) ^ set(agent.DEVIATIONS))}")
    if sorted(EXPECT) != sorted(agent.DEVIATIONS):
        problems.append(f"selftest EXPECT and agent.DEVIATIONS differ: {sorted(set(EXPECT) ^ set(agent.DEVIATIONS))}")
    for e in entries:
        for key in ("name", "sentence", "source", "level", "what", "how_to_provoke"):
            if not isinstance(e.get(key), str) or not e.get(key):
                problems.append(f"{e.get('name')}: missing {key}")
        if e.get("level") not in ("MUST", "SHOULD"):
            problems.append(f"{e.get('name')}: level must be MUST or SHOULD")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deviation")
    parser.add_argument("--all-deviations", action="store_true")
    parser.add_argument("--scenario")
    args = parser.parse_args()

    if args.scenario:
        findings = run_scenario(args.scenario, None)
        print(f"{args.scenario}: {'PASS' if not findings else 'FAIL ' + json.dumps(findings)}")
        return 0 if not findings else 1

    if args.deviation or args.all_deviations:
        names = list(EXPECT) if args.all_deviations else [args.deviation]
        unknown = [n for n in names if n not in EXPECT]
        if unknown:
            print("unknown deviation(s):", unknown)
            return 2
        reference_cache: dict[str, dict] = {}
        failures = 0
        for name in names:
            scen, code = EXPECT[name]
            if scen not in reference_cache:
                reference_cache[scen] = run_scenario(scen, None)
            ref = reference_cache[scen]
            var = run_scenario(scen, name)
            ok = code not in ref and code in var
            extra = sorted(set(var) - set(ref) - {code})
            status = "PASS" if ok else "FAIL"
            if not ok:
                failures += 1
            print(f"{status} {name}: expects {code!r} in scenario {scen!r}; "
                  f"reference={'clean' if code not in ref else 'HAS IT'} "
                  f"variant={'shows it' if code in var else 'does NOT show it'}"
                  + (f" [also: {', '.join(extra)}]" if extra else "")
                  + ("" if ok else f" variant findings={json.dumps(var)}"))
            sys.stdout.flush()
        print(f"{len(names) - failures}/{len(names)} deviations behave as intended")
        return 0 if failures == 0 else 1

    problems = check_deviations_json()
    for p in problems:
        print("FAIL deviations.json:", p)
    failures = len(problems)
    for name in SCENARIOS:
        t0 = time.monotonic()
        findings = run_scenario(name, None)
        dt = time.monotonic() - t0
        if findings:
            failures += 1
            print(f"FAIL {name} ({dt:.1f}s): {json.dumps(findings)}")
        else:
            print(f"PASS {name} ({dt:.1f}s)")
        sys.stdout.flush()
    print("reference agent:", "all scenarios clean" if failures == 0 else f"{failures} problem(s)")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
