//! The command line as users run it: `sandpit run` (plain and `--json`) with the exit codes of
//! interface.md §3, and `sandpit doctor`.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::process::{Command, Output};

fn sandpit(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_sandpit"))
        .args(args)
        .env_remove("SANDPIT_HELPER")
        .stdin(std::process::Stdio::null())
        .output()
        .expect("run sandpit")
}

fn backend() -> &'static str {
    common::native_or_unsandboxed("CLI tests")
}

fn json_run(extra: &[&str]) -> (serde_json::Value, i32) {
    let b = backend();
    let mut args = vec!["run", "-b", b, "--json"];
    args.extend_from_slice(extra);
    let out = sandpit(&args);
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert_eq!(
        stdout.lines().count(),
        1,
        "exactly one JSON object: {stdout}"
    );
    (
        serde_json::from_str(&stdout).unwrap(),
        out.status.code().unwrap(),
    )
}

#[test]
fn json_result_has_every_field() {
    let (v, code) = json_run(&[
        "-l",
        "python",
        "--input",
        r#"{"n": 20}"#,
        "print('hi'); result = n * 2",
    ]);
    assert_eq!(code, 0);
    for k in [
        "status",
        "stdout",
        "stderr",
        "exit_code",
        "result",
        "exception",
        "error",
        "timed_out",
        "truncated",
        "session_id",
        "session_restarted",
        "backend",
        "language",
        "duration_ms",
        "warnings",
        "files",
    ] {
        assert!(v.get(k).is_some(), "missing {k} in {v}");
    }
    assert_eq!(v["status"], "ok");
    assert_eq!(v["stdout"], "hi\n");
    assert_eq!(v["result"], 40);
    assert_eq!(v["language"], "python");
}

#[test]
fn exit_codes_follow_the_contract() {
    let (v, code) = json_run(&["-l", "bash", "exit 3"]);
    assert_eq!((v["status"].as_str(), code), (Some("error"), 3));
    let (v, code) = json_run(&["-l", "py", "--timeout-ms", "300", "while True: pass"]);
    assert_eq!((v["status"].as_str(), code), (Some("timeout"), 124));
    let (v, code) = json_run(&["-l", "js", "--timeout-ms", "50", "1"]);
    assert_eq!(
        (v["error"]["code"].as_str(), code),
        (Some("INVALID_REQUEST"), 2)
    );
    let (v, code) = json_run(&["-l", "python", "--network", "1"]);
    assert_eq!(
        (v["error"]["code"].as_str(), v["status"].as_str(), code),
        (Some("POLICY_DENIED"), Some("blocked"), 126)
    );
    let (v, code) = json_run(&["-l", "python", "--memory-mb", "999999", "1"]);
    assert_eq!(
        (v["error"]["code"].as_str(), code),
        (Some("POLICY_DENIED"), 126)
    );
    let (v, code) = json_run(&["-l", "javascript", "throw new RangeError('r')"]);
    assert_eq!(
        (v["exception"]["type"].as_str(), code),
        (Some("RangeError"), 1)
    );
}

#[test]
fn plain_run_streams_and_exits_with_the_code_status() {
    let b = backend();
    let out = sandpit(&[
        "run",
        "-b",
        b,
        "-l",
        "bash",
        "echo out; echo err >&2; exit 5",
    ]);
    assert_eq!(out.status.code(), Some(5));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
    assert!(String::from_utf8_lossy(&out.stderr).contains("err\n"));
    let out = sandpit(&["run", "-b", b, "-l", "python", "1/0"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("ZeroDivisionError"));
}

#[test]
fn code_from_a_file_and_from_stdin() {
    let b = backend();
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("c.py");
    std::fs::write(&f, "print(6 * 7)").unwrap();
    let out = sandpit(&["run", "-b", b, "-f", f.to_str().unwrap()]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "42\n");
    let mut child = Command::new(env!("CARGO_BIN_EXE_sandpit"))
        .args(["run", "-b", b, "-l", "bash", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"echo from-stdin")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "from-stdin\n");
}

#[test]
fn usage_errors_exit_2() {
    assert_eq!(sandpit(&["run", "-l", "cobol", "x"]).status.code(), Some(2));
    assert_eq!(sandpit(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        sandpit(&["run", "-b", "nonsense", "1"]).status.code(),
        Some(2)
    );
}

#[test]
fn doctor_explains_every_backend() {
    let out = sandpit(&["doctor", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = v["backends"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["backend"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["docker", "linux", "macos", "wasi", "unsandboxed"]);
    for b in v["backends"].as_array().unwrap() {
        assert!(!b["detail"].as_str().unwrap().is_empty());
    }
    assert!(v["config"]["effective"]["limits"]["output_bytes"].is_number());
    let text = sandpit(&["doctor"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("`-b auto` picks"));
}
