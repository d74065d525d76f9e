#!/usr/bin/env python3
"""Self test of server.py, with a small stdlib client that reads replies the
way Vibe's client (agent_socket.py) does.

    python3 selftest.py                    # the reference: every method, the basics
    python3 selftest.py --deviation NAME   # NAME differs from the reference as intended
    python3 selftest.py --all              # every deviation in deviations.json
    python3 selftest.py --all --matrix     # also: which checks each deviation fails

Every server, command and temporary directory it starts is cleaned up.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import itertools
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SERVER = HERE / "server.py"
DEVIATIONS_FILE = HERE / "deviations.json"
SOURCES = Path("/work/shared/specs/agent-socket")

MAX_COMMAND_SECONDS = 3.0
TOOL_TIMEOUT_SECONDS = 1.5
READ_CAP = 70 * 1024 * 1024
_IDS = itertools.count(1)


class CheckFailed(Exception):
    pass


def expect(condition: object, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# ---------------------------------------------------------------------------
# Servers


class Server:
    def __init__(self, root: Path, tag: str, deviation: str | None = None,
                 extra: tuple[str, ...] = ()) -> None:
        self.dir = root / tag
        self.dir.mkdir(mode=0o700)
        self.workspace = self.dir / "ws"
        self.workspace.mkdir(mode=0o700)
        self.workspace = Path(os.path.realpath(self.workspace))
        # The socket's directory does not exist yet: the server creates it.
        self.sock = str(self.dir / "run" / "agent.sock")
        self.deviation = deviation
        self.log = open(self.dir / "server.log", "wb")
        argv = [sys.executable, str(SERVER), "--listen", self.sock,
                "--workspace", str(self.workspace),
                "--max-command-seconds", str(MAX_COMMAND_SECONDS),
                "--tool-timeout-seconds", str(TOOL_TIMEOUT_SECONDS), *extra]
        if deviation:
            argv += ["--deviation", deviation]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log)
        self.pids_to_reap: list[int] = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            if os.path.exists(self.sock):
                return
            if self.proc.poll() is not None:
                break
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"server {tag} did not start: {self.read_log()}")

    def read_log(self) -> str:
        try:
            return (self.dir / "server.log").read_text(errors="replace")[-2000:]
        except OSError:
            return ""

    def stop(self) -> int | None:
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                rc = self.proc.wait(10)
        for pid in self.pids_to_reap:  # processes this test's commands started
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        self.log.close()
        return rc


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


# ---------------------------------------------------------------------------
# The client


def exchange(path: str, data: bytes, timeout: float = 15.0, shut: bool = False) -> bytes:
    """Writes ``data``, reads everything until the server closes (bounded)."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(timeout)
    deadline = time.monotonic() + timeout
    try:
        s.connect(path)
        s.sendall(data)
        if shut:
            s.shutdown(socket.SHUT_WR)
        chunks, size = [], 0
        while size < READ_CAP:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            s.settimeout(left)
            try:
                chunk = s.recv(1 << 20)
            except socket.timeout:
                break
            except ConnectionResetError:
                break
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        return b"".join(chunks)
    finally:
        s.close()


def encode(message: object) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def call(srv: Server, method: str, params: object, rid: object = None,
         timeout: float = 15.0) -> tuple[bytes, object]:
    if rid is None:
        rid = next(_IDS)
    return exchange(srv.sock, encode({"jsonrpc": "2.0", "id": rid, "method": method,
                                      "params": params}), timeout), rid


class Reply:
    def __init__(self, kind: str, value: object = None, why: str = "") -> None:
        self.kind, self.value, self.why = kind, value, why

    def __repr__(self) -> str:
        return f"<{self.kind} {self.why or json.dumps(self.value)[:300]}>"


def vibe_reply(raw: bytes, rid: object) -> Reply:
    """What Vibe's ``_exchange`` and ``_call`` make of a reply."""
    end = raw.find(b"\n")
    if end < 0:
        return Reply("connection", why=f"no reply line: {raw[:200]!r}")
    try:
        obj = json.loads(raw[: end + 1])
    except ValueError as e:
        return Reply("malformed", why=f"not JSON: {e}: {raw[:200]!r}")
    if not isinstance(obj, dict):
        return Reply("malformed", why="not an object")
    if obj.get("jsonrpc") != "2.0":
        return Reply("malformed", why=f"jsonrpc is {obj.get('jsonrpc')!r}")
    the_id = obj.get("id")
    if not (the_id is None or isinstance(the_id, str)
            or (isinstance(the_id, int) and not isinstance(the_id, bool))):
        return Reply("malformed", why=f"id {the_id!r}")
    error = obj.get("error")
    if error is not None:
        if not isinstance(error, dict):
            return Reply("malformed", why="error is not an object")
        code, message = error.get("code"), error.get("message")
        if not isinstance(code, int) or isinstance(code, bool):
            return Reply("malformed", why=f"error code {code!r}")
        if not isinstance(message, str):
            return Reply("malformed", why=f"error message {message!r}")
        return Reply("error", error)
    if the_id != rid or type(the_id) is not type(rid) or obj.get("result") is None:
        return Reply("malformed", why=f"no result for request {rid!r}: id {the_id!r}")
    return Reply("result", obj["result"])


