//! The false findings the fuzz oracles once made, kept as case files in
//! `tests/fuzz_regressions/`, run against each protocol's reference in
//! memory as it is and bent into every other legal reading of its input:
//! the byte-order mark ignored, a duplicated id read by its first member,
//! ids written back as the whole numbers they are (as a JavaScript peer
//! writes them). Each case passes every one of them. (tests/fuzz.rs runs the
//! same files against the independent fixtures, as processes.)

use super::readings::{BOM, How, Readings};
use crate::outcome::{CaseResult, Outcome};
use crate::protocols::{acp, agent_socket, cwx};
use crate::transport::serve::{AfterRefusal, Out, Served, serve};
use crate::transport::stdio::{Launcher, Pipes};
use crate::wire::{Codec, Refused};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a bent peer reads a message before its reference sees it.
type Read = fn(&[u8]) -> Vec<u8>;
/// What a bent peer does to each message its reference writes.
type Write = fn(&mut Value);

fn as_written(m: &[u8]) -> Vec<u8> {
    m.to_vec()
}

/// RFC 8259 8.1: a reader that ignores a leading byte-order mark.
fn bom_ignored(m: &[u8]) -> Vec<u8> {
    m.strip_prefix(BOM).unwrap_or(m).to_vec()
}

/// RFC 8259 4: a reader that keeps the first of duplicated ids.
fn first_id(m: &[u8]) -> Vec<u8> {
    let Some(r) = Readings::of(m) else {
        return m.to_vec();
    };
    match r.objects.iter().find(|o| o.how == How::FirstDuplicate) {
        Some(o) => {
            let mut v = o.value();
            if let (Value::Object(map), Some(id)) = (&mut v, &o.id) {
                map.insert("id".into(), id.to_value());
            }
            v.to_string().into_bytes()
        }
        None => m.to_vec(),
    }
}

fn unchanged(_: &mut Value) {}

/// A writer whose numbers are doubles, as JavaScript's: an id that is a
/// whole number comes back without a fraction or a sign on zero.
fn whole_numbers(v: &mut Value) {
    if let Some(id) = v.get_mut("id")
        && let Some(f) = id.as_f64()
        && id.is_f64()
        && f.fract() == 0.0
        && f.abs() < 9e15
    {
        *id = Value::from(f as i64);
    }
}

/// The readings each case must pass under.
const BENDS: &[(&str, Read, Write)] = &[
    ("as written", as_written, unchanged),
    (
        "byte-order mark ignored, whole numbers",
        bom_ignored,
        whole_numbers,
    ),
    ("first of duplicated ids", first_id, unchanged),
];

/// A served reference that reads and writes as a bend says.
struct Bent<S> {
    inner: S,
    read: Read,
    write: Write,
}

impl<S> Bent<S> {
    fn bent(&self, out: Vec<Out>) -> Vec<Out> {
        out.into_iter()
            .map(|o| match o {
                Out::Message(mut m) => {
                    (self.write)(&mut m);
                    Out::Message(m)
                }
                raw => raw,
            })
            .collect()
    }
}

impl<S: Served> Served for Bent<S> {
    fn codec(&self) -> Codec {
        self.inner.codec()
    }
    fn greet(&mut self, now: Instant) -> Vec<Out> {
        let out = self.inner.greet(now);
        self.bent(out)
    }
    fn handle(&mut self, payload: &[u8], now: Instant) -> Vec<Out> {
        let read = (self.read)(payload);
        let out = self.inner.handle(&read, now);
        self.bent(out)
    }
    fn refused(&mut self, why: &Refused, now: Instant) -> (Vec<Out>, AfterRefusal) {
        let (out, then) = self.inner.refused(why, now);
        (self.bent(out), then)
    }
    fn next_deadline(&self) -> Option<Instant> {
        self.inner.next_deadline()
    }
    fn tick(&mut self, now: Instant) -> Vec<Out> {
        let out = self.inner.tick(now);
        self.bent(out)
    }
    fn done(&self) -> bool {
        self.inner.done()
    }
}

/// A stdio reference in memory, `make()` bent.
fn launcher<S: Served + 'static>(make: fn() -> S, read: Read, write: Write) -> Launcher {
    Launcher::Memory(Arc::new(move |pipes: Pipes| {
        let mut peer = Bent {
            inner: make(),
            read,
            write,
        };
        Box::pin(async move {
            let _ = serve(&mut peer, pipes.input, pipes.output).await;
        })
    }))
}

