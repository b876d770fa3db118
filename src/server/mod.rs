//! The servers: `mcp` (Model Context Protocol on stdio). The HTTP API comes with issue 4's
//! remaining work.

pub mod mcp;