def timeout_seconds(data: object) -> float | None:
    """_ErrorBody.timeout_seconds"""
    if isinstance(data, dict):
        seconds = data.get("timeoutSeconds")
        if isinstance(seconds, (int, float)) and not isinstance(seconds, bool) and seconds > 0:
            return float(seconds)
    return None


def result_of(srv: Server, method: str, params: object, timeout: float = 15.0) -> object:
    raw, rid = call(srv, method, params, timeout=timeout)
    reply = vibe_reply(raw, rid)
    expect(reply.kind == "result", f"{method}: expected a result, got {reply!r}")
    return reply.value


def error_of(srv: Server, method: str, params: object, timeout: float = 15.0) -> dict:
    raw, rid = call(srv, method, params, timeout=timeout)
    reply = vibe_reply(raw, rid)
    expect(reply.kind == "error", f"{method}: expected an error, got {reply!r}")
    return reply.value


def init_params(version: int = 2) -> dict:
    return {"protocolVersion": version, "vibeVersion": "selftest"}


RESERVED = {"vibe", "ui"}
ACCESS = {"direct", "programmatic", "both"}


def vibe_initialize(result: object) -> dict:
    """_InitializeResult validation, connect_agent_socket, check_client_tools, _sandbox."""
    expect(isinstance(result, dict), "initialize result is not an object")
    version = result.get("protocolVersion")
    expect(isinstance(version, int) and not isinstance(version, bool),
           f"protocolVersion {version!r} is not an integer")
    for key in ("workspace", "python", "instructions"):
        expect(result.get(key) is None or isinstance(result.get(key), str),
               f"{key} {result.get(key)!r} is not a string or null")
    tools = result.get("tools", [])
    expect(isinstance(tools, list), f"tools is a {type(tools).__name__}, not a list")
    seen = set()
    for tool in tools:
        expect(isinstance(tool, dict), "a tool is not an object")
        namespace = tool.get("namespace", "client")
        expect(isinstance(namespace, str), f"namespace {namespace!r}")
        expect(isinstance(tool.get("name"), str), f"tool name {tool.get('name')!r}")
        expect(isinstance(tool.get("description", ""), str),
               f"description {tool.get('description')!r} of {tool.get('name')}")
        expect(isinstance(tool.get("inputSchema", {}), dict),
               f"inputSchema {tool.get('inputSchema')!r} of {tool['name']}")
        expect(tool.get("outputSchema") is None or isinstance(tool.get("outputSchema"), dict),
               f"outputSchema {tool.get('outputSchema')!r} of {tool['name']}")
        expect(tool.get("modelAccess", "programmatic") in ACCESS,
               f"modelAccess {tool.get('modelAccess')!r} of {tool['name']}")
        namespace = namespace or "client"
        expect(namespace not in RESERVED, f"namespace {namespace!r} is Vibe's own")
        full = f"{namespace}.{tool['name']}"
        expect(full not in seen, f"{full} declared twice")
        seen.add(full)
    limit = result.get("toolTimeoutSeconds")
    expect(limit is None or (isinstance(limit, (int, float)) and not isinstance(limit, bool)
                             and math.isfinite(limit) and limit > 0),
           f"toolTimeoutSeconds {limit!r} is not positive")
    expect(version == 2, f"protocolVersion {version}; Vibe speaks 2")
    workspace, python = result.get("workspace"), result.get("python")
    expect((workspace is None) == (python is None), "workspace and python come together")
    if workspace is not None:
        expect(workspace.startswith("/"), f"workspace {workspace!r} is not absolute")
    return result


def vibe_execute(result: object) -> dict:
    expect(isinstance(result, dict), "execute result is not an object")
    code = result.get("exitCode")
    expect(isinstance(code, int) and not isinstance(code, bool),
           f"exitCode {code!r} is not an integer (keys {sorted(result)})")
    expect(isinstance(result.get("stdout"), str), "stdout is not a string")
    expect(isinstance(result.get("stderr"), str), "stderr is not a string")
    return result


def vibe_read(result: object, max_bytes: int) -> bytes | None:
    expect(isinstance(result, dict) and "contentBase64" in result, f"readFile result {result!r}")
    content = result["contentBase64"]
    if content is None:
        return None
    expect(isinstance(content, str), f"contentBase64 {content!r}")
    try:
        data = base64.b64decode(content, validate=True)
    except ValueError as e:
        raise CheckFailed(f"contentBase64 is not strict base64 ({e}): {content[:80]!r}")
    expect(len(data) <= max_bytes, f"{len(data)} bytes for maxBytes {max_bytes}")
    return data


def vibe_tool_result(result: object) -> dict:
    """_ToolCallResult validation."""
    expect(isinstance(result, dict), f"tools/call result {result!r} is not an object")
    expect(isinstance(result.get("annotations", {}), dict),
           f"annotations {result.get('annotations')!r} is not an object")
    error = result.get("error")
    if error is not None:
        expect(isinstance(error, dict), f"error {error!r} is not an object")
        expect(isinstance(error.get("message"), str), f"error message {error.get('message')!r}")
        expect(error.get("code") is None or isinstance(error.get("code"), str),
               f"error code {error.get('code')!r}")
    return {"output": result.get("output"), "annotations": result.get("annotations", {}),
            "error": error}


