//! `sandpit serve`: the HTTP API (`interface.md` §5).
//!
//! Routes: `POST /v1/execute` (JSON, or a server-sent event stream with
//! `Accept: text/event-stream`), `GET /v1/sessions`, `DELETE /v1/sessions/{id}`, `GET /healthz`,
//! `GET /metrics` (Prometheus text), `GET /openapi.json`. Every error is JSON
//! `{error: {code, message}}`. Every request passes the Host/Origin check (against DNS
//! rebinding) and, when a token is set, the bearer-token check (all routes but `/healthz`).

use crate::error::{Error, ErrorCode};
use crate::pipeline::approval::{ApprovalRequest, Approver, Decision, PendingApprovals};
use crate::session::manager::{SessionInfo, SessionManager, Via};
use crate::session::{OutputEvent, StreamKind};
use crate::types::{ExecRequest, ExecResult, Status};
use axum::body::Bytes;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{FromRequest, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::future::IntoFuture as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;
use utoipa::OpenApi;

/// Where the server listens.
#[derive(Debug, Clone)]
pub enum Listen {
    Tcp(String),
    Unix(std::path::PathBuf),
}

/// Request bodies larger than this are refused with 413.
pub const BODY_LIMIT: usize = 10 * 1024 * 1024;

/// How long a graceful shutdown waits for in-flight requests before giving up on them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

// ---------------------------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------------------------

/// The `error` member of an error response.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorDetail {
    /// An `interface.md` §1 error code, or for transport-level refusals one of `UNAUTHORIZED`,
    /// `FORBIDDEN`, `NOT_FOUND`, `METHOD_NOT_ALLOWED`, `PAYLOAD_TOO_LARGE`.
    pub code: String,
    pub message: String,
}

/// Every error response: `{error: {code, message}}`.
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

/// An error answer: a status and a JSON body.
#[derive(Debug)]
struct ApiError {
    status: StatusCode,
    code: String,
    message: String,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code: code.to_string(),
            message: message.into(),
        }
    }

    fn from_code(code: ErrorCode, message: String) -> Self {
        ApiError {
            status: status_for(code),
            code: code_str(code),
            message,
        }
    }

    fn from_error(e: &Error) -> Self {
        Self::from_code(e.code(), e.message_with_hint())
    }

    fn body(&self) -> ErrorBody {
        ErrorBody {
            error: ErrorDetail {
                code: self.code.clone(),
                message: self.message.clone(),
            },
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body())).into_response()
    }
}

/// The HTTP status for a request that never ran because of `code`.
fn status_for(code: ErrorCode) -> StatusCode {
    match code {
        ErrorCode::InvalidRequest => StatusCode::BAD_REQUEST,
        ErrorCode::PolicyDenied | ErrorCode::SecurityBlocked | ErrorCode::SessionForbidden => {
            StatusCode::FORBIDDEN
        }
        ErrorCode::SessionNotFound => StatusCode::NOT_FOUND,
        ErrorCode::SessionLanguageMismatch => StatusCode::CONFLICT,
        ErrorCode::SessionLimit | ErrorCode::QueueFull => StatusCode::TOO_MANY_REQUESTS,
        ErrorCode::BackendUnavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorCode::Timeout => StatusCode::GATEWAY_TIMEOUT,
        ErrorCode::PackageInstallFailed | ErrorCode::SandboxError => {
            StatusCode::INTERNAL_SERVER_ERROR
        }
    }
}

fn code_str(code: ErrorCode) -> String {
    serde_json::to_value(code)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| format!("{code:?}"))
}

fn status_str(s: Status) -> &'static str {
    match s {
        Status::Ok => "ok",
        Status::Error => "error",
        Status::Timeout => "timeout",
        Status::Blocked => "blocked",
        Status::Killed => "killed",
    }
}

/// A JSON body extractor whose rejections are JSON errors (never axum's plain text).
struct JsonBody<T>(T);

