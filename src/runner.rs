//! The protocol-independent runner: selection, phases, parallelism, progress.

use crate::case::{Case, Phase};
use crate::outcome::CaseResult;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::task::JoinSet;

pub type CaseFuture = Pin<Box<dyn Future<Output = CaseResult> + Send>>;

/// Runs `cases`: the main phase up to `jobs` at a time, then the disruptive
/// phase one at a time. `run` starts case `i`; `progress` sees each result as
/// it comes. Results come back in the cases' order.
pub async fn run_cases<S>(
    cases: &[Case<S>],
    jobs: usize,
    run: Arc<dyn Fn(usize) -> CaseFuture + Send + Sync>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Vec<CaseResult> {
    let total = cases.len();
    let mut results: Vec<Option<CaseResult>> = (0..total).map(|_| None).collect();
    let mut done = 0;
    for (phase, width) in [(Phase::Main, jobs.max(1)), (Phase::Disruptive, 1)] {
        let mut queue = cases
            .iter()
            .enumerate()
            .filter(|(_, c)| c.phase == phase)
            .map(|(i, _)| i);
        let mut set = JoinSet::new();
        loop {
            while set.len() < width {
                let Some(i) = queue.next() else { break };
                let fut = run(i);
                set.spawn(async move { (i, fut.await) });
            }
            let Some(joined) = set.join_next().await else {
                break;
            };
            // A panic in a case task is conform's bug; the case reports it below.
            if let Ok((i, r)) = joined {
                done += 1;
                progress(&r, done, total);
                results[i] = Some(r);
            }
        }
    }
    results
        .into_iter()
        .enumerate()
        .map(|(i, r)| {
            r.unwrap_or_else(|| CaseResult {
                id: cases[i].id.clone(),
                title: cases[i].title.clone(),
                level: cases[i].level,
                requirements: cases[i].requirements.clone(),
                outcome: crate::outcome::Outcome::Error,
                message: "conform failed while running this case (a bug in conform)".into(),
                duration_ms: 0,
                skip_kind: None,
                transcript: vec![],
            })
        })
        .collect()
}
