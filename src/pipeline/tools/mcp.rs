//! `mcp` tools: sandpit as an MCP client (the official SDK, rmcp) of another server that it
//! starts on stdio, so that sandboxed code can call that server's tools without network or
//! secrets of its own.
//!
//! One server process per distinct `command` (with its `env` and `cwd`) for the whole sandpit
//! process, started at the first call, shared by every session, restarted at the next call if
//! it exited; killed when sandpit drops the broker (or exits). Its stderr goes to sandpit's
//! debug log. A call cancelled with its cell sends the server `notifications/cancelled`.
//!
//! What the code gets: the tool's `structuredContent` when it has one; else the text of its
//! content (one text block: that string; several: joined by newlines); else `{"content":
//! [...]}` with the blocks as MCP sends them (images and audio as base64). A result with
//! `isError` is an error with its text.

use super::program::clean_env;
use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::ServiceExt;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// Which server: its argv, the names of the variables it gets, its working directory.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ServerKey {
    pub command: Vec<String>,
    pub env: Vec<String>,
    pub cwd: String,
    pub path: String,
}

struct Running {
    service: RunningService<RoleClient, ()>,
    /// Killed when this is dropped.
    _child: tokio::process::Child,
}

/// One server, started on demand.
struct Server {
    key: ServerKey,
    running: Mutex<Option<Running>>,
}

impl Server {
    /// A peer of the live server, starting it first when it is not running.
    async fn peer(&self, start_timeout: Duration) -> Result<Peer<RoleClient>, String> {
        let mut guard = self.running.lock().await;
        if let Some(r) = guard.as_ref() {
            if !r.service.is_transport_closed() {
                return Ok(r.service.peer().clone());
            }
            tracing::info!(server = ?self.key.command, "the MCP server exited; starting it again");
            *guard = None;
        }
        let r = tokio::time::timeout(start_timeout, self.start())
            .await
            .map_err(|_| {
                format!(
                    "the MCP server {:?} did not complete its initialization within {} ms",
                    self.key.command[0],
                    start_timeout.as_millis()
                )
            })??;
        let peer = r.service.peer().clone();
        *guard = Some(r);
        Ok(peer)
    }

    async fn start(&self) -> Result<Running, String> {
        let k = &self.key;
        let Some((prog, args)) = k.command.split_first() else {
            return Err("an mcp tool without a command".into());
        };
        let mut cmd = tokio::process::Command::new(prog);
        cmd.args(args)
            .env_clear()
            .envs(clean_env(&k.path, &k.env, &[]))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        if !k.cwd.is_empty() {
            cmd.current_dir(&k.cwd);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("could not start the MCP server {prog}: {e}"))?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err("the MCP server's pipes are missing".into());
        };
        if let Some(stderr) = child.stderr.take() {
            let name = prog.clone();
            tokio::spawn(async move {
                use tokio::io::AsyncBufReadExt;
                let mut lines = tokio::io::BufReader::new(stderr).lines();
                while let Ok(Some(line)) = lines.next_line().await {
                    tracing::debug!(server = %name, "{}", line.chars().take(2000).collect::<String>());
                }
            });
        }
        let service = ()
            .serve((stdout, stdin))
            .await
            .map_err(|e| format!("the MCP server {prog} did not initialize: {e}"))?;
        tracing::info!(server = %prog, "MCP server started for tools");
        Ok(Running {
            service,
            _child: child,
        })
    }
}

/// The MCP servers of every `mcp` tool.
#[derive(Default)]
pub struct McpPool {
    servers: std::sync::Mutex<HashMap<ServerKey, Arc<Server>>>,
}

impl McpPool {
    /// Calls `tool` on the server `key` with `arguments` (an object), within `timeout` (start
    /// included).
    pub async fn call(
        &self,
        key: &ServerKey,
        tool: &str,
        arguments: Value,
        timeout: Duration,
    ) -> Result<Value, String> {
        let server = {
            let mut servers = self
                .servers
                .lock()
                .map_err(|_| "the MCP server table is poisoned".to_string())?;
            servers
                .entry(key.clone())
                .or_insert_with(|| {
                    Arc::new(Server {
                        key: key.clone(),
                        running: Mutex::new(None),
                    })
                })
                .clone()
        };
        let work = async {
            let peer = server.peer(timeout).await?;
            let mut params = CallToolRequestParams::new(tool.to_string());
            if let Value::Object(map) = arguments {
                params = params.with_arguments(map);
            }
            match peer.call_tool_once(params).await {
                Ok(rmcp::model::CallToolResponse::Complete(r)) => result_value(r),
                Ok(_) => Err(format!(
                    "the MCP tool {tool} asked for more input or started a task, which sandpit does not support"
                )),
                Err(e) => Err(format!("the MCP call of {tool} failed: {e}")),
            }
        };
        match tokio::time::timeout(timeout, work).await {
            Ok(r) => r,
            // Dropping the call sent the server notifications/cancelled.
            Err(_) => Err(format!(
                "the MCP tool {tool} did not answer within {} ms",
                timeout.as_millis()
            )),
        }
    }
}

/// What the code gets from a tool's result (see the module's documentation).
pub fn result_value(r: CallToolResult) -> Result<Value, String> {
    let texts: Vec<&str> = r
        .content
        .iter()
        .filter_map(|b| match b {
            ContentBlock::Text(t) => Some(t.text.as_str()),
            _ => None,
        })
        .collect();
    let all_text = texts.len() == r.content.len();
    if r.is_error == Some(true) {
        let text = if texts.is_empty() {
            "the MCP tool reported an error".to_string()
        } else {
            texts.join("\n")
        };
        return Err(text);
    }
    if let Some(v) = r.structured_content {
        return Ok(v);
    }
    if all_text {
        return Ok(Value::String(texts.join("\n")));
    }
    let blocks = serde_json::to_value(&r.content)
        .map_err(|e| format!("the MCP tool's content could not be read: {e}"))?;
    Ok(serde_json::json!({ "content": blocks }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_become_json_for_the_code() {
        let text = |s: &str| ContentBlock::text(s.to_string());
        let r = CallToolResult::success(vec![text("hello")]);
        assert_eq!(result_value(r).unwrap(), "hello");
        let r = CallToolResult::success(vec![text("a"), text("b")]);
        assert_eq!(result_value(r).unwrap(), "a\nb");
        let mut r = CallToolResult::success(vec![text("{}")]);
        r.structured_content = Some(serde_json::json!({"n": 1}));
        assert_eq!(result_value(r).unwrap(), serde_json::json!({"n": 1}));
        let r = CallToolResult::error(vec![text("no such row")]);
        assert_eq!(result_value(r).unwrap_err(), "no such row");
        let r = CallToolResult::success(vec![ContentBlock::image("aGk=", "image/png")]);
        let v = result_value(r).unwrap();
        assert_eq!(v["content"][0]["data"], "aGk=", "{v}");
    }
}
