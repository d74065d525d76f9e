//! The protocol-independent runner: selection, phases, parallelism, progress.

use crate::case::{Case, Dialect, Phase};
use crate::outcome::CaseResult;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use tokio::task::JoinSet;

pub type CaseFuture = Pin<Box<dyn Future<Output = CaseResult> + Send>>;

/// Runs `cases`: the main phase up to `jobs` at a time, then the disruptive
/// phase one at a time. `run` starts case `i`; `progress` sees each result as
/// it comes. Results come back in the cases' order.
pub async fn run_cases<D: Dialect>(
    cases: &[Case<D>],
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
            r.unwrap_or_else(|| {
                CaseResult::for_case(
                    &cases[i],
                    "conform failed while running this case (a bug in conform)",
                )
            })
        })
        .collect()
}

/// Runs case `i` of the shared cases with a shared context.
pub type RunNth<C, D, F> = fn(Arc<C>, Arc<Vec<Case<D>>>, usize) -> F;

/// Runs `cases` as [`run_cases`] does, case `i` by `run(ctx, cases, i)`: the
/// shared plumbing of the roles where conform plays the peer.
pub async fn run_with<D: Dialect, C, F>(
    cases: Vec<Case<D>>,
    jobs: usize,
    ctx: C,
    run: RunNth<C, D, F>,
    progress: &mut dyn FnMut(&CaseResult, usize, usize),
) -> Vec<CaseResult>
where
    C: Send + Sync + 'static,
    F: Future<Output = CaseResult> + Send + 'static,
{
    let cases = Arc::new(cases);
    let ctx = Arc::new(ctx);
    let run_one: Arc<dyn Fn(usize) -> CaseFuture + Send + Sync> = {
        let cases = cases.clone();
        Arc::new(move |i| Box::pin(run(ctx.clone(), cases.clone(), i)))
    };
    run_cases(&cases, jobs, run_one, progress).await
}