impl<S, T> FromRequest<S> for JsonBody<T>
where
    S: Send + Sync,
    T: serde::de::DeserializeOwned,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(req, state).await.map_err(|e| {
            if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "PAYLOAD_TOO_LARGE",
                    format!("the request body is larger than {BODY_LIMIT} bytes"),
                )
            } else {
                ApiError::new(
                    StatusCode::BAD_REQUEST,
                    "INVALID_REQUEST",
                    format!("could not read the request body: {}", e.body_text()),
                )
            }
        })?;
        serde_json::from_slice(&bytes).map(JsonBody).map_err(|e| {
            ApiError::from_code(
                ErrorCode::InvalidRequest,
                format!("invalid request: the body is not a valid JSON ExecRequest: {e}"),
            )
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Metrics
// ---------------------------------------------------------------------------------------------

const BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

#[derive(Default)]
struct MetricsInner {
    executions: BTreeMap<(String, String), u64>,
    /// Cumulative counts per bucket of `BUCKETS`.
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
    /// Executions the analyzer refused.
    analyzer_blocks: u64,
}

#[derive(Default)]
struct Metrics {
    inner: std::sync::Mutex<MetricsInner>,
}

impl Metrics {
    fn record(&self, r: &ExecResult) {
        let mut m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        *m.executions
            .entry((
                r.language.as_str().to_string(),
                status_str(r.status).to_string(),
            ))
            .or_insert(0) += 1;
        let secs = r.duration_ms / 1000.0;
        for (i, b) in BUCKETS.iter().enumerate() {
            if secs <= *b {
                m.buckets[i] += 1;
            }
        }
        m.count += 1;
        m.sum += secs;
        if r.error.as_ref().map(|e| e.code) == Some(ErrorCode::SecurityBlocked) {
            m.analyzer_blocks += 1;
        }
    }

    fn render(&self, sessions: usize, queue: usize) -> String {
        use std::fmt::Write as _;
        let m = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let mut s = String::new();
        s.push_str("# HELP sandpit_executions_total Executions by language and status.\n");
        s.push_str("# TYPE sandpit_executions_total counter\n");
        for ((lang, status), n) in &m.executions {
            let _ = writeln!(
                s,
                "sandpit_executions_total{{language=\"{lang}\",status=\"{status}\"}} {n}"
            );
        }
        s.push_str("# HELP sandpit_execution_duration_seconds Wall time of executions.\n");
        s.push_str("# TYPE sandpit_execution_duration_seconds histogram\n");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                s,
                "sandpit_execution_duration_seconds_bucket{{le=\"{b}\"}} {}",
                m.buckets[i]
            );
        }
        let _ = writeln!(
            s,
            "sandpit_execution_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            m.count
        );
        let _ = writeln!(s, "sandpit_execution_duration_seconds_sum {}", m.sum);
        let _ = writeln!(s, "sandpit_execution_duration_seconds_count {}", m.count);
        s.push_str("# HELP sandpit_analyzer_blocks_total Executions the analyzer refused.\n");
        s.push_str("# TYPE sandpit_analyzer_blocks_total counter\n");
        let _ = writeln!(s, "sandpit_analyzer_blocks_total {}", m.analyzer_blocks);
        s.push_str("# HELP sandpit_active_sessions Live sessions.\n");
        s.push_str("# TYPE sandpit_active_sessions gauge\n");
        let _ = writeln!(s, "sandpit_active_sessions {sessions}");
        s.push_str("# HELP sandpit_queue_length Executions waiting for a slot.\n");
        s.push_str("# TYPE sandpit_queue_length gauge\n");
        let _ = writeln!(s, "sandpit_queue_length {queue}");
        s
    }
}

// ---------------------------------------------------------------------------------------------
// State and guards
// ---------------------------------------------------------------------------------------------

#[derive(Clone)]
struct AppState {
    manager: Arc<SessionManager>,
    token: Option<Arc<str>>,
    /// Accepted `Host` values (lowercase, `host:port`), or for a Unix socket bare host names.
    hosts: Arc<Vec<String>>,
    unix: bool,
    metrics: Arc<Metrics>,
    /// Executions waiting for an operator's decision (`approval.mode` `auto` or `ask`).
    approvals: Arc<PendingApprovals>,
}

