//! `-b unsandboxed`: the interpreter runs as the calling user with no confinement at all, only
//! a clean environment and its own workspace directory. For development and for measuring what
//! the sandbox costs; never chosen by `auto`, and the CLI warns when it is used.

use super::{BackendKind, BoxFuture, LaunchSpec, Launched};
use crate::error::{Error, Result};

pub struct UnsandboxedBackend;

impl UnsandboxedBackend {
    pub fn new() -> Self {
        UnsandboxedBackend
    }
}

impl Default for UnsandboxedBackend {
    fn default() -> Self {
        Self::new()
    }
}

struct TempDir(std::path::PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

impl super::Backend for UnsandboxedBackend {
    fn kind(&self) -> BackendKind {
        BackendKind::Unsandboxed
    }

    fn launch<'a>(&'a self, spec: &'a LaunchSpec) -> BoxFuture<'a, Result<Launched>> {
        Box::pin(async move {
            let name = crate::util::random_hex(16)?;
            let base = spec.state_dir.join("unsandboxed").join(&name[..16]);
            let workspace = spec
                .workspace
                .clone()
                .unwrap_or_else(|| base.join("workspace"));
            let (home, tmp) = (base.join("home"), base.join("tmp"));
            for d in [&workspace, &home, &tmp] {
                std::fs::create_dir_all(d)
                    .map_err(|e| Error::io(format!("create {}", d.display()), e))?;
            }
            let env = super::sandbox_env(
                &home.display().to_string(),
                &tmp.display().to_string(),
                &workspace.display().to_string(),
                spec,
            );
            super::pty_spawn::spawn(
                super::pty_spawn::Program {
                    path: spec.interpreter.clone(),
                    args: spec.argv[1..].to_vec(),
                    env,
                    cwd: Some(workspace.clone()),
                },
                super::pty_spawn::Extras {
                    place: None,
                    guard: Box::new(TempDir(base)),
                    oom_killed: None,
                    kill_all: None,
                    workspace: Some(workspace),
                    // No limit of any kind applies here, the disk cap included.
                    disk: None,
                },
            )
        })
    }
}
