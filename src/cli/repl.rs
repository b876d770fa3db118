//! `sandpit repl`: a persistent session in this terminal, with line editing and history.
//! A line that opens a block (ends with `:`, `{`, `(`, `[` or `\`) continues until an empty line.
//! Ctrl-C while a cell runs interrupts the cell, not the session; Ctrl-D leaves.
//! Every cell goes through the pipeline: the analyzer, approval (a prompt here, under
//! `approval.mode` `auto` or `ask`), redaction and the audit trail.

use super::{backend_choice, BackendArg, EXIT_SANDPIT_FAILURE};
use crate::backend;
use crate::pipeline::gate::{Caller, Pipeline};
use crate::policy::Policy;
use crate::session::{ExecOptions, OutputEvent, Session, SessionConfig, StreamKind};
use crate::types::{ExecRequest, ExecResult, Language, Status};
use std::io::Write;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

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
    let started = async {
        let choice = backend_choice(&backend_arg, &policy)?;
        let backend = backend::select(choice, &policy, &backend::helper_path()?).await?;
        let config = SessionConfig {
            language,
            session_id: None,
            workspace: None,
            network: false,
            limits: policy.limits.clone(),
        };
        Session::start(&policy, backend, config).await
    };
    let pipeline = match Pipeline::from_policy(&policy) {
        Ok(p) => p,
        Err(e) => {
            super::report_error(&e);
            return ExitCode::from(EXIT_SANDPIT_FAILURE);
        }
    };
    let mut session = match started.await {
        Ok(s) => s,
        Err(e) => {
            super::report_error(&e);
            return ExitCode::from(EXIT_SANDPIT_FAILURE);
        }
    };
    session.set_redactor(pipeline.redactor().clone());
    let approver = super::approve::TerminalApprover {
        timeout: Duration::from_millis(policy.approval.timeout_ms),
    };
    let backend_name = session.backend_name();
    let mut trusted = false;
    eprintln!(
        "sandpit repl: {} {} on the {} backend. Ctrl-C interrupts a running cell, Ctrl-D exits.",
        language,
        session.interpreter_version().unwrap_or(""),
        session.backend_name()
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
        req.session_id = Some(session.id().to_string());
        let caller = Caller {
            interface: "repl",
            backend: backend_name,
            session_trusted: trusted,
            approver: Some(&approver),
        };
        let user = req.user.clone();
        let admission = match pipeline.admit(&req, &user, caller).await {
            Ok(a) => a,
            Err(e) => {
                let mut r = ExecResult::from_error(language, backend_name, &e);
                pipeline.redact_result(&mut r);
                if let Some(err) = r.error {
                    eprintln!("[sandpit] {}", err.message);
                }
                continue;
            }
        };
        trusted |= admission.trust_session;
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
        let opts = ExecOptions {
            timeout: Duration::from_millis(policy.defaults.timeout_ms),
            input: Default::default(),
            interactive: false,
            output: Some(tx),
            cancel: Some(cancel),
        };
        let result = session.execute(&code, opts).await;
        watcher.abort();
        let _ = printer.await;
        match result {
            Ok(mut r) => {
                pipeline.finish(&req, &user, caller, &admission, &mut r);
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
                if r.status == Status::Error && r.exception.is_none() {
                    if let Some(c) = r.exit_code.filter(|c| *c != 0) {
                        eprintln!("[sandpit] exit status {c}");
                    }
                }
            }
            Err(e) => {
                let mut r = ExecResult::from_error(language, backend_name, &e);
                pipeline.failed(&req, &user, caller, &admission, &mut r);
                if let Some(err) = r.error {
                    eprintln!("[sandpit] {}", err.message);
                }
            }
        }
    }
    session.kill().await;
    ExitCode::SUCCESS
}
