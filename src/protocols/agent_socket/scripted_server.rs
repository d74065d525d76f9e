//! `--role client`: conform serves a scripted agent socket in a fresh 0700
//! directory, starts the client under test against it once per case, and
//! records every connection for [`scripted::grade`]. The IO half; the
//! answers and the grading are sans-IO in [`scripted`].

use super::scripted::{self, ClientEnd, Exchange, Observation, Script};
use super::{reference, reference_client};
use crate::case::Case;
use crate::error::RunError;
use crate::evidence::Evidence;
use crate::matcher::shell_quote;
use crate::outcome::{CaseResult, Direction, RunReport, Transcript, TranscriptEntry};
use crate::peer::{PeerScript, Reach};
use crate::runner;
use crate::target::Target;
use crate::transport::process::{self, Stdio3};
use crate::transport::unix::{self, Connector, ReadOutcome};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::UnixListener;
use tokio::task::JoinSet;
use tokio::time::Instant;

/// The most connections one case accepts; a client opening more is cut off.
const MAX_CONNECTIONS: usize = 256;
/// How long conform lets connections settle after the client ended.
const SETTLE: Duration = Duration::from_millis(300);

/// Runs the client `cases` and reports.
pub async fn run(
    options: &crate::suite::RunOptions,
    cases: Vec<Case<super::ClientCases>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    if let Target::Unix(_) = options.target {
        return Err(RunError::Usage(
            "--role client tests a client conform starts: --target builtin or exec:<command line> with {socket}".into(),
        ));
    }
    let reach = Arc::new(Reach::default());
    let ctx = (
        options.target.clone(),
        reference::find_python(),
        options.strict,
        reach.clone(),
    );
    let results = runner::run_with(cases, options.jobs, ctx, run_nth, progress).await;
    reach.verdict("client", "socket", results.len())?;
    Ok(super::CLIENT.report(options, results, vec![]))
}

/// The shared record of one case.
#[derive(Clone)]
struct Record {
    started: Instant,
    /// Orders the events of all connections (see [`Exchange::opened_seq`]).
    events: Arc<std::sync::atomic::AtomicU64>,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
    transcript: Arc<Mutex<Transcript>>,
    /// What the client said of itself, last.
    said: Arc<Mutex<String>>,
}

impl Record {
    fn ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    fn seq(&self) -> u64 {
        self.events
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst)
            + 1
    }

    fn log(&self, conn: usize, dir: Direction, bytes: &[u8]) {
        self.log_as(format!("c{conn}"), dir, bytes);
    }

    /// What the client said of itself (its stderr, the reference's log).
    fn log_client(&self, text: &str) {
        if let Ok(mut said) = self.said.lock() {
            text.trim_start_matches("stderr:\n").clone_into(&mut said);
        }
        self.log_as("client".into(), Direction::Event, text.as_bytes());
    }

    fn said(&self) -> String {
        self.said.lock().map(|s| s.clone()).unwrap_or_default()
    }

    fn log_as(&self, conn: String, dir: Direction, bytes: &[u8]) {
        if let Ok(mut t) = self.transcript.lock() {
            t.log(&conn, dir, bytes);
        }
    }

    fn new(started: Instant) -> Record {
        Record {
            started,
            events: Arc::default(),
            exchanges: Arc::default(),
            transcript: Arc::new(Mutex::new(Transcript::new(started))),
            said: Arc::default(),
        }
    }

    /// A new connection's exchange; `None` past [`MAX_CONNECTIONS`].
    fn open(&self) -> Option<usize> {
        let mut all = self.exchanges.lock().ok()?;
        if all.len() >= MAX_CONNECTIONS {
            return None;
        }
        all.push(Exchange {
            opened_ms: self.ms(),
            opened_seq: self.seq(),
            ..Exchange::default()
        });
        Some(all.len() - 1)
    }

    /// What conform saw of the client, once it ended as `end`.
    fn observation(&self, end: ClientEnd) -> Observation {
        let mut exchanges = self.exchanges.lock().map(|e| e.clone()).unwrap_or_default();
        if let ClientEnd::Stopped { ms } = end {
            // Closes that came of conform stopping the client are not the client's.
            for e in &mut exchanges {
                e.closed_ms = e.closed_ms.filter(|c| *c <= ms);
            }
        }
        Observation { exchanges, end }
    }

    fn transcript(&self) -> Vec<TranscriptEntry> {
        self.transcript
            .lock()
            .map(|t| t.entries().to_vec())
            .unwrap_or_default()
    }

    fn update(&self, conn: usize, f: impl FnOnce(&mut Exchange)) {
        if let Ok(mut all) = self.exchanges.lock()
            && let Some(e) = all.get_mut(conn)
        {
            f(e);
        }
    }
}

