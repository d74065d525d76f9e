#!/usr/bin/env python3
"""The logic of conform's GitHub Action (action.yml), tested by tests/action.rs.

Runs `conform run` once with the action's inputs, writing the Markdown
report (for the job summary), the JSON report (for the outputs) and the
other formats asked for into the report directory; appends the Markdown to
$GITHUB_STEP_SUMMARY; writes the verdict, the counts and the report paths
to $GITHUB_OUTPUT; and exits with conform's exit status.

Inputs come as environment variables, as action.yml passes them:
CONFORM_BIN (the conform to run), INPUT_PROTOCOL, INPUT_ROLE, INPUT_TARGET
(one a line), INPUT_ARGS (shell words), INPUT_EXPECTED_FAILURES,
INPUT_FORMATS, INPUT_REPORT_DIR. Standard library only.
"""

import collections
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid

# Each format's file in the report directory.
FILES = {
    "json": "conform.json",
    "junit": "conform.xml",
    "html": "conform.html",
    "markdown": "conform.md",
    "human": "conform.txt",
}

COUNTS = ["total", "passed", "failed", "warned", "info", "skipped", "errors",
          "waived", "stale", "unexercised"]

# GitHub keeps at most 1 MiB of summary per step.
SUMMARY_LIMIT = 900 * 1024


def env(name, default=""):
    return os.environ.get(name, default).strip()


def write_outputs(outputs):
    """Appends `outputs` to $GITHUB_OUTPUT (printed when it is not set)."""
    path = os.environ.get("GITHUB_OUTPUT")
    if not path:
        for k, v in outputs.items():
            print(f"{k}={v}")
        return
    with open(path, "a", encoding="utf-8") as f:
        for k, v in outputs.items():
            # The multi-line form, so no value can add an output of its own.
            delimiter = f"conform_{uuid.uuid4().hex}"
            f.write(f"{k}<<{delimiter}\n{v}\n{delimiter}\n")


def write_summary(text):
    """Appends `text` to the job summary (printed when it is not set)."""
    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        print(text)
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(text)


def capped(markdown, name):
    data = markdown.encode("utf-8")
    if len(data) <= SUMMARY_LIMIT:
        return markdown
    cut = data[:SUMMARY_LIMIT].decode("utf-8", errors="ignore")
    cut = cut[: cut.rfind("\n") + 1]
    return (cut + "\n\n*The report goes on: the job summary holds 1 MiB. "
            f"The whole of it is `{name}` in the report directory.*\n")


def verdict(code, summary):
    """pass, fail, incomplete, error or interrupted, from the exit status
    and the report's summary."""
    if code in (130, 143):
        return "interrupted"
    if code == 0:
        return "pass"
    if code == 1 and summary is not None:
        unwaived = summary.get("failed", 0) - summary.get("waived", 0)
        if (unwaived <= 0 and summary.get("errors", 0) == 0
                and summary.get("stale", 0) == 0 and summary.get("unexercised", 0) > 0):
            return "incomplete"
        return "fail"
    return "error"


def fail_early(message, outputs):
    """An input conform would refuse anyway, said before building anything."""
    print(f"conform action: {message}", file=sys.stderr)
    write_summary(f"## conform could not run\n\n{message}\n")
    outputs.update({"verdict": "error", "exit-code": "2"})
    write_outputs(outputs)
    return 2


def main():
    conform = env("CONFORM_BIN", "conform")
    report_dir = os.path.abspath(env("INPUT_REPORT_DIR", "conform-reports") or "conform-reports")
    outputs = {"report-dir": report_dir}
    protocol = env("INPUT_PROTOCOL")
    if not protocol:
        return fail_early("the `protocol` input is required (agent-socket, cwx or acp)", outputs)
    formats = [f.lower() for f in re.split(r"[\s,]+", env("INPUT_FORMATS")) if f]
    unknown = [f for f in formats if f not in FILES]
    if unknown:
        return fail_early(f"unknown report formats {unknown}: the formats are {sorted(FILES)}",
                          outputs)
    try:
        extra = shlex.split(env("INPUT_ARGS"))
    except ValueError as e:
        return fail_early(f"the `args` input is not shell words: {e}", outputs)
    os.makedirs(report_dir, exist_ok=True)
    path = {f: os.path.join(report_dir, FILES[f]) for f in FILES}
    # Markdown for the summary and JSON for the outputs, whatever is asked.
    keep = ["markdown", "json"] + [f for f in formats if f not in ("markdown", "json")]

    cmd = [conform, "run", "--protocol", protocol]
    if env("INPUT_ROLE"):
        cmd += ["--role", env("INPUT_ROLE")]
    for target in env("INPUT_TARGET", "builtin").splitlines():
        if target.strip():
            cmd += ["--target", target.strip()]
    if env("INPUT_EXPECTED_FAILURES"):
        cmd += ["--expected-failures", env("INPUT_EXPECTED_FAILURES")]
    cmd += ["--format", "markdown", "--output", path["markdown"]]
    for f in keep[1:]:
        cmd += ["--report", f"{f}={path[f]}"]
    cmd += extra
    for f in keep:
        # A report of an earlier run must not pass for this one's.
        if os.path.exists(path[f]):
            os.remove(path[f])
    print("conform action: " + shlex.join(cmd), file=sys.stderr, flush=True)

    try:
        child = subprocess.Popen(cmd, stderr=subprocess.PIPE)
    except OSError as e:
        return fail_early(f"cannot start {conform}: {e}", outputs)
    # A cancelled job signals this script; conform gets the signal too, and
    # writes the report of what finished before it exits.
    def forward(signum, _frame):
        try:
            child.send_signal(signum)
        except OSError:
            pass
    for s in (signal.SIGINT, signal.SIGTERM):
        signal.signal(s, forward)
    tail = collections.deque(maxlen=40)
    for raw in child.stderr:
        line = raw.decode("utf-8", errors="replace")
        sys.stderr.write(line)
        sys.stderr.flush()
        tail.append(line)
    code = child.wait()

    report = None
    if os.path.exists(path["json"]):
        try:
            with open(path["json"], encoding="utf-8") as f:
                report = json.load(f)
        except (OSError, ValueError) as e:
            print(f"conform action: cannot read {path['json']}: {e}", file=sys.stderr)
    summary = report.get("summary") if isinstance(report, dict) else None
    outputs["verdict"] = verdict(code, summary)
    outputs["exit-code"] = str(code)
    for k in COUNTS:
        outputs[k] = str((summary or {}).get(k, 0))
    for f in keep:
        if os.path.exists(path[f]):
            outputs[f"{f}-report"] = path[f]

    if os.path.exists(path["markdown"]):
        with open(path["markdown"], encoding="utf-8") as f:
            markdown = f.read()
        write_summary(f"**conform verdict: {outputs['verdict']}** (exit {code})\n\n"
                      + capped(markdown, FILES["markdown"]) + "\n")
    else:
        write_summary(
            f"## conform could not run (exit {code})\n\n"
            "A wrong command line, a bad case or expected-failures file, or a target that "
            "could not be started. conform said:\n\n```\n" + "".join(tail) + "```\n")
    write_outputs(outputs)
    return code


if __name__ == "__main__":
    sys.exit(main())
