//! End-to-end tests of the `mars` binary.
// A failed unwrap is how a test or benchmark reports broken setup.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::Write;
use std::process::{Command, Output, Stdio};

fn mars(args: &[&str], stdin: &str) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mars"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the mars binary starts");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(stdin.as_bytes())
        .expect("write stdin");
    child.wait_with_output().expect("mars finishes")
}

/// Position 0: token 0 (logit 2.0) narrowly beats token 1 (1.9); the draft is token 1.
const CLOSE_CALL: &str =
    r#"{"target_logits": [[2.0, 1.9, null], [0.0, 0.0, 5.0]], "draft_tokens": [1]}"#;

fn verdict(args: &[&str]) -> serde_json::Value {
    let out = mars(
        &[&["verify", "--input", "-", "--json"], args].concat(),
        CLOSE_CALL,
    );
    assert!(
        out.status.success(),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON verdict")
}

#[test]
fn strict_rejects_the_runner_up_and_mars_keeps_it() {
    let strict = verdict(&[]);
    assert_eq!(strict["accepted"], 0);
    assert_eq!(strict["next"]["token"], 0);
    assert_eq!(strict["positions"][0]["decision"], "rejected");

    let mars = verdict(&["--theta", "0.9"]);
    assert_eq!(mars["accepted"], 1);
    assert_eq!(mars["next"]["token"], 2);
    assert_eq!(mars["positions"][0]["decision"], "accepted_relaxed");
    assert!(mars["ledger"]["distance"].as_f64().expect("number") > 0.0);

    // e^{-0.1} ≈ 0.905: margin mode relaxes at ρ = 0.9 and not at 0.95.
    assert_eq!(verdict(&["--rho", "0.9"])["accepted"], 1);
    assert_eq!(verdict(&["--rho", "0.95"])["accepted"], 0);
}

#[test]
fn table_output_reports_the_ledger() {
    let out = mars(&["verify", "--input", "-", "--theta", "0.9"], CLOSE_CALL);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.contains("AcceptedRelaxed") && text.contains("ledger: 1 relaxed positions"),
        "{text}"
    );
}

#[test]
fn bad_settings_and_input_name_the_field() {
    let out = mars(&["verify", "--input", "-", "--theta", "NaN"], CLOSE_CALL);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("theta"));

    let out = mars(&["verify", "--input", "-", "--top-p", "1.5"], CLOSE_CALL);
    assert!(String::from_utf8_lossy(&out.stderr).contains("top_p"));

    let ragged = r#"{"target_logits": [[1.0, 2.0], [1.0]], "draft_tokens": [0]}"#;
    let out = mars(&["verify", "--input", "-"], ragged);
    assert!(String::from_utf8_lossy(&out.stderr).contains("target_logits[1] has 1 values"));

    let out_of_vocab = r#"{"target_logits": [[1.0, 2.0], [1.0, 0.0]], "draft_tokens": [7]}"#;
    let out = mars(&["verify", "--input", "-"], out_of_vocab);
    assert!(String::from_utf8_lossy(&out.stderr).contains("draft_tokens[0] = 7"));

    let out = mars(&["verify", "--input", "-"], "{not json");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("parsing the step JSON"));
}