fn cases<D: crate::case::Dialect>(file: &str) -> Vec<crate::case::Case<D>> {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(file);
    let text = std::fs::read_to_string(&path).unwrap();
    let cases = crate::case::parse_cases::<D>(file, &text).unwrap();
    assert!(!cases.is_empty(), "{file} has cases");
    cases
}

fn passed(r: &CaseResult, bend: &str) {
    assert!(
        matches!(r.outcome, Outcome::Pass | Outcome::Info) && r.findings.is_empty(),
        "{} under the reading `{bend}`: {}\n{:#?}",
        r.id,
        r.message,
        r.transcript
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_socket_regressions_pass_every_reading() {
    use agent_socket::reference::{Action, Config, handle_line};
    use tokio::io::AsyncWriteExt;
    let dir = tempfile::tempdir().unwrap();
    let config = Arc::new(Config {
        workspace: dir.path().to_path_buf(),
        python: "python3".into(),
    });
    for (bend, read, write) in BENDS {
        let config = config.clone();
        let connector = crate::transport::unix::Connector::Memory(Arc::new(move |mut stream| {
            let config = config.clone();
            tokio::spawn(async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
                let crate::transport::unix::ReadOutcome::Line { line, .. } =
                    crate::transport::unix::read_line(&mut stream, 1 << 20, deadline).await
                else {
                    return;
                };
                if let Action::Reply(mut reply) = handle_line(&config, &read(&line)) {
                    write(&mut reply);
                    let mut bytes = reply.to_string().into_bytes();
                    bytes.push(b'\n');
                    let _ = stream.write_all(&bytes).await;
                    let _ = stream.shutdown().await;
                }
            });
        }));
        let mut session = agent_socket::driver::Session::new(connector, None, false);
        session.handshake().await;
        for case in cases::<agent_socket::ServerCases>("agent-socket.json") {
            passed(&session.run_case(&case).await, bend);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_regressions_pass_every_reading() {
    let startup = Duration::from_secs(10);
    for (bend, read, write) in BENDS {
        let launcher = launcher(acp::reference::Agent::new, *read, *write);
        let ctx = acp::driver::Context::isolated(launcher, startup)
            .await
            .unwrap();
        for case in cases::<acp::AgentCases>("acp.json") {
            passed(&ctx.run_case(&case).await, bend);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cwx_regressions_pass_every_reading() {
    fn plugin_host() -> cwx::reference::Host {
        cwx::reference::Host::new(cwx::table::Tier::Plugin)
    }
    for (bend, read, write) in BENDS {
        let ctx = cwx::driver::Context {
            launcher: launcher(plugin_host, *read, *write),
            tier: cwx::table::Tier::Plugin,
            strict: false,
            extension: None,
            startup: Duration::from_secs(10),
        };
        for case in cases::<cwx::HostCases>("cwx.json") {
            passed(&ctx.run_case(&case).await, bend);
        }
    }
}

/// Seed 11's input 28 (issue 26), replayed to the point where it once
/// failed: `session/new` with a null id, then an update of the session its
/// null-id result gave (the reference names its sessions
/// `ref-<pid>-<n>`, and runs in this process). "MUST contain a String,
/// Number, or NULL value if included": the result is session/new's, and
/// the session is one the agent gave.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acp_a_null_id_session_new_gives_a_known_session() {
    let session = format!("ref-{}-1", std::process::id());
    let case = serde_json::json!({"cases": [{
        "id": "acp/fuzz-regression/null-id-then-update",
        "title": "a null-id session/new, then an update of its session",
        "level": "MUST",
        "requirements": ["acp.session.known-id"],
        "config": {"setup": "initialize"},
        "steps": [
            {"raw": format!(
                "{}\n{}\n",
                r#"{"jsonrpc":"2.0","id":null,"method":"session/new","params":{"cwd":"${workspace}","mcpServers":[]}}"#,
                serde_json::json!({"jsonrpc": "2.0", "id": "fuzz-mode", "method": "session/set_mode",
                    "params": {"sessionId": session, "modeId": "ask"}})
            )},
            {"probe": true}
        ]
    }]});
    let cases = crate::case::parse_cases::<acp::AgentCases>("null-id", &case.to_string()).unwrap();
    let launcher = launcher(acp::reference::Agent::new, as_written, unchanged);
    let ctx = acp::driver::Context::isolated(launcher, Duration::from_secs(10))
        .await
        .unwrap();
    let r = ctx.run_case(&cases[0]).await;
    assert!(
        r.transcript
            .iter()
            .any(|e| e.data.contains("current_mode_update") && e.data.contains(&session)),
        "the reference updated the session: {:#?}",
        r.transcript
    );
    passed(&r, "as written");
}
