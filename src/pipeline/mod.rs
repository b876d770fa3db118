//! The pipeline shared by every backend: the language wrapper (drivers and framing), the
//! pre-execution analyzer, the output pipeline (marker detection, head+tail limits, UTF-8 repair)
//! and secret redaction.

pub mod analyzer;
pub mod output;
pub mod redact;
pub mod wrapper;
