//! How long conform waits for an answer, and what a wait that runs out
//! means. Sans-IO: the policy and its words; `drive::stdio` does the waiting.
//!
//! A bound is conform's choice, never the source's: none of the sources puts
//! a time on an answer. So a bound that passes is not yet a missing answer.
//! conform then waits a *grace* (a multiple of the bound, with a ceiling) and
//! meanwhile sends a cheap request on the same connection, the *liveness
//! probe*. An answer that comes in the grace is an answer, reported as slow
//! with the time it took. One that does not come is judged by the probe: a
//! target that answers the probe is working (for a turn, conform's limit: a
//! skip); one that answers neither is stuck (JSON-RPC 2.0: "When a rpc call
//! is made, the Server MUST reply with a Response").
//!
//! `CONFORM_BOUND_SCALE` (a positive number, 1 by default) multiplies every
//! bound conform chose, so the tests of what a bound means need not wait a
//! minute; a case file's own `deadline` is data and is not scaled.

use std::sync::OnceLock;
use std::time::Duration;

/// The grace is this many times the bound (so a wait lasts twice its bound,
/// and a target that answers nothing at all is given up within twice the
/// start-up bound)...
pub const GRACE_FACTOR: u32 = 1;
/// ...but never longer than this (scaled): a turn's bound is long already.
pub const GRACE_CEILING: Duration = Duration::from_secs(30);
/// The start-up bound is this many times the agent's first answer's latency...
pub const STARTUP_FACTOR: u32 = 5;
/// ...never shorter than `--startup-timeout` and never longer than this many
/// times it.
pub const STARTUP_CEILING_FACTOR: u32 = 6;
/// The environment variable that scales conform's bounds (for tests).
pub const SCALE_VAR: &str = "CONFORM_BOUND_SCALE";

/// The scale of every bound: `CONFORM_BOUND_SCALE`, or 1 when it is unset
/// or not a positive number (kept within 0.01..=100).
pub fn scale() -> f64 {
    static SCALE: OnceLock<f64> = OnceLock::new();
    *SCALE.get_or_init(|| parse_scale(std::env::var(SCALE_VAR).ok().as_deref()))
}

fn parse_scale(raw: Option<&str>) -> f64 {
    raw.and_then(|s| s.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s > 0.0)
        .map_or(1.0, |s| s.clamp(0.01, 100.0))
}

/// `bound`, one of conform's own, at the run's scale.
pub fn scaled(bound: Duration) -> Duration {
    bound.mul_f64(scale())
}

/// How much longer than `bound` conform waits, probing liveness, before it
/// calls an answer missing.
pub fn grace(bound: Duration) -> Duration {
    (bound * GRACE_FACTOR).min(scaled(GRACE_CEILING))
}

/// The start-up bound for a fresh process of an agent whose first answer
/// (the probe's `initialize`) took `first`: `STARTUP_FACTOR` times that,
/// within `floor` (the `--startup-timeout`) and `STARTUP_CEILING_FACTOR`
/// times `floor`. A machine that was slow for the first start is as slow
/// for the next.
pub fn startup_bound(floor: Duration, first: Duration) -> Duration {
    (first * STARTUP_FACTOR).clamp(floor, floor * STARTUP_CEILING_FACTOR)
}

/// What the liveness probe showed about a target whose answer did not come.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Liveness {
    /// It answered the probe after this long: it serves requests.
    Alive(Duration),
    /// It did not answer the probe within the grace.
    Stuck,
    /// Its stream ended, or conform could not go on: no probe.
    Gone,
    /// No probe was sent (the protocol has none, or the wait was for nothing).
    Unprobed,
}

impl Liveness {
    /// The clause a report says it in, naming the probe (`what`).
    pub fn describe(self, what: &str) -> String {
        match self {
            Liveness::Alive(after) => format!(
                "it answered {what} in {} (sent when the bound passed), so it still serves requests",
                secs(after)
            ),
            Liveness::Stuck => {
                format!("it did not answer {what} (sent when the bound passed) either: it is stuck")
            }
            Liveness::Gone => "its stream ended".into(),
            Liveness::Unprobed => "conform had no probe to send".into(),
        }
    }
}

