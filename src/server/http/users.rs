//! Per-user tokens (`sandpit serve --tokens FILE`): each bearer token names its user, and the
//! user of a request is the token's, never what the request says. Without a token file, `user`
//! in a request is only a label that any client holding the shared token may set.
//!
//! The file: one `USER TOKEN` pair per line (whitespace between), `#` comments and blank lines
//! ignored. It must be readable by its owner only (mode 0600 or stricter), like an SSH key.
//! Users are 1-64 characters of letters, digits, `.`, `_`, `-`, `@`; tokens at least 16
//! characters, each naming one user.

use crate::error::{Error, Result};
use std::path::Path;

/// The users and their tokens.
#[derive(Debug, Clone)]
pub struct TokenTable {
    entries: Vec<(String, String)>,
}

/// The least a token may be: shorter ones are guessable.
const MIN_TOKEN_LEN: usize = 16;

impl TokenTable {
    /// Reads and checks the token file.
    pub fn load(path: &Path) -> Result<TokenTable> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let meta = std::fs::metadata(path)
                .map_err(|e| Error::io(format!("read the token file {}", path.display()), e))?;
            if meta.mode() & 0o077 != 0 {
                return Err(Error::Config(format!(
                    "the token file {} may be read or written by others (mode {:o}): chmod 600 it",
                    path.display(),
                    meta.mode() & 0o777
                )));
            }
        }
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("read the token file {}", path.display()), e))?;
        Self::parse(&text).map_err(|e| Error::Config(format!("{}: {e}", path.display())))
    }

    /// Parses the file's text.
    pub fn parse(text: &str) -> std::result::Result<TokenTable, String> {
        let mut entries: Vec<(String, String)> = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.split('#').next().unwrap_or("").trim();
            if line.is_empty() {
                continue;
            }
            let mut parts = line.split_whitespace();
            let (Some(user), Some(token), None) = (parts.next(), parts.next(), parts.next()) else {
                return Err(format!("line {}: expected `USER TOKEN`", n + 1));
            };
            if user.is_empty()
                || user.len() > 64
                || !user
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "._-@".contains(c))
            {
                return Err(format!(
                    "line {}: user {user:?} must be 1-64 letters, digits, '.', '_', '-', '@'",
                    n + 1
                ));
            }
            if token.len() < MIN_TOKEN_LEN {
                return Err(format!(
                    "line {}: the token of {user} is shorter than {MIN_TOKEN_LEN} characters",
                    n + 1
                ));
            }
            if entries.iter().any(|(_, t)| t == token) {
                return Err(format!(
                    "line {}: a token may name only one user (this one is listed twice)",
                    n + 1
                ));
            }
            entries.push((user.to_string(), token.to_string()));
        }
        if entries.is_empty() {
            return Err("no `USER TOKEN` lines".into());
        }
        Ok(TokenTable { entries })
    }

    /// The user whose token `given` is, comparing every entry in constant time.
    pub fn user_of(&self, given: &str) -> Option<&str> {
        let mut found = None;
        for (user, token) in &self.entries {
            if crate::util::constant_time_eq(given.as_bytes(), token.as_bytes()) {
                found = Some(user.as_str());
            }
        }
        found
    }
}

/// Who sent a request, as the guard established it: `Some(user)` under per-user tokens.
#[derive(Debug, Clone, Default)]
pub struct Authed(pub Option<String>);

impl Authed {
    /// The user a request acts as: the token's (a different one asked for is refused with
    /// `POLICY_DENIED`), else what it asked for, else `default`.
    pub fn user(&self, asked: Option<&str>) -> Result<String> {
        let asked = asked.filter(|u| !u.is_empty() && *u != "default");
        match (&self.0, asked) {
            (Some(me), Some(other)) if me != other => Err(Error::PolicyDenied(format!(
                "this bearer token belongs to user {me:?} and acts only as that user, not {other:?}"
            ))),
            (Some(me), _) => Ok(me.clone()),
            (None, Some(u)) => Ok(u.to_string()),
            (None, None) => Ok("default".into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_names_users_and_refuses_what_is_unsafe() {
        let t = TokenTable::parse(
            "# comment\nalice aaaaaaaaaaaaaaaaaaaa\nbob   bbbbbbbbbbbbbbbbbbbb # trailing\n",
        )
        .unwrap();
        assert_eq!(t.user_of("aaaaaaaaaaaaaaaaaaaa"), Some("alice"));
        assert_eq!(t.user_of("bbbbbbbbbbbbbbbbbbbb"), Some("bob"));
        assert_eq!(t.user_of("cccccccccccccccccccc"), None);
        assert!(TokenTable::parse("alice short").is_err());
        assert!(TokenTable::parse("a b c").is_err());
        assert!(TokenTable::parse("al ice aaaaaaaaaaaaaaaaaaaa").is_err());
        assert!(TokenTable::parse("x/y aaaaaaaaaaaaaaaaaaaa").is_err());
        assert!(TokenTable::parse("a aaaaaaaaaaaaaaaaaaaa\nb aaaaaaaaaaaaaaaaaaaa").is_err());
        assert!(TokenTable::parse("# nothing\n").is_err());
    }

    #[test]
    fn the_token_decides_the_user() {
        let alice = Authed(Some("alice".into()));
        assert_eq!(alice.user(None).unwrap(), "alice");
        assert_eq!(alice.user(Some("default")).unwrap(), "alice");
        assert_eq!(alice.user(Some("alice")).unwrap(), "alice");
        let e = alice.user(Some("bob")).unwrap_err();
        assert_eq!(e.code(), crate::error::ErrorCode::PolicyDenied);
        let anyone = Authed(None);
        assert_eq!(anyone.user(Some("bob")).unwrap(), "bob");
        assert_eq!(anyone.user(None).unwrap(), "default");
    }
}