/// What the client did, graded.
fn graded(
    case: &Case<super::ClientCases>,
    observed: Result<(Script, Observation), String>,
    record: &Record,
    strict: bool,
) -> CaseResult {
    let evidence = match observed {
        Err(why) => Evidence::failed_to_run(why),
        Ok((script, obs)) => scripted::evidence(case, &script, &obs),
    };
    CaseResult::graded(case, evidence, strict, record.started, record.transcript())
}

async fn run_nth(
    ctx: Arc<(Target, String, bool, Arc<Reach>)>,
    cases: Arc<Vec<Case<super::ClientCases>>>,
    i: usize,
) -> CaseResult {
    let (target, python, strict, reach) = &*ctx;
    let record = Record::new(Instant::now());
    let observed = observe(&cases[i], target, python, &record).await;
    // The client reached conform's server when it connected at all.
    match &observed {
        Ok((_, obs)) => reach.saw(!obs.exchanges.is_empty(), &record.said()),
        Err(why) => reach.saw(false, why),
    }
    graded(&cases[i], observed, &record, *strict)
}

/// Runs `client` in this process against the case's scripted server over
/// in-memory connections, bounded by the case's deadline, and grades it:
/// the driver with no socket and no process (the unit tests').
pub async fn run_in_memory<F, Fut>(
    case: &Case<super::ClientCases>,
    python: &str,
    strict: bool,
    client: F,
) -> CaseResult
where
    F: FnOnce(Connector) -> Fut,
    Fut: std::future::Future<Output = (i32, Vec<String>)>,
{
    let record = Record::new(Instant::now());
    let observed = async {
        let dir = super::private_dir("conform-asc-").map_err(|e| e.to_string())?;
        let script = Arc::new(Script::new(
            &case.config,
            &dir.path().display().to_string(),
            python,
        )?);
        let deadline = record.started + Duration::from_secs_f64(case.config.deadline_seconds());
        let tasks = Arc::new(Mutex::new(Vec::new()));
        let connector = {
            let (script, record, tasks) = (script.clone(), record.clone(), tasks.clone());
            Connector::Memory(Arc::new(move |stream| {
                if let Some(index) = record.open() {
                    let t = tokio::spawn(answer(
                        stream,
                        index,
                        script.clone(),
                        record.clone(),
                        deadline,
                    ));
                    if let Ok(mut all) = tasks.lock() {
                        all.push(t);
                    }
                }
            }))
        };
        let end = match tokio::time::timeout_at(deadline, client(connector)).await {
            Ok((code, log)) => {
                record.log_client(&log.join("\n"));
                ClientEnd::Exited {
                    code: Some(code),
                    signal: None,
                    ms: record.ms(),
                }
            }
            Err(_) => ClientEnd::Stopped { ms: record.ms() },
        };
        tokio::time::sleep(SETTLE).await;
        for t in tasks
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default()
        {
            t.abort();
        }
        let script = Arc::try_unwrap(script).unwrap_or_else(|s| (*s).clone());
        Ok((script, record.observation(end)))
    }
    .await;
    graded(case, observed, &record, strict)
}

