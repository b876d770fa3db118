#![allow(clippy::expect_used)]
//! `cargo bench`: the latency figures of `sandpit bench` (cold start, warm p50/p99 per language,
//! one-shot run, idle memory), each beside the bare interpreter measured in the same run.
//! Extra arguments after `--` go to `sandpit bench` (e.g. `cargo bench -- --json`).

fn main() {
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| a != "--bench")
        .collect();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_sandpit"))
        .arg("bench")
        .args(&args)
        .status()
        .expect("run sandpit bench");
    std::process::exit(status.code().unwrap_or(1));
}
