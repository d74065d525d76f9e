//! Interop: the ACP suite against an agent built on the official Rust SDK
//! (crate `agent-client-protocol`, a dev-dependency), whose fake model follows
//! conform's prompt script. The test binary is its own agent: started with
//! `CONFORM_SDK_AGENT=1` it serves ACP on stdio instead of running the test.
//!
//! Every failure must be a real deviation of the SDK, listed in
//! `SDK_DEVIATIONS` with the spec text it breaks; anything else fails the test.

#[path = "fixtures/sdk_agent.rs"]
mod sdk_agent;
mod support;

use std::collections::BTreeSet;

/// Cases the SDK-built agent fails, each a deviation of the SDK itself.
const SDK_DEVIATIONS: &[(&str, &str)] = &[(
    "acp/jsonrpc/invalid-utf8-survived",
    "a line that is not UTF-8 ends the SDK's connection (its stdio transport reads lines as \
     UTF-8 text), so every later request goes unanswered: JSON-RPC 2.0's 'When a rpc call is \
     made, the Server MUST reply with a Response' (survival is a MUST since issue 17; it was a \
     warning before)",
)];

fn main() {
    if std::env::var_os("CONFORM_SDK_AGENT").is_some() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        if let Err(e) = runtime.block_on(sdk_agent::run_agent()) {
            eprintln!("sdk-agent: {e}");
            std::process::exit(1);
        }
        return;
    }
    let me = std::env::current_exe().expect("the test binary's path");
    let target = format!(
        "exec:CONFORM_SDK_AGENT=1 exec {}",
        conform::matcher::shell_quote(&me.display().to_string())
    );
    let out = support::conform()
        .args([
            "run",
            "--protocol",
            "acp",
            "--format",
            "json",
            "--target",
            &target,
        ])
        .output()
        .expect("conform runs");
    let report = support::report_from(&out.stdout);
    assert!(
        !report.is_null(),
        "no JSON report; stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let failed = support::outcome_ids(&report, "fail");
    let errors = support::outcome_ids(&report, "error");
    let known: BTreeSet<String> = SDK_DEVIATIONS
        .iter()
        .map(|(id, _)| (*id).to_owned())
        .collect();
    let unexpected: Vec<&String> = failed.difference(&known).collect();
    let fixed: Vec<&String> = known.difference(&failed).collect();
    support::snapshot_report("acp_sdk_agent", &report);
    println!("{}", support::outcome_text(&report));
    assert!(errors.is_empty(), "conform errors: {errors:?}");
    assert!(
        unexpected.is_empty(),
        "failures that are not known SDK deviations: {unexpected:?}"
    );
    assert!(
        fixed.is_empty(),
        "known deviations that now pass: {fixed:?}"
    );
    println!("acp_sdk_interop: ok");
}
