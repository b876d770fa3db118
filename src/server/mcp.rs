//! `sandpit mcp`: the MCP server on stdio (`interface.md` §4).
//!
//! Built on the official Rust SDK (`rmcp`), with [`ServerHandler`] implemented by hand: three
//! tools (`execute_code`, `list_sessions`, `kill_session`) whose input schemas are derived from
//! [`ExecRequest`]. stdout carries only the protocol; logs go to stderr. MCP over stdio has one
//! client, so every call runs as the user `default`.

use crate::pipeline::approval::{ApprovalRequest, Approver, Decision};
use crate::session::manager::{SessionManager, Via};
use crate::types::{ExecRequest, ExecResult, Status};
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, CustomRequest,
    CustomResult, ErrorCode, Implementation, JsonObject, ListToolsResult, PaginatedRequestParams,
    ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{ElicitationMode, Peer, RequestContext};
use rmcp::{ErrorData as McpError, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use std::sync::Arc;

/// The only user of an MCP-over-stdio server.
const MCP_USER: &str = "default";

/// The arguments `execute_code` accepts (a subset of [`ExecRequest`]'s fields).
const EXECUTE_ARGS: &[&str] = &[
    "language",
    "code",
    "session_id",
    "timeout_ms",
    "input_data",
    "files",
    "output_files",
    "packages",
];

/// Serves MCP on stdin/stdout until stdin closes, then returns `Ok(())`; the caller tears down
/// every session.
pub async fn serve(manager: Arc<SessionManager>) -> crate::Result<()> {
    let handler = SandpitMcp { manager };
    let running = match handler.serve(rmcp::transport::io::stdio_pipes()).await {
        Ok(running) => running,
        // The client went away before (or while) initializing: nothing to serve.
        Err(rmcp::service::ServerInitializeError::ConnectionClosed(reason)) => {
            tracing::info!(%reason, "MCP client closed the connection before initializing");
            return Ok(());
        }
        Err(e) => {
            return Err(crate::Error::sandbox(format!(
                "the MCP session could not start: {e}"
            )))
        }
    };
    tracing::info!("MCP server ready on stdio");
    match running.waiting().await {
        Ok(reason) => {
            tracing::info!(?reason, "MCP client disconnected");
            Ok(())
        }
        Err(e) => Err(crate::Error::sandbox(format!(
            "the MCP service task failed: {e}"
        ))),
    }
}

/// The MCP handler: a thin adapter over the shared [`SessionManager`].
struct SandpitMcp {
    manager: Arc<SessionManager>,
}

impl ServerHandler for SandpitMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("sandpit", env!("CARGO_PKG_VERSION")))
            .with_instructions(
                "Run untrusted Python, JavaScript or bash code in a sandbox with `execute_code`. \
                 Pass a `session_id` to keep state (variables, files) between calls; a variable \
                 named `result` (or the value of a last expression) is returned as JSON. \
                 `list_sessions` and `kill_session` manage sessions; `list_files`, `read_file` \
                 and `write_file` reach a live session's workspace between calls.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let mut all = tools();
        // The host tools the code itself can call, so that a model writes code that uses them.
        if let Some(note) = crate::pipeline::tools::describe_for_models(self.manager.policy()) {
            if let Some(t) = all.iter_mut().find(|t| t.name == "execute_code") {
                let text = format!("{}{note}", t.description.as_deref().unwrap_or_default());
                t.description = Some(text.into());
            }
        }
        Ok(ListToolsResult::with_all_items(all))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let args = request.arguments.unwrap_or_default();
        let result = match request.name.as_ref() {
            "execute_code" => {
                let cancelled = context.ct.clone().cancelled_owned();
                self.execute_code(args, context.peer.clone(), cancelled)
                    .await
            }
            "list_sessions" => self.list_sessions(args).await,
            "kill_session" => self.kill_session(args).await,
            "list_files" | "read_file" | "write_file" => {
                self.file_tool(request.name.as_ref(), args).await
            }
            other => {
                return Err(McpError::invalid_params(
                    format!(
                    "unknown tool {other:?}; available: execute_code, list_sessions, kill_session, list_files, read_file, write_file"
                ),
                    None,
                ))
            }
        };
        Ok(CallToolResponse::from(result))
    }

    async fn on_custom_request(
        &self,
        request: CustomRequest,
        _context: RequestContext<RoleServer>,
    ) -> Result<CustomResult, McpError> {
        Err(McpError::new(
            ErrorCode::METHOD_NOT_FOUND,
            format!(
                "method not found: {}; this server offers tools/list and tools/call",
                request.method
            ),
            None,
        ))
    }
}

