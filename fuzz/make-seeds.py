#!/usr/bin/env python3
"""Writes the cargo-fuzz seed corpora from conform's golden corpus.

    python3 fuzz/make-seeds.py

Each target's seeds go to fuzz/corpus/<target>/seed-<sha1 prefix>, taken from
corpus/: the requests of the agent-socket and ACP cases, the cwx golden
messages and frames, and the case files themselves. Targets whose first byte
is a parameter (a limit, a chunk size, a tier) get seeds with several first
bytes. Re-running is idempotent; stale seeds are removed.
"""

from __future__ import annotations

import hashlib
import json
import pathlib
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "corpus"
OUT = ROOT / "fuzz" / "corpus"
PARAMS = [3, 200]


def cases(protocol: str) -> list[dict]:
    out = []
    for f in sorted((CORPUS / protocol / "cases").glob("*.json")):
        out.extend(json.loads(f.read_text())["cases"])
    return out


def request_lines(protocol: str) -> list[bytes]:
    """The requests a suite sends, as compact JSON lines, templates filled."""
    lines = []
    for i, case in enumerate(cases(protocol)):
        for step in case["steps"]:
            if "send" in step:
                send = step["send"]
                msg = {"jsonrpc": "2.0"}
                if not send.get("notification"):
                    msg["id"] = send.get("id", i)
                msg["method"] = send["method"]
                msg["params"] = send.get("params", {})
                text = json.dumps(msg, separators=(",", ":"))
                text = text.replace("${", "/tmp/conform-seed-").replace("}", "}")
                lines.append(text.encode())
            elif isinstance(step.get("raw"), str):
                lines.append(step["raw"].encode())
            elif "rawHex" in step:
                lines.append(bytes.fromhex(step["rawHex"]))
    return list(dict.fromkeys(lines))


def cwx_messages() -> tuple[list[bytes], list[bytes]]:
    """Golden payloads and golden frames of the cwx corpus."""
    payloads, frames = [], []
    for f in sorted((CORPUS / "cwx" / "messages").glob("*.json")):
        for entry in json.loads(f.read_text())["entries"]:
            if "message" in entry:
                payloads.append(json.dumps(entry["message"], separators=(",", ":")).encode())
            if "frame_hex" in entry:
                frames.append(bytes.fromhex(entry["frame_hex"]))
    for p in payloads:
        frames.append(b"CWX1" + struct.pack("<I", len(p)) + p)
    return list(dict.fromkeys(payloads)), list(dict.fromkeys(frames))


def main() -> None:
    as_lines = request_lines("agent-socket")
    acp_lines = request_lines("acp")
    payloads, frames = cwx_messages()
    case_files = [f.read_bytes() for p in ("agent-socket", "acp", "cwx")
                  for f in sorted((CORPUS / p / "cases").glob("*.json"))]
    replies = [
        b'{"jsonrpc":"2.0","id":1,"result":{"protocolVersion":2}}',
        b'{"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"Parse error"}}',
        b'{"jsonrpc":"2.0","id":"7","result":null,"error":{"code":1,"message":"x"}}',
    ] + [p for p in payloads if b'"method"' not in p]
    with_param = lambda items: [bytes([p]) + i for i in items for p in PARAMS]  # noqa: E731
    seeds = {
        "line_decoder": with_param([b"\n".join(as_lines[:8]) + b"\n", b"\n".join(acp_lines[:8])]),
        "frame_decoder": with_param([b"".join(frames[i:i + 8]) for i in range(0, len(frames), 8)]),
        "frame_round_trip": with_param([b"\xff".join(payloads[i:i + 8]) for i in range(0, len(payloads), 8)]),
        "jsonrpc_reply": replies,
        "acp_monitor": [b"\n".join(acp_lines[i:i + 4]) for i in range(0, len(acp_lines), 4)],
        "cwx_parsers": payloads,
        "case_files": case_files,
        "agent_socket_reference": as_lines,
        "acp_reference": [b"\n".join(acp_lines[i:i + 6]) for i in range(0, len(acp_lines), 6)],
        "cwx_reference": [bytes([p]) + b"\xff".join(payloads[i:i + 5])
                          for i in range(0, len(payloads), 5) for p in (0, 1)],
    }
    for target, items in seeds.items():
        d = OUT / target
        d.mkdir(parents=True, exist_ok=True)
        keep = set()
        for item in items:
            name = "seed-" + hashlib.sha1(item).hexdigest()[:16]
            keep.add(name)
            (d / name).write_bytes(item)
        for old in d.glob("seed-*"):
            if old.name not in keep:
                old.unlink()
        print(f"{target}: {len(keep)} seeds")


if __name__ == "__main__":
    main()
