//! The suites conform runs, in one table: a suite is a protocol and the role
//! under test, with what it provides (its catalogue, its cases, its run, and
//! where it has them a reference to serve, a fuzzer and a scripted peer).
//! The command line finds a suite by lookup; nothing above this table knows
//! which protocols there are.
//!
//! Adding a protocol: a folder under `protocols/` whose `mod.rs` defines one
//! [`Suite`] per role, a corpus under `corpus/<id>/`, a [`Protocol`]
//! variant, and its suites' lines in [`SUITES`].

use crate::case::CaseFileError;
use crate::error::RunError;
use crate::outcome::{CaseResult, RunReport};
use crate::protocols::{acp, agent_socket, cwx};
use crate::requirements::Catalogue;
use crate::target::Target;
use clap::ValueEnum;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::OnceLock;
use std::time::Duration;

/// A future a suite's entry point returns.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + 'a>>;

/// Every suite, the default role of each protocol first.
pub const SUITES: &[&Suite] = &[
    &agent_socket::SERVER,
    &agent_socket::CLIENT,
    &cwx::HOST,
    &cwx::CORE,
    &acp::AGENT,
    &acp::CLIENT,
];

/// A protocol conform tests (DESIGN.md's protocol ids).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize, Deserialize,
)]
pub enum Protocol {
    #[value(name = "agent-socket")]
    #[serde(rename = "agent-socket")]
    AgentSocket,
    #[value(name = "cwx")]
    #[serde(rename = "cwx")]
    Cwx,
    #[value(name = "acp")]
    #[serde(rename = "acp")]
    Acp,
}

/// The side of a protocol a requirement binds, or a suite tests.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, ValueEnum, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    Server,
    Client,
    Host,
    Core,
    Agent,
}

impl Protocol {
    pub const ALL: [Protocol; 3] = [Protocol::AgentSocket, Protocol::Cwx, Protocol::Acp];

    /// The id the command line, the corpus and the reports use (a test
    /// checks it is clap's and serde's name too).
    pub fn id(self) -> &'static str {
        match self {
            Protocol::AgentSocket => "agent-socket",
            Protocol::Cwx => "cwx",
            Protocol::Acp => "acp",
        }
    }

    /// The protocol whose id this is.
    pub fn from_id(id: &str) -> Option<Protocol> {
        Protocol::ALL.into_iter().find(|p| p.id() == id)
    }

    /// The protocol's suites, its default role first.
    pub fn suites(self) -> impl Iterator<Item = &'static Suite> {
        SUITES.iter().copied().filter(move |s| s.protocol == self)
    }

    /// The roles conform can test, the default first (DESIGN.md).
    pub fn roles(self) -> Vec<Role> {
        self.suites().map(|s| s.role).collect()
    }

    /// The requirement catalogue, parsed once.
    pub fn catalogue(self) -> &'static Catalogue {
        static CATALOGUES: OnceLock<Vec<(Protocol, Catalogue)>> = OnceLock::new();
        let all = CATALOGUES.get_or_init(|| {
            Protocol::ALL
                .iter()
                .map(|p| {
                    let path = p.suites().next().map(|s| s.catalogue).unwrap_or("");
                    let text = crate::corpus::file(path).unwrap_or("{}");
                    let catalogue = Catalogue::parse(text)
                        .expect("the embedded catalogue parses (a corpus test checks it)");
                    (*p, catalogue)
                })
                .collect()
        });
        all.iter()
            .find(|(p, _)| *p == self)
            .map(|(_, c)| c)
            .expect("every protocol has a catalogue")
    }

    /// The suite of `role`, or the default one; a role the protocol does
    /// not have is a usage error.
    pub fn suite(self, role: Option<Role>) -> Result<&'static Suite, RunError> {
        let mut suites = self.suites();
        match role {
            None => suites.next(),
            Some(r) => suites.find(|s| s.role == r),
        }
        .ok_or_else(|| {
            RunError::Usage(format!(
                "{} has no role {:?}; its roles are {}",
                self.id(),
                role.map(Role::id).unwrap_or(""),
                self.roles()
                    .iter()
                    .map(|r| r.id())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))
        })
    }
}

