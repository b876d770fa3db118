//! The pipeline shared by every backend: the language wrapper (drivers and framing), the
//! pre-execution analyzer, approval and the audit trail around each run ([`gate`]), the output
//! pipeline (marker detection, head+tail limits, UTF-8 repair), secret redaction, and the
//! broker of the host tools sandboxed code may call ([`tools`]).

pub mod analyzer;
pub mod approval;
pub mod audit;
pub mod gate;
pub mod output;
pub mod redact;
pub mod tools;
pub mod wrapper;
