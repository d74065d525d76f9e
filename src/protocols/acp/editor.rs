//! conform as the editor: real answers to the agent's requests, inside a
//! temporary workspace. Files are read and written there only; terminals run
//! there, in their own process groups, with bounded output, and are killed
//! when the case ends. Permission requests get the case's scripted answer.

use super::steps::Permission;
use crate::transport::process;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncReadExt;
use tokio::sync::watch;

/// What conform answers a request with.
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    Result(Value),
    Error { code: i64, message: String },
}

impl Answer {
    fn error(code: i64, message: impl Into<String>) -> Answer {
        Answer::Error {
            code,
            message: message.into(),
        }
    }

    fn invalid(message: impl Into<String>) -> Answer {
        Answer::error(-32602, message)
    }

    pub fn to_message(&self, id: &Value) -> Value {
        match self {
            Answer::Result(r) => json!({"jsonrpc": "2.0", "id": id, "result": r}),
            Answer::Error { code, message } => {
                json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message}})
            }
        }
    }
}

/// The most of a file conform reads for the agent.
const READ_LIMIT: u64 = 16 * 1024 * 1024;
/// Terminal output kept when the agent sets no limit, and the most it may set.
const OUTPUT_DEFAULT: usize = 1024 * 1024;
const OUTPUT_MAX: usize = 16 * 1024 * 1024;

struct Terminal {
    pid: i32,
    output: Arc<Mutex<Output>>,
    status: watch::Receiver<Option<std::process::ExitStatus>>,
    /// The command's process group, ended with the terminal at the latest.
    _process: process::Spawned,
}

#[derive(Default)]
struct Output {
    bytes: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Output {
    /// Appends, keeping the last `limit` bytes, cut at a character boundary.
    fn push(&mut self, data: &[u8]) {
        self.bytes.extend_from_slice(data);
        if self.bytes.len() > self.limit {
            let mut cut = self.bytes.len() - self.limit;
            // Skip UTF-8 continuation bytes so the kept text starts on a character.
            while cut < self.bytes.len() && (self.bytes[cut] & 0xC0) == 0x80 {
                cut += 1;
            }
            self.bytes.drain(..cut);
            self.truncated = true;
        }
    }
}

pub struct Editor {
    workspace: PathBuf,
    permission: Permission,
    terminals: HashMap<String, Terminal>,
    next_terminal: u32,
    /// Terminal ids created and released, for `terminals-released`.
    pub created: Vec<String>,
    pub released: Vec<String>,
}

impl Editor {
    pub fn new(workspace: PathBuf, permission: Permission) -> Editor {
        Editor {
            workspace,
            permission,
            terminals: HashMap::new(),
            next_terminal: 0,
            created: vec![],
            released: vec![],
        }
    }

    /// A path the agent named, if it lies inside the workspace.
    fn inside(&self, path: &str) -> Result<PathBuf, Answer> {
        let p = Path::new(path);
        if !p.is_absolute() {
            return Err(Answer::invalid(format!("{path:?} is not an absolute path")));
        }
        if p.components().any(|c| c == Component::ParentDir) || !p.starts_with(&self.workspace) {
            return Err(Answer::invalid(format!(
                "{path:?} is outside the workspace conform gave as cwd"
            )));
        }
        Ok(p.to_path_buf())
    }

    /// The answer to `method`, or `None` for a method conform does not
    /// answer automatically (none today).
    pub async fn answer(&mut self, method: &str, params: &Value, within: Duration) -> Answer {
        match method {
            "fs/read_text_file" => self.read(params),
            "fs/write_text_file" => self.write(params),
            "session/request_permission" => self.permission(params, self.permission),
            "terminal/create" => self.create_terminal(params),
            "terminal/output" => self.with_terminal(params, |t| Answer::Result(t.describe())),
            "terminal/wait_for_exit" => self.wait_for_exit(params, within).await,
            "terminal/kill" => self.with_terminal(params, |t| {
                t.kill();
                Answer::Result(json!({}))
            }),
            "terminal/release" => self.release(params),
            _ => Answer::error(-32601, format!("Method not found: {method}")),
        }
    }