/// A wait for one answer: what came, how long it took, what the probe showed.
#[derive(Debug, Clone)]
pub struct Waited {
    pub answer: Option<Result<serde_json::Value, serde_json::Value>>,
    /// From the start of the wait to the answer, or to the end of the grace.
    pub after: Duration,
    /// The bound the wait had, and the grace after it.
    pub bound: Duration,
    pub grace: Duration,
    pub liveness: Liveness,
}

impl Waited {
    /// Whether an answer came after the bound (in the grace).
    pub fn late(&self) -> bool {
        self.answer.is_some() && self.after > self.bound
    }

    /// The note a late answer to `what` gets: information, not a failure.
    pub fn slow_note(&self, what: &str) -> Option<String> {
        self.late().then(|| slow_note(what, self.after, self.bound))
    }

    /// How long conform waited, as the reports say it: "nothing within 30s
    /// (conform's bound of 10s and a grace of 20s)".
    pub fn waited(&self) -> String {
        waited(self.after, self.bound, self.grace)
    }
}

/// "conform's bound of 10s" and its grace, as a report says them; a wait
/// with no grace is said as its bound, as before there was one.
pub fn waited(after: Duration, bound: Duration, grace: Duration) -> String {
    if grace.is_zero() {
        format!("{:.0}s", bound.as_secs_f64())
    } else {
        format!(
            "{} (conform's bound of {} and a grace of {})",
            secs(after),
            secs(bound),
            secs(grace)
        )
    }
}

/// The note an answer to `what` that took `took`, past `bound`, gets.
pub fn slow_note(what: &str, took: Duration, bound: Duration) -> String {
    format!(
        "slow: {what} was answered after {}, past conform's bound of {} (a bound is conform's choice, not the source's: a late answer is an answer)",
        secs(took),
        secs(bound)
    )
}

/// A duration as the reports write it: whole seconds from 10 s up, one
/// decimal below (so a 2 s answer is never said to be "within 10s" missing).
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 10.0 {
        format!("{s:.0}s")
    } else {
        format!("{s:.1}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scale_that_is_not_a_positive_number_is_one() {
        assert_eq!(parse_scale(None), 1.0);
        assert_eq!(parse_scale(Some("x")), 1.0);
        assert_eq!(parse_scale(Some("-2")), 1.0);
        assert_eq!(parse_scale(Some("0")), 1.0);
        assert_eq!(parse_scale(Some("NaN")), 1.0);
        assert_eq!(parse_scale(Some(" 0.1 ")), 0.1);
        assert_eq!(parse_scale(Some("1e9")), 100.0);
    }

    #[test]
    fn the_start_up_bound_follows_the_first_answer_within_floor_and_ceiling() {
        let floor = Duration::from_secs(10);
        assert_eq!(startup_bound(floor, Duration::from_millis(50)), floor);
        assert_eq!(
            startup_bound(floor, Duration::from_secs(4)),
            Duration::from_secs(20)
        );
        assert_eq!(
            startup_bound(floor, Duration::from_secs(40)),
            Duration::from_secs(60)
        );
    }

    #[test]
    fn only_an_answer_after_the_bound_is_slow() {
        let mut w = Waited {
            answer: Some(Ok(serde_json::json!({}))),
            after: Duration::from_secs(2),
            bound: Duration::from_secs(10),
            grace: Duration::from_secs(20),
            liveness: Liveness::Unprobed,
        };
        assert_eq!(w.slow_note("session/new"), None);
        w.after = Duration::from_secs(12);
        let note = w.slow_note("session/new").unwrap();
        assert!(
            note.contains("after 12s, past conform's bound of 10s"),
            "{note}"
        );
        w.answer = None;
        assert!(!w.late());
        assert_eq!(
            w.waited(),
            "12s (conform's bound of 10s and a grace of 20s)"
        );
    }

    #[test]
    fn durations_under_ten_seconds_keep_a_decimal() {
        assert_eq!(secs(Duration::from_millis(2040)), "2.0s");
        assert_eq!(secs(Duration::from_millis(60_400)), "60s");
    }
}
