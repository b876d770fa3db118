//! npm packages the client tests run under Node (the official MCP TypeScript SDK, an OpenAPI
//! client generator): installed once per target directory, pinned by the caller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A directory `name` under the target's scratch directory holding `packages` (npm specs),
/// installed with `npm install` the first time; `installed` are the files, relative to the
/// directory, whose presence says the install is complete. Its package.json makes `.mjs` and
/// `.js` files there ES modules.
pub(crate) fn install_once(
    name: &str,
    packages: &[&str],
    installed: &[&str],
) -> Result<PathBuf, String> {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let complete = |d: &Path| installed.iter().all(|f| d.join(f).is_file());
    if complete(&dir) {
        return Ok(dir);
    }
    if !Path::new("/usr/bin/node").exists() {
        return Err("no /usr/bin/node".into());
    }
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    std::fs::write(
        dir.join("package.json"),
        format!(r#"{{"name": "sandpit-{name}-test", "private": true, "type": "module"}}"#),
    )
    .map_err(|e| e.to_string())?;
    let ok = Command::new("npm")
        .args(["install", "--silent", "--no-audit", "--no-fund"])
        .args(packages)
        .current_dir(&dir)
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok && complete(&dir) {
        Ok(dir)
    } else {
        Err(format!(
            "`npm install {}` failed (is the npm registry reachable?)",
            packages.join(" ")
        ))
    }
}

/// True if `npm` runs here.
pub(crate) fn exists() -> bool {
    Command::new("npm")
        .arg("--version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}
