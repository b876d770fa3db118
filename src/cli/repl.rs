//! `sandpit repl`: a persistent session in this terminal, with line editing and history.
//! A line that opens a block (ends with `:`, `{`, `(`, `[` or `\`) continues until an empty line.
//! Ctrl-C while a cell runs interrupts the cell, not the session; Ctrl-D leaves.
//! Every cell goes through the pipeline: the analyzer, approval (a prompt here, under
//! `approval.mode` `auto` or `ask`), redaction and the audit trail.

use super::{backend_choice, BackendArg, EXIT_SANDPIT_FAILURE};
use crate::backend;
use crate::policy::Policy;
use crate::session::manager::{SessionManager, Via};
use crate::session::{OutputEvent, StreamKind};
use crate::types::{ExecRequest, Language, Status};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

/// The owner of the REPL's session (one person at one terminal).
const USER: &str = "default";

fn continues(line: &str) -> bool {
    let t = line.trim_end();
    t.ends_with(':')
        || t.ends_with('{')
        || t.ends_with('(')
        || t.ends_with('[')
        || t.ends_with('\\')
}

pub async fn repl(language: Option<Language>, backend_arg: BackendArg, policy: Policy) -> ExitCode {
    let language = language.unwrap_or(policy.defaults.language);
    // The same path as every interface: the session manager, with one persistent session.
    let started = async {
        let choice = backend_choice(&backend_arg, &policy)?;
        let backend = backend::select(choice, &policy, &backend::helper_path()?).await?;
        let manager = SessionManager::with_backend(policy.clone(), backend, Default::default())?;
        let id = format!("repl-{}", crate::util::random_hex(6)?);
        let opened = manager.open(USER, &id, language).await?;
        Ok::<_, crate::Error>((manager, id, opened))
    };
    let (manager, session_id, opened) = match started.await {
        Ok(s) => s,
        Err(e) => {
            super::report_error(&e);
            return ExitCode::from(EXIT_SANDPIT_FAILURE);
        }
    };
    let approver: Arc<dyn crate::pipeline::approval::Approver> =
        Arc::new(super::approve::TerminalApprover {
            timeout: Duration::from_millis(policy.approval.timeout_ms),
        });
    eprintln!(
        "sandpit repl: {} {} on the {} backend. Ctrl-C interrupts a running cell, Ctrl-D exits.\nsandbox: {}",
        language,
        opened.version,
        manager.backend_name(),
        opened.sandbox
    );
    let mut editor = match rustyline::DefaultEditor::new() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("sandpit: cannot start line editing: {e}");
            return ExitCode::from(EXIT_SANDPIT_FAILURE);
        }
    };
    let prompt = match language {
        Language::Python => ">>> ",
        Language::Javascript => "> ",
        Language::Bash => "$ ",
    };
    loop {
        // Line editing blocks: run it off the async workers.
        let (ed, line) = match tokio::task::spawn_blocking(move || {
            let mut ed = editor;
            let mut code = String::new();
            let mut first = true;
            loop {
                match ed.readline(if first { prompt } else { "... " }) {
                    Ok(l) => {
                        let more = continues(&l) || (!first && !l.trim().is_empty());
                        code.push_str(&l);
                        code.push('\n');
                        first = false;
                        if !more {
                            break;
                        }
                    }
                    Err(rustyline::error::ReadlineError::Interrupted) => {
                        code.clear();
                        break;
                    }
                    Err(_) => return (ed, None),
                }
            }
            let _ = ed.add_history_entry(code.trim_end());
            (ed, Some(code))
        })
        .await
        {
            Ok(x) => x,
            Err(_) => break,
        };
        editor = ed;
        let Some(code) = line else { break };
        if code.trim().is_empty() {
            continue;
        }
        let mut req = ExecRequest::new(language, code.clone());
        req.session_id = Some(session_id.clone());
        req.user = USER.to_string();
        req.timeout_ms = policy.defaults.timeout_ms;
        let cancel = Arc::new(tokio::sync::Notify::new());
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<OutputEvent>();
        let printer = tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let data = super::terminal::sanitize_for_terminal(&ev.data);
                let _ = match ev.stream {
                    StreamKind::Stdout => std::io::stdout()
                        .write_all(&data)
                        .and_then(|_| std::io::stdout().flush()),
                    StreamKind::Stderr => std::io::stderr()
                        .write_all(&data)
                        .and_then(|_| std::io::stderr().flush()),
                };
            }
        });
        let watcher = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                while tokio::signal::ctrl_c().await.is_ok() {
                    cancel.notify_one();
                }
            })
        };
        let via = Via {
            interface: "repl",
            approver: Some(approver.clone()),
            cancel: Some(cancel),
            workspace: None,
            tools: Some(Arc::new(super::approve::TerminalToolNotices)),
        };
        let r = manager.execute_via(req, Some(tx), via).await;
        watcher.abort();
        let _ = printer.await;
        if let Some(ex) = &r.exception {
            eprintln!(
                "{}",
                if ex.traceback.is_empty() {
                    format!("{}: {}", ex.kind, ex.message)
                } else {
                    ex.traceback.trim_end().to_string()
                }
            );
        }
        if let Some(v) = &r.result {
            println!("result = {v}");
        }
        for w in &r.warnings {
            eprintln!("[sandpit] {w}");
        }
        if let Some(err) = &r.error {
            eprintln!("[sandpit] {}", err.message);
        } else if r.status == Status::Error && r.exception.is_none() {
            if let Some(c) = r.exit_code.filter(|c| *c != 0) {
                eprintln!("[sandpit] exit status {c}");
            }
        }
    }
    manager.shutdown().await;
    ExitCode::SUCCESS
}
