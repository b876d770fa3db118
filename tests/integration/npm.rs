//! npm packages the client tests run under Node (the official MCP TypeScript SDK, an OpenAPI
//! client generator): installed once per target directory, pinned by the caller.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;

/// A directory `name` under the target's scratch directory holding `packages` (npm specs),
/// installed with `npm install` the first time; `installed` are the files, relative to the
/// directory, that the caller needs. Its package.json makes `.mjs` and `.js` files there ES
/// modules.
///
/// Tests calling this run in parallel (the stdio and HTTP MCP clients share one directory), so
/// the install is serialized within the process and built in a scratch directory that is renamed
/// into place only once `npm install` has finished: a reader never sees a half-extracted package
/// (a `package.json` whose `dist/` is still being written).
pub(crate) fn install_once(
    name: &str,
    packages: &[&str],
    installed: &[&str],
) -> Result<PathBuf, String> {
    static INSTALLING: Mutex<()> = Mutex::new(());
    let _serial = INSTALLING.lock().unwrap_or_else(|e| e.into_inner());
    let root = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let dir = root.join(name);
    let marker = format!("{}\n", packages.join(" "));
    let complete = |d: &Path| {
        std::fs::read_to_string(d.join(COMPLETE)).is_ok_and(|m| m == marker)
            && installed.iter().all(|f| d.join(f).is_file())
    };
    if complete(&dir) {
        return Ok(dir);
    }
    if !Path::new("/usr/bin/node").exists() {
        return Err("no /usr/bin/node".into());
    }
    let scratch = root.join(format!("{name}.installing-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    std::fs::create_dir_all(&scratch).map_err(|e| e.to_string())?;
    std::fs::write(
        scratch.join("package.json"),
        format!(r#"{{"name": "sandpit-{name}-test", "private": true, "type": "module"}}"#),
    )
    .map_err(|e| e.to_string())?;
    let ok = Command::new("npm")
        .args(["install", "--silent", "--no-audit", "--no-fund"])
        .args(packages)
        .current_dir(&scratch)
        .stdin(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if ok {
        std::fs::write(scratch.join(COMPLETE), &marker).map_err(|e| e.to_string())?;
    }
    if !(ok && complete(&scratch)) {
        let _ = std::fs::remove_dir_all(&scratch);
        return Err(format!(
            "`npm install {}` failed (is the npm registry reachable?)",
            packages.join(" ")
        ));
    }
    // An older, incomplete install (from before this marker existed, or an interrupted run) is
    // replaced whole.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::rename(&scratch, &dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    Ok(dir)
}

/// Written into an install directory, with the package specs, once `npm install` succeeded.
const COMPLETE: &str = ".sandpit-install-complete";

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