def tool_params(name: str, value: object, caller: object = None) -> dict:
    n = next(_IDS)
    return {"callbackId": f"client_tool:{n}", "name": name, "input": value,
            "toolCallId": f"call_{n}", "caller": caller}


# ---------------------------------------------------------------------------
# Checks: each raises CheckFailed or returns a short detail.


def check_socket(srv: Server) -> str:
    mode = stat.S_IMODE(os.stat(srv.sock).st_mode)
    expect(stat.S_ISSOCK(os.stat(srv.sock).st_mode), "not a socket")
    expect(mode == 0o600, f"socket mode {mode:o}, not 600")
    dmode = stat.S_IMODE(os.stat(os.path.dirname(srv.sock)).st_mode)
    expect(dmode == 0o700, f"socket directory (created by the server) mode {dmode:o}, not 700")
    return "socket 0600 in a 0700 directory"


def check_initialize(srv: Server) -> str:
    result = vibe_initialize(result_of(srv, "agent/initialize", init_params()))
    workspace, python = result.get("workspace"), result.get("python")
    expect(workspace is not None, "no sandbox served")
    expect(os.path.isdir(workspace), f"workspace {workspace} is not a directory")
    run = vibe_execute(result_of(srv, "sandbox/execute", {
        "command": shlex.join([python, "-I", "-c", "print(6*7)"]), "cwd": "/", "timeout": 30.0}))
    expect(run["exitCode"] == 0 and run["stdout"] == "42\n",
           f"python {python} does not run: {run}")
    names = sorted(f"{t.get('namespace', 'client')}.{t['name']}" for t in result["tools"])
    expect(isinstance(result.get("instructions"), str), "no instructions")
    return f"v2, workspace {workspace}, tools {names}"


def check_initialize_other_version(srv: Server) -> str:
    raw, rid = call(srv, "agent/initialize", init_params(3))
    reply = vibe_reply(raw, rid)
    if reply.kind == "error":
        return "refused version 3"
    expect(reply.kind == "result", f"{reply!r}")
    version = reply.value.get("protocolVersion") if isinstance(reply.value, dict) else None
    expect(version == 2, f"asked for 3, claims {version!r}; this server speaks 2")
    return "asked for 3, answers 2"


def check_framing(srv: Server) -> str:
    raw, rid = call(srv, "agent/initialize", init_params())
    expect(raw.endswith(b"\n"), f"reply does not end with a newline: ...{raw[-40:]!r}")
    lines = raw.count(b"\n")
    expect(lines == 1, f"{lines} newlines: more than one line")
    expect(not raw.endswith(b"\r\n"), "reply line ends with CRLF")
    line = raw[:-1]
    obj = json.loads(line)
    compact = [json.dumps(obj, separators=(",", ":"), ensure_ascii=a).encode() for a in (True, False)]
    expect(line in compact, f"not compact JSON: {line[:120]!r}")
    return "one compact line"


def check_jsonrpc_reply(srv: Server) -> str:
    for rid in (41, "req-42"):
        raw, _ = call(srv, "agent/initialize", init_params(), rid=rid)
        obj = json.loads(raw.split(b"\n")[0])
        expect(obj.get("jsonrpc") == "2.0", f"jsonrpc {obj.get('jsonrpc')!r}")
        expect(obj.get("id") == rid and type(obj.get("id")) is type(rid),
               f"id {obj.get('id')!r} for {rid!r}")
        expect(("result" in obj) != ("error" in obj), f"members {sorted(obj)}")
    return "ids 41 and 'req-42' echoed, result only"


def check_no_eof_needed(srv: Server) -> str:
    raw = exchange(srv.sock, encode({"jsonrpc": "2.0", "id": 5, "method": "agent/initialize",
                                     "params": init_params()}), timeout=4.0)
    expect(raw.endswith(b"\n"), f"no reply within 4s to a request line whose writer "
                                f"stays open: {raw[:100]!r}")
    return "answered at the newline"


def check_per_connection(srv: Server) -> str:
    run = vibe_execute(result_of(srv, "sandbox/execute",
                                 {"command": "echo fresh", "cwd": "/", "timeout": 10.0}))
    expect(run["stdout"] == "fresh\n", f"{run}")
    return "execute on a fresh connection, no initialize"


def check_unknown_method(srv: Server) -> str:
    raw, rid = call(srv, "sandbox/frobnicate", {})
    expect(raw, "connection closed without a reply")
    reply = vibe_reply(raw, rid)
    expect(reply.kind == "error", f"{reply!r}")
    expect(reply.value["code"] == -32601, f"code {reply.value['code']}, not -32601")
    expect(json.loads(raw.split(b"\n")[0]).get("id") == rid, "id not echoed")
    return "-32601"


