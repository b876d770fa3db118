//! The globs of the analyzer's rules, over qualified names (`subprocess.*`), commands and
//! paths (`/etc/*`): `*` matches any run of characters, `\x` the character `x`. A leaf:
//! the rules (`rules.rs`) and the matchers of every language use it.

use serde::Deserialize;

/// A glob over names or paths: `*` matches any run of characters.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(transparent)]
pub(crate) struct Glob(pub(crate) String);

impl Glob {
    pub(crate) fn matches(&self, text: &str) -> bool {
        glob_match(&self.0, text)
    }
}

/// True if any glob matches.
pub(crate) fn any_glob(globs: &[Glob], text: &str) -> bool {
    globs.iter().any(|g| g.matches(text))
}

/// Simple glob matching: `*` matches any run of characters (including `.` and `/`), `\x`
/// matches `x` literally (`/\*` is the two characters `/*`), every other character matches
/// itself.
pub(crate) fn glob_match(pattern: &str, text: &str) -> bool {
    // (literal byte, is_star)
    let mut tokens: Vec<(u8, bool)> = Vec::with_capacity(pattern.len());
    let mut bytes = pattern.bytes();
    while let Some(b) = bytes.next() {
        match b {
            b'*' => tokens.push((b'*', true)),
            b'\\' => tokens.push((bytes.next().unwrap_or(b'\\'), false)),
            _ => tokens.push((b, false)),
        }
    }
    let s = text.as_bytes();
    let (mut pi, mut si) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        match (tokens.get(pi), s.get(si)) {
            (Some((_, true)), _) => {
                star = Some((pi, si));
                pi += 1;
            }
            (Some((a, false)), Some(b)) if a == b => {
                pi += 1;
                si += 1;
            }
            _ => match star {
                Some((sp, ss)) => {
                    pi = sp + 1;
                    si = ss + 1;
                    star = Some((sp, ss + 1));
                }
                None => return false,
            },
        }
    }
    while tokens.get(pi).is_some_and(|t| t.1) {
        pi += 1;
    }
    pi == tokens.len()
}