impl Role {
    pub const ALL: [Role; 5] = [
        Role::Server,
        Role::Client,
        Role::Host,
        Role::Core,
        Role::Agent,
    ];

    pub fn id(self) -> &'static str {
        match self {
            Role::Server => "server",
            Role::Client => "client",
            Role::Host => "host",
            Role::Core => "core",
            Role::Agent => "agent",
        }
    }
}

impl std::fmt::Display for Protocol {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.id())
    }
}

/// How a run is set up, whatever the suite; a suite reads what it needs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub target: Target,
    pub jobs: usize,
    pub strict: bool,
    /// How long a target has to start.
    pub startup_timeout: Duration,
    /// cwx: the trust tier the host was launched with.
    pub tier: cwx::table::Tier,
    /// cwx: an extension the host can load, for the cases that need one.
    pub extension: Option<cwx::driver::Extension>,
    /// acp: the user's prompt phrasings, tried before conform's own.
    pub prompts: Option<PathBuf>,
    /// A fresh target process for every case, none shared.
    pub isolate: bool,
}

impl RunOptions {
    /// Cases at once when `-j` is not given: twice the cores, at least four.
    pub fn default_jobs() -> usize {
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(2)
            .max(2)
            * 2
    }
}

/// How `conform fuzz` is set up, whatever the suite.
#[derive(Debug, Clone)]
pub struct FuzzSetup {
    pub target: Target,
    pub startup: Duration,
    /// The bound on a reply or a probe, in seconds.
    pub timeout: f64,
    /// cwx: the tier the host was launched with.
    pub tier: cwx::table::Tier,
}

/// How `conform reference` is set up.
#[derive(Debug, Clone)]
pub struct ReferenceOptions {
    /// agent-socket: the socket to listen on.
    pub listen: Option<PathBuf>,
    /// agent-socket: the sandbox's workspace.
    pub workspace: Option<PathBuf>,
    /// cwx: the tier to serve.
    pub tier: cwx::table::Tier,
}

/// What a fuzzing run returns: its report and the harness's closing notes.
pub type FuzzOutcome = Result<(crate::fuzz::Report, Vec<String>), RunError>;

/// Reports each finished case: (result, how many done, of how many).
pub type Progress<'a> = &'a mut dyn FnMut(&CaseResult, usize, usize);

/// A suite's loaded cases, whatever their step type: selected by id, then run.
pub trait Cases: Send {
    /// Each case's listing, in the corpus's order.
    fn listing(&self) -> Vec<crate::case::Listing>;
    /// Keeps the cases whose `keep` entry is true (one per case, in order).
    fn keep(&mut self, keep: &[bool]);
    /// Runs what is kept against `options.target`.
    fn run<'a>(
        self: Box<Self>,
        options: &'a RunOptions,
        progress: Progress<'a>,
    ) -> BoxFuture<'a, Result<RunReport, RunError>>;
}

/// How a suite's cases run: implemented once per suite, on its dialect.
pub trait Run: crate::case::Dialect {
    /// Runs `cases` against `options.target` and reports.
    fn run<'a>(
        options: &'a RunOptions,
        cases: Vec<crate::case::Case<Self>>,
        progress: Progress<'a>,
    ) -> BoxFuture<'a, Result<RunReport, RunError>>;
}

/// Implements [`Run`] for a dialect with the async fn that runs its cases:
/// `runs!(AgentCases, run)`.
#[macro_export]
macro_rules! runs {
    ($dialect:ty, $run:path) => {
        impl $crate::suite::Run for $dialect {
            fn run<'a>(
                options: &'a $crate::suite::RunOptions,
                cases: Vec<$crate::case::Case<Self>>,
                progress: $crate::suite::Progress<'a>,
            ) -> $crate::suite::BoxFuture<
                'a,
                Result<$crate::outcome::RunReport, $crate::error::RunError>,
            > {
                Box::pin($run(options, cases, progress))
            }
        }
    };
}

