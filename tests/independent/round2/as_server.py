#!/usr/bin/env python3
"""A tiny agent-socket (protocol version 2) server: a test double.

Written only from the module docstring of the agent socket client
(/work/shared/specs/agent-socket/agent_socket.py, `vibe -p --agent-socket`).

Usage:
    python3 as_server.py SOCKET_PATH [--deviation silent] [--workspace DIR] [--no-sandbox]
                         [--max-lifetime SECONDS]
    python3 as_server.py --list

SOCKET_PATH is where the server creates its Unix socket (mode 0600).  The docstring says
"The caller runs a server on a Unix socket it created with mode 0600 inside a 0700
directory": the directory is the caller's; this server warns on stderr when it is not 0700.
An existing *socket* at SOCKET_PATH is replaced; any other existing file is refused.

Framing (docstring): "Vibe connects once per request: it writes one request line, reads one
reply line, and closes the connection"; lines are compact JSON-RPC 2.0 followed by "\\n".
Each connection is served on its own thread, so concurrent requests are answered
concurrently.

Correct server (default):
  agent/initialize  -> {"protocolVersion": 2, "workspace": DIR, "python": sys.executable,
                        "tools": [client.echo], "toolTimeoutSeconds": null,
                        "instructions": null}
                       (--no-sandbox: workspace and python are both null)
  sandbox/execute   -> runs `/bin/sh -c command` in cwd, {"exitCode", "stdout", "stderr"};
                       past its `timeout` the command is killed and the answer is -32001;
                       with timeout null the server's own limit (600 s) applies and the
                       -32001 error carries data {"timeoutSeconds": 600}
  sandbox/readFile  -> {"contentBase64": base64 of at most maxBytes bytes, or null when there
                       is no such file}; a relative path is taken from the workspace
  tools/call        -> client.echo: {"output": input, "annotations": {}, "error": null};
                       another name: a CallbackResult whose `error` names the unknown tool
  anything else     -> -32601; a line that is not JSON -> -32700 (id null); bad params -32602

--deviation silent: accepts every connection, reads the request to end of input (until the
caller closes or shuts down its side), and never writes a byte.  It breaks the docstring's
"it writes one request line, reads one reply line" (and JSON-RPC 2.0's "the Server MUST
reply with a Response").

The process ends when its stdin closes (or after --max-lifetime, default 3600 s); it then
removes its socket.  Logs go to stderr only.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import threading
import time

PROTOCOL_VERSION = 2
TIMEOUT_ERROR_CODE = -32001
MAX_LINE = 64 * 1024 * 1024
OWN_EXEC_LIMIT = 600.0
CONNECTION_READ_LIMIT = 120.0  # how long one connection may take to send its request
OUTPUT_LIMIT = 16 * 1024 * 1024

DEVIATIONS = {"silent": "accepts connections, reads each request to end of input, never answers"}
DEV: str | None = None

ECHO_TOOL = {
    "namespace": "client",
    "name": "echo",
    "description": "Returns its input unchanged.",
    "inputSchema": {"type": "object"},
    "outputSchema": None,
    "modelAccess": "both",
}


def log(msg: str) -> None:
    try:
        sys.stderr.write("as-server: %s\n" % msg)
        sys.stderr.flush()
    except Exception:
        pass


class RpcError(Exception):
    def __init__(self, code: int, message: str, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data


class Server:
    def __init__(self, path: str, workspace: str | None):
        self.path = path
        self.workspace = workspace
        self.sock: socket.socket | None = None
        self.stopping = False

    # -- socket --------------------------------------------------------------

    def open(self) -> None:
        parent = os.path.dirname(os.path.abspath(self.path)) or "."
        try:
            mode = stat.S_IMODE(os.stat(parent).st_mode)
            if mode != 0o700:
                log("warning: the socket directory %s has mode %o, not 0700" % (parent, mode))
        except OSError as e:
            raise SystemExit("as-server: cannot stat %s: %s" % (parent, e))
        if os.path.lexists(self.path):
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
            else:
                raise SystemExit("as-server: %s exists and is not a socket" % self.path)
        # Bind under a temporary name and rename once listening, so that the path appears
        # only when connections are accepted.
        tmp = os.path.join(parent, ".%s.%d.tmp" % (os.path.basename(self.path), os.getpid()))
        if os.path.lexists(tmp):
            os.unlink(tmp)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)
        try:
            sock.bind(tmp)
        finally:
            os.umask(old)
        os.chmod(tmp, 0o600)
        sock.listen(64)
        os.rename(tmp, self.path)
        sock.settimeout(0.5)
        self.sock = sock
        log("listening on %s%s" % (self.path, " (deviation %s)" % DEV if DEV else ""))

    def close(self) -> None:
        self.stopping = True
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
        try:
            if stat.S_ISSOCK(os.lstat(self.path).st_mode):
                os.unlink(self.path)
        except OSError:
            pass

    def accept_loop(self) -> None:
        while not self.stopping:
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                break
            handler = self.serve_silent if DEV == "silent" else self.serve
            threading.Thread(target=handler, args=(conn,), daemon=True).start()

    # -- connections -----------------------------------------------------------

    def serve_silent(self, conn: socket.socket) -> None:
        """silent: read until the caller's end of input, never write."""
        deadline = time.monotonic() + CONNECTION_READ_LIMIT
        total = 0
        try:
            conn.settimeout(0.5)
            while time.monotonic() < deadline and not self.stopping:
                try:
                    chunk = conn.recv(65536)
                except socket.timeout:
                    continue
                if not chunk:
                    break
                total += len(chunk)
        except OSError:
            pass
        finally:
            log("silent: read %d byte(s), answered nothing" % total)
            try:
                conn.close()
            except OSError:
                pass

    def read_line(self, conn: socket.socket) -> bytes | None:
        buf = bytearray()
        deadline = time.monotonic() + CONNECTION_READ_LIMIT
        conn.settimeout(0.5)
        while time.monotonic() < deadline and not self.stopping:
            try:
                chunk = conn.recv(65536)
            except socket.timeout:
                continue
            if not chunk:
                break
            buf.extend(chunk)
            nl = buf.find(b"\n")
            if nl >= 0:
                return bytes(buf[:nl])
            if len(buf) > MAX_LINE:
                return None
        return bytes(buf) if buf.strip() else None

    def serve(self, conn: socket.socket) -> None:
        try:
            line = self.read_line(conn)
            if line is None:
                return
            reply = self.handle(line)
            if reply is not None:
                data = json.dumps(reply, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"
                conn.settimeout(30.0)
                conn.sendall(data)
        except OSError as e:
            log("connection error: %s" % e)
        finally:
            try:
                conn.close()
            except OSError:
                pass

    # -- JSON-RPC ----------------------------------------------------------------

    def handle(self, line: bytes):
        try:
            msg = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "Parse error"}}
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or not isinstance(msg.get("method"), str):
            rid = msg.get("id") if isinstance(msg, dict) and isinstance(msg.get("id"), (int, str)) else None
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32600, "message": "Invalid Request"}}
        if "id" not in msg:
            return None  # a notification: no reply
        rid = msg["id"]
        params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
        try:
            result = self.dispatch(msg["method"], params)
            return {"jsonrpc": "2.0", "id": rid, "result": result}
        except RpcError as e:
            err = {"code": e.code, "message": e.message}
            if e.data is not None:
                err["data"] = e.data
            return {"jsonrpc": "2.0", "id": rid, "error": err}
        except Exception as e:  # keep serving
            log("internal error: %r" % e)
            return {"jsonrpc": "2.0", "id": rid, "error": {"code": -32603, "message": "Internal error"}}

    def dispatch(self, method: str, params: dict):
        if method == "agent/initialize":
            sandbox = self.workspace is not None
            return {"protocolVersion": PROTOCOL_VERSION,
                    "workspace": self.workspace if sandbox else None,
                    "python": sys.executable if sandbox else None,
                    "tools": [ECHO_TOOL], "toolTimeoutSeconds": None, "instructions": None}
        if method == "sandbox/execute":
            return self.execute(params)
        if method == "sandbox/readFile":
            return self.read_file(params)
        if method == "tools/call":
            name = params.get("name")
            if not isinstance(name, str) or not isinstance(params.get("callbackId"), str):
                raise RpcError(-32602, "Invalid params")
            if name == "client.echo":
                return {"output": params.get("input"), "annotations": {}, "error": None}
            return {"output": None, "annotations": {},
                    "error": {"message": "unknown tool %s" % name, "code": "unknown_tool", "details": None}}
        raise RpcError(-32601, "Method not found")

    def execute(self, params: dict):
        command, cwd, timeout = params.get("command"), params.get("cwd"), params.get("timeout")
        if not isinstance(command, str) or not isinstance(cwd, str) or not (
                timeout is None or (isinstance(timeout, (int, float)) and not isinstance(timeout, bool))):
            raise RpcError(-32602, "Invalid params")
        own = timeout is None or timeout > OWN_EXEC_LIMIT
        limit = OWN_EXEC_LIMIT if own else max(0.0, float(timeout))
        if not os.path.isdir(cwd):
            return {"exitCode": 127, "stdout": "", "stderr": "no such directory: %s\n" % cwd}
        proc = subprocess.Popen(["/bin/sh", "-c", command], cwd=cwd, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except OSError:
                pass
            proc.communicate(timeout=5)
            data = {"timeoutSeconds": OWN_EXEC_LIMIT} if own else None
            raise RpcError(TIMEOUT_ERROR_CODE, "the command timed out after %gs" % limit, data)
        return {"exitCode": proc.returncode,
                "stdout": out[:OUTPUT_LIMIT].decode("utf-8", "replace"),
                "stderr": err[:OUTPUT_LIMIT].decode("utf-8", "replace")}

    def read_file(self, params: dict):
        path, max_bytes = params.get("path"), params.get("maxBytes")
        if not isinstance(path, str) or not isinstance(max_bytes, int) or isinstance(max_bytes, bool) \
                or max_bytes < 0:
            raise RpcError(-32602, "Invalid params")
        if not os.path.isabs(path) and self.workspace:
            path = os.path.join(self.workspace, path)
        try:
            with open(path, "rb") as fh:
                data = fh.read(min(max_bytes, MAX_LINE // 2))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return {"contentBase64": None}
        except OSError as e:
            raise RpcError(-32603, "cannot read %s: %s" % (path, e.strerror))
        return {"contentBase64": base64.b64encode(data).decode("ascii")}


def main() -> None:
    global DEV
    ap = argparse.ArgumentParser(description="agent-socket v2 server test double")
    ap.add_argument("path", nargs="?", help="the Unix socket to create")
    ap.add_argument("--deviation", choices=sorted(DEVIATIONS), default=None)
    ap.add_argument("--workspace", default=None, help="sandbox workspace (default: the cwd)")
    ap.add_argument("--no-sandbox", action="store_true", help="serve tools only (workspace/python null)")
    ap.add_argument("--max-lifetime", type=float, default=3600.0)
    ap.add_argument("--list", action="store_true")
    args = ap.parse_args()
    if args.list:
        for name in DEVIATIONS:
            print("deviation\t%s" % name)
        return
    if not args.path:
        ap.error("the socket path is required")
    DEV = args.deviation
    workspace = None if args.no_sandbox else os.path.abspath(args.workspace or os.getcwd())
    server = Server(args.path, workspace)
    server.open()
    threading.Thread(target=server.accept_loop, daemon=True).start()

    def watchdog():
        time.sleep(max(1.0, args.max_lifetime))
        log("max lifetime reached; exiting")
        server.close()
        os._exit(3)

    threading.Thread(target=watchdog, daemon=True).start()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        try:
            signal.signal(sig, lambda *_: (server.close(), os._exit(0)))
        except (ValueError, OSError):
            pass
    # The process lives as long as its stdin is open.
    stdin = sys.stdin.buffer
    while True:
        try:
            chunk = stdin.read1(65536)
        except (OSError, ValueError):
            break
        if not chunk:
            break
    log("stdin closed; exiting")
    server.close()
    os._exit(0)


if __name__ == "__main__":
    main()
