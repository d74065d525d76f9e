//! Mistral Vibe's agent socket, protocol version 2: conform plays Vibe and
//! tests a server (`driver`), or plays the server and tests a client
//! (`scripted`, `scripted_server`).

pub mod driver;
pub mod fuzz;
pub mod reference;
pub mod reference_client;
pub mod scripted;
pub mod scripted_server;
pub mod steps;
pub mod table;
pub mod validate;

use crate::case::{Case, Dialect, NoConfig, NoNeed};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::runner;
use crate::suite::{self, BoxFuture, Protocol, Role, RunOptions, Suite};
use crate::target::Target;
use crate::transport::process::{self, Stdio3};
use crate::transport::unix::Connector;
use driver::Session;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use steps::{Need, Step};

pub const CATALOGUE: &str = "agent-socket/requirements.json";

/// Servers: conform plays Vibe.
pub const SERVER: Suite = Suite::new(
    Protocol::AgentSocket,
    Role::Server,
    CATALOGUE,
    &[],
    suite::load::<ServerCases>,
)
.fuzzed_by(fuzz::start, 32)
.with_reference(serve_reference);

/// Clients: conform plays the server.
pub const CLIENT: Suite = Suite::new(
    Protocol::AgentSocket,
    Role::Client,
    CATALOGUE,
    scripted::rules::EVERY_MESSAGE,
    suite::load::<ClientCases>,
);

/// The server cases' language.
#[derive(Debug, Clone, Copy)]
pub struct ServerCases;

impl Dialect for ServerCases {
    type Step = Step;
    type Need = Need;
    type Config = NoConfig;
    const PROTOCOL: Protocol = Protocol::AgentSocket;
    const DIR: &'static str = "agent-socket/cases";
    const LOOPS: bool = true;
    fn checks(step: &Step) -> Vec<String> {
        let mut names = step
            .expect
            .as_ref()
            .map(steps::Expect::check_names)
            .unwrap_or_default();
        if matches!(step.action, crate::step::Action::Probe) {
            names.push("probe".into());
        }
        names
    }
}

crate::runs!(ServerCases, run);

/// The client cases' language (`--role client`).
#[derive(Debug, Clone, Copy)]
pub struct ClientCases;

impl Dialect for ClientCases {
    type Step = scripted::ClientStep;
    type Need = NoNeed;
    type Config = scripted::ClientConfig;
    const PROTOCOL: Protocol = Protocol::AgentSocket;
    const DIR: &'static str = scripted::CASES_DIR;
}

crate::runs!(ClientCases, scripted_server::run);

/// `conform reference --protocol agent-socket --listen PATH`: the reference
/// server until SIGTERM or Ctrl-C.
fn serve_reference(options: suite::ReferenceOptions) -> BoxFuture<'static, Result<(), RunError>> {
    Box::pin(async move {
        let Some(listen) = options.listen else {
            return Err(RunError::Usage(
                "agent-socket's reference needs --listen PATH".into(),
            ));
        };
        let (_tmp, workspace) = match options.workspace {
            Some(w) => (None, w),
            None => {
                let t = private_dir("conform-as-workspace-")?;
                let p = t.path().to_path_buf();
                (Some(t), p)
            }
        };
        let (task, running) = start_reference(&listen, &workspace)
            .await
            .map_err(|e| RunError::Usage(format!("cannot listen on {}: {e}", listen.display())))?;
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| RunError::Conform(e.to_string()))?;
        tokio::select! {
            _ = term.recv() => {}
            _ = tokio::signal::ctrl_c() => {}
        }
        task.abort();
        running.kill_all();
        let _ = std::fs::remove_file(&listen);
        Ok(())
    })
}

/// A started target and what must be undone at the end.
struct Started {
    socket: PathBuf,
    spawned: Option<process::Spawned>,
    builtin: Option<(tokio::task::JoinHandle<()>, reference::Running)>,
    _dirs: Vec<tempfile::TempDir>,
}

/// A fresh 0700 directory for a socket.
pub(crate) fn private_dir(prefix: &str) -> Result<tempfile::TempDir, RunError> {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(prefix)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .map_err(|e| RunError::Conform(format!("cannot create a temporary directory: {e}")))?;
    Ok(dir)
}

/// Listens on `socket`, then makes it mode 0600. The process-wide umask is
/// left alone: changing it around the bind raced every other bind and spawn
/// of a parallel run. Until the chmod the socket has the umask's mode; the
/// sockets conform binds live in 0700 directories ([`private_dir`]), where
/// no one else can reach them meanwhile.
pub fn bind_private(socket: &Path) -> std::io::Result<tokio::net::UnixListener> {
    use std::os::unix::fs::PermissionsExt;
    let listener = tokio::net::UnixListener::bind(socket)?;
    std::fs::set_permissions(socket, std::fs::Permissions::from_mode(0o600))?;
    Ok(listener)
}

/// Starts the builtin reference server on a socket in a fresh directory.
pub async fn start_reference(
    socket: &Path,
    workspace: &Path,
) -> std::io::Result<(tokio::task::JoinHandle<()>, reference::Running)> {
    let listener = bind_private(socket)?;
    let config = Arc::new(reference::Config {
        workspace: workspace.to_path_buf(),
        python: reference::find_python(),
    });
    let running = reference::Running::default();
    let task = tokio::spawn(reference::serve(listener, config, running.clone()));
    Ok((task, running))
}