/// Compares two byte strings in time independent of where they differ.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = u8::from(a.len() != b.len());
    for i in 0..a.len().max(b.len()) {
        let x = a.get(i).copied().unwrap_or(0);
        let y = b.get(i).copied().unwrap_or(0);
        diff |= x ^ y;
    }
    diff == 0
}

impl AppState {
    fn host_ok(&self, host: &str) -> bool {
        let host = host.trim().to_ascii_lowercase();
        if self.unix {
            // curl --unix-socket and most clients send `localhost`; any port is fine here.
            let name = strip_port(&host);
            return self.hosts.iter().any(|h| h == name);
        }
        self.hosts.contains(&host)
    }

    fn check_host_origin(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let forbidden = |what: &str| {
            ApiError::new(
                StatusCode::FORBIDDEN,
                "FORBIDDEN",
                format!(
                    "{what} is not one this server answers to (protection against DNS rebinding); \
                     use http://localhost:PORT or the address the server listens on"
                ),
            )
        };
        match headers.get(header::HOST).map(|h| h.to_str()) {
            Some(Ok(h)) if self.host_ok(h) => {}
            None if self.unix => {}
            Some(Ok(h)) => return Err(forbidden(&format!("Host {h:?}"))),
            _ => return Err(forbidden("the request's Host")),
        }
        if let Some(origin) = headers.get(header::ORIGIN) {
            let ok = origin
                .to_str()
                .ok()
                .and_then(|o| o.strip_prefix("http://"))
                .is_some_and(|h| self.host_ok(h));
            if !ok {
                let o = String::from_utf8_lossy(origin.as_bytes()).into_owned();
                return Err(forbidden(&format!("Origin {o:?}")));
            }
        }
        Ok(())
    }

    fn check_token(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let Some(token) = &self.token else {
            return Ok(());
        };
        let given = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim);
        match given {
            Some(g) if constant_time_eq(g.as_bytes(), token.as_bytes()) => Ok(()),
            _ => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "UNAUTHORIZED",
                "a valid bearer token is required: send `Authorization: Bearer <token>` \
                 (the token the server was started with, --token or SANDPIT_TOKEN)",
            )),
        }
    }
}

fn strip_port(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        // [v6]:port
        return match rest.find(']') {
            Some(i) => &host[..i + 2],
            None => host,
        };
    }
    match host.rsplit_once(':') {
        Some((h, p)) if p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => host,
    }
}

/// Host/Origin check, then the bearer token (except for `/healthz`), then one log line.
async fn guard(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let start = Instant::now();
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let checked = state.check_host_origin(req.headers()).and_then(|()| {
        if path == "/healthz" {
            Ok(())
        } else {
            state.check_token(req.headers())
        }
    });
    let response = match checked {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    };
    tracing::info!(
        %method,
        %path,
        status = response.status().as_u16(),
        ms = start.elapsed().as_millis() as u64,
        "http request"
    );
    response
}

// ---------------------------------------------------------------------------------------------
// Handlers
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Deserialize)]
struct UserQuery {
    user: Option<String>,
}

/// `GET /v1/sessions`: `{sessions: [...]}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct SessionList {
    pub sessions: Vec<SessionInfo>,
}

/// `DELETE /v1/sessions/{id}`: `{killed: true}`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Killed {
    pub killed: bool,
}

/// `GET /healthz`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Health {
    pub status: String,
    pub backend: String,
}

fn bad_query(e: QueryRejection) -> Response {
    ApiError::from_code(
        ErrorCode::InvalidRequest,
        format!("invalid request: bad query string: {}", e.body_text()),
    )
    .into_response()
}

fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
}