    /// The answer to a permission request under `choice`.
    pub fn permission(&self, params: &Value, choice: Permission) -> Answer {
        let options = params
            .get("options")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        let wanted: &[&str] = match choice {
            Permission::Cancelled => {
                return Answer::Result(json!({"outcome": {"outcome": "cancelled"}}));
            }
            Permission::Allow => &["allow_once", "allow_always"],
            Permission::Reject => &["reject_once", "reject_always"],
        };
        let pick = options
            .iter()
            .find(|o| {
                o.get("kind")
                    .and_then(Value::as_str)
                    .is_some_and(|k| wanted.contains(&k))
            })
            .or(options.first());
        match pick.and_then(|o| o.get("optionId")) {
            Some(id) => Answer::Result(json!({"outcome": {"outcome": "selected", "optionId": id}})),
            None => Answer::invalid("the permission request offers no option"),
        }
    }

    fn read(&self, params: &Value) -> Answer {
        let Some(path) = params.get("path").and_then(Value::as_str) else {
            return Answer::invalid("`path` is required");
        };
        let path = match self.inside(path) {
            Ok(p) => p,
            Err(a) => return a,
        };
        match std::fs::metadata(&path) {
            Ok(m) if m.len() > READ_LIMIT => {
                return Answer::error(-32603, "the file is over conform's 16 MiB read limit");
            }
            Ok(_) => {}
            Err(e) => return Answer::error(-32002, format!("cannot read {}: {e}", path.display())),
        }
        let text = match std::fs::read(&path) {
            Ok(b) => String::from_utf8_lossy(&b).into_owned(),
            Err(e) => return Answer::error(-32002, format!("cannot read {}: {e}", path.display())),
        };
        // `line` is 1-based; `limit` counts lines.
        let line = params
            .get("line")
            .and_then(Value::as_u64)
            .unwrap_or(1)
            .max(1) as usize;
        let limit = params
            .get("limit")
            .and_then(Value::as_u64)
            .map(|l| l as usize);
        let content = if line == 1 && limit.is_none() {
            text
        } else {
            text.split_inclusive('\n')
                .skip(line - 1)
                .take(limit.unwrap_or(usize::MAX))
                .collect()
        };
        Answer::Result(json!({"content": content}))
    }

    fn write(&self, params: &Value) -> Answer {
        let (Some(path), Some(content)) = (
            params.get("path").and_then(Value::as_str),
            params.get("content").and_then(Value::as_str),
        ) else {
            return Answer::invalid("`path` and `content` are required");
        };
        let path = match self.inside(path) {
            Ok(p) => p,
            Err(a) => return a,
        };
        if let Some(parent) = path.parent() {
            let _ = std::fs::create_dir_all(parent);
        }
        match std::fs::write(&path, content) {
            Ok(()) => Answer::Result(json!({})),
            Err(e) => Answer::error(-32603, format!("cannot write {}: {e}", path.display())),
        }
    }

    fn create_terminal(&mut self, params: &Value) -> Answer {
        let Some(command) = params.get("command").and_then(Value::as_str) else {
            return Answer::invalid("`command` is required");
        };
        let args: Vec<String> = params
            .get("args")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let cwd = match params.get("cwd").and_then(Value::as_str) {
            Some(c) => match self.inside(c) {
                Ok(p) => p,
                Err(a) => return a,
            },
            None => self.workspace.clone(),
        };
        let limit = params
            .get("outputByteLimit")
            .and_then(Value::as_u64)
            .map(|l| (l as usize).min(OUTPUT_MAX))
            .unwrap_or(OUTPUT_DEFAULT);
        let env: Vec<(&str, &std::ffi::OsStr)> = params
            .get("env")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| {
                let name = v.get("name").and_then(Value::as_str)?;
                let value = v.get("value").and_then(Value::as_str)?;
                Some((name, std::ffi::OsStr::new(value)))
            })
            .collect();
        let mut child = match process::spawn_in(
            process::Program::Argv(command, &args),
            Some(&cwd),
            &env,
            process::Stdio3::Output,
        ) {
            Ok(c) => c,
            Err(e) => return Answer::error(-32603, format!("cannot run {command:?}: {e}")),
        };
        let output = Arc::new(Mutex::new(Output {
            limit,
            ..Output::default()
        }));
        for pipe in [
            child
                .stdout_pipe
                .take()
                .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
            child
                .stderr_pipe
                .take()
                .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let output = output.clone();
            tokio::spawn(async move {
                let mut pipe = pipe;
                let mut buf = [0u8; 8192];
                while let Ok(n) = pipe.read(&mut buf).await {
                    if n == 0 {
                        break;
                    }
                    if let Ok(mut o) = output.lock() {
                        o.push(&buf[..n]);
                    }
                }
            });
        }
        let (pid, rx) = (child.pid(), child.status_watch());
        self.next_terminal += 1;
        let id = format!("term-{}", self.next_terminal);
        self.created.push(id.clone());
        self.terminals.insert(
            id.clone(),
            Terminal {
                pid,
                output,
                status: rx,
                _process: child,
            },
        );
        Answer::Result(json!({"terminalId": id}))
    }

