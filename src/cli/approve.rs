//! Approval at the terminal, for `sandpit run` and `sandpit repl`: the code and the analyzer's
//! findings are shown on the controlling terminal (`/dev/tty`, so it works when the code came
//! from stdin), and the answer is read there.

use crate::pipeline::approval::{ApprovalRequest, Approver, Decision};
use futures_util::future::BoxFuture;
use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::time::{Duration, Instant};

/// Asks on the controlling terminal; no terminal means a denial that says so.
pub struct TerminalApprover {
    /// Gives up (denies) after this long; the pipeline applies the same limit.
    pub timeout: Duration,
}

impl Approver for TerminalApprover {
    fn decide(&self, request: ApprovalRequest) -> BoxFuture<'_, Decision> {
        let deadline = Instant::now() + self.timeout;
        Box::pin(async move {
            tokio::task::spawn_blocking(move || prompt(&request, deadline))
                .await
                .unwrap_or_else(|e| Decision::Deny(format!("the approval prompt failed: {e}")))
        })
    }
}

fn prompt(request: &ApprovalRequest, deadline: Instant) -> Decision {
    let tty = match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/tty")
    {
        Ok(t) => t,
        Err(e) => {
            return Decision::Deny(format!(
                "approval is required but there is no terminal to ask on ({e})"
            ))
        }
    };
    let mut out = &tty;
    let choices = match request.kind {
        crate::pipeline::approval::ApprovalKind::Execution => {
            "[y] run  [t] run and trust this session  [n] deny > "
        }
        crate::pipeline::approval::ApprovalKind::HostExec => {
            "[y] run it  [t] run it, and this command again in this session  [n] deny > "
        }
    };
    let text = format!(
        "\n{}{choices}",
        String::from_utf8_lossy(&super::terminal::sanitize_for_terminal(
            request.prompt_text().as_bytes()
        ))
    );
    if out
        .write_all(text.as_bytes())
        .and_then(|_| out.flush())
        .is_err()
    {
        return Decision::Deny("could not write the approval prompt".into());
    }
    match read_line(&tty, deadline) {
        Some(answer) => decide(&answer),
        None => {
            let _ = out.write_all(b"\n(no answer in time: denied)\n");
            Decision::Deny("no answer at the terminal in time".into())
        }
    }
}

/// Host tools at the terminal: a `host_exec` command on a notify list is told on stderr (the
/// result's warnings say it too); `http` tools cannot be answered here.
pub struct TerminalToolNotices;

impl crate::pipeline::tools::ToolFrontend for TerminalToolNotices {
    fn notify(&self, notice: &crate::pipeline::tools::ToolNotice) {
        let text = format!("sandpit: {}\n", notice.text());
        let _ =
            std::io::stderr().write_all(&super::terminal::sanitize_for_terminal(text.as_bytes()));
    }
}

/// The decision an answer stands for.
fn decide(answer: &str) -> Decision {
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Decision::Approve,
        "t" | "trust" => Decision::ApproveAndTrustSession,
        _ => Decision::Deny("denied at the terminal".into()),
    }
}

/// Reads one line before `deadline`, polling so that a timed-out prompt leaves no reader
/// behind to steal the next line typed.
fn read_line(tty: &std::fs::File, deadline: Instant) -> Option<String> {
    let fd = tty.as_raw_fd();
    let mut line = Vec::new();
    loop {
        let left = deadline.checked_duration_since(Instant::now())?;
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().min(200) as i32;
        // SAFETY: one valid pollfd for the duration of the call.
        let n = unsafe { libc::poll(&mut pfd, 1, ms) };
        if n <= 0 {
            continue;
        }
        let mut b = [0u8; 1];
        // SAFETY: reading one byte into a one-byte buffer from an open descriptor.
        let r = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
        if r <= 0 || b[0] == b'\n' {
            return Some(String::from_utf8_lossy(&line).into_owned());
        }
        line.push(b[0]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_map_to_decisions() {
        assert_eq!(decide("y\n"), Decision::Approve);
        assert_eq!(decide(" YES "), Decision::Approve);
        assert_eq!(decide("t"), Decision::ApproveAndTrustSession);
        assert!(matches!(decide(""), Decision::Deny(_)));
        assert!(matches!(decide("n"), Decision::Deny(_)));
    }
}