/// Serves the case's script, runs the client to its end or the case's
/// deadline, and returns what conform saw; `Err` when conform itself could
/// not run the case.
async fn observe(
    case: &Case<super::ClientCases>,
    target: &Target,
    python: &str,
    record: &Record,
) -> Result<(Script, Observation), String> {
    let config = &case.config;
    let dir = super::private_dir("conform-asc-").map_err(|e| e.to_string())?;
    let workspace = dir.path().join("workspace");
    std::fs::create_dir(&workspace).map_err(|e| format!("cannot create the workspace: {e}"))?;
    let script = Arc::new(Script::new(
        config,
        &workspace.display().to_string(),
        python,
    )?);
    let socket = dir.path().join("agent.sock");
    let listener =
        super::bind_private(&socket).map_err(|e| format!("cannot listen on a socket: {e}"))?;
    let deadline = record.started + Duration::from_secs_f64(config.deadline_seconds());
    let server = tokio::spawn(serve(listener, script.clone(), record.clone(), deadline));
    let end = run_client(target, &socket, &case.id, deadline, record).await?;
    // Let the connections see the client's closes, then stop serving.
    tokio::time::sleep(SETTLE).await;
    server.abort();
    let _ = server.await;
    drop(dir);
    let script = Arc::try_unwrap(script).unwrap_or_else(|s| (*s).clone());
    Ok((script, record.observation(end)))
}

/// Starts the client and waits for its end, bounded by `deadline`.
async fn run_client(
    target: &Target,
    socket: &Path,
    scenario: &str,
    deadline: Instant,
    record: &Record,
) -> Result<ClientEnd, String> {
    match target {
        Target::Builtin => {
            let connector = Connector::Unix(socket.to_path_buf());
            let task = tokio::spawn(async move { reference_client::run(&connector).await });
            let abort = task.abort_handle();
            match tokio::time::timeout_at(deadline, task).await {
                Ok(Ok((code, log))) => {
                    record.log_client(&log.join("\n"));
                    Ok(ClientEnd::Exited {
                        code: Some(code),
                        signal: None,
                        ms: record.ms(),
                    })
                }
                Ok(Err(e)) => Err(format!("conform's reference client failed: {e}")),
                Err(_) => {
                    abort.abort();
                    Ok(ClientEnd::Stopped { ms: record.ms() })
                }
            }
        }
        Target::Exec(cmd) => {
            let line = cmd.replace("{socket}", &shell_quote(&socket.display().to_string()));
            let mut spawned = process::spawn(
                &line,
                &[
                    ("CONFORM_SOCKET", socket.as_os_str()),
                    ("CONFORM_SCENARIO", std::ffi::OsStr::new(scenario)),
                ],
                Stdio3::CaptureOutput,
            )
            .map_err(|e| format!("cannot start `{cmd}`: {e}"))?;
            let within = deadline.saturating_duration_since(Instant::now());
            let status = spawned.wait_for_exit(within).await;
            let ms = record.ms();
            let end = match status {
                Some(s) => {
                    use std::os::unix::process::ExitStatusExt;
                    ClientEnd::Exited {
                        code: s.code(),
                        signal: s.signal(),
                        ms,
                    }
                }
                None => ClientEnd::Stopped { ms },
            };
            // Ends the whole group either way: nothing of the client outlives its case.
            let _ = spawned.shutdown(process::TERM_GRACE).await;
            let stderr = spawned.stderr_tail();
            if !stderr.trim().is_empty() {
                record.log_client(&format!("stderr:\n{stderr}"));
            }
            Ok(end)
        }
        Target::Unix(_) => Err("--role client cannot test unix: targets".into()),
    }
}

/// Accepts connections until aborted, each served by its own task.
async fn serve(listener: UnixListener, script: Arc<Script>, record: Record, deadline: Instant) {
    let mut conns = JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let Some(index) = record.open() else {
            continue;
        };
        conns.spawn(answer(
            stream,
            index,
            script.clone(),
            record.clone(),
            deadline,
        ));
    }
}