/// Runs code: one-shot, or in a persistent session with `session_id`.
#[utoipa::path(
    post,
    path = "/v1/execute",
    request_body = ExecRequest,
    responses(
        (status = 200, description = "The execution ran (or was blocked by the sandbox pipeline); \
            with `Accept: text/event-stream` a stream of events `execution_start`, \
            `output_chunk` {stream, data}, `execution_end` {result}, `execution_error` {error}",
            body = ExecResult),
        (status = 400, description = "Invalid request", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 403, description = "Refused by policy, analyzer, session owner or Host check", body = ErrorBody),
        (status = 404, description = "Session not found", body = ErrorBody),
        (status = 409, description = "Session runs another language", body = ErrorBody),
        (status = 413, description = "Body larger than 10 MiB", body = ErrorBody),
        (status = 429, description = "Session limit or queue full", body = ErrorBody),
        (status = 503, description = "Backend unavailable", body = ErrorBody),
    )
)]
async fn execute(
    State(state): State<AppState>,
    headers: HeaderMap,
    JsonBody(req): JsonBody<ExecRequest>,
) -> Response {
    if wants_sse(&headers) {
        return execute_sse(state, req).into_response();
    }
    let via = Via {
        interface: "http",
        approver: Some(state.approvals.clone()),
        cancel: None,
    };
    let result = state.manager.execute_via(req, None, via).await;
    state.metrics.record(&result);
    match &result.error {
        Some(e) => ApiError::from_code(e.code, e.message.clone()).into_response(),
        None => Json(result).into_response(),
    }
}

fn chunk_event(ev: OutputEvent) -> Event {
    let stream = match ev.stream {
        StreamKind::Stdout => "stdout",
        StreamKind::Stderr => "stderr",
    };
    let data = serde_json::json!({
        "stream": stream,
        "data": String::from_utf8_lossy(&ev.data),
    });
    Event::default()
        .event("output_chunk")
        .data(data.to_string())
}

fn execute_sse(
    state: AppState,
    req: ExecRequest,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let (tx, rx) = mpsc::unbounded_channel::<Event>();
    let start = serde_json::json!({
        "session_id": req.session_id,
        "language": req.language,
    });
    let _ = tx.send(
        Event::default()
            .event("execution_start")
            .data(start.to_string()),
    );
    tokio::spawn(async move {
        let (otx, mut orx) = mpsc::unbounded_channel::<OutputEvent>();
        // Tells the client when its execution waits for an operator.
        // A client that disconnects interrupts its cell (the session keeps its state).
        let cancel = Arc::new(tokio::sync::Notify::new());
        let watcher = {
            let (tx, cancel) = (tx.clone(), cancel.clone());
            tokio::spawn(async move {
                tx.closed().await;
                cancel.notify_one();
            })
        };
        let via = Via {
            interface: "http",
            approver: Some(Arc::new(AnnouncingApprover {
                pending: state.approvals.clone(),
                events: tx.clone(),
            })),
            cancel: Some(cancel),
        };
        let run = state.manager.execute_via(req, Some(otx), via);
        tokio::pin!(run);
        let result = loop {
            tokio::select! {
                biased;
                Some(ev) = orx.recv() => { let _ = tx.send(chunk_event(ev)); }
                r = &mut run => break r,
            }
        };
        watcher.abort();
        while let Ok(ev) = orx.try_recv() {
            let _ = tx.send(chunk_event(ev));
        }
        state.metrics.record(&result);
        let last = match &result.error {
            Some(e) => {
                let body = serde_json::json!({ "error": { "code": e.code, "message": e.message } });
                Event::default()
                    .event("execution_error")
                    .data(body.to_string())
            }
            None => {
                let body = serde_json::json!({ "result": result });
                Event::default()
                    .event("execution_end")
                    .data(body.to_string())
            }
        };
        let _ = tx.send(last);
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|ev| (Ok::<_, Infallible>(ev), rx))
    });
    Sse::new(stream).keep_alive(KeepAlive::default())
}

/// The sessions the user owns.
#[utoipa::path(
    get,
    path = "/v1/sessions",
    params(("user" = Option<String>, Query, description = "owner (default `default`)")),
    responses(
        (status = 200, description = "The user's sessions", body = SessionList),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    )
)]
async fn list_sessions(
    State(state): State<AppState>,
    q: Result<Query<UserQuery>, QueryRejection>,
) -> Response {
    let user = match q {
        Ok(Query(q)) => q.user.unwrap_or_else(|| "default".into()),
        Err(e) => return bad_query(e),
    };
    let sessions = state.manager.list(&user).await;
    Json(SessionList { sessions }).into_response()
}

