//! Secret redaction (work in progress).
