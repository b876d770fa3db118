//! sandpit runs untrusted Python, JavaScript (Node.js) and bash code for AI agents and
//! automation, one-shot or in persistent REPL sessions, inside the strongest sandbox the host
//! offers.
//!
//! Layers, top to bottom: interfaces (`cli`), the [`session`] (a persistent interpreter behind a
//! PTY driven by the [`pipeline`]'s language drivers), and the [`backend`]s that start confined
//! interpreters from a [`policy`].

#![cfg_attr(test, allow(clippy::unwrap_used, clippy::expect_used))]

pub mod backend;
pub mod cli;
pub mod error;
pub mod image;
pub mod pipeline;
pub mod policy;
pub mod server;
pub mod session;
pub mod types;
pub mod util;

pub use error::{Error, ErrorCode, Result};
pub use session::{ExecOptions, OutputEvent, Session};
pub use types::{ExecRequest, ExecResult, Language, Status};

/// Runs the helper stage when this process was started as one (`__sandbox-helper`,
/// `__sandbox-probe` on Linux, `__sandbox-macos-init` inside a macOS sandbox); otherwise
/// returns. A program that embeds sandpit as a library and uses the native Linux or macOS
/// backend calls this first thing in `main`, before any thread starts.
pub fn maybe_run_helper() {
    #[cfg(target_os = "linux")]
    {
        let mut args = std::env::args();
        let _ = args.next();
        match args.next().as_deref() {
            Some(backend::linux::HELPER_ARG) => {
                let plan = args.next().unwrap_or_default();
                backend::linux::helper::main(&plan)
            }
            Some(backend::linux::PROBE_ARG) => backend::linux::probe_main(),
            _ => {}
        }
    }
    #[cfg(unix)]
    {
        let mut args = std::env::args();
        let _ = args.next();
        if args.next().as_deref() == Some(backend::macos::INIT_ARG) {
            backend::macos::init::main(args)
        }
    }
}
