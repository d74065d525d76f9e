//! conform's figures (issue 8), printed with the machine they were taken on:
//!
//! 1. exchange overhead: conform running a one-exchange case N times against
//!    the builtin agent-socket server (in process) and the builtin ACP agent
//!    (a process per case), against a minimal raw client doing the same
//!    exchange on the same target in the same run; the ratio of medians;
//! 2. suite time: each default suite against its builtin reference, `-j 1`
//!    and the default `-j`;
//! 3. fuzz throughput: inputs a second of `conform fuzz` per protocol;
//! 4. memory: peak resident memory of each full run (`/usr/bin/time -v`);
//! 5. a slow-starting agent: the ACP suite against the builtin agent behind
//!    an added 2 s start-up delay, beside the same without it, with the
//!    processes shared by the cases that need only a fresh session (the
//!    default) and with `--isolate` (`-- slow` measures this one alone).
//!
//! Run: `cargo bench --bench figures` (it builds the release binary first).
//! Rounds interleave conform and the raw client so the machine's load falls
//! on both alike; medians, not means, because the machine is shared.

use conform::case::{Case, parse_cases};
use conform::protocols::{acp, agent_socket};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_else(|| "unknown cpu".into());
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines()
                .find(|l| l.starts_with("MemTotal"))
                .map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned())
        })
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or("?".into(), |kb| format!("{:.0} GiB", kb as f64 / 1048576.0));
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let rustc = Command::new("rustc")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .unwrap_or_default();
    format!(
        "{cpu}, {cores} cores, {mem}, {rustc}, load average {}",
        load.split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// The release binary, built if need be.
fn binary() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let status = Command::new(env!("CARGO"))
        .args(["build", "--release", "--quiet", "--bin", "conform"])
        .current_dir(root)
        .status()
        .expect("cargo runs");
    assert!(status.success(), "the release build failed");
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    target.join("release/conform")
}

fn one_case<D: conform::case::Dialect>(json: &str) -> Case<D> {
    parse_cases::<D>("bench", json)
        .expect("the bench case parses")
        .remove(0)
}

/// Raw: connect, write one request line, read one reply line, close.
async fn raw_exchange(socket: &Path, line: &[u8]) {
    let mut s = tokio::net::UnixStream::connect(socket)
        .await
        .expect("connect");
    s.write_all(line).await.expect("write");
    let mut reply = String::new();
    BufReader::new(s).read_line(&mut reply).await.expect("read");
    assert!(reply.ends_with('\n'));
}

async fn agent_socket_overhead(n: usize, rounds: usize) -> (f64, f64) {
    agent_socket_sides(n, rounds, true, true).await
}

/// conform's exchanges (`ours`) and the raw client's (`raw`), each side
/// measured only when asked for.
async fn agent_socket_sides(n: usize, rounds: usize, ours_on: bool, raw_on: bool) -> (f64, f64) {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let socket = dir.path().join("agent.sock");
    let (task, running) = agent_socket::start_reference(&socket, dir.path())
        .await
        .expect("the builtin server listens");
    let mut session = agent_socket::driver::Session::new(
        conform::transport::unix::Connector::Unix(socket.clone()),
        None,
        false,
    );
    session.handshake().await;
    let case: Case<agent_socket::ServerCases> = one_case(
        r#"{"id":"bench/read-file","title":"one readFile","level":"MUST","requirements":["as.read.missing"],
            "steps":[{"send":{"method":"sandbox/readFile","params":{"path":"/nonexistent/conform-bench","maxBytes":1024}},
                      "expect":{"result":{"contentBase64":null}}}]}"#,
    );
    let line = br#"{"jsonrpc":"2.0","id":1,"method":"sandbox/readFile","params":{"path":"/nonexistent/conform-bench","maxBytes":1024}}
"#;
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..if ours_on { n } else { 0 } {
            let r = session.run_case(&case).await;
            assert_eq!(r.outcome, conform::outcome::Outcome::Pass, "{}", r.message);
        }
        ours.push(t.elapsed().as_secs_f64() / n as f64);
        let t = Instant::now();
        for _ in 0..if raw_on { n } else { 0 } {
            raw_exchange(&socket, line).await;
        }
        raw.push(t.elapsed().as_secs_f64() / n as f64);
    }
    task.abort();
    running.kill_all();
    (median(ours), median(raw))
}

/// Raw: start the agent, initialize, `n` session/new each awaited, close
/// stdin, wait for the agent to exit.
async fn raw_acp(command: &str, workspace: &str, n: usize) {
    let mut child = tokio::process::Command::new("/bin/sh")
        .args(["-c", command])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the agent starts");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut out = BufReader::new(child.stdout.take().expect("stdout"));
    let mut reply = String::new();
    stdin
        .write_all(
            b"{\"jsonrpc\":\"2.0\",\"id\":0,\"method\":\"initialize\",\"params\":{\"protocolVersion\":1,\"clientCapabilities\":{}}}\n",
        )
        .await
        .expect("write");
    out.read_line(&mut reply).await.expect("read");
    for i in 1..=n {
        let line = format!(
            "{{\"jsonrpc\":\"2.0\",\"id\":{i},\"method\":\"session/new\",\"params\":{{\"cwd\":{workspace:?},\"mcpServers\":[]}}}}\n"
        );
        stdin.write_all(line.as_bytes()).await.expect("write");
        reply.clear();
        out.read_line(&mut reply).await.expect("read");
    }
    drop(stdin);
    child.wait().await.expect("the agent exits");
}

