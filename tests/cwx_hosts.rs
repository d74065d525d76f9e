//! The cwx suite proven by hosts: conform's builtin reference host passes
//! every case on both tiers.

mod support;

#[test]
fn the_builtin_reference_host_passes_every_case_on_both_tiers() {
    let total = conform::protocols::cwx::load_cases(&[]).unwrap().len();
    for tier in ["plugin", "builtin"] {
        let (code, report, stderr) =
            support::run_protocol_json("cwx", "builtin", &["--tier", tier]);
        assert_eq!(
            code,
            0,
            "{tier}: {stderr}\n{}",
            support::outcome_text(&report)
        );
        for outcome in ["fail", "warn", "error", "skip"] {
            let got = support::outcome_ids(&report, outcome);
            assert!(got.is_empty(), "{tier} {outcome}: {got:?}");
        }
        assert_eq!(report["summary"]["total"], total);
    }
}
