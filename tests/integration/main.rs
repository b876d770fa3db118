//! The integration tests, one binary (so the test command links once): each module drives the
//! real `sandpit` program or library through one interface. The conformance suite
//! (`tests/conformance.rs`) is its own binary, run as root and as an unprivileged user.
//!
//! - `cli`: exit codes, `--json`, analyzer modes, secrets kept out of output and logs;
//! - `repl`: `sandpit repl` in a real PTY (approval prompts, analyzer refusals);
//! - `manager`: owners, limits, queue, expiry;
//! - `pipeline`: analyzer, redaction, approval and audit on every backend;
//! - `mcp`: JSON-RPC over stdio, elicitation approval, the official Python SDK;
//! - `http`: routes, SSE, tokens, approvals, disconnects;
//! - `container_seccomp`: what a container's seccomp profile refuses (pivot_root,
//!   process_vm_readv), reproduced on the host.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod cli;
mod container_seccomp;
mod http;
mod manager;
mod mcp;
mod pipeline;
mod repl;
