//! The language wrapper: one small driver per language (`driver.py`, `driver.js`, `driver.sh`,
//! embedded with `include_str!`) that the interpreter runs as a persistent REPL, and the framing
//! the host speaks with it.
//!
//! Channels (the same on every backend; under WASI, which has no fds 3 and 4 to inherit, the
//! driver opens the two channels the host serves as `$SANDPIT_CHANNELS/requests` and
//! `$SANDPIT_CHANNELS/responses`):
//! - fd 0/1: the session's terminal (stdin, stdout); fd 2: a separate stderr pipe;
//! - fd 3: requests, host → driver: a header line `ID NONCE INTERACTIVE PRELUDE_LEN CODE_LEN\n`
//!   then exactly that many bytes of prelude (`input_data`) and code;
//! - fd 4: responses, driver → host: one JSON line per cell, and a `ready` line at start.
//!
//! After a cell the driver flushes, writes the end marker `\x1esandpit-end:NONCE\x1e` on stdout
//! and on stderr, then the response line. The nonce is fresh per execution and sent only on fd 3,
//! so nothing the code prints can end a cell early: a marker with another nonce is plain output.

use crate::types::{ExceptionInfo, Language};
use serde::Deserialize;
use std::collections::BTreeMap;

pub const PYTHON_DRIVER: &str = include_str!("driver.py");
pub const JAVASCRIPT_DRIVER: &str = include_str!("driver.js");
pub const BASH_DRIVER: &str = include_str!("driver.sh");
/// The JavaScript driver for QuickJS-NG (the WASI backend), with `driver.js`'s wire contract.
pub const QUICKJS_DRIVER: &str = include_str!("driver_quickjs.js");

/// The arguments that start the QuickJS driver, after the interpreter (`qjs`): the `std` and
/// `os` modules, and the driver's source.
pub fn quickjs_driver_args() -> Vec<String> {
    ["--std", "-e", QUICKJS_DRIVER]
        .iter()
        .map(|s| s.to_string())
        .collect()
}

/// The arguments that start `lang`'s driver, after the interpreter: its flags and source.
pub fn driver_args(lang: Language) -> Vec<String> {
    let (flags, src): (&[&str], &str) = match lang {
        // -I: isolated mode (no PYTHON* variables, no user site-packages, no cwd on sys.path).
        Language::Python => (&["-I", "-c"], PYTHON_DRIVER),
        Language::Javascript => (&["-e"], JAVASCRIPT_DRIVER),
        Language::Bash => (&["--noprofile", "--norc", "-c"], BASH_DRIVER),
    };
    flags
        .iter()
        .chain(std::iter::once(&src))
        .map(|s| s.to_string())
        .collect()
}

/// A fresh 128-bit nonce as 32 lowercase hex characters.
pub fn new_nonce() -> crate::Result<String> {
    crate::util::random_hex(16)
}

/// The end marker for `nonce`.
pub fn end_marker(nonce: &str) -> Vec<u8> {
    format!("\x1esandpit-end:{nonce}\x1e").into_bytes()
}

/// Encodes one request frame for fd 3.
pub fn encode_request(
    lang: Language,
    id: u64,
    nonce: &str,
    interactive: bool,
    input: &BTreeMap<String, serde_json::Value>,
    code: &str,
) -> Vec<u8> {
    let prelude = match lang {
        Language::Bash => bash_exports(input),
        _ if input.is_empty() => String::new(),
        _ => serde_json::Value::Object(input.clone().into_iter().collect()).to_string(),
    };
    let mut frame = format!(
        "{id} {nonce} {} {} {}\n",
        u8::from(interactive),
        prelude.len(),
        code.len()
    )
    .into_bytes();
    frame.extend_from_slice(prelude.as_bytes());
    frame.extend_from_slice(code.as_bytes());
    frame
}

/// `input_data` for bash: `export NAME='value'` lines, strings as-is, other values as JSON.
/// Names are validated as identifiers before this point ([`crate::policy::Policy::validate`]).
pub fn bash_exports(input: &BTreeMap<String, serde_json::Value>) -> String {
    let mut s = String::new();
    for (k, v) in input {
        let text = match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        s.push_str(&format!("export {k}={}\n", shell_quote(&text)));
    }
    s
}

/// Single-quotes `s` for bash: the only character needing care inside '' is ' itself.
pub fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// The driver's `ready` line.
#[derive(Debug, Clone, Deserialize)]
pub struct Ready {
    pub ready: bool,
    #[serde(default)]
    pub version: String,
    #[serde(default)]
    pub pid: Option<i64>,
}

/// How the driver says a cell ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CellStatus {
    Ok,
    Error,
    Interrupted,
}

/// The driver's response line for one cell.
#[derive(Debug, Clone, Deserialize)]
pub struct CellResponse {
    pub id: u64,
    pub nonce: String,
    pub status: CellStatus,
    pub exit_code: i32,
    #[serde(default)]
    pub result: Option<serde_json::Value>,
    #[serde(default)]
    pub exception: Option<ExceptionInfo>,
    #[serde(default)]
    pub warnings: Vec<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frame_lengths_are_bytes() {
        let mut input = BTreeMap::new();
        input.insert("n".to_string(), serde_json::json!(3));
        let f = encode_request(Language::Python, 7, "ab", false, &input, "é=1");
        let s = String::from_utf8(f).unwrap();
        assert_eq!(s, "7 ab 0 7 4\n{\"n\":3}é=1");
    }

    #[test]
    fn bash_exports_quote_everything() {
        let mut input = BTreeMap::new();
        input.insert("A".to_string(), serde_json::json!("it's $(rm -rf /) `x`"));
        input.insert("B".to_string(), serde_json::json!({"k": [1, 2]}));
        let s = bash_exports(&input);
        assert_eq!(
            s,
            "export A='it'\\''s $(rm -rf /) `x`'\nexport B='{\"k\":[1,2]}'\n"
        );
    }

    #[test]
    fn nonces_are_fresh_hex() {
        let a = new_nonce().unwrap();
        let b = new_nonce().unwrap();
        assert_eq!(a.len(), 32);
        assert!(a
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(a, b);
    }

    #[test]
    fn response_parses() {
        let r: CellResponse = serde_json::from_str(
            r#"{"id":1,"nonce":"n","status":"error","exit_code":1,"result":null,"exception":{"type":"E","message":"m","traceback":"t"},"warnings":[]}"#,
        )
        .unwrap();
        assert_eq!(r.status, CellStatus::Error);
        assert_eq!(r.exception.unwrap().kind, "E");
    }
}
