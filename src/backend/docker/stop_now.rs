//! Stopping a container at once, for the disk cap's kill (`SandboxControl::kill_now`). The
//! engine's kill is a round trip through containerd and runc (about 130 ms on the development
//! VM), during which a sandbox writing as fast as it can goes on writing: far past the disk cap,
//! where the cap is enforced by measuring and killing. Where sandpit can write the container's
//! cgroup (root, the engine's usual cgroup layout), that kill first stops every process of the
//! container there: cgroup v2's `cgroup.kill`, or cgroup v1's freezer, thawed again once the
//! engine's SIGKILL is pending (so that it lands), or if that request never runs. A container
//! left frozen by a sandpit that died in between is thawed by the next backend's stale sweep.
//! Elsewhere the engine's kill alone does it.

use std::path::{Path, PathBuf};

/// Where the container's processes can be stopped from the host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stopper {
    /// cgroup v2: `cgroup.kill` kills every process in it.
    Kill(PathBuf),
    /// cgroup v1: `freezer.state` freezes every process in it.
    Freeze(PathBuf),
}

/// The container's cgroup files where the engine puts them by default (the cgroupfs driver's
/// `docker/<id>`, the systemd driver's `system.slice/docker-<id>.scope`), under `root`
/// (`/sys/fs/cgroup`), if sandpit may write them.
pub fn find(root: &Path, id: &str) -> Option<Stopper> {
    let dirs = [
        PathBuf::from("docker").join(id),
        PathBuf::from("system.slice").join(format!("docker-{id}.scope")),
    ];
    let writable = |p: &Path| std::fs::OpenOptions::new().write(true).open(p).is_ok();
    for d in &dirs {
        let kill = root.join(d).join("cgroup.kill");
        if writable(&kill) {
            return Some(Stopper::Kill(kill));
        }
        let freeze = root.join("freezer").join(d).join("freezer.state");
        if writable(&freeze) {
            return Some(Stopper::Freeze(freeze));
        }
    }
    None
}

impl Stopper {
    /// Stops the container's processes now. Returns whether they must be thawed once the
    /// engine's kill is pending.
    pub fn stop(&self) -> bool {
        let (path, value, thaw) = match self {
            Stopper::Kill(p) => (p, "1", false),
            Stopper::Freeze(p) => (p, "FROZEN", true),
        };
        match std::fs::write(path, value) {
            Ok(()) => thaw,
            Err(e) => {
                tracing::debug!(path = %path.display(), error = %e, "could not stop the container through its cgroup");
                false
            }
        }
    }

    /// Thaws what [`Stopper::stop`] froze.
    pub fn thaw(&self) {
        if let Stopper::Freeze(p) = self {
            if let Err(e) = std::fs::write(p, "THAWED") {
                tracing::debug!(path = %p.display(), error = %e, "could not thaw the container");
            }
        }
    }
}

/// Thaws the freezer when dropped.
pub struct ThawOnDrop(pub Stopper);

impl Drop for ThawOnDrop {
    fn drop(&mut self) {
        self.0.thaw();
    }
}

/// Thaws the container `id` if its cgroup v1 freezer holds it frozen.
pub fn thaw_if_frozen(root: &Path, id: &str) {
    if let Some(Stopper::Freeze(state)) = find(root, id) {
        if std::fs::read_to_string(&state).is_ok_and(|s| s.trim() == "FROZEN") {
            tracing::info!(container = %id, "thawing a sandpit container left frozen");
            Stopper::Freeze(state).thaw();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_engines_cgroup_layouts_are_found() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        assert_eq!(find(r, "abc"), None);
        let v1 = r.join("freezer/docker/abc");
        std::fs::create_dir_all(&v1).unwrap();
        std::fs::write(v1.join("freezer.state"), "THAWED").unwrap();
        assert_eq!(
            find(r, "abc"),
            Some(Stopper::Freeze(v1.join("freezer.state")))
        );
        let v2 = r.join("system.slice/docker-abc.scope");
        std::fs::create_dir_all(&v2).unwrap();
        std::fs::write(v2.join("cgroup.kill"), "").unwrap();
        assert_eq!(
            find(r, "abc"),
            Some(Stopper::Freeze(v1.join("freezer.state"))),
            "docker/<id> first"
        );
        std::fs::remove_dir_all(r.join("freezer")).unwrap();
        let s = find(r, "abc").unwrap();
        assert_eq!(s, Stopper::Kill(v2.join("cgroup.kill")));
        assert!(!s.stop(), "a kill needs no thaw");
        assert_eq!(
            std::fs::read_to_string(v2.join("cgroup.kill")).unwrap(),
            "1"
        );
        let f = Stopper::Freeze(v2.join("state"));
        assert!(f.stop());
        drop(ThawOnDrop(f));
        assert_eq!(std::fs::read_to_string(v2.join("state")).unwrap(), "THAWED");
        // A frozen leftover is thawed; a thawed one is left alone.
        std::fs::create_dir_all(r.join("freezer/docker/def")).unwrap();
        let state = r.join("freezer/docker/def/freezer.state");
        std::fs::write(&state, "FROZEN\n").unwrap();
        thaw_if_frozen(r, "def");
        assert_eq!(std::fs::read_to_string(&state).unwrap(), "THAWED");
    }
}