/// conform's ACP case of `n` session/new exchanges after initialize, and the
/// raw client doing the same on the same agent; seconds per exchange. A
/// case of one exchange gives the fixed cost of a case (a fresh agent).
async fn acp_overhead(bin: &Path, n: usize, rounds: usize) -> (f64, f64) {
    let command = format!(
        "exec {} reference --protocol acp",
        conform::matcher::shell_quote(&bin.display().to_string())
    );
    let launcher = conform::transport::stdio::Launcher::Command(command.clone());
    let (probe, first) = acp::driver::probe(&launcher, Duration::from_secs(10))
        .await
        .expect("the builtin agent answers");
    if let Some(c) = first {
        c.close().await;
    }
    let book = acp::prompts::Book::builtin().expect("the prompt book");
    // A fresh agent for each case, as the case measured needs.
    let ctx =
        acp::driver::Context::new(launcher, false, probe, Duration::from_secs(10), book, true);
    let step = r#"{"send":{"method":"session/new","params":{"cwd":"${workspace}","mcpServers":[]}},"expect":{"result":{"sessionId":{"$type":"string"}}}}"#;
    let steps = vec![step; n].join(",");
    let case: Case<acp::AgentCases> = one_case(&format!(
        r#"{{"id":"bench/sessions","title":"n session/new","level":"MUST","requirements":["acp.session.unique-session-id"],
            "config":{{"setup":"initialize"}},"steps":[{steps}]}}"#
    ));
    let workspace = tempfile::tempdir().expect("a workspace");
    let ws = workspace.path().display().to_string();
    let (mut ours, mut raw) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let t = Instant::now();
        let r = ctx.run_case(&case).await;
        assert_eq!(r.outcome, conform::outcome::Outcome::Pass, "{}", r.message);
        ours.push(t.elapsed().as_secs_f64() / n as f64);
        let t = Instant::now();
        raw_acp(&command, &ws, n).await;
        raw.push(t.elapsed().as_secs_f64() / n as f64);
    }
    (median(ours), median(raw))
}

/// Wall time, peak RSS (KiB, when /usr/bin/time is there) and output
/// (stdout then stderr) of `bin args`.
fn timed(bin: &Path, args: &[&str]) -> (f64, Option<u64>, String) {
    let time = Path::new("/usr/bin/time");
    let t = Instant::now();
    let out = if time.exists() {
        Command::new(time).arg("-v").arg(bin).args(args).output()
    } else {
        Command::new(bin).args(args).output()
    }
    .expect("conform runs");
    let wall = t.elapsed().as_secs_f64();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let rss = stderr
        .lines()
        .find(|l| l.contains("Maximum resident set size"))
        .and_then(|l| l.split(':').nth(1))
        .and_then(|v| v.trim().parse().ok());
    let text = format!("{}{stderr}", String::from_utf8_lossy(&out.stdout));
    (wall, rss, text)
}