/// Kills one of the user's sessions.
#[utoipa::path(
    delete,
    path = "/v1/sessions/{id}",
    params(
        ("id" = String, Path, description = "session id"),
        ("user" = Option<String>, Query, description = "owner (default `default`)"),
    ),
    responses(
        (status = 200, description = "Killed", body = Killed),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 403, description = "The session belongs to another user", body = ErrorBody),
        (status = 404, description = "No such session", body = ErrorBody),
    )
)]
async fn kill_session(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    q: Result<Query<UserQuery>, QueryRejection>,
) -> Response {
    let user = match q {
        Ok(Query(q)) => q.user.unwrap_or_else(|| "default".into()),
        Err(e) => return bad_query(e),
    };
    let id = match id {
        Ok(Path(id)) => id,
        Err(e) => {
            return ApiError::from_code(
                ErrorCode::InvalidRequest,
                format!(
                    "invalid request: bad session id in the path: {}",
                    e.body_text()
                ),
            )
            .into_response()
        }
    };
    match state.manager.kill(&user, &id).await {
        Ok(true) => Json(Killed { killed: true }).into_response(),
        Ok(false) => ApiError::from_error(&Error::SessionNotFound(id)).into_response(),
        Err(e) => ApiError::from_error(&e).into_response(),
    }
}

/// `GET /v1/approvals`: `{approvals: [...]}`.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub struct ApprovalList {
    pub approvals: Vec<ApprovalRequest>,
}

/// `POST /v1/approvals/{id}`: `{resolved: true}`.
#[derive(Debug, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Resolved {
    pub resolved: bool,
}

/// Executions waiting for approval (`approval.mode` `auto` or `ask`), oldest first. The code is
/// shown redacted.
#[utoipa::path(
    get,
    path = "/v1/approvals",
    responses(
        (status = 200, description = "Pending approvals", body = ApprovalList),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
    )
)]
async fn list_approvals(State(state): State<AppState>) -> Json<ApprovalList> {
    Json(ApprovalList {
        approvals: state.approvals.list(),
    })
}

/// Decides a pending approval: `{"decision": "approve"}`, `{"decision":
/// "approve_and_trust_session"}` or `{"decision": "deny", "reason": "..."}`.
#[utoipa::path(
    post,
    path = "/v1/approvals/{id}",
    params(("id" = String, Path, description = "approval id")),
    request_body = Decision,
    responses(
        (status = 200, description = "Decided", body = Resolved),
        (status = 400, description = "Invalid decision", body = ErrorBody),
        (status = 401, description = "Missing or wrong bearer token", body = ErrorBody),
        (status = 404, description = "No such pending approval (decided, withdrawn or timed out)", body = ErrorBody),
    )
)]
async fn decide_approval(
    State(state): State<AppState>,
    id: Result<Path<String>, PathRejection>,
    JsonBody(decision): JsonBody<Decision>,
) -> Response {
    let Ok(Path(id)) = id else {
        return ApiError::from_code(
            ErrorCode::InvalidRequest,
            "invalid request: bad approval id".into(),
        )
        .into_response();
    };
    if state.approvals.resolve(&id, decision) {
        Json(Resolved { resolved: true }).into_response()
    } else {
        ApiError::new(
            StatusCode::NOT_FOUND,
            "NOT_FOUND",
            format!("no pending approval {id:?}: it was decided, withdrawn or timed out; GET /v1/approvals lists the pending ones"),
        )
        .into_response()
    }
}

/// For a streaming execute: announces the pending approval as an `approval_pending` event
/// (`{approval_id, code, findings}`), then waits like [`PendingApprovals`].
struct AnnouncingApprover {
    pending: Arc<PendingApprovals>,
    events: mpsc::UnboundedSender<Event>,
}

impl Approver for AnnouncingApprover {
    fn decide(&self, request: ApprovalRequest) -> futures_util::future::BoxFuture<'_, Decision> {
        let body = serde_json::json!({
            "approval_id": request.id,
            "code": request.code,
            "findings": request.findings,
        });
        let _ = self.events.send(
            Event::default()
                .event("approval_pending")
                .data(body.to_string()),
        );
        self.pending.decide(request)
    }
}

