#!/usr/bin/env python3
"""Validates every JSON example of the ACP v1 pages against the schema.

Each ```json block of docs/protocol/v1/*.mdx that parses is read as the
message it shows: a request or notification is checked against its
method's params definition, a response against the result definition of
the request with the same id shown before it on the page (the pages show
a request, then its answer). Every disagreement is printed, page and line
first: where the pages and the schema disagree, conform accepts both
readings and reports the disagreement as information (docs/acp.md, "Where the
sources disagree").

Usage: scripts/check_doc_examples.py [PAGES_DIR] [SCHEMA]
Needs the `jsonschema` package (pip install jsonschema). Exit 1 when any
example breaks the schema, 0 when none does.
"""

import glob
import json
import os
import re
import sys

import jsonschema

HERE = os.path.dirname(os.path.abspath(__file__))
PAGES = sys.argv[1] if len(sys.argv) > 1 else "docs/protocol/v1"
SCHEMA = sys.argv[2] if len(sys.argv) > 2 else os.path.join(HERE, "..", "corpus", "acp", "schema.json")

BLOCK = re.compile(r"^```json[^\n]*\n(.*?)^```", re.S | re.M)


def methods(schema):
    """method -> (params definition, result definition or None)."""
    out = {}
    for name, d in schema["$defs"].items():
        m = d.get("x-method")
        if not m:
            continue
        params, result = out.get(m, (None, None))
        if name.endswith("Response"):
            result = name
        else:
            params = name
        out[m] = (params, result)
    return out


def check(schema, definition, value):
    doc = {"$ref": f"#/$defs/{definition}", "$defs": schema["$defs"]}
    v = jsonschema.Draft202012Validator(doc)
    return sorted(e.message for e in v.iter_errors(value))


def main():
    schema = json.load(open(SCHEMA))
    table = methods(schema)
    disagreements = 0
    checked = unparsed = 0
    for page in sorted(glob.glob(os.path.join(PAGES, "*.mdx"))):
        text = open(page).read()
        asked = {}  # id -> method, of the requests shown so far
        for block in BLOCK.finditer(text):
            line = text.count("\n", 0, block.start()) + 1
            try:
                msg = json.loads(block.group(1))
            except ValueError:
                unparsed += 1
                continue
            if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0":
                continue
            method = msg.get("method")
            if method is not None:
                if "id" in msg:
                    asked[json.dumps(msg["id"])] = method
                definition = table.get(method, (None, None))[0]
                value = msg.get("params")
                what = f"{method} {'request' if 'id' in msg else 'notification'} params"
            elif "result" in msg:
                method = asked.get(json.dumps(msg.get("id")))
                definition = table.get(method, (None, None))[1]
                value = msg["result"]
                what = f"{method} result"
            else:
                continue
            if definition is None:
                continue
            checked += 1
            errors = check(schema, definition, value)
            if errors:
                disagreements += 1
                shown = json.dumps(value)
                print(f"{os.path.basename(page)}:{line}: the {what} {shown[:80]} breaks {definition}: {'; '.join(errors)[:300]}")
    print(f"{checked} examples checked, {disagreements} disagree with the schema, {unparsed} blocks are not JSON", file=sys.stderr)
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