def check_parse_error(srv: Server) -> str:
    raw = exchange(srv.sock, b'{"jsonrpc":"2.0","id":7,"method":"agent/initialize"\n')
    expect(raw, "no reply to a line that is not JSON")
    obj = json.loads(raw.split(b"\n")[0])
    expect(obj.get("error", {}).get("code") == -32700, f"code {obj.get('error')}")
    expect("id" in obj and obj["id"] is None, f"id {obj.get('id')!r}, not null")
    raw = exchange(srv.sock, b"\xff\xfe not utf-8\n")
    expect(raw and json.loads(raw.split(b"\n")[0])["error"]["code"] == -32700, "bad bytes")
    time.sleep(0.2)
    expect(srv.proc.poll() is None, "the server exited")
    result_of(srv, "agent/initialize", init_params())
    return "-32700 with null id, still serving"


def check_invalid_request(srv: Server) -> str:
    for line in (b'{"jsonrpc":"2.0","id":8}\n',
                 b'{"jsonrpc":"1.0","id":9,"method":"agent/initialize","params":{}}\n',
                 b'"hello"\n', b'{"jsonrpc":"2.0","id":10,"method":"agent/initialize",'
                               b'"params":"x"}\n'):
        raw = exchange(srv.sock, line)
        expect(raw, f"no reply to {line!r}")
        obj = json.loads(raw.split(b"\n")[0])
        expect(obj.get("error", {}).get("code") == -32600, f"{line!r} -> {obj.get('error')}")
    return "-32600 x4"


def check_invalid_params(srv: Server) -> str:
    cases = [("sandbox/execute", {"cwd": "/", "timeout": 1.0}),
             ("sandbox/readFile", {"path": "/", "maxBytes": -1}),
             ("tools/call", {"name": "demo.add"}),
             ("agent/initialize", {"vibeVersion": "x"})]
    for method, params in cases:
        raw, rid = call(srv, method, params, rid=77)
        reply = vibe_reply(raw, rid)
        expect(reply.kind == "error", f"{method} {params}: {reply!r}")
        expect(reply.value["code"] == -32602, f"{method}: code {reply.value['code']}, not -32602")
        expect(json.loads(raw.split(b"\n")[0]).get("id") == 77, f"{method}: id not echoed")
    return "-32602 x4, ids echoed"


def check_execute(srv: Server) -> str:
    sub = srv.workspace / "sub dir"
    sub.mkdir(exist_ok=True)
    run = vibe_execute(result_of(srv, "sandbox/execute", {
        "command": "printf 'out:%s' \"$(pwd)\"; printf err >&2; exit 3",
        "cwd": str(sub), "timeout": 10.0}))
    expect(run["exitCode"] == 3, f"exitCode {run['exitCode']!r}, not 3")
    expect(run["stdout"] == f"out:{sub}", f"stdout {run['stdout']!r} (cwd {sub})")
    expect(run["stderr"] == "err", f"stderr {run['stderr']!r}")
    return "exit 3 result, stdout/stderr apart, cwd honoured"


def check_posix_sh(srv: Server) -> str:
    run = vibe_execute(result_of(srv, "sandbox/execute", {
        "command": 'readlink /proc/$$/exe; printf "%s" "${BASH_VERSION-unset}"',
        "cwd": "/", "timeout": 10.0}))
    sh = os.path.realpath("/bin/sh")
    lines = run["stdout"].split("\n")
    expect(lines[0] == sh, f"the command ran under {lines[0]}, not {sh}")
    if not sh.endswith("bash"):
        expect(lines[1] == "unset", f"BASH_VERSION {lines[1]!r} under {sh}")
    return f"ran under {sh}"


def check_timeout_null(srv: Server) -> str:
    run = vibe_execute(result_of(srv, "sandbox/execute",
                                 {"command": "echo ok", "cwd": "/", "timeout": None}))
    expect(run["stdout"] == "ok\n", f"{run}")
    return "timeout null accepted"


def check_execute_timeout(srv: Server) -> str:
    ws = srv.workspace
    for name in ("sh.pid", "child.pid"):
        (ws / name).unlink(missing_ok=True)
    command = "echo $$ > sh.pid; sleep 30 & echo $! > child.pid; wait"
    started = time.monotonic()
    raw, rid = call(srv, "sandbox/execute", {"command": command, "cwd": str(ws),
                                             "timeout": 0.5}, timeout=20)
    elapsed = time.monotonic() - started
    pids = []
    for name in ("sh.pid", "child.pid"):
        try:
            pids.append(int((ws / name).read_text()))
        except (OSError, ValueError):
            pass
    srv.pids_to_reap.extend(pids)
    reply = vibe_reply(raw, rid)
    expect(reply.kind == "error", f"expected -32001, got {reply!r}")
    expect(reply.value["code"] == -32001, f"code {reply.value['code']}, not -32001")
    expect(elapsed < 2.5, f"answered after {elapsed:.1f}s for a 0.5s timeout")
    data = reply.value.get("data")
    if isinstance(data, dict) and "timeoutSeconds" in data:
        named = timeout_seconds(data)
        expect(named is not None, f"data {data!r}: Vibe cannot read the limit")
        expect(named <= 0.5 + 1e-9, f"names {named}s, longer than the 0.5s asked for")
    time.sleep(0.5)
    expect(len(pids) == 2, f"pid files missing: {pids}")
    left = [p for p in pids if alive(p)]
    expect(not left, f"still running after -32001: {left} (of shell {pids[0]}, child {pids[1]})")
    return f"-32001 after {elapsed:.2f}s, data {data}, process group gone"