/// Approval over MCP: an elicitation request (form mode) to the client, showing the code. Accept
/// approves (with `trust_session` checked, the session is trusted from then on); decline or
/// cancel denies. A client that did not declare the elicitation capability cannot be asked, and
/// the execution is denied with a message saying so.
struct ElicitingApprover {
    peer: Peer<RoleServer>,
}

impl Approver for ElicitingApprover {
    fn decide(&self, request: ApprovalRequest) -> futures_util::future::BoxFuture<'_, Decision> {
        Box::pin(async move {
            if !self
                .peer
                .supported_elicitation_modes()
                .contains(&ElicitationMode::Form)
            {
                return Decision::Deny(
                    "approval is required, but this MCP client did not declare the elicitation capability, so no one can be asked".into(),
                );
            }
            let mut properties = std::collections::BTreeMap::new();
            properties.insert(
                "trust_session".to_string(),
                rmcp::model::PrimitiveSchemaDefinition::Boolean(
                    rmcp::model::BooleanSchema::new()
                        .description("Also approve later executions in this session without asking")
                        .with_default(false),
                ),
            );
            let params = rmcp::model::ElicitRequestParams::FormElicitationParams {
                meta: None,
                message: request.prompt_text(),
                requested_schema: rmcp::model::ElicitationSchema::new(properties),
            };
            match self.peer.create_elicitation(params).await {
                Ok(r) => decision_from_elicitation(r.action, r.content.as_ref()),
                Err(e) => Decision::Deny(format!("the approval request to the client failed: {e}")),
            }
        })
    }
}

/// Host tools over MCP: a `host_exec` command on a notify list is told to the client as a log
/// message (level `notice`, logger `sandpit`); `http` tools cannot be answered here (the
/// default refusal says so).
struct McpToolFrontend {
    peer: Peer<RoleServer>,
}

impl crate::pipeline::tools::ToolFrontend for McpToolFrontend {
    fn notify(&self, notice: &crate::pipeline::tools::ToolNotice) {
        let peer = self.peer.clone();
        let data = json!({ "message": notice.text(), "tool": notice.tool, "command": notice.command, "session_id": notice.session_id });
        tokio::spawn(async move {
            // Logging is the protocol's way to tell a client's user something unasked.
            #[allow(deprecated)]
            let params = rmcp::model::LoggingMessageNotificationParam::new(
                rmcp::model::LoggingLevel::Notice,
                data,
            )
            .with_logger("sandpit");
            #[allow(deprecated)]
            let sent = peer.notify_logging_message(params).await;
            if let Err(e) = sent {
                tracing::debug!(error = %e, "could not send a tool notice to the MCP client");
            }
        });
    }
}

fn decision_from_elicitation(
    action: rmcp::model::ElicitationAction,
    content: Option<&Value>,
) -> Decision {
    use rmcp::model::ElicitationAction;
    match action {
        ElicitationAction::Accept => {
            if content
                .and_then(|c| c.get("trust_session"))
                .and_then(Value::as_bool)
                == Some(true)
            {
                Decision::ApproveAndTrustSession
            } else {
                Decision::Approve
            }
        }
        ElicitationAction::Decline => Decision::Deny("declined by the user".into()),
        ElicitationAction::Cancel => Decision::Deny("cancelled by the user".into()),
        _ => Decision::Deny("the client answered with an action sandpit does not know".into()),
    }
}