/// Liveness, and the backend in use (no token needed).
#[utoipa::path(get, path = "/healthz", responses((status = 200, body = Health)))]
async fn healthz(State(state): State<AppState>) -> Json<Health> {
    Json(Health {
        status: "ok".into(),
        backend: state.manager.backend_name().into(),
    })
}

/// Prometheus metrics (text exposition format).
#[utoipa::path(get, path = "/metrics", responses((status = 200, description = "Prometheus text", content_type = "text/plain")))]
async fn metrics(State(state): State<AppState>) -> Response {
    let sessions = state.manager.session_count().await;
    let text = state.metrics.render(sessions, state.manager.queue_len());
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "sandpit",
        description = "Run untrusted Python, JavaScript and bash in sandboxes"
    ),
    paths(
        execute,
        list_sessions,
        kill_session,
        list_approvals,
        decide_approval,
        healthz,
        metrics,
        openapi_json
    ),
    components(schemas(
        ApprovalList,
        ApprovalRequest,
        Decision,
        Resolved,
        ExecRequest,
        ExecResult,
        SessionInfo,
        SessionList,
        Killed,
        Health,
        ErrorBody,
        ErrorDetail
    )),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

/// Declares the bearer token (required off loopback; see the README) in the document.
struct BearerAuth;

impl utoipa::Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "required when the server listens off loopback, or when started with --token",
                    ))
                    .build(),
            ),
        );
    }
}

/// This document.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "OpenAPI 3.1 document")))]
async fn openapi_json() -> Response {
    Json(ApiDoc::openapi()).into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "NOT_FOUND",
        "no such route; see /openapi.json for the API",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "METHOD_NOT_ALLOWED",
        "this route does not take that method; see /openapi.json for the API",
    )
}

fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/execute", post(execute))
        .route("/v1/sessions", get(list_sessions))
        .route("/v1/sessions/{id}", delete(kill_session))
        .route("/v1/approvals", get(list_approvals))
        .route("/v1/approvals/{id}", post(decide_approval))
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(openapi_json))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(axum::extract::DefaultBodyLimit::max(BODY_LIMIT))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard))
        .with_state(state)
}

// ---------------------------------------------------------------------------------------------
// Serving
// ---------------------------------------------------------------------------------------------