def check_own_limit(srv: Server) -> str:
    started = time.monotonic()
    reply = vibe_reply(*call(srv, "sandbox/execute", {"command": "sleep 8", "cwd": "/",
                                                      "timeout": 20.0}, timeout=30))
    elapsed = time.monotonic() - started
    expect(reply.kind == "error" and reply.value["code"] == -32001, f"{reply!r}")
    if elapsed < 20 - 0.5:
        named = timeout_seconds(reply.value.get("data"))
        expect(named is not None and named < 20,
               f"stopped after {elapsed:.1f}s, sooner than the 20s timeout, "
               f"but data {reply.value.get('data')!r} does not say so")
    return f"own limit: -32001 after {elapsed:.1f}s, data {reply.value.get('data')}"


def check_concurrency(srv: Server) -> str:
    box: dict = {}

    def slow() -> None:
        try:
            box["slow"] = vibe_reply(*call(srv, "sandbox/execute",
                                           {"command": "sleep 2", "cwd": "/", "timeout": 10.0}))
        except OSError as e:
            box["slow"] = Reply("connection", why=str(e))

    thread = threading.Thread(target=slow)
    thread.start()
    time.sleep(0.3)
    started = time.monotonic()
    fast = vibe_reply(*call(srv, "sandbox/readFile", {"path": "/nonexistent", "maxBytes": 10}))
    latency = time.monotonic() - started
    thread.join(15)
    expect(fast.kind == "result", f"{fast!r}")
    expect(box.get("slow") is not None and box["slow"].kind == "result", f"{box}")
    expect(latency < 1.0, f"a readFile waited {latency:.2f}s behind a running command")
    return f"readFile answered in {latency:.3f}s during a 2s command"


def check_readfile(srv: Server) -> str:
    ws = srv.workspace
    content = bytes([0xFB, 0xFF, 0xFE, 0x3E, 0x3F]) * 20  # base64 '+' and '/'
    (ws / "data.bin").write_bytes(content)
    (ws / "empty").write_bytes(b"")
    (ws / "dir").mkdir(exist_ok=True)
    (ws / "dir" / "inside.txt").write_text("x")
    fifo = ws / "fifo"
    if not fifo.exists():
        os.mkfifo(fifo)

    def read(path: str, max_bytes: int) -> bytes | None:
        return vibe_read(result_of(srv, "sandbox/readFile",
                                   {"path": path, "maxBytes": max_bytes}), max_bytes)

    expect(read(str(ws / "data.bin"), 1000) == content, "full read differs")
    expect(read(str(ws / "data.bin"), 10) == content[:10], "maxBytes 10 differs")
    expect(read(str(ws / "empty"), 100) == b"", "empty file is not empty content")
    expect(read(str(ws / "missing"), 100) is None, "missing file is not null")
    expect(read(str(ws / "dir"), 100) is None, "a directory is not null")
    expect(read(str(fifo), 100) is None, "a FIFO is not null")
    if os.path.exists("/dev/zero"):
        expect(read("/dev/zero", 100) is None, "/dev/zero is not null")
    return "bytes, maxBytes, empty, missing, dir, fifo, device"


def check_tools(srv: Server) -> str:
    init = vibe_initialize(result_of(srv, "agent/initialize", init_params()))
    declared = {f"{t.get('namespace') or 'client'}.{t['name']}" for t in init["tools"]}
    expect({"client.echo", "demo.add", "demo.fail", "demo.sleep", "demo.whoami"} <= declared,
           f"declared {sorted(declared)}")

    def tool(name: str, value: object, caller: object = None) -> dict:
        return vibe_tool_result(result_of(srv, "tools/call", tool_params(name, value, caller)))

    added = tool("demo.add", {"a": 2, "b": 3})
    expect(added["output"] == {"sum": 5} and added["error"] is None, f"demo.add: {added}")
    echoed = tool("client.echo", {"value": [1, "two", None]})
    expect(echoed["output"] == [1, "two", None], f"client.echo: {echoed}")
    failed = tool("demo.fail", {})
    expect(failed["error"] is not None and failed["error"]["code"] == "demo_failure",
           f"demo.fail: {failed}")
    nobody = tool("demo.whoami", {}, None)
    expect(nobody["output"] == {"caller": None, "kind": "unknown",
                                "callbackId": nobody["output"]["callbackId"],
                                "toolCallId": nobody["output"]["toolCallId"]}
           if isinstance(nobody["output"], dict) else False, f"whoami, caller null: {nobody}")
    sub = {"sessionId": "s2", "rootSessionId": "s1", "parentSessionId": "s1",
           "name": "helper", "agentType": "explore"}
    who = tool("demo.whoami", {}, sub)
    expect(isinstance(who["output"], dict) and who["output"].get("caller") == sub
           and who["output"].get("kind") == "subagent", f"whoami, subagent: {who}")
    return "add, echo, fail, whoami(null), whoami(subagent)"