fn main() {
    // `cargo bench` passes --bench; `-- overhead` measures figure 1 only
    // (to compare two builds quickly). `-- callgrind ours|raw|none` makes
    // 200 agent-socket exchanges of one side (or none: the set-up alone) on
    // one thread, to count instructions under `valgrind --tool=callgrind`.
    let args: Vec<String> = std::env::args().collect();
    let only_overhead = args.iter().any(|a| a == "overhead");
    if args.iter().any(|a| a == "slow") {
        println!("machine: {}", machine());
        slow_start(&binary());
        return;
    }
    if let Some(i) = args.iter().position(|a| a == "callgrind") {
        let side = args.get(i + 1).map_or("ours", String::as_str);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let (ours, raw) = rt.block_on(agent_socket_sides(200, 1, side == "ours", side == "raw"));
        println!("agent-socket, 200 exchanges ({side}): conform {ours:.6} s, raw {raw:.6} s");
        return;
    }
    println!("machine: {}", machine());
    let bin = binary();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");

    println!("\n1. exchange overhead (median per exchange; conform / raw client, goal <= 1.25)");
    let (ours, raw) = rt.block_on(agent_socket_overhead(2000, 7));
    println!(
        "   agent-socket readFile, builtin server, 7 rounds of 2000: conform {:.1} us, raw {:.1} us, ratio {:.2}",
        ours * 1e6,
        raw * 1e6,
        ours / raw
    );
    let (ours, raw) = rt.block_on(acp_overhead(&bin, 500, 7));
    println!(
        "   acp session/new, builtin agent, 7 rounds of one session of 500: conform {:.1} us, raw {:.1} us, ratio {:.2}",
        ours * 1e6,
        raw * 1e6,
        ours / raw
    );
    let (ours, raw) = rt.block_on(acp_overhead(&bin, 1, 21));
    println!(
        "   acp case of one exchange (a fresh agent each, its start and end included), 21 rounds: conform {:.1} ms, raw {:.1} ms, ratio {:.2}",
        ours * 1e3,
        raw * 1e3,
        ours / raw
    );

    if only_overhead {
        return;
    }

    println!("\n2. suite time against the builtin references (wall, seconds)");
    let mut memory = Vec::new();
    for protocol in ["agent-socket", "acp", "cwx"] {
        let (serial, _, _) = timed(
            &bin,
            &[
                "run",
                "--protocol",
                protocol,
                "-j",
                "1",
                "--format",
                "json",
                "--output",
                "/dev/null",
            ],
        );
        let (parallel, rss, _) = timed(
            &bin,
            &[
                "run",
                "--protocol",
                protocol,
                "--format",
                "json",
                "--output",
                "/dev/null",
            ],
        );
        println!("   {protocol:<13} -j 1: {serial:>6.1}   default -j: {parallel:>6.1}");
        memory.push((format!("full {protocol} run"), rss));
    }

    println!(
        "\n3. fuzz throughput (inputs a second, 10 s each, builtin targets; acp and cwx on live targets)"
    );
    let mut rates: Vec<(&str, Option<f64>)> = Vec::new();
    for protocol in ["agent-socket", "acp", "cwx"] {
        let (_, rss, output) = timed(
            &bin,
            &[
                "fuzz",
                "--protocol",
                protocol,
                "--duration",
                "10",
                "--seed",
                "1",
                "--out",
                "/tmp/conform-bench-findings",
            ],
        );
        let rate = output.lines().find_map(|l| {
            let open = l.rfind('(')?;
            let close = l[open..].find("/s)")?;
            l[open + 1..open + close].parse::<f64>().ok()
        });
        println!(
            "   {protocol:<13} {}/s",
            rate.map_or("?".into(), |r| format!("{r:.0}"))
        );
        rates.push((protocol, rate));
        memory.push((format!("fuzz {protocol} 10 s"), rss));
    }
    // Issue 19's goals: each stdio protocol at 1 000 inputs a second, and at
    // a fifth of agent-socket's rate measured in the same run.
    if let [(_, Some(socket)), rest @ ..] = rates.as_slice() {
        for (protocol, rate) in rest {
            if let Some(r) = rate {
                println!(
                    "   {protocol:<13} {:.2} of agent-socket's rate (goal 0.20), {:.0}/s of 1 000/s",
                    r / socket,
                    r
                );
            }
        }
    }

    println!("\n4. peak resident memory (/usr/bin/time -v)");
    for (what, rss) in memory {
        match rss {
            Some(kb) => println!("   {what:<24} {:.1} MiB", kb as f64 / 1024.0),
            None => println!("   {what:<24} (no /usr/bin/time here)"),
        }
    }
    println!("   hostile targets: see tests/hostile.rs (each asserts under 128 MiB)");
    slow_start(&bin);
}

/// Figure 5: the ACP suite (default `-j`) against the builtin agent started
/// at once and behind `sleep 2`, with shared processes and `--isolate`;
/// wall seconds and the agent processes the run says it started.
fn slow_start(bin: &Path) {
    println!(
        "\n5. ACP suite against a slow-starting agent (default -j; wall seconds, agent processes)"
    );
    let agent = format!(
        "{} reference --protocol acp",
        conform::matcher::shell_quote(&bin.display().to_string())
    );
    let report = std::env::temp_dir().join(format!("conform-bench-{}.json", std::process::id()));
    for (label, delay) in [("no delay", ""), ("2 s start-up", "sleep 2; ")] {
        for isolate in [false, true] {
            let target = format!("exec:{delay}exec {agent}");
            let mut args = vec![
                "run",
                "--protocol",
                "acp",
                "--target",
                &target,
                "--startup-timeout",
                "30",
                "--format",
                "json",
                "--output",
            ];
            let out = report.display().to_string();
            args.push(&out);
            if isolate {
                args.push("--isolate");
            }
            let (secs, _, _) = timed(bin, &args);
            let json: serde_json::Value = std::fs::read(&report)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            let started = json["notes"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|n| n.as_str())
                .find_map(|n| n.strip_prefix("the run started "))
                .and_then(|n| n.split(' ').next())
                .unwrap_or("?")
                .to_owned();
            let summary = &json["summary"];
            println!(
                "   {label:<13} {:<9} {secs:>6.1} s, {started:>3} processes, {} passed of {}",
                if isolate { "--isolate" } else { "shared" },
                summary["passed"],
                summary["total"]
            );
        }
    }
    let _ = std::fs::remove_file(&report);
}
