//! `POST /v1/execute` with `Accept: text/event-stream`: one execution as server-sent events,
//! `execution_start`, `output_chunk` {stream, data} as the output arrives, `approval_pending`
//! when it waits for an operator, `tool_call` when the code calls an `http` tool (answer it at
//! `POST /v1/tool_calls/{call_id}`), `tool_notice` when a `host_exec` command on a notify list
//! ran, then `execution_end` {result} or `execution_error` {error}.
//! A client that disconnects interrupts its cell (the session keeps its state).

use super::AppState;
use crate::pipeline::approval::{ApprovalRequest, Approver, Decision, PendingApprovals};
use crate::pipeline::tools::{PendingToolCalls, ToolCallEvent, ToolFrontend, ToolNotice};
use crate::session::manager::Via;
use crate::session::{OutputEvent, StreamKind};
use crate::types::ExecRequest;
use axum::http::{header, HeaderMap};
use axum::response::sse::{Event, KeepAlive, Sse};
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc;

/// True if the client asked for an event stream.
pub(super) fn wants_sse(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("text/event-stream"))
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

/// Runs `req` and streams it as events.
pub(super) fn execute_sse(
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
            workspace: None,
            tools: Some(Arc::new(AnnouncingToolCalls {
                pending: state.tool_calls.clone(),
                events: tx.clone(),
            })),
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
        let last = match result.failure() {
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
            "kind": request.kind,
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

/// For a streaming execute: each call of an `http` tool is announced as a `tool_call` event
/// (`{call_id, name, arguments, user, session_id, created_at}`), then waits like
/// [`PendingToolCalls`] for `POST /v1/tool_calls/{call_id}`; a `host_exec` command on a notify
/// list is announced as a `tool_notice` event (`{tool, command, user, session_id}`).
struct AnnouncingToolCalls {
    pending: Arc<PendingToolCalls>,
    events: mpsc::UnboundedSender<Event>,
}

impl ToolFrontend for AnnouncingToolCalls {
    fn call(
        &self,
        event: ToolCallEvent,
    ) -> futures_util::future::BoxFuture<'_, Result<serde_json::Value, String>> {
        let body = serde_json::to_string(&event).unwrap_or_default();
        let _ = self
            .events
            .send(Event::default().event("tool_call").data(body));
        self.pending.call(event)
    }

    fn notify(&self, notice: &ToolNotice) {
        let body = serde_json::to_string(notice).unwrap_or_default();
        let _ = self
            .events
            .send(Event::default().event("tool_notice").data(body));
    }
}