/// A suite's [`Suite::load`]: its cases, behind [`Cases`].
pub fn load<R: Run>(extra: &[(String, String)]) -> Result<Box<dyn Cases>, CaseFileError> {
    Ok(Box::new(Loaded::<R>(crate::case::load::<R>(extra)?)))
}

struct Loaded<R: Run>(Vec<crate::case::Case<R>>);

impl<R: Run> Cases for Loaded<R> {
    fn listing(&self) -> Vec<crate::case::Listing> {
        self.0.iter().map(crate::case::Case::listing).collect()
    }

    fn keep(&mut self, keep: &[bool]) {
        let mut flags = keep.iter();
        self.0.retain(|_| flags.next().copied().unwrap_or(false));
    }

    fn run<'a>(
        self: Box<Self>,
        options: &'a RunOptions,
        progress: Progress<'a>,
    ) -> BoxFuture<'a, Result<RunReport, RunError>> {
        R::run(options, self.0, progress)
    }
}

/// Starts a fuzzing harness on the target and fuzzes it.
pub type FuzzStart = for<'a> fn(
    FuzzSetup,
    &'a crate::fuzz::Options,
    &'a mut dyn FnMut(&str),
) -> BoxFuture<'a, FuzzOutcome>;

/// Loads a suite's embedded cases and the `--case` files, checked.
pub type Load = fn(&[(String, String)]) -> Result<Box<dyn Cases>, CaseFileError>;

/// Serves conform's own implementation of a role.
pub type Reference = fn(ReferenceOptions) -> BoxFuture<'static, Result<(), RunError>>;

/// Serves a scripted peer: its script, and where it records what it saw.
pub type Peer = fn(PathBuf, PathBuf) -> BoxFuture<'static, std::io::Result<()>>;

/// A suite's fuzzer.
pub struct FuzzEntry {
    pub start: FuzzStart,
    /// How many inputs run at once unless `-j` says.
    pub jobs: usize,
}

/// One suite: a protocol, the role under test, and what the suite provides.
pub struct Suite {
    pub protocol: Protocol,
    pub role: Role,
    /// The requirement catalogue's path under `corpus/` (the protocol's).
    pub catalogue: &'static str,
    /// Requirements checked on every message of every case that runs:
    /// any case that ran exercised them.
    pub watched: &'static [&'static str],
    /// The embedded cases plus the `--case` files, checked.
    pub load: Load,
    /// `conform fuzz` against a target of this role.
    pub fuzz: Option<FuzzEntry>,
    /// `conform reference`: serve conform's own implementation of this role.
    pub reference: Option<Reference>,
    /// `conform peer`: the scripted peer a target of this role starts.
    pub peer: Option<Peer>,
    /// The options of its own it reads; another suite's is a usage error.
    pub options: &'static [SuiteOption],
}

/// A command-line option that only some suites read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuiteOption {
    /// `--tier`: the cwx host's trust tier.
    Tier,
    /// `--extension`: an extension the cwx host can load.
    Extension,
    /// `--prompts`: the phrasings an ACP agent's model understands.
    Prompts,
    /// `--isolate`: a fresh ACP agent process for every case.
    Isolate,
}

impl SuiteOption {
    pub fn flag(self) -> &'static str {
        match self {
            SuiteOption::Tier => "--tier",
            SuiteOption::Extension => "--extension",
            SuiteOption::Prompts => "--prompts",
            SuiteOption::Isolate => "--isolate",
        }
    }
}