async fn start(target: &Target, startup: Duration) -> Result<Started, RunError> {
    match target {
        Target::Builtin => {
            let dir = private_dir("conform-as-")?;
            let ws = private_dir("conform-as-workspace-")?;
            let socket = dir.path().join("agent.sock");
            let (task, running) = start_reference(&socket, ws.path()).await.map_err(|e| {
                RunError::Target(format!("the builtin server could not listen: {e}"))
            })?;
            Ok(Started {
                socket,
                spawned: None,
                builtin: Some((task, running)),
                _dirs: vec![dir, ws],
            })
        }
        Target::Unix(path) => {
            if let Err(e) = crate::transport::unix::connect(path, startup).await {
                return Err(RunError::Target(format!(
                    "cannot connect to {}: {e}",
                    path.display()
                )));
            }
            Ok(Started {
                socket: path.clone(),
                spawned: None,
                builtin: None,
                _dirs: vec![],
            })
        }
        Target::Exec(cmd) => {
            let dir = private_dir("conform-as-")?;
            let socket = dir.path().join("agent.sock");
            let quoted = crate::matcher::shell_quote(&socket.display().to_string());
            let line = cmd.replace("{socket}", &quoted);
            let spawned = process::spawn(
                &line,
                &[("CONFORM_SOCKET", socket.as_os_str())],
                Stdio3::CaptureOutput,
            )
            .map_err(|e| RunError::Target(format!("cannot start `{cmd}`: {e}")))?;
            let mut started = Started {
                socket: socket.clone(),
                spawned: Some(spawned),
                builtin: None,
                _dirs: vec![dir],
            };
            // Wait, bounded, for the socket to accept connections.
            let deadline = tokio::time::Instant::now() + startup;
            loop {
                let sp = started.spawned.as_mut().expect("spawned");
                if let Some(status) = sp.exit_status() {
                    let stderr = sp.stderr_tail();
                    return Err(RunError::Target(format!(
                        "the target {} before its socket accepted a connection{}",
                        process::describe_status(Some(status)),
                        if stderr.trim().is_empty() {
                            String::new()
                        } else {
                            format!("; its stderr:\n{}", stderr.trim_end())
                        }
                    )));
                }
                if socket.exists()
                    && crate::transport::unix::connect(&socket, Duration::from_millis(500))
                        .await
                        .is_ok()
                {
                    break;
                }
                if tokio::time::Instant::now() >= deadline {
                    let (_, _) = sp.shutdown(process::TERM_GRACE).await;
                    let stderr = sp.stderr_tail();
                    return Err(RunError::Target(format!(
                        "the target's socket did not accept a connection within {:.0}s{}",
                        startup.as_secs_f64(),
                        if stderr.trim().is_empty() {
                            String::new()
                        } else {
                            format!("; its stderr:\n{}", stderr.trim_end())
                        }
                    )));
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok(started)
        }
    }
}

/// Ends whatever `start` began and says how it went.
/// `clean_end`: say so too when the target ended as asked (a run's report
/// does; the fuzzer's notes only say what went wrong).
async fn stop(started: &mut Started, notes: &mut Vec<String>, clean_end: bool) {
    if let Some((task, running)) = started.builtin.take() {
        task.abort();
        let _ = task.await;
        running.kill_all();
    }
    if let Some(sp) = started.spawned.as_mut() {
        let already = sp.exit_status();
        let (status, killed) = sp.shutdown(process::TERM_GRACE).await;
        match already {
            Some(s) => notes.push(format!(
                "the target {} during the run",
                process::describe_status(Some(s))
            )),
            None if killed => notes.push(format!(
                "the target ignored SIGTERM for {}s and was killed",
                process::TERM_GRACE.as_secs()
            )),
            None if clean_end => notes.push(format!(
                "the target {} after SIGTERM",
                process::describe_status(status)
            )),
            None => {}
        }
        let stderr = sp.stderr_tail();
        if !stderr.trim().is_empty() {
            notes.push(format!("the target's stderr:\n{}", stderr.trim_end()));
        }
    }
}

async fn run_nth(
    session: Arc<Session>,
    cases: Arc<Vec<Case<ServerCases>>>,
    i: usize,
) -> CaseResult {
    session.run_case(&cases[i]).await
}

/// Runs `cases` against the target and reports.
pub async fn run(
    options: &RunOptions,
    cases: Vec<Case<ServerCases>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let mut started = start(&options.target, options.startup_timeout).await?;
    let exit = started.spawned.as_ref().map(|s| s.status_watch());
    let mut session = Session::new(
        Connector::Unix(started.socket.clone()),
        exit,
        options.strict,
    );
    session.startup = options.startup_timeout;
    session.selected = cases.iter().map(|c| c.id.clone()).collect();
    session.handshake().await;
    let mut notes = Vec::new();
    if let Some(why) = &session.declared.handshake_failed {
        notes.push(format!("the handshake failed: {why}"));
    }
    if let Some(t) = session.declared.slow {
        notes.push(format!(
            "the server is slow: it answered conform's first agent/initialize only after {:.1}s, past the start-up bound of {:.0}s (--startup-timeout)",
            t.as_secs_f64(),
            options.startup_timeout.as_secs_f64()
        ));
    }
    let results = runner::run_with(cases, options.jobs, session, run_nth, progress).await;
    stop(&mut started, &mut notes, true).await;
    Ok(SERVER.report(options, results, notes))
}
