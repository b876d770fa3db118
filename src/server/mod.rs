//! The servers over the session manager: `mcp` (Model Context Protocol on stdio) and `http`
//! (the HTTP API with OpenAPI and streaming).

pub mod http;
pub mod mcp;
