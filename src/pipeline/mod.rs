//! The pipeline shared by every backend: the language wrapper (drivers and framing) and the
//! output pipeline (marker detection, head+tail limits, UTF-8 repair).

pub mod output;
pub mod wrapper;