def check_tool_timeout(srv: Server) -> str:
    started = time.monotonic()
    reply = vibe_reply(*call(srv, "tools/call", tool_params("demo.sleep", {"seconds": 6}),
                             timeout=20))
    elapsed = time.monotonic() - started
    expect(reply.kind == "error", f"{reply!r}")
    expect(reply.value["code"] == -32001, f"code {reply.value['code']}, not -32001")
    expect(elapsed < TOOL_TIMEOUT_SECONDS + 1.5, f"after {elapsed:.1f}s")
    return f"-32001 after {elapsed:.1f}s"


CHECKS = {
    "socket": check_socket,
    "initialize": check_initialize,
    "initialize-other-version": check_initialize_other_version,
    "framing": check_framing,
    "jsonrpc-reply": check_jsonrpc_reply,
    "no-eof-needed": check_no_eof_needed,
    "per-connection": check_per_connection,
    "unknown-method": check_unknown_method,
    "parse-error": check_parse_error,
    "invalid-request": check_invalid_request,
    "invalid-params": check_invalid_params,
    "execute": check_execute,
    "posix-sh": check_posix_sh,
    "timeout-null": check_timeout_null,
    "execute-timeout": check_execute_timeout,
    "own-limit": check_own_limit,
    "concurrency": check_concurrency,
    "readfile": check_readfile,
    "tools": check_tools,
    "tool-timeout": check_tool_timeout,
}

# The check that shows each deviation.
SHOWN_BY = {
    "socket": ["socket-mode-0666", "socket-dir-0755"],
    "initialize": [
        "protocol-version-1", "protocol-version-missing", "workspace-without-python",
        "workspace-relative", "workspace-nonexistent", "python-not-runnable",
        "reserved-namespace-vibe", "reserved-namespace-ui", "duplicate-tool",
        "duplicate-via-default", "model-access-invalid", "input-schema-not-object",
        "output-schema-not-object", "description-null", "tool-name-missing", "tools-not-list",
        "tool-timeout-zero", "instructions-not-string"],
    "initialize-other-version": ["protocol-version-echo"],
    "framing": ["reply-no-newline", "reply-indented", "reply-spaces", "reply-crlf",
                "reply-extra-line"],
    "jsonrpc-reply": ["id-as-string", "jsonrpc-missing", "error-null-on-success"],
    "no-eof-needed": ["request-needs-eof"],
    "per-connection": ["require-initialize-per-connection"],
    "unknown-method": ["close-without-reply", "method-not-found-code"],
    "parse-error": ["die-on-malformed", "parse-error-with-id", "parse-error-code"],
    "invalid-request": ["invalid-request-code"],
    "invalid-params": ["invalid-params-code", "error-id-null", "error-message-missing",
                       "abort-code-for-errors"],
    "execute": ["nonzero-exit-error", "stderr-into-stdout", "exit-code-string", "cwd-ignored",
                "snake-case-fields"],
    "posix-sh": ["bash-not-sh"],
    "timeout-null": ["timeout-null-refused"],
    "execute-timeout": ["timeout-not-enforced", "timeout-wrong-code", "timeout-as-result",
                        "timeout-leaves-running", "timeout-kills-only-shell",
                        "timeout-data-longer", "timeout-data-string"],
    "own-limit": ["timeout-data-missing"],
    "concurrency": ["serial"],
    "readfile": ["readfile-over-max", "readfile-directory-listing", "readfile-nonregular",
                 "readfile-base64-newlines", "readfile-urlsafe", "readfile-empty-null",
                 "readfile-missing-error", "readfile-missing-empty"],
    "tools": ["annotations-not-object", "tool-error-code-int", "tool-error-no-message",
              "tool-error-string", "result-unwrapped", "tool-name-bare", "caller-null-refused"],
    "tool-timeout": ["tool-timeout-wrong-code"],
}
CHECK_OF = {name: check for check, names in SHOWN_BY.items() for name in names}


def run_check(srv: Server, name: str) -> tuple[bool, str]:
    try:
        return True, CHECKS[name](srv)
    except CheckFailed as e:
        return False, str(e)
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RuntimeError) as e:
        return False, f"{type(e).__name__}: {e}"


# ---------------------------------------------------------------------------
# Reference-only basics