impl Suite {
    /// A suite of `protocol` testing `role` that provides only its cases;
    /// the methods below add the rest.
    pub const fn new(
        protocol: Protocol,
        role: Role,
        catalogue: &'static str,
        watched: &'static [&'static str],
        load: Load,
    ) -> Suite {
        Suite {
            protocol,
            role,
            catalogue,
            watched,
            load,
            fuzz: None,
            reference: None,
            peer: None,
            options: &[],
        }
    }

    /// Reading these options of its own.
    pub const fn reading(self, options: &'static [SuiteOption]) -> Suite {
        Suite { options, ..self }
    }

    /// A usage error for the first of `given` that this suite does not
    /// read: it would be accepted and ignored, and the user misled.
    pub fn check_options(&self, given: &[SuiteOption]) -> Result<(), RunError> {
        let Some(foreign) = given.iter().find(|o| !self.options.contains(o)) else {
            return Ok(());
        };
        let owners: Vec<String> = SUITES
            .iter()
            .filter(|s| s.options.contains(foreign))
            .map(|s| format!("{} {}", s.protocol, s.role))
            .collect();
        Err(RunError::Usage(format!(
            "{} is not an option of the {} {} suite (it is the {} suite's)",
            foreign.flag(),
            self.protocol,
            self.role,
            owners.join(" and ")
        )))
    }

    /// With a fuzzer that runs `jobs` inputs at once unless `-j` says.
    pub const fn fuzzed_by(self, start: FuzzStart, jobs: usize) -> Suite {
        Suite {
            fuzz: Some(FuzzEntry { start, jobs }),
            ..self
        }
    }

    /// With conform's own implementation of the role, for `conform reference`.
    pub const fn with_reference(self, reference: Reference) -> Suite {
        Suite {
            reference: Some(reference),
            ..self
        }
    }

    /// With the scripted peer a target of the role starts, for `conform peer`.
    pub const fn with_peer(self, peer: Peer) -> Suite {
        Suite {
            peer: Some(peer),
            ..self
        }
    }

    pub fn catalogue(&self) -> &'static Catalogue {
        self.protocol.catalogue()
    }

    /// The ids of the MUST requirements of the role under test.
    pub fn musts(&self) -> Vec<String> {
        self.catalogue()
            .requirements
            .iter()
            .filter(|r| r.role == self.role && r.level == crate::case::Level::Must)
            .map(|r| r.id.clone())
            .collect()
    }

    /// The report of a finished run, with its unexercised MUSTs marked.
    pub fn report(
        &self,
        options: &RunOptions,
        cases: Vec<CaseResult>,
        notes: Vec<String>,
    ) -> RunReport {
        RunReport::new(
            self,
            options.target.to_string(),
            options.strict,
            cases,
            notes,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_protocol_has_suites_and_every_id_reads_back() {
        for p in Protocol::ALL {
            assert!(!p.id().is_empty());
            assert_eq!(Protocol::from_id(p.id()), Some(p));
            assert!(p.suites().next().is_some(), "{p} has no suite");
            assert!(!p.catalogue().requirements.is_empty());
        }
        for r in Role::ALL {
            assert_eq!(r.to_possible_value().unwrap().get_name(), r.id());
            assert_eq!(serde_json::to_value(r).unwrap(), r.id());
        }
        for p in Protocol::ALL {
            assert_eq!(p.to_possible_value().unwrap().get_name(), p.id());
            assert_eq!(serde_json::to_value(p).unwrap(), p.id());
        }
        assert_eq!(Protocol::AgentSocket.id(), "agent-socket");
        assert_eq!(
            Protocol::Acp.roles(),
            vec![Role::Agent, Role::Client],
            "the default role comes first"
        );
    }

    #[test]
    fn a_role_the_protocol_lacks_is_a_usage_error() {
        assert!(Protocol::Cwx.suite(Some(Role::Core)).is_ok());
        assert!(matches!(
            Protocol::Cwx.suite(Some(Role::Agent)),
            Err(RunError::Usage(_))
        ));
        assert_eq!(
            Protocol::Cwx.suite(None).map(|s| s.role).ok(),
            Some(Role::Host)
        );
    }

    #[test]
    fn every_suite_has_a_catalogue_that_names_its_role() {
        for s in SUITES {
            assert!(
                s.catalogue().requirements.iter().any(|r| r.role == s.role),
                "{} {}: no requirement binds the role",
                s.protocol,
                s.role
            );
            for w in s.watched {
                assert!(
                    s.catalogue().get(w).is_some(),
                    "{w} is not in the catalogue"
                );
            }
        }
    }
}