async fn shutdown_signal() -> crate::Result<()> {
    #[cfg(unix)]
    {
        let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
            .map_err(|e| Error::io("installing the SIGTERM handler", e))?;
        tokio::select! {
            r = tokio::signal::ctrl_c() => r.map_err(|e| Error::io("waiting for SIGINT", e))?,
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    tokio::signal::ctrl_c()
        .await
        .map_err(|e| Error::io("waiting for Ctrl-C", e))?;
    Ok(())
}

/// Runs `app` on `listener` until a signal, then shuts down gracefully (bounded wait).
async fn run<L>(listener: L, app: Router) -> crate::Result<()>
where
    L: axum::serve::Listener,
    L::Addr: std::fmt::Debug,
{
    let stop = Arc::new(tokio::sync::Notify::new());
    let stop2 = stop.clone();
    let server = axum::serve(listener, app)
        .with_graceful_shutdown(async move { stop2.notified().await })
        .into_future();
    tokio::pin!(server);
    tokio::select! {
        r = &mut server => r.map_err(|e| Error::io("serving HTTP", e)),
        s = shutdown_signal() => {
            s?;
            tracing::info!("shutting down the HTTP server");
            stop.notify_one();
            match tokio::time::timeout(SHUTDOWN_GRACE, &mut server).await {
                Ok(r) => r.map_err(|e| Error::io("serving HTTP", e)),
                Err(_) => {
                    tracing::warn!("in-flight requests did not finish in time; stopping anyway");
                    Ok(())
                }
            }
        }
    }
}

fn loopback_hosts(port: Option<u16>) -> Vec<String> {
    ["localhost", "127.0.0.1", "[::1]"]
        .iter()
        .map(|h| match port {
            Some(p) => format!("{h}:{p}"),
            None => (*h).to_string(),
        })
        .collect()
}

/// Serves the HTTP API until SIGINT/SIGTERM, then returns (the caller tears down the sessions).
pub async fn serve(
    manager: Arc<SessionManager>,
    listen: Listen,
    token: Option<String>,
) -> crate::Result<()> {
    let token: Option<Arc<str>> = token.filter(|t| !t.trim().is_empty()).map(Into::into);
    let metrics = Arc::new(Metrics::default());
    match listen {
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(&addr)
                .await
                .map_err(|e| Error::io(format!("listening on {addr}"), e))?;
            let local: SocketAddr = listener
                .local_addr()
                .map_err(|e| Error::io(format!("listening on {addr}"), e))?;
            if !local.ip().is_loopback() && token.is_none() {
                return Err(Error::Config(format!(
                    "refusing to listen on {addr} (not loopback) without a bearer token: \
                     pass --token TOKEN or set SANDPIT_TOKEN, or listen on 127.0.0.1"
                )));
            }
            let port = local.port();
            let mut hosts = loopback_hosts(Some(port));
            let listen_host = strip_port(&addr).to_ascii_lowercase();
            for h in [listen_host, local.ip().to_string()] {
                let h = if h.contains(':') && !h.starts_with('[') {
                    format!("[{h}]")
                } else {
                    h
                };
                if !h.is_empty() {
                    hosts.push(format!("{h}:{port}"));
                }
            }
            if port == 80 {
                hosts.extend(hosts.clone().iter().map(|h| strip_port(h).to_string()));
            }
            hosts.sort();
            hosts.dedup();
            let state = AppState {
                manager,
                token,
                hosts: Arc::new(hosts),
                unix: false,
                metrics,
                approvals: Arc::new(PendingApprovals::new()),
            };
            eprintln!("sandpit: listening on http://{local}");
            run(listener, router(state)).await
        }
        Listen::Unix(path) => serve_unix(manager, path, token, metrics).await,
    }
}

#[cfg(unix)]
async fn serve_unix(
    manager: Arc<SessionManager>,
    path: PathBuf,
    token: Option<Arc<str>>,
    metrics: Arc<Metrics>,
) -> crate::Result<()> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    if let Ok(meta) = std::fs::symlink_metadata(&path) {
        if meta.file_type().is_socket() {
            std::fs::remove_file(&path).map_err(|e| {
                Error::io(format!("removing the stale socket {}", path.display()), e)
            })?;
        } else {
            return Err(Error::Config(format!(
                "{} exists and is not a socket; choose another --unix path",
                path.display()
            )));
        }
    }
    let listener = tokio::net::UnixListener::bind(&path)
        .map_err(|e| Error::io(format!("listening on {}", path.display()), e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| Error::io(format!("setting the mode of {}", path.display()), e))?;
    let state = AppState {
        manager,
        token,
        hosts: Arc::new(loopback_hosts(None)),
        unix: true,
        metrics,
        approvals: Arc::new(PendingApprovals::new()),
    };
    eprintln!("sandpit: listening on unix:{}", path.display());
    let outcome = run(listener, router(state)).await;
    let _ = std::fs::remove_file(&path);
    outcome
}

#[cfg(not(unix))]
async fn serve_unix(
    _manager: Arc<SessionManager>,
    path: PathBuf,
    _token: Option<Arc<str>>,
    _metrics: Arc<Metrics>,
) -> crate::Result<()> {
    Err(Error::Config(format!(
        "Unix sockets are not supported on this platform ({})",
        path.display()
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constant_time_eq_works() {
        assert!(constant_time_eq(b"secret", b"secret"));
        assert!(!constant_time_eq(b"secret", b"secreT"));
        assert!(!constant_time_eq(b"secret", b"secret2"));
        assert!(!constant_time_eq(b"", b"x"));
    }

    #[test]
    fn strip_port_handles_v4_v6_and_names() {
        assert_eq!(strip_port("127.0.0.1:80"), "127.0.0.1");
        assert_eq!(strip_port("[::1]:8080"), "[::1]");
        assert_eq!(strip_port("localhost"), "localhost");
    }

    #[test]
    fn openapi_lists_the_routes() {
        let v = serde_json::to_value(ApiDoc::openapi()).unwrap();
        assert!(v["paths"]["/v1/execute"]["post"].is_object());
        assert!(v["components"]["schemas"]["ExecRequest"].is_object());
    }
}