def basics(srv: Server, root: Path) -> list[tuple[str, bool, str]]:
    out = []

    def item(name, fn):
        try:
            out.append((name, True, fn()))
        except CheckFailed as e:
            out.append((name, False, str(e)))
        except Exception as e:
            out.append((name, False, f"{type(e).__name__}: {e}"))

    def batch():
        raw = exchange(srv.sock, encode([
            {"jsonrpc": "2.0", "id": 1, "method": "agent/initialize", "params": init_params()},
            {"jsonrpc": "2.0", "method": "agent/initialize", "params": init_params()},
            {"jsonrpc": "2.0", "id": 2, "method": "nope"}]))
        replies = json.loads(raw)
        expect(isinstance(replies, list) and [r["id"] for r in replies] == [1, 2], f"{raw[:200]!r}")
        raw = exchange(srv.sock, b"[]\n")
        expect(json.loads(raw)["error"]["code"] == -32600, "empty batch")
        return "batch of 3 -> 2 replies; [] -> -32600"

    def notification():
        raw = exchange(srv.sock, encode({"jsonrpc": "2.0", "method": "agent/initialize",
                                         "params": init_params()}), timeout=5)
        expect(raw == b"", f"replied to a notification: {raw[:100]!r}")
        return "no reply to a notification"

    def strict_json():
        raw = exchange(srv.sock, b'{"jsonrpc":"2.0","id":1,"method":"sandbox/execute","params":'
                                 b'{"command":"true","cwd":"/","timeout":NaN}}\n')
        expect(json.loads(raw)["error"]["code"] == -32700, f"NaN: {raw!r}")
        return "NaN is not JSON"

    def half_close():
        raw = exchange(srv.sock, encode({"jsonrpc": "2.0", "id": 3, "method": "agent/initialize",
                                         "params": init_params()})[:-1], shut=True)
        expect(vibe_reply(raw, 3).kind == "result", f"{raw[:100]!r}")
        return "a request ended by EOF instead of a newline is still answered"

    def bad_params():
        for params in ({"command": "true", "cwd": "/", "timeout": -1},
                       {"command": "true", "cwd": "/", "timeout": "5"},
                       {"command": 5, "cwd": "/", "timeout": 1}):
            expect(error_of(srv, "sandbox/execute", params)["code"] == -32602, f"{params}")
        expect(error_of(srv, "tools/call", tool_params("demo.nothing", {}))["code"] == -32602,
               "unknown tool")
        return "negative/string timeout, non-string command, unknown tool -> -32602"

    def missing_cwd():
        run = vibe_execute(result_of(srv, "sandbox/execute",
                                     {"command": "true", "cwd": "/no/such/dir", "timeout": 5.0}))
        expect(run["exitCode"] != 0 and run["stderr"], f"{run}")
        return f"missing cwd -> result exit {run['exitCode']}"

    def relative_paths():
        (srv.workspace / "rel.txt").write_text("relative")
        data = vibe_read(result_of(srv, "sandbox/readFile", {"path": "rel.txt", "maxBytes": 99}), 99)
        expect(data == b"relative", f"{data!r}")
        run = vibe_execute(result_of(srv, "sandbox/execute",
                                     {"command": "cat rel.txt", "cwd": ".", "timeout": 5.0}))
        expect(run["stdout"] == "relative", f"{run}")
        return "relative paths are the workspace's"

    def max_zero():
        data = vibe_read(result_of(srv, "sandbox/readFile",
                                   {"path": str(srv.workspace / "rel.txt"), "maxBytes": 0}), 0)
        expect(data == b"", f"{data!r}")
        return "maxBytes 0 -> empty content"

    def signal_exit():
        run = vibe_execute(result_of(srv, "sandbox/execute",
                                     {"command": "kill -9 $$", "cwd": "/", "timeout": 5.0}))
        expect(run["exitCode"] == 137, f"{run}")
        return "a command killed by SIGKILL -> exit 137"

    def big_output():
        run = vibe_execute(result_of(srv, "sandbox/execute", {
            "command": "head -c 3000000 /dev/zero | tr '\\0' a", "cwd": "/", "timeout": 20.0}))
        expect(len(run["stdout"]) == 3000000, f"{len(run['stdout'])}")
        return "3 MB of stdout"

    def unicode_output():
        run = vibe_execute(result_of(srv, "sandbox/execute", {
            "command": "printf 'caf\\303\\251 \\377'", "cwd": "/", "timeout": 5.0}))
        expect(run["stdout"] == "café \ufffd", f"{run}")
        return "UTF-8 kept, invalid bytes replaced"

    def background_left():
        started = time.monotonic()
        run = vibe_execute(result_of(srv, "sandbox/execute", {
            "command": "sleep 20 & echo $! > bg.pid; echo done", "cwd": str(srv.workspace),
            "timeout": 10.0}))
        srv.pids_to_reap.append(int((srv.workspace / "bg.pid").read_text()))
        expect(run["stdout"] == "done\n" and time.monotonic() - started < 3, f"{run}")
        return "a command that leaves a background job is answered when its shell exits"

    for name, fn in [("batch", batch), ("notification", notification), ("strict-json", strict_json),
                     ("half-close", half_close), ("bad-params", bad_params),
                     ("missing-cwd", missing_cwd), ("relative-paths", relative_paths),
                     ("max-bytes-zero", max_zero), ("signal-exit", signal_exit),
                     ("big-output", big_output), ("unicode-output", unicode_output),
                     ("background-job", background_left)]:
        item(name, fn)

    # Half servers.
    def half(flag, present, absent):
        s = Server(root, "half" + flag.replace("-", ""), extra=(flag,))
        try:
            init = vibe_initialize(result_of(s, "agent/initialize", init_params()))
            if flag == "--no-sandbox":
                expect(init["workspace"] is None and init["python"] is None, f"{init}")
            else:
                expect(init["tools"] == [] and init["toolTimeoutSeconds"] is None, f"{init}")
            expect(error_of(s, absent[0], absent[1])["code"] == -32601, f"{absent[0]}")
            result_of(s, present[0], present[1])
        finally:
            s.stop()
        return f"{flag}: {absent[0]} -> -32601"

    item("no-sandbox", lambda: half("--no-sandbox", ("tools/call", tool_params("demo.add", {"a": 1, "b": 1})),
                                    ("sandbox/execute", {"command": "true", "cwd": "/", "timeout": 1.0})))
    item("no-tools", lambda: half("--no-tools", ("sandbox/execute", {"command": "true", "cwd": "/", "timeout": 1.0}),
                                  ("tools/call", tool_params("demo.add", {"a": 1, "b": 1}))))

    def sigterm():
        s = Server(root, "sigterm")
        box = {}
        def run() -> None:
            try:
                box["raw"] = call(s, "sandbox/execute", {
                    "command": "echo $$ > sh.pid; sleep 60 & echo $! > child.pid; wait",
                    "cwd": str(s.workspace), "timeout": None}, timeout=20)
            except OSError as e:
                box["raw"] = e

        thread = threading.Thread(target=run)
        thread.start()
        pids: list[int] = []
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and len(pids) < 2:
            try:
                pids = [int((s.workspace / n).read_text()) for n in ("sh.pid", "child.pid")]
            except (OSError, ValueError):
                time.sleep(0.05)
        s.pids_to_reap.extend(pids)
        expect(len(pids) == 2, "the command did not start")
        rc = s.stop()
        thread.join(20)
        time.sleep(0.3)
        expect(rc == 0, f"exit code {rc}")
        expect(not os.path.exists(s.sock), "socket left behind")
        expect(not any(alive(p) for p in pids), f"commands left running: {pids}")
        return "SIGTERM: exit 0, socket removed, the command and its child killed"

    item("sigterm", sigterm)
    return out


