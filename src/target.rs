//! `--target`: what conform tests.

use std::path::PathBuf;
use std::str::FromStr;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// conform's own reference implementation of the role under test.
    Builtin,
    /// A command line conform spawns in its own process group.
    Exec(String),
    /// An agent-socket server that is already listening.
    Unix(PathBuf),
}

impl FromStr for Target {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "builtin" {
            Ok(Target::Builtin)
        } else if let Some(cmd) = s.strip_prefix("exec:") {
            if cmd.trim().is_empty() {
                Err("exec: needs a command line".into())
            } else {
                Ok(Target::Exec(cmd.to_owned()))
            }
        } else if let Some(path) = s.strip_prefix("unix:") {
            if path.is_empty() {
                Err("unix: needs a socket path".into())
            } else {
                Ok(Target::Unix(PathBuf::from(path)))
            }
        } else {
            Err(format!(
                "{s:?} is not builtin, exec:<command line> or unix:<path>"
            ))
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Builtin => write!(f, "builtin"),
            Target::Exec(c) => write!(f, "exec:{c}"),
            Target::Unix(p) => write!(f, "unix:{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_three_forms() {
        assert_eq!("builtin".parse(), Ok(Target::Builtin));
        assert_eq!(
            "exec:./s --listen {socket}".parse(),
            Ok(Target::Exec("./s --listen {socket}".into()))
        );
        assert_eq!(
            "unix:/tmp/a.sock".parse(),
            Ok(Target::Unix("/tmp/a.sock".into()))
        );
        assert!("exec:".parse::<Target>().is_err());
        assert!("tcp:1".parse::<Target>().is_err());
    }
}
