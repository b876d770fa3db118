//! `sandpit run`: one execution in a fresh sandbox. Without `--json` output streams live and the
//! exit status is the code's; with it, exactly one `ExecResult` is printed.

use super::{backend_choice, BackendArg, EXIT_SANDPIT_FAILURE, EXIT_USAGE};
use crate::backend;
use crate::pipeline::gate::{Admission, Caller, Pipeline};
use crate::policy::Policy;
use crate::session::{OutputEvent, Session, SessionConfig, StreamKind};
use crate::types::{ExecRequest, ExecResult, Language};
use clap::Args;
use std::io::{IsTerminal, Read, Write};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Args, Debug)]
pub struct RunArgs {
    /// python, javascript or bash (aliases: py, js, node, sh, shell)
    #[arg(short = 'l', long = "language", value_name = "LANG")]
    language: Option<Language>,
    #[command(flatten)]
    backend: BackendArg,
    /// Wall-time limit (100..=300000)
    #[arg(long, value_name = "N")]
    timeout_ms: Option<u64>,
    /// Memory limit (at most the policy's)
    #[arg(long, value_name = "N")]
    memory_mb: Option<u64>,
    /// Allow network (only if the policy permits it)
    #[arg(long)]
    network: bool,
    /// input_data as a JSON object
    #[arg(long, value_name = "JSON")]
    input: Option<String>,
    /// Use this directory as the workspace (kept afterwards)
    #[arg(long, value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Print exactly one ExecResult as JSON
    #[arg(long)]
    json: bool,
    /// Read the code from FILE
    #[arg(
        short = 'f',
        long = "file",
        value_name = "FILE",
        conflicts_with = "code"
    )]
    file: Option<PathBuf>,
    /// The code, or - to read it from stdin
    code: Option<String>,
}

fn exit(code: i32) -> ExitCode {
    ExitCode::from(code.clamp(0, 255) as u8)
}

fn fail(json: bool, lang: Language, backend: &str, e: &crate::Error) -> ExitCode {
    let r = ExecResult::from_error(lang, backend, e);
    if json {
        super::print_stdout(&format!(
            "{}\n",
            serde_json::to_string(&r).unwrap_or_default()
        ));
    } else {
        super::report_error(e);
    }
    exit(r.cli_exit_code())
}

