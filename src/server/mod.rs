//! The servers over the session manager: `mcp` (Model Context Protocol on stdio), `http`
//! (the HTTP API with OpenAPI and streaming) and `metrics` (its Prometheus metrics).

pub mod http;
pub mod json_schema;
pub mod mcp;
mod metrics;
