//! The init stage: the first process inside a macOS sandbox. `sandbox-exec` applies the
//! profile and executes `sandpit __sandbox-macos-init INTERPRETER ARGS...`, which, already
//! confined:
//!
//! 1. closes every inherited descriptor but the five session channels (0-2 the terminal and
//!    stderr, 3 and 4 the driver's requests and responses): a descriptor of sandpit's that
//!    leaked into the fork (macOS has no `pipe2`, so a pipe is close-on-exec only a moment
//!    after it exists) never reaches the code;
//! 2. ignores the session's interrupt (SIGINT, SIGQUIT: they are for the code), and makes
//!    SIGHUP (the terminal closed: sandpit is gone), SIGTERM and SIGUSR1 (sandpit ends the
//!    session) sweep the sandbox, below, and exit;
//! 3. starts the interpreter as its child, in the same process group (the session's interrupt
//!    reaches it), with those signals back at their defaults, and waits for it;
//! 4. when the interpreter ends, sweeps and exits with its status (a signal as 128 + signal).
//!
//! The sweep is `kill(-1, SIGKILL)` from inside the sandbox: the profile lets the sandbox
//! signal only processes of its own sandbox, so this reaches exactly the session's processes,
//! those that left the process group (`setsid`, a daemon) included, and nothing else of the
//! user's. It runs only on macOS and only when the init finds itself confined (it cannot list
//! `/Users`); elsewhere there is no sweep and the process group is what sandpit kills.

use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::sync::atomic::{AtomicBool, Ordering};

/// The session channels: everything above is closed.
const KEEP_FDS: i32 = 5;
/// Where closing by number stops when `/dev/fd` cannot be listed (sandpit's own descriptors
/// are far below: a few per live session).
const FALLBACK_MAX_FD: i32 = 4096;

/// Set once, before the handlers are installed: the sweep may run.
static CONFINED: AtomicBool = AtomicBool::new(false);

/// The init stage's entry point (`args`: the interpreter and its arguments).
pub fn main(args: impl Iterator<Item = String>) -> ! {
    let argv: Vec<OsString> = args.map(OsString::from).collect();
    let Some((program, rest)) = argv.split_first() else {
        eprintln!("sandpit init: no interpreter to run");
        std::process::exit(125)
    };
    close_inherited();
    CONFINED.store(sweep::confined(), Ordering::SeqCst);
    if let Err(e) = install_handlers() {
        eprintln!("sandpit init: {e}");
        std::process::exit(125)
    }
    let mut cmd = std::process::Command::new(program);
    cmd.args(rest);
    // SAFETY: the closure only calls signal (async-signal-safe) and allocates nothing.
    unsafe {
        cmd.pre_exec(|| {
            for s in [
                libc::SIGINT,
                libc::SIGQUIT,
                libc::SIGHUP,
                libc::SIGTERM,
                libc::SIGUSR1,
            ] {
                libc::signal(s, libc::SIG_DFL);
            }
            Ok(())
        });
    }
    let status = match cmd.spawn().and_then(|mut c| c.wait()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!(
                "sandpit init: cannot run {}: {e}",
                program.to_string_lossy()
            );
            sweep::run();
            std::process::exit(127)
        }
    };
    sweep::run();
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(libc::SIGKILL));
    std::process::exit(code)
}

/// Closes every descriptor above the session channels (listed in `/dev/fd`, which is the
/// process's own table on macOS and on Linux; if it cannot be listed, every number up to
/// [`FALLBACK_MAX_FD`]).
fn close_inherited() {
    let fds: Vec<i32> = match std::fs::read_dir("/dev/fd") {
        Ok(entries) => entries
            .flatten()
            .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
            .filter(|fd| *fd >= KEEP_FDS)
            .collect(),
        Err(_) => (KEEP_FDS..=FALLBACK_MAX_FD).collect(),
    };
    for fd in fds {
        // SAFETY: closing a descriptor number this process does not use any more (the list's
        // own descriptor is closed already: closing it again fails harmlessly with EBADF).
        unsafe { libc::close(fd) };
    }
}

extern "C" fn on_end(_: libc::c_int) {
    sweep::run();
    // SAFETY: _exit is async-signal-safe and ends the process at once.
    unsafe { libc::_exit(128 + libc::SIGKILL) }
}

fn install_handlers() -> std::io::Result<()> {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let ignore = SigAction::new(SigHandler::SigIgn, SaFlags::empty(), SigSet::empty());
    let end = SigAction::new(SigHandler::Handler(on_end), SaFlags::empty(), SigSet::all());
    for (s, a) in [
        (Signal::SIGINT, &ignore),
        (Signal::SIGQUIT, &ignore),
        (Signal::SIGHUP, &end),
        (Signal::SIGTERM, &end),
        (Signal::SIGUSR1, &end),
    ] {
        // SAFETY: the handler only calls kill and _exit (async-signal-safe) and reads an
        // atomic; ignoring a signal has no preconditions.
        unsafe { sigaction(s, a) }.map_err(std::io::Error::from)?;
    }
    Ok(())
}

#[cfg(target_os = "macos")]
mod sweep {
    use std::sync::atomic::Ordering;

    /// Inside the profile, the directory of the users' homes cannot be listed (EPERM);
    /// outside any sandbox it can (it is world-readable). Only then may the sweep run:
    /// `kill(-1)` unconfined would reach every process of the user's.
    pub fn confined() -> bool {
        matches!(
            std::fs::read_dir("/Users")
                .err()
                .and_then(|e| e.raw_os_error()),
            Some(libc::EPERM | libc::EACCES)
        )
    }

    /// SIGKILL to every process this sandbox may signal: its own (the profile allows signals
    /// to the same sandbox only). Async-signal-safe.
    pub fn run() {
        if super::CONFINED.load(Ordering::SeqCst) {
            // SAFETY: kill has no memory preconditions; -1 means every process we may signal,
            // which the sandbox narrows to its own. The caller itself is not signalled.
            unsafe { libc::kill(-1, libc::SIGKILL) };
        }
    }
}

#[cfg(not(target_os = "macos"))]
mod sweep {
    /// No Seatbelt here: never sweep.
    pub fn confined() -> bool {
        false
    }

    pub fn run() {}
}
