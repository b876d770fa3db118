//! The macOS backend's init stage (`sandpit __sandbox-macos-init`), the real binary, run here
//! without a sandbox: it passes the interpreter's status on, closes inherited descriptors but
//! the five session channels, survives the session's interrupt while the interpreter gets it,
//! and never sweeps (`kill(-1)`) unless it finds itself inside Seatbelt, which it never is
//! here. Inside the sandbox (the sweep itself) only a Mac runs it: tests/macos-smoke.sh.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn init(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_sandpit"));
    c.arg("__sandbox-macos-init")
        .args(args)
        .stdin(Stdio::null());
    c
}

fn wait_for(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let t = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        assert!(t.elapsed() < limit, "the init stage did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn the_interpreter_s_status_is_passed_on() {
    let s = init(&["/bin/sh", "-c", "exit 3"]).status().unwrap();
    assert_eq!(s.code(), Some(3));
    // A signal arrives as 128 + signal, as through the Linux helper's PID 1.
    let s = init(&["/bin/sh", "-c", "kill -TERM $$"]).status().unwrap();
    assert_eq!(s.code(), Some(128 + 15));
    let s = init(&["/nonexistent/interpreter"]).status().unwrap();
    assert_eq!(s.code(), Some(127));
}

#[test]
fn only_the_session_channels_are_inherited() {
    let (r, w) = nix::unistd::pipe().unwrap();
    use std::os::fd::AsRawFd;
    let (r, w) = (r.as_raw_fd(), w.as_raw_fd());
    let mut c = init(&[
        "/bin/sh",
        "-c",
        "for n in 3 4 7 9; do if { true >&$n; } 2>/dev/null; then echo \"$n open\"; else echo \"$n closed\"; fi; done",
    ]);
    // SAFETY: dup2 only (async-signal-safe, no allocation); the descriptors are open in the
    // parent until the spawn returns.
    unsafe {
        c.pre_exec(move || {
            for (from, to) in [(w, 3), (w, 4), (w, 7), (r, 9)] {
                if libc::dup2(from, to) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    let out = c.output().unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "3 open\n4 open\n7 closed\n9 closed\n"
    );
}

#[test]
fn the_interrupt_reaches_the_interpreter_and_the_init_reports_it() {
    let mut child = init(&["/bin/sh", "-c", "sleep 30"])
        .process_group(0)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pgid = child.id() as i32;
    // SAFETY: killpg has no memory preconditions; the group is the one just started.
    unsafe { libc::killpg(pgid, libc::SIGINT) };
    let s = wait_for(&mut child, Duration::from_secs(10));
    assert_eq!(
        (s.code(), s.signal()),
        (Some(128 + 2), None),
        "the init stage must outlive the interrupt and report the interpreter's"
    );
}

#[test]
fn no_sweep_outside_a_sandbox() {
    let mut child = init(&["/bin/sh", "-c", "sleep 31416; true"])
        .process_group(0)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let pgid = child.id() as i32;
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(pgid, libc::SIGUSR1) };
    let s = wait_for(&mut child, Duration::from_secs(10));
    assert_eq!(s.code(), Some(137), "SIGUSR1 ends the init stage");
    // Unconfined, kill(-1) would have reached every process of this user: the interpreter
    // must still be there (then the test ends it).
    let alive = common::host_process_with("sleep 31416");
    // SAFETY: as above; the group is the one this test started.
    unsafe { libc::killpg(pgid, libc::SIGKILL) };
    assert!(alive, "the init stage swept outside a sandbox");
}
