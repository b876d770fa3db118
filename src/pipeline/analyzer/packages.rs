//! Package names for pip and npm, checked before they reach the package manager, and which
//! package manager serves a language.

use crate::error::{Error, Result};
use crate::types::Language;

/// The longest accepted package specification.
const MAX_LEN: usize = 100;

/// Version operators: pip's `==`, `>=`, `<=`, `~=`, the single `=`, `<`, `>`, and
/// npm's `@`.
const OPERATORS: &[&str] = &["==", ">=", "<=", "~=", "=", "<", ">", "@"];

/// Checks a package specification.
///
/// The form is `^[a-zA-Z0-9_-]+([=<>][a-zA-Z0-9._-]+)?$`. Accepted as well, because
/// that is how the package managers spell ordinary packages:
/// - two-character pip operators `==`, `>=`, `<=`, `~=` (`numpy==1.26.4`);
/// - dots inside a name (`zope.interface`, `ruamel.yaml`), never first and never `..`;
/// - npm versions `name@1.2.3` and scoped names `@scope/name`, `@scope/name@1.2.3`.
///
/// Still refused: empty, more than 100 characters, a leading `-` (it would be read as an
/// option: `-e`, `--index-url=...`), spaces, URLs and VCS specs (`git+https://...`), paths
/// (`../x`, `a/b` other than one npm scope), extras (`pkg[extra]`), ranges with `^`/`~`/`*`,
/// environment markers, and any shell metacharacter.
pub fn validate_package_name(name: &str) -> Result<(), String> {
    const FORM: &str = "expected NAME, NAME==VERSION (or =, <, >, >=, <=, ~=), NAME@VERSION, or @SCOPE/NAME[@VERSION], \
                        with letters, digits, '_', '-' and '.' only";
    let fail = |why: &str| Err(format!("invalid package name {name:?}: {why}; {FORM}"));
    if name.is_empty() {
        return fail("it is empty");
    }
    if name.chars().count() > MAX_LEN {
        return fail(&format!("it is longer than {MAX_LEN} characters"));
    }
    if name.starts_with('-') {
        return fail("it starts with '-' and would be read as an option");
    }
    let (package, rest) = match name.strip_prefix('@') {
        Some(scoped) => {
            let Some((scope, after)) = scoped.split_once('/') else {
                return fail("a scoped name is @SCOPE/NAME");
            };
            if !is_name(scope) {
                return fail("the scope is not a valid name");
            }
            let end = after.find('@').unwrap_or(after.len());
            let (pkg, rest) = after.split_at(end);
            (pkg, rest)
        }
        None => {
            let end = name.find(['=', '<', '>', '~', '@']).unwrap_or(name.len());
            name.split_at(end)
        }
    };
    if !is_name(package) {
        return fail("the name is not valid");
    }
    if rest.is_empty() {
        return Ok(());
    }
    let Some(op) = OPERATORS.iter().find(|op| rest.starts_with(**op)) else {
        return fail("the version operator is not valid");
    };
    if name.starts_with('@') && *op != "@" {
        return fail("an npm version follows '@'");
    }
    let version = rest.strip_prefix(*op).unwrap_or_default();
    if version.is_empty()
        || !version
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
    {
        return fail("the version is not valid");
    }
    Ok(())
}

/// Letters, digits, `_`, `-`, `.`; starts with a letter, digit or `_`; no `..`.
fn is_name(s: &str) -> bool {
    let mut chars = s.chars();
    let Some(first) = chars.next() else {
        return false;
    };
    (first.is_ascii_alphanumeric() || first == '_')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        && !s.contains("..")
}

/// Which package manager serves a language.
pub fn installer_for(language: Language) -> Result<&'static str> {
    match language {
        Language::Python => Ok("pip"),
        Language::Javascript => Ok("npm"),
        Language::Bash => Err(Error::InvalidRequest(
            "packages can be installed into python (pip) and javascript (npm) sessions, not bash"
                .into(),
        )),
    }
}

/// Checks a request's package list: the language has an installer, every name is valid.
pub fn validate_packages(language: Language, packages: &[String]) -> Result<()> {
    if packages.is_empty() {
        return Ok(());
    }
    installer_for(language)?;
    if packages.len() > 50 {
        return Err(Error::InvalidRequest(format!(
            "{} packages requested; at most 50 per request",
            packages.len()
        )));
    }
    for p in packages {
        validate_package_name(p).map_err(Error::InvalidRequest)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bash_has_no_installer_and_names_are_checked() {
        assert!(validate_packages(Language::Bash, &[]).is_ok());
        assert!(matches!(
            validate_packages(Language::Bash, &["x".into()]),
            Err(Error::InvalidRequest(_))
        ));
        assert!(validate_packages(Language::Python, &["requests".into()]).is_ok());
        for bad in ["--index-url=http://x", "a b", "../x", "-e", "x;rm -rf /"] {
            assert!(
                matches!(
                    validate_packages(Language::Python, &[bad.into()]),
                    Err(Error::InvalidRequest(_))
                ),
                "{bad} accepted"
            );
        }
        let many: Vec<String> = (0..51).map(|i| format!("p{i}")).collect();
        assert!(validate_packages(Language::Javascript, &many).is_err());
    }
}