    fn with_terminal(&mut self, params: &Value, f: impl FnOnce(&Terminal) -> Answer) -> Answer {
        let id = params
            .get("terminalId")
            .and_then(Value::as_str)
            .unwrap_or("");
        match self.terminals.get(id) {
            Some(t) => f(t),
            None => Answer::invalid(format!("no terminal {id:?} (never created, or released)")),
        }
    }

    async fn wait_for_exit(&mut self, params: &Value, within: Duration) -> Answer {
        let id = params
            .get("terminalId")
            .and_then(Value::as_str)
            .unwrap_or("");
        let Some(t) = self.terminals.get(id) else {
            return Answer::invalid(format!("no terminal {id:?}"));
        };
        let mut rx = t.status.clone();
        let _ = tokio::time::timeout(within, rx.wait_for(|s| s.is_some())).await;
        // Give the output readers a moment to take the last bytes.
        tokio::time::sleep(Duration::from_millis(20)).await;
        match t.exit_status() {
            Some(s) => Answer::Result(s),
            None => Answer::error(
                -32603,
                format!(
                    "the command did not exit within {:.0}s",
                    within.as_secs_f64()
                ),
            ),
        }
    }

    fn release(&mut self, params: &Value) -> Answer {
        let id = params
            .get("terminalId")
            .and_then(Value::as_str)
            .unwrap_or("");
        match self.terminals.remove(id) {
            Some(t) => {
                t.kill();
                self.released.push(id.to_owned());
                Answer::Result(json!({}))
            }
            None => Answer::invalid(format!("no terminal {id:?}")),
        }
    }
}

impl Terminal {
    fn exit_status(&self) -> Option<Value> {
        use std::os::unix::process::ExitStatusExt;
        let s = (*self.status.borrow())?;
        Some(json!({
            "exitCode": s.code(),
            "signal": s.signal().map(|n| Signal::try_from(n).map(|s| s.as_str().to_owned()).unwrap_or(n.to_string())),
        }))
    }

    fn describe(&self) -> Value {
        let (text, truncated) = self
            .output
            .lock()
            .map(|o| (String::from_utf8_lossy(&o.bytes).into_owned(), o.truncated))
            .unwrap_or_default();
        let mut v = json!({"output": text, "truncated": truncated});
        if let Some(s) = self.exit_status() {
            v["exitStatus"] = s;
        }
        v
    }

    fn kill(&self) {
        if self.pid > 0 && self.status.borrow().is_none() {
            let _ = killpg(Pid::from_raw(self.pid), Signal::SIGKILL);
        }
    }
}

impl Drop for Editor {
    fn drop(&mut self) {
        for t in self.terminals.values() {
            t.kill();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncation_keeps_the_tail_on_a_character_boundary() {
        let mut o = Output {
            limit: 4,
            ..Output::default()
        };
        o.push("aé€".as_bytes()); // 1 + 2 + 3 bytes
        assert!(o.truncated);
        assert_eq!(String::from_utf8(o.bytes.clone()).unwrap(), "€");
    }

    #[test]
    fn paths_outside_the_workspace_are_refused() {
        let e = Editor::new("/w".into(), Permission::Allow);
        assert!(e.inside("/w/a.txt").is_ok());
        assert!(e.inside("/w/../etc/passwd").is_err());
        assert!(e.inside("/etc/passwd").is_err());
        assert!(e.inside("a.txt").is_err());
    }

    #[test]
    fn permission_answers_follow_the_script() {
        let e = Editor::new("/w".into(), Permission::Allow);
        let params = json!({"options": [
            {"optionId": "no", "name": "No", "kind": "reject_once"},
            {"optionId": "yes", "name": "Yes", "kind": "allow_once"}]});
        assert_eq!(
            e.permission(&params, Permission::Allow),
            Answer::Result(json!({"outcome": {"outcome": "selected", "optionId": "yes"}}))
        );
        assert_eq!(
            e.permission(&params, Permission::Reject),
            Answer::Result(json!({"outcome": {"outcome": "selected", "optionId": "no"}}))
        );
        assert_eq!(
            e.permission(&params, Permission::Cancelled),
            Answer::Result(json!({"outcome": {"outcome": "cancelled"}}))
        );
    }
}