/// One connection: read the request line, answer it as scripted, then
/// watch for anything more and for the client's close.
async fn answer(
    mut stream: impl unix::Conn + 'static,
    conn: usize,
    script: Arc<Script>,
    record: Record,
    deadline: Instant,
) {
    let (line, after) =
        match unix::read_line(&mut stream, scripted::REQUEST_LIMIT_BYTES, deadline).await {
            ReadOutcome::Line { line, after } => {
                let mut line = line.into_vec();
                line.push(b'\n');
                (line, after)
            }
            ReadOutcome::TooLong { .. } => {
                record.update(conn, |e| {
                    e.overlong = true;
                    e.request_ms = Some(record.ms());
                });
                return;
            }
            ReadOutcome::Closed { partial } | ReadOutcome::Failed { partial, .. } => {
                record.log(conn, Direction::Received, &partial);
                let ms = record.ms();
                record.update(conn, |e| {
                    e.line = partial.into_vec();
                    e.request_ms = Some(ms);
                    e.closed_ms = Some(ms);
                });
                return;
            }
            ReadOutcome::TimedOut { partial } => {
                record.log(conn, Direction::Received, &partial);
                record.update(conn, |e| e.line = partial.into_vec());
                return;
            }
        };
    record.log(conn, Direction::Received, &line);
    let ms = record.ms();
    let seq = record.seq();
    let exchange = Exchange {
        line: line.clone(),
        ..Exchange::default()
    };
    let request = exchange.request();
    let method = exchange.method();
    let id = request
        .as_ref()
        .and_then(|r| r.get("id").cloned())
        .unwrap_or(serde_json::Value::Null);
    record.update(conn, |e| {
        e.line = line;
        e.request_ms = Some(ms);
        e.request_seq = seq;
        e.extra = after.clone();
    });
    let answer = script.answer(method.as_deref(), &id);
    if let Some(bytes) = &answer.bytes {
        // Ordered before the write: the client may act on the reply before
        // this task runs again.
        let ms = record.ms();
        let seq = record.seq();
        record.log(conn, Direction::Sent, bytes);
        let _ = unix::write_all(&mut stream, bytes, deadline).await;
        record.update(conn, |e| {
            e.reply = Some(bytes.clone());
            e.reply_ms = Some(ms);
            e.reply_seq = Some(seq);
        });
        if answer.close {
            let _ = stream.shutdown().await;
        }
    }
    // After a reply the client has a window to close; a silent answer
    // waits for the client to give up, until the case's deadline.
    // (past the deadline: the client is stopped and this task aborted
    // first, so a connection conform gave up on never frees the client).
    let watch_until = if answer.bytes.is_some() {
        Instant::now() + Duration::from_secs_f64(scripted::CLOSE_WINDOW_SECONDS)
    } else {
        deadline + Duration::from_secs(60)
    };
    let within = watch_until.saturating_duration_since(Instant::now());
    let (rest, closed) = unix::read_until_close(&mut stream, within, 4096).await;
    if !rest.is_empty() {
        record.log(conn, Direction::Received, &rest);
    }
    let ms = record.ms();
    record.update(conn, |e| {
        e.extra.extend_from_slice(&rest);
        if closed {
            e.closed_ms = Some(ms);
        }
    });
    if closed {
        record.log(conn, Direction::Event, b"the client closed the connection");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::evidence::Kind;
    use crate::outcome::Outcome;

    fn case(id: &str) -> Case<super::super::ClientCases> {
        crate::case::embedded(id)
    }

    fn python() -> String {
        reference::find_python()
    }

    #[tokio::test(start_paused = true)]
    async fn the_reference_client_passes_over_in_memory_connections() {
        let c = case("agent-socket/client/workload/valid");
        let r = run_in_memory(&c, &python(), false, |server| async move {
            reference_client::run(&server).await
        })
        .await;
        assert_eq!(r.outcome, Outcome::Pass, "{}", r.message);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_is_not_compact_breaks_a_typed_rule() {
        let c = case("agent-socket/client/workload/valid");
        let r = run_in_memory(&c, &python(), false, |server| async move {
            let mut conn = server.connect(Duration::from_secs(1)).await.unwrap();
            let line = b"{\"jsonrpc\": \"2.0\", \"id\": 1, \"method\": \"agent/initialize\", \"params\": {\"protocolVersion\": 2, \"vibeVersion\": \"3.0.3\"}}\n";
            let _ = conn.write_all(line).await;
            let _ = unix::read_line(&mut conn, 1 << 20, Instant::now() + Duration::from_secs(5)).await;
            (0, vec![])
        })
        .await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        let f = r
            .finding(scripted::rules::COMPACT)
            .expect("the compact rule");
        assert_eq!(f.kind, Kind::Framing);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_ends_is_stopped_at_the_case_deadline() {
        let c = case("agent-socket/client/workload/valid");
        let r = run_in_memory(&c, &python(), false, |_| std::future::pending()).await;
        assert_eq!(r.outcome, Outcome::Fail, "{}", r.message);
        assert_eq!(r.findings[0].kind, Kind::Missing);
        assert!(r.message.contains("conform stopped it"), "{}", r.message);
    }
}