impl SandpitMcp {
    /// `cancelled` completes when the client sends `notifications/cancelled` for this call: the
    /// running cell is then interrupted (the session keeps its state).
    async fn execute_code(
        &self,
        args: JsonObject,
        peer: Peer<RoleServer>,
        cancelled: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> CallToolResult {
        let req = match exec_request(args) {
            Ok(req) => req,
            Err(message) => return invalid_arguments("execute_code", &message),
        };
        tracing::debug!(language = %req.language, session = ?req.session_id, "execute_code");
        let cancel = Arc::new(tokio::sync::Notify::new());
        let watcher = {
            let cancel = cancel.clone();
            tokio::spawn(async move {
                cancelled.await;
                cancel.notify_one();
            })
        };
        let via = Via {
            interface: "mcp",
            approver: Some(Arc::new(ElicitingApprover { peer: peer.clone() })),
            cancel: Some(cancel.clone()),
            workspace: None,
            tools: Some(Arc::new(McpToolFrontend { peer })),
        };
        let result = self.manager.execute_via(req, None, via).await;
        watcher.abort();
        let text = render_result(&result);
        let structured = match serde_json::to_value(&result) {
            Ok(v) => v,
            Err(e) => {
                return tool_error(
                    format!("internal error: the result could not be serialized: {e}"),
                    None,
                )
            }
        };
        let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
        out.structured_content = Some(structured);
        out.is_error = Some(result.status != Status::Ok);
        out
    }

    async fn list_sessions(&self, args: JsonObject) -> CallToolResult {
        if let Err(message) = check_arg_names(&args, &[]) {
            return invalid_arguments("list_sessions", &message);
        }
        let sessions = self.manager.list(MCP_USER).await;
        let text = if sessions.is_empty() {
            "no sessions".to_string()
        } else {
            sessions
                .iter()
                .map(|s| {
                    format!(
                        "{} ({}, {}, {}): {} execution(s), created {}, last used {}",
                        s.session_id,
                        s.language,
                        s.backend,
                        s.state,
                        s.execution_count,
                        s.created_at,
                        s.last_used_at
                    )
                })
                .collect::<Vec<_>>()
                .join("\n")
        };
        let structured = json!({ "sessions": sessions });
        let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
        out.structured_content = Some(structured);
        out
    }

    async fn kill_session(&self, args: JsonObject) -> CallToolResult {
        if let Err(message) = check_arg_names(&args, &["session_id"]) {
            return invalid_arguments("kill_session", &message);
        }
        let id = match args.get("session_id") {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            Some(_) => {
                return invalid_arguments("kill_session", "`session_id` must be a non-empty string")
            }
            None => {
                return invalid_arguments("kill_session", "missing required argument `session_id`")
            }
        };
        match self.manager.kill(MCP_USER, &id).await {
            Ok(killed) => {
                let text = if killed {
                    format!("session {id} killed")
                } else {
                    format!("no session {id}")
                };
                let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
                out.structured_content = Some(json!({ "killed": killed }));
                out
            }
            Err(e) => tool_error(
                e.message_with_hint(),
                Some(json!({ "error": { "code": e.code(), "message": e.message_with_hint() } })),
            ),
        }
    }
}

impl SandpitMcp {
    /// `list_files`, `read_file`, `write_file`: the files API on a live session's workspace.
    async fn file_tool(&self, tool: &str, args: JsonObject) -> CallToolResult {
        let allowed: &[&str] = match tool {
            "list_files" => &["session_id", "dir"],
            "read_file" => &["session_id", "path"],
            _ => &["session_id", "path", "content", "encoding"],
        };
        if let Err(message) = check_arg_names(&args, allowed) {
            return invalid_arguments(tool, &message);
        }
        let text_arg = |name: &str, required: bool| -> Result<String, String> {
            match args.get(name) {
                Some(Value::String(s)) => Ok(s.clone()),
                Some(_) => Err(format!("`{name}` must be a string")),
                None if required => Err(format!("missing required argument `{name}`")),
                None => Ok(String::new()),
            }
        };
        let fail = |e: crate::Error| {
            tool_error(
                e.message_with_hint(),
                Some(json!({ "error": { "code": e.code(), "message": e.message_with_hint() } })),
            )
        };
        let id = match text_arg("session_id", true) {
            Ok(id) => id,
            Err(m) => return invalid_arguments(tool, &m),
        };
        match tool {
            "list_files" => {
                let dir = text_arg("dir", false).unwrap_or_default();
                match self.manager.list_files(MCP_USER, &id, &dir).await {
                    Ok(files) => {
                        let text = if files.is_empty() {
                            "(empty)".to_string()
                        } else {
                            files
                                .iter()
                                .map(|f| match f.kind.as_str() {
                                    "file" => format!("{} ({} bytes)", f.path, f.size),
                                    kind => format!("{} ({kind})", f.path),
                                })
                                .collect::<Vec<_>>()
                                .join("\n")
                        };
                        let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
                        out.structured_content = Some(json!({ "files": files }));
                        out
                    }
                    Err(e) => fail(e),
                }
            }
            "read_file" => {
                let path = match text_arg("path", true) {
                    Ok(p) => p,
                    Err(m) => return invalid_arguments(tool, &m),
                };
                match self.manager.read_file(MCP_USER, &id, &path).await {
                    Ok(f) => {
                        let text = match f.encoding {
                            crate::types::Encoding::Utf8 => f.content.clone(),
                            crate::types::Encoding::Base64 => format!(
                                "{} is binary ({} bytes); its base64 is in the structured content",
                                f.path, f.size
                            ),
                        };
                        let mut out = CallToolResult::success(vec![ContentBlock::text(text)]);
                        out.structured_content = serde_json::to_value(&f).ok();
                        out
                    }
                    Err(e) => fail(e),
                }
            }
            _ => {
                let (path, content) = match (text_arg("path", true), text_arg("content", true)) {
                    (Ok(p), Ok(c)) => (p, c),
                    (Err(m), _) | (_, Err(m)) => return invalid_arguments(tool, &m),
                };
                let encoding = match args.get("encoding").and_then(Value::as_str) {
                    None | Some("utf8") => crate::types::Encoding::Utf8,
                    Some("base64") => crate::types::Encoding::Base64,
                    Some(other) => {
                        return invalid_arguments(
                            tool,
                            &format!("`encoding` {other:?} must be utf8 or base64"),
                        )
                    }
                };
                let spec = crate::types::FileSpec {
                    path: path.clone(),
                    content,
                    encoding,
                };
                match self.manager.write_file(MCP_USER, &id, spec).await {
                    Ok(size) => {
                        let mut out = CallToolResult::success(vec![ContentBlock::text(format!(
                            "wrote {path} ({size} bytes) in session {id}'s workspace"
                        ))]);
                        out.structured_content = Some(json!({ "path": path, "size": size }));
                        out
                    }
                    Err(e) => fail(e),
                }
            }
        }
    }
}

/// Builds the request from `execute_code`'s arguments, rejecting unknown names.
fn exec_request(mut args: JsonObject) -> Result<ExecRequest, String> {
    check_arg_names(&args, EXECUTE_ARGS)?;
    for required in ["language", "code"] {
        if !args.contains_key(required) {
            return Err(format!("missing required argument `{required}`"));
        }
    }
    args.insert("user".to_string(), Value::String(MCP_USER.to_string()));
    serde_json::from_value(Value::Object(args)).map_err(|e| e.to_string())
}

/// Rejects argument names not in `allowed`, naming the ones that are.
fn check_arg_names(args: &JsonObject, allowed: &[&str]) -> Result<(), String> {
    let unknown: Vec<&str> = args
        .keys()
        .map(String::as_str)
        .filter(|k| !allowed.contains(k))
        .collect();
    if unknown.is_empty() {
        return Ok(());
    }
    let expected = if allowed.is_empty() {
        "this tool takes no arguments".to_string()
    } else {
        format!("expected: {}", allowed.join(", "))
    };
    Err(format!(
        "unknown argument(s) {}; {expected}",
        unknown.join(", ")
    ))
}

/// An `isError` result for arguments that do not fit the tool's schema.
fn invalid_arguments(tool: &str, message: &str) -> CallToolResult {
    let message = format!("invalid arguments for {tool}: {message}");
    let structured = json!({ "error": { "code": "INVALID_REQUEST", "message": message } });
    tool_error(message, Some(structured))
}

fn tool_error(text: String, structured: Option<Value>) -> CallToolResult {
    let mut out = CallToolResult::error(vec![ContentBlock::text(text)]);
    out.structured_content = structured;
    out
}

/// The compact text a model reads: stdout, labelled stderr, exit code, notices, the error, the
/// exception and the `result` value.
fn render_result(r: &ExecResult) -> String {
    let mut parts: Vec<String> = Vec::new();
    if !r.stdout.is_empty() {
        parts.push(r.stdout.trim_end_matches('\n').to_string());
    }
    if !r.stderr.is_empty() {
        parts.push(format!("stderr:\n{}", r.stderr.trim_end_matches('\n')));
    }
    if let Some(code) = r.exit_code.filter(|c| *c != 0) {
        parts.push(format!("exit code: {code}"));
    }
    match r.status {
        Status::Timeout => parts.push("status: timeout (the execution was stopped)".to_string()),
        Status::Killed => parts.push("status: killed (a limit or a signal ended it)".to_string()),
        Status::Blocked => parts.push("status: blocked (refused before running)".to_string()),
        Status::Ok | Status::Error => {}
    }
    if r.truncated {
        parts.push("[output truncated: a stream exceeded the output limit]".to_string());
    }
    if r.session_restarted {
        parts.push("[the session was restarted: earlier state is lost]".to_string());
    }
    if let Some(err) = &r.error {
        let code = serde_json::to_value(err.code)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        parts.push(format!("error ({code}): {}", err.message));
    }
    if let Some(exc) = &r.exception {
        if exc.message.is_empty() {
            parts.push(exc.kind.clone());
        } else {
            parts.push(format!("{}: {}", exc.kind, exc.message));
        }
    }
    if let Some(value) = r.result.as_ref().filter(|v| !v.is_null()) {
        parts.push(format!("result = {value}"));
    }
    if parts.is_empty() {
        "(no output)".to_string()
    } else {
        parts.join("\n")
    }
}

fn schema(value: Value) -> JsonObject {
    match value {
        Value::Object(map) => map,
        _ => JsonObject::new(),
    }
}

/// The three tools and their input schemas (derived from [`ExecRequest`]).
fn tools() -> Vec<Tool> {
    let execute = schema(json!({
        "type": "object",
        "properties": {
            "language": {
                "type": "string",
                "enum": ["python", "javascript", "bash"],
                "description": "The language of `code` (aliases accepted: py, js, node, sh, shell)."
            },
            "code": { "type": "string", "description": "The code to run." },
            "session_id": {
                "type": "string",
                "description": "A persistent session: created on first use, reused after (variables and files survive). Omit for a one-off run."
            },
            "timeout_ms": {
                "type": "integer",
                "minimum": 100,
                "maximum": 300000,
                "default": 30000,
                "description": "Wall-clock limit for this execution."
            },
            "input_data": {
                "type": "object",
                "description": "python/javascript: each key becomes a global variable; bash: an environment variable."
            },
            "files": {
                "type": "array",
                "description": "Files written into the workspace before the code runs.",
                "items": {
                    "type": "object",
                    "properties": {
                        "path": { "type": "string", "description": "Relative to the workspace." },
                        "content": { "type": "string" },
                        "encoding": { "type": "string", "enum": ["utf8", "base64"], "default": "utf8" }
                    },
                    "required": ["path", "content"],
                    "additionalProperties": false
                }
            },
            "output_files": {
                "type": "array",
                "items": { "type": "string" },
                "description": "Workspace paths read back after the run."
            },
            "packages": {
                "type": "array",
                "items": { "type": "string" },
                "description": "pip / npm packages to install into the session before running."
            }
        },
        "required": ["language", "code"],
        "additionalProperties": false
    }));
    let list = schema(json!({
        "type": "object",
        "properties": {},
        "additionalProperties": false
    }));
    let kill = schema(json!({
        "type": "object",
        "properties": {
            "session_id": { "type": "string", "description": "The session to kill." }
        },
        "required": ["session_id"],
        "additionalProperties": false
    }));
    vec![
        Tool::new(
            "execute_code",
            "Run Python, JavaScript or bash code in a sandbox and return stdout, stderr, the \
             exit code, any exception and the value of a variable named `result`.",
            execute,
        )
        .with_title("Execute code")
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(false)
                .idempotent(false)
                .open_world(false),
        ),
        Tool::new(
            "list_sessions",
            "List your persistent sessions with their language, state and usage.",
            list,
        )
        .with_title("List sessions")
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "list_files",
            "List the files of a live session's workspace (the code's working directory), or of \
             a directory in it.",
            schema(json!({
                "type": "object",
                "properties": {
                    "session_id": { "type": "string", "description": "A live session." },
                    "dir": { "type": "string", "description": "A directory relative to the workspace (default: the workspace)." }
                },
                "required": ["session_id"],
                "additionalProperties": false
            })),
        )
        .with_title("List files")
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "read_file",
            "Read one file of a live session's workspace (at most 10 MiB; text as is, binary \
             as base64 in the structured content).",
            schema(json!({
                "type": "object",
                "properties": {
                    "session_id": { "type": "string", "description": "A live session." },
                    "path": { "type": "string", "description": "Relative to the workspace." }
                },
                "required": ["session_id", "path"],
                "additionalProperties": false
            })),
        )
        .with_title("Read file")
        .with_annotations(ToolAnnotations::new().read_only(true)),
        Tool::new(
            "write_file",
            "Write one file into a live session's workspace (parents created, an existing file \
             replaced), for the session's next cells to use.",
            schema(json!({
                "type": "object",
                "properties": {
                    "session_id": { "type": "string", "description": "A live session." },
                    "path": { "type": "string", "description": "Relative to the workspace." },
                    "content": { "type": "string" },
                    "encoding": { "type": "string", "enum": ["utf8", "base64"], "default": "utf8" }
                },
                "required": ["session_id", "path", "content"],
                "additionalProperties": false
            })),
        )
        .with_title("Write file")
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(false)
                .idempotent(true)
                .open_world(false),
        ),
        Tool::new(
            "kill_session",
            "Kill a persistent session and free its sandbox; its state is lost.",
            kill,
        )
        .with_title("Kill session")
        .with_annotations(
            ToolAnnotations::new()
                .read_only(false)
                .destructive(true)
                .idempotent(true),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exec_request_rejects_unknown_and_missing_arguments() {
        let args = schema(json!({"language": "py", "code": "1", "bogus": 1}));
        let err = exec_request(args).unwrap_err();
        assert!(err.contains("bogus"), "{err}");
        let args = schema(json!({"language": "py"}));
        assert!(exec_request(args).unwrap_err().contains("`code`"));
        let args = schema(json!({"language": "py", "code": "1", "user": "x"}));
        assert!(exec_request(args).unwrap_err().contains("user"));
        let args = schema(json!({"language": "js", "code": "1", "session_id": "a"}));
        let req = exec_request(args).unwrap();
        assert_eq!(req.user, "default");
        assert_eq!(req.session_id.as_deref(), Some("a"));
    }

    #[test]
    fn tools_have_object_schemas() {
        let tools = tools();
        assert_eq!(tools.len(), 6);
        for t in tools {
            assert_eq!(t.input_schema.get("type"), Some(&json!("object")));
        }
    }
}
