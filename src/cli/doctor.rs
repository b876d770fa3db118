//! `sandpit doctor`: every backend, available or not and exactly why; the kernel features found;
//! the effective configuration and where it came from.

use crate::backend;
use crate::policy::{ConfigSource, Policy};
use std::process::ExitCode;

pub fn doctor(json: bool, policy: &Policy, source: &ConfigSource) -> ExitCode {
    let helper = match backend::helper_path() {
        Ok(h) => h,
        Err(e) => {
            super::report_error(&e);
            return ExitCode::from(super::EXIT_SANDPIT_FAILURE);
        }
    };
    let report = backend::report(policy, &helper);
    let auto = backend::select(backend::BackendChoice::Auto, policy, &helper);
    let auto_text = match &auto {
        Ok(b) => b.kind().as_str().to_string(),
        Err(e) => format!("none: {}", e.message_with_hint()),
    };
    if json {
        let v = serde_json::json!({
            "backends": report,
            "auto": auto.as_ref().map(|b| b.kind().as_str()).ok(),
            "auto_detail": auto_text,
            "config": { "file": source.file, "env_overrides": source.env_overrides, "effective": policy },
        });
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
        return ExitCode::SUCCESS;
    }
    println!("sandpit {}\n", env!("CARGO_PKG_VERSION"));
    println!("Backends (auto prefers them in this order):");
    for a in &report {
        let mark = if a.available { "ok " } else { "-- " };
        println!("  {mark}{:<12} {}", a.backend.as_str(), a.detail);
        for (k, v) in &a.facts {
            println!("        {k:<22} {v}");
        }
    }
    println!("\n`-b auto` picks: {auto_text}\n");
    println!(
        "Configuration: {}",
        source
            .file
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_else(|| "built-in defaults (no sandpit.toml found)".into())
    );
    for o in &source.env_overrides {
        println!("  from the environment: {o}");
    }
    match toml::to_string_pretty(policy) {
        Ok(t) => {
            for line in t.lines() {
                println!("  {line}");
            }
        }
        Err(e) => println!("  (cannot print: {e})"),
    }
    ExitCode::SUCCESS
}