def check_deviations_file() -> list[tuple[str, bool, str]]:
    out = []
    sys.path.insert(0, str(HERE))
    import server  # noqa: E402  (only for its DEVIATIONS table)
    entries = json.loads(DEVIATIONS_FILE.read_text())
    names = [e["name"] for e in entries]
    out.append(("deviations.json names", sorted(names) == sorted(server.DEVIATIONS)
                and len(set(names)) == len(names),
                f"{len(names)} entries; server has {len(server.DEVIATIONS)}"))
    texts = {p.name: " ".join(p.read_text().split()) for p in SOURCES.glob("*.py")}
    bad = []
    for e in entries:
        source_file = e["source"].split(",")[0].strip()
        quote = " ".join(e["sentence"].split())
        if source_file not in texts or quote not in texts[source_file]:
            bad.append(e["name"])
        if e["level"] not in ("MUST", "SHOULD") or not e["what"] or not e["how_to_provoke"]:
            bad.append(e["name"] + " (fields)")
    out.append(("sentences quoted exactly", not bad, f"not found: {bad}" if bad else
                f"{len(entries)} sentences found in their sources"))
    unshown = sorted(set(names) - set(CHECK_OF))
    out.append(("every deviation has a check", not unshown, f"missing: {unshown}" if unshown else "yes"))
    return out


# ---------------------------------------------------------------------------


def show(rows, title):
    print(title)
    ok = True
    for name, passed, detail in rows:
        ok &= passed
        print(f"  [{'ok' if passed else 'FAIL'}] {name}: {detail}")
    return ok


def run_deviation(root: Path, tag: str, name: str, matrix: bool) -> tuple[bool, str, list[str]]:
    srv = Server(root, tag, deviation=name)
    try:
        check = CHECK_OF[name]
        passed, detail = run_check(srv, check)
        also = []
        if matrix:
            for other in CHECKS:
                if other != check and not run_check(srv, other)[0]:
                    also.append(other)
    finally:
        srv.stop()
    return (not passed), f"{check}: {detail}", also


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--deviation")
    parser.add_argument("--all", action="store_true")
    parser.add_argument("--matrix", action="store_true")
    parser.add_argument("--jobs", type=int, default=6)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agent-socket-selftest-"))
    ok = True
    try:
        ref = Server(root, "ref")
        try:
            rows = [(name, *run_check(ref, name)) for name in CHECKS]
            if not args.deviation:
                rows += basics(ref, root)
                rows += check_deviations_file()
            ok &= show(rows, "reference:")
        finally:
            rc = ref.stop()
        ok &= show([("reference exit", rc == 0, f"exit code {rc} on SIGTERM")], "")
        names = []
        if args.deviation:
            names = [args.deviation]
        elif args.all:
            names = [e["name"] for e in json.loads(DEVIATIONS_FILE.read_text())]
        if names:
            print("deviations (the reference passes each check; the deviation must fail it):")
            with concurrent.futures.ThreadPoolExecutor(max(1, args.jobs)) as pool:
                futures = {name: pool.submit(run_deviation, root, f"d{i}", name, args.matrix)
                           for i, name in enumerate(names)}
                for name in names:
                    shown, detail, also = futures[name].result()
                    ok &= shown
                    extra = f"  (also fails: {', '.join(also)})" if also else ""
                    print(f"  [{'ok' if shown else 'FAIL'}] {name}: {detail}{extra}")
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
