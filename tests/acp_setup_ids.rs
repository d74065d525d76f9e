//! conform's own set-up traffic uses ordinary ids (issue 26 item 4): an
//! agent that mishandles an edge id fails the case about that id, with a
//! full report, instead of ending the run at the handshake.

mod support;

use support::{outcome_ids, python_available, run_protocol_json};

/// `tests/fixtures/acp_falsy_id_agent.py` takes a request whose id is 0
/// (or "", or null) for a notification and never answers it. Before,
/// conform's probe sent `initialize` with id 0: the run ended with exit 2,
/// "could not be started", and no report.
#[test]
fn an_agent_that_drops_id_zero_gets_a_full_report_failing_the_id_case() {
    if !python_available() {
        eprintln!("skipped: python3 is not available");
        return;
    }
    let target = format!(
        "exec:python3 {}/tests/fixtures/acp_falsy_id_agent.py",
        env!("CARGO_MANIFEST_DIR")
    );
    let (code, report, stderr) = run_protocol_json("acp", &target, &["-j", "4"]);
    assert_eq!(code, 1, "{stderr}\n{report:#}");
    // Each falsy id's case fails: id-zero on a connection already
    // initialized; id-empty-string and id-null on the connection's first
    // initialize, which the agent never answers: the liveness probe on that
    // connection tells its silence from a slow start (no skip).
    assert_eq!(
        outcome_ids(&report, "fail"),
        [
            "acp/jsonrpc/id-empty-string",
            "acp/jsonrpc/id-null",
            "acp/jsonrpc/id-zero"
        ]
        .map(str::to_owned)
        .into(),
        "{report:#}"
    );
    let zero = report["cases"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "acp/jsonrpc/id-zero")
        .unwrap();
    let requirements: Vec<&str> = zero["requirements"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r.as_str())
        .collect();
    assert!(requirements.contains(&"acp.jsonrpc.id-echo"), "{zero:#}");
    // A full report: every case of the suite ran or said why not.
    assert!(
        report["summary"]["passed"].as_u64().unwrap() > 50,
        "{report:#}"
    );
}
