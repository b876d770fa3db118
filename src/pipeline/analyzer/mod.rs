//! The pre-execution analyzer (work in progress).
