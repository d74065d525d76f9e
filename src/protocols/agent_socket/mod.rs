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

use crate::case::{self, Case, CaseFileError};
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::requirements::Catalogue;
use crate::runner;
use crate::target::Target;
use crate::transport::process::{self, Stdio3};
use driver::Session;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use steps::Step;

pub const CATALOGUE: &str = "agent-socket/requirements.json";

/// The requirement catalogue of the protocol.
pub fn catalogue() -> Catalogue {
    Catalogue::parse(crate::corpus::file(CATALOGUE).unwrap_or("{}"))
        .expect("the embedded catalogue parses (a corpus test checks it)")
}

/// The embedded cases plus `extra` files, checked.
pub fn load_cases(extra: &[(String, String)]) -> Result<Vec<Case<Step>>, CaseFileError> {
    case::load_corpus("agent-socket/cases", &catalogue(), extra, &|c: &Case<
        Step,
    >| {
        if !c.config.is_null() {
            return Err("agent-socket cases take no `config`".into());
        }
        match c.for_each.as_deref() {
            None | Some("tool") => Ok(()),
            Some(_) => Err("for_each is `tool` or nothing".into()),
        }
    })
}

/// The embedded client cases (`--role client`) plus `extra` files, checked.
pub fn load_client_cases(
    extra: &[(String, String)],
) -> Result<Vec<Case<scripted::ClientStep>>, CaseFileError> {
    case::load_corpus(scripted::CASES_DIR, &catalogue(), extra, &|c: &Case<
        scripted::ClientStep,
    >| {
        if c.for_each.is_some() || !c.needs.is_empty() || !c.finally.is_empty() {
            return Err("client cases take no for_each, needs or finally".into());
        }
        scripted::ClientConfig::of(c).map(|_| ())
    })
}

impl case::CheckedStep for Step {
    fn check(&self) -> Result<(), String> {
        self.validate()
    }
}

/// How a run is set up.
pub struct RunOptions {
    pub target: Target,
    pub jobs: usize,
    pub strict: bool,
    pub startup_timeout: Duration,
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

/// Listens on `socket`, which is left mode 0600.
pub fn bind_private(socket: &Path) -> std::io::Result<tokio::net::UnixListener> {
    // Bind with a umask that leaves the socket 0600.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let l = tokio::net::UnixListener::bind(socket);
    nix::sys::stat::umask(old);
    l
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
async fn stop(started: &mut Started, notes: &mut Vec<String>) {
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
            None => notes.push(format!(
                "the target {} after SIGTERM",
                process::describe_status(status)
            )),
        }
        let stderr = sp.stderr_tail();
        if !stderr.trim().is_empty() {
            notes.push(format!("the target's stderr:\n{}", stderr.trim_end()));
        }
    }
}

/// Runs `cases` against the target and reports.
pub async fn run(
    options: &RunOptions,
    cases: Vec<Case<Step>>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Result<RunReport, RunError> {
    let mut started = start(&options.target, options.startup_timeout).await?;
    let exit = started.spawned.as_ref().map(|s| s.status_watch());
    let mut session = Session::new(started.socket.clone(), exit, options.strict);
    session.handshake().await;
    let mut notes = Vec::new();
    if let Some(why) = &session.declared.handshake_failed {
        notes.push(format!("the handshake failed: {why}"));
    }
    let session = Arc::new(session);
    let cases = Arc::new(cases);
    let run_one: Arc<dyn Fn(usize) -> runner::CaseFuture + Send + Sync> = {
        let session = session.clone();
        let cases = cases.clone();
        Arc::new(move |i| {
            let session = session.clone();
            let cases = cases.clone();
            Box::pin(async move { session.run_case(&cases[i]).await })
        })
    };
    let results = runner::run_cases(&cases, options.jobs, run_one, progress).await;
    stop(&mut started, &mut notes).await;
    Ok(RunReport::new(
        crate::protocols::Protocol::AgentSocket,
        "server",
        options.target.to_string(),
        options.strict,
        results,
        notes,
    ))
}
