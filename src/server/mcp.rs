//! `sandpit mcp`: the MCP server on stdio.

use crate::session::manager::SessionManager;
use std::sync::Arc;

/// Serves MCP on stdin/stdout until stdin closes, then tears down every session.
pub async fn serve(manager: Arc<SessionManager>) -> crate::Result<()> {
    let _ = manager;
    Err(crate::Error::sandbox("the MCP server is being written"))
}
