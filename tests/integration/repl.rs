//! `sandpit repl` in a real terminal (a PTY that is its controlling terminal): state across
//! cells, and approval prompts under `approval.mode = "ask"` (approve and trust, deny), and the
//! analyzer refusing a cell without ending the session.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::common;

use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

struct Repl {
    pty: pty_process::Pty,
    child: tokio::process::Child,
    seen: String,
}

impl Repl {
    fn start(env: &[(&str, &str)]) -> Repl {
        Self::start_in("python", env)
    }

    fn start_in(language: &str, env: &[(&str, &str)]) -> Repl {
        let backend = common::native_or_unsandboxed("REPL tests");
        let (pty, pts) = pty_process::open().unwrap();
        pty.resize(pty_process::Size::new(40, 200)).unwrap();
        let child = pty_process::Command::new(env!("CARGO_BIN_EXE_sandpit"))
            .args(["repl", "-b", backend, "-l", language])
            .envs(env.iter().copied())
            .env_remove("SANDPIT_HELPER")
            .kill_on_drop(true)
            .spawn(pts)
            .expect("spawn sandpit repl");
        Repl {
            pty,
            child,
            seen: String::new(),
        }
    }

    /// Reads until `needle` appears (after what earlier waits consumed); returns what came.
    async fn expect(&mut self, needle: &str) -> String {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        let mut buf = [0u8; 4096];
        loop {
            if let Some(i) = self.seen.find(needle) {
                let upto = i + needle.len();
                let out = self.seen[..upto].to_string();
                self.seen.drain(..upto);
                return out;
            }
            let n = tokio::time::timeout_at(deadline, self.pty.read(&mut buf))
                .await
                .unwrap_or_else(|_| panic!("no {needle:?} on the terminal; saw: {}", self.seen))
                .unwrap();
            assert!(n > 0, "the terminal closed; saw: {}", self.seen);
            self.seen.push_str(&String::from_utf8_lossy(&buf[..n]));
        }
    }

    async fn line(&mut self, text: &str) {
        self.pty.write_all(text.as_bytes()).await.unwrap();
        self.pty.write_all(b"\r").await.unwrap();
    }

    async fn quit(mut self) {
        self.pty.write_all(b"\x04").await.unwrap();
        let status = tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("repl exits on Ctrl-D")
            .unwrap();
        assert!(status.success(), "{status}");
    }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn repl_asks_for_approval_and_trusts_the_session() {
    rt().block_on(async {
        let mut r = Repl::start(&[("SANDPIT_APPROVAL", "ask"), ("SANDPIT_AUDIT", "false")]);
        r.expect(">>> ").await;
        r.line("x = 6 * 7").await;
        let prompt = r.expect("[n] deny > ").await;
        assert!(
            prompt.contains("x = 6 * 7"),
            "the prompt shows the code: {prompt}"
        );
        r.line("n").await;
        r.expect("approval denied").await;
        r.expect(">>> ").await;
        // Denied: x was never set. Approve and trust: no more prompts in this session.
        r.line("x = 6 * 7").await;
        r.expect("[n] deny > ").await;
        r.line("t").await;
        r.expect(">>> ").await;
        r.line("print(x)").await;
        let out = r.expect(">>> ").await;
        assert!(out.contains("42"), "{out}");
        assert!(
            !out.contains("[n] deny"),
            "a trusted session is not asked again: {out}"
        );
        r.quit().await;
    });
}

#[test]
fn repl_reports_analyzer_blocks_and_keeps_going() {
    rt().block_on(async {
        let mut r = Repl::start(&[("SANDPIT_AUDIT", "false")]);
        let banner = r.expect(">>> ").await;
        // The banner says what confines the session.
        let sandbox = banner
            .lines()
            .find(|l| l.starts_with("sandbox: "))
            .unwrap_or_else(|| panic!("no sandbox line in the banner: {banner}"));
        if common::native_or_unsandboxed("REPL tests") == "linux" {
            assert!(
                sandbox.contains("seccomp (") && sandbox.contains("uid "),
                "{sandbox}"
            );
        } else {
            assert!(sandbox.contains("NO isolation"), "{sandbox}");
        }
        r.line("y = 1").await;
        r.expect(">>> ").await;
        r.line("import os; os.system('echo ran')").await;
        let out = r.expect(">>> ").await;
        assert!(
            out.contains("python.os-system") && out.contains("line 1"),
            "{out}"
        );
        r.line("print(y + 1)").await;
        let out = r.expect(">>> ").await;
        assert!(out.contains('2'), "{out}");
        r.quit().await;
    });
}

impl Repl {
    /// Waits for the REPL to exit and returns its status code.
    async fn exit_code(mut self) -> Option<i32> {
        tokio::time::timeout(Duration::from_secs(15), self.child.wait())
            .await
            .expect("the repl exits")
            .unwrap()
            .code()
    }
}

/// The REPL behaves like the language's own: values echoed, a JavaScript function typed over
/// several lines runs without a blank line, `.exit` / `exit()` leave, `sys.exit(3)` leaves
/// with 3, and bash's `$?` carries from one cell to the next.
#[test]
fn repl_behaves_like_the_language_s_own() {
    rt().block_on(async {
        let mut r = Repl::start_in("javascript", &[("SANDPIT_AUDIT", "false")]);
        r.expect("> ").await;
        // Each line after its continuation prompt (line editing drops typed-ahead input).
        r.line("function f() {").await;
        r.expect("... ").await;
        r.line("  return 41;").await;
        r.expect("... ").await;
        r.line("}").await;
        r.expect("> ").await;
        r.line("f() + 1").await;
        let out = r.expect("> ").await;
        assert!(out.contains("42"), "the value is echoed: {out}");
        r.line(".exit").await;
        assert_eq!(r.exit_code().await, Some(0));

        let mut r = Repl::start(&[("SANDPIT_AUDIT", "false")]);
        r.expect(">>> ").await;
        r.line("'text'").await;
        let out = r.expect(">>> ").await;
        assert!(out.contains("'text'"), "echoed as repr: {out}");
        // What a cell displays shows as it happens: text as text, anything else by kind.
        r.line("display('shown'); display({'image/png': b'PNG'}, raw=True)")
            .await;
        let out = r.expect(">>> ").await;
        assert!(
            out.contains("'shown'") && out.contains("[image/png output, 3 bytes]"),
            "displays: {out}"
        );
        r.line("exit()").await;
        assert_eq!(r.exit_code().await, Some(0));

        let mut r = Repl::start(&[("SANDPIT_AUDIT", "false")]);
        r.expect(">>> ").await;
        r.line("import sys; sys.exit(3)").await;
        assert_eq!(r.exit_code().await, Some(3));

        let mut r = Repl::start_in("bash", &[("SANDPIT_AUDIT", "false")]);
        r.expect("$ ").await;
        r.line("false").await;
        r.expect("$ ").await;
        r.line("echo \"was $?\"").await;
        let out = r.expect("$ ").await;
        assert!(out.contains("was 1"), "$? carries over: {out}");
        r.quit().await;
    });
}