/// Like [`fail`], with the message redacted, and (when the run was admitted) audited.
fn fail_redacted(
    json: bool,
    lang: Language,
    backend: &str,
    e: &crate::Error,
    pipeline: &Pipeline,
    audit: Option<(&ExecRequest, &str, Caller<'_>, &Admission)>,
) -> ExitCode {
    let mut r = ExecResult::from_error(lang, backend, e);
    match audit {
        Some((req, user, caller, admission)) => {
            pipeline.failed(req, user, caller, admission, &mut r)
        }
        None => pipeline.redact_result(&mut r),
    }
    if json {
        super::print_stdout(&format!(
            "{}\n",
            serde_json::to_string(&r).unwrap_or_default()
        ));
    } else if let Some(err) = &r.error {
        eprintln!("sandpit: {}", err.message);
    }
    exit(r.cli_exit_code())
}

pub async fn run(args: RunArgs, policy: Policy) -> ExitCode {
    let language = args.language.unwrap_or(policy.defaults.language);
    let code = match (&args.file, args.code.as_deref()) {
        (Some(f), _) => match std::fs::read_to_string(f) {
            Ok(c) => c,
            Err(e) => {
                eprintln!("sandpit: cannot read {}: {e}", f.display());
                return ExitCode::from(EXIT_USAGE);
            }
        },
        (None, Some("-")) | (None, None) => {
            let mut s = String::new();
            if std::io::stdin().is_terminal() && args.code.is_none() {
                eprintln!(
                    "sandpit: no code given (pass CODE, -f FILE, or pipe it on stdin with -)"
                );
                return ExitCode::from(EXIT_USAGE);
            }
            if let Err(e) = std::io::stdin().read_to_string(&mut s) {
                eprintln!("sandpit: cannot read code from stdin: {e}");
                return ExitCode::from(EXIT_USAGE);
            }
            s
        }
        (None, Some(c)) => c.to_string(),
    };
    let mut req = ExecRequest::new(language, code);
    req.timeout_ms = args.timeout_ms.unwrap_or(policy.defaults.timeout_ms);
    req.network = args.network;
    req.limits.memory_mb = args.memory_mb;
    if let Some(input) = &args.input {
        match serde_json::from_str(input) {
            Ok(v) => req.input_data = v,
            Err(e) => {
                return fail(
                    args.json,
                    language,
                    "none",
                    &crate::Error::InvalidRequest(format!("--input is not a JSON object: {e}")),
                )
            }
        }
    }
    let choice = match backend_choice(&args.backend, &policy) {
        Ok(c) => c,
        Err(e) => return fail(args.json, language, "none", &e),
    };
    if let Err(e) = policy.validate(&req) {
        return fail(args.json, language, "none", &e);
    }
    let helper = match backend::helper_path() {
        Ok(h) => h,
        Err(e) => return fail(args.json, language, "none", &e),
    };
    let backend = match backend::select(choice, &policy, &helper).await {
        Ok(b) => b,
        Err(e) => return fail(args.json, language, "none", &e),
    };
    if backend.kind() == backend::BackendKind::Unsandboxed {
        eprintln!("sandpit: warning: the unsandboxed backend runs this code with NO isolation");
    }
    let backend_name = backend.kind().as_str();
    // The pipeline around the run: analyzer and approval before, redaction and audit after.
    let pipeline = match Pipeline::from_policy(&policy) {
        Ok(p) => p,
        Err(e) => return fail(args.json, language, backend_name, &e),
    };
    let approver = super::approve::TerminalApprover {
        timeout: std::time::Duration::from_millis(policy.approval.timeout_ms),
    };
    let caller = Caller {
        interface: "cli",
        backend: backend_name,
        session_trusted: false,
        approver: Some(&approver),
    };
    let user = req.user.clone();
    let admission = match pipeline.admit(&req, &user, caller).await {
        Ok(a) => a,
        Err(e) => return fail_redacted(args.json, language, backend_name, &e, &pipeline, None),
    };
    // Failures from here on are audited too.
    let failed = |e: &crate::Error| {
        fail_redacted(
            args.json,
            language,
            backend_name,
            e,
            &pipeline,
            Some((&req, &user, caller, &admission)),
        )
    };
    let mut config = SessionConfig::for_request(&policy, &req);
    config.workspace = args.workspace.clone();
    if let Some(w) = &config.workspace {
        if let Err(e) = std::fs::create_dir_all(w) {
            return failed(&crate::Error::io(
                format!("create workspace {}", w.display()),
                e,
            ));
        }
    }
    let mut session = match Session::start(&policy, backend.clone(), config).await {
        Ok(s) => s,
        Err(e) => return failed(&e),
    };
    session.set_redactor(pipeline.redactor().clone());

    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<OutputEvent>();
    let printer = (!args.json).then(|| {
        let sanitize_out = std::io::stdout().is_terminal();
        let sanitize_err = std::io::stderr().is_terminal();
        tokio::spawn(async move {
            while let Some(ev) = rx.recv().await {
                let _ = match ev.stream {
                    StreamKind::Stdout => {
                        let data = if sanitize_out {
                            super::terminal::sanitize_for_terminal(&ev.data)
                        } else {
                            ev.data
                        };
                        let mut o = std::io::stdout().lock();
                        o.write_all(&data).and_then(|_| o.flush())
                    }
                    StreamKind::Stderr => {
                        let data = if sanitize_err {
                            super::terminal::sanitize_for_terminal(&ev.data)
                        } else {
                            ev.data
                        };
                        let mut o = std::io::stderr().lock();
                        o.write_all(&data).and_then(|_| o.flush())
                    }
                };
            }
        })
    });
    let outcome = session
        .run_request(&req, printer.as_ref().map(|_| tx.clone()))
        .await;
    drop(tx);
    if let Some(p) = printer {
        let _ = p.await;
    }
    session.kill().await;
    let mut result = match outcome {
        Ok(r) => r,
        Err(e) => return failed(&e),
    };
    pipeline.finish(&req, &user, caller, &admission, &mut result);
    if args.json {
        super::print_stdout(&format!(
            "{}\n",
            serde_json::to_string(&result).unwrap_or_default()
        ));
    } else {
        if let Some(ex) = &result.exception {
            let tb = if ex.traceback.is_empty() {
                format!("{}: {}", ex.kind, ex.message)
            } else {
                ex.traceback.clone()
            };
            eprintln!("{}", tb.trim_end());
        }
        if result.truncated {
            eprintln!("sandpit: output truncated (limit {} bytes per stream; --json keeps the head and the tail)", policy.limits.output_bytes);
        }
        for w in result.warnings.iter().filter(|w| !w.contains("truncated")) {
            eprintln!("sandpit: {w}");
        }
        if let Some(err) = &result.error {
            eprintln!("sandpit: {}", err.message);
        }
        if let Some(v) = &result.result {
            let _ = v; // `result` is part of --json output; plain runs show what the code printed.
        }
    }
    let code = result.cli_exit_code();
    if result.exit_code.is_none() && result.error.is_some() {
        return ExitCode::from(EXIT_SANDPIT_FAILURE);
    }
    exit(code)
}
