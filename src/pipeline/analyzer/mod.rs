//! The pre-execution analyzer (work in progress).

/// Placeholder until the analyzer lands: the package-name rule of the issue.
pub fn validate_package_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('-')
        && regex::Regex::new(r"^[a-zA-Z0-9_-]+([=<>]{1,2}[a-zA-Z0-9._-]+)?$")
            .map(|r| r.is_match(name))
            .unwrap_or(false);
    if ok {
        Ok(())
    } else {
        Err(format!("invalid package name {name:?}"))
    }
}
