//! The Docker backend's disk cap. The workspace is a bind mount of a host directory, so a capped
//! tmpfs mounted on that directory before the container is created caps it inside (ENOSPC), as
//! on the native backend (`backend::disk`) — provided the engine sees the mount. An engine in
//! another mount namespace (sandpit started under `unshare --mount`, say) would bind the
//! directory beneath it instead, and the host and the container would see two different
//! workspaces. So a marker file is left in the directory beneath the tmpfs, and the engine is
//! asked whether the container sees it (`HEAD /containers/{id}/archive`): if it does, the tmpfs
//! is detached and the workspace is accounted instead, so both sides see the same directory.

use crate::backend::disk::{self, CappedMount, DiskCap};
use crate::policy::Limits;
use bollard::query_parameters::ContainerArchiveInfoOptions;
use bollard::Docker;
use std::path::Path;

/// Left beneath the tmpfs: a container that sees it does not see the tmpfs.
const MARKER: &str = ".sandpit-beneath-the-disk-cap";

/// Mounts the capped tmpfs on a workspace sandpit made, as root (else, or when the kernel
/// refuses, `None`: the workspace is accounted).
pub fn mount(workspace: &Path, made_here: bool, limits: &Limits) -> Option<CappedMount> {
    if !made_here || !nix::unistd::geteuid().is_root() {
        return None;
    }
    if let Err(e) = std::fs::write(workspace.join(MARKER), b"") {
        tracing::warn!(path = %workspace.display(), error = %e, "cannot mark the workspace; its disk cap falls back to accounting");
        return None;
    }
    let uid = super::image::SANDBOX_UID;
    let l = disk::DiskLimit::of(limits);
    match disk::mount_capped(workspace, l.mb, l.inodes, (uid, uid)) {
        Ok(m) => Some(m),
        Err(e) => {
            tracing::warn!(error = %e.message_with_hint(), "the disk cap falls back to accounting");
            let _ = std::fs::remove_file(workspace.join(MARKER));
            None
        }
    }
}

/// Whether the container `id` sees the tmpfs on its workspace (not the marker beneath it).
pub async fn engine_sees_it(docker: &Docker, id: &str) -> bool {
    let opts = ContainerArchiveInfoOptions {
        path: format!("/workspace/{MARKER}"),
    };
    match docker.get_container_archive_info(id, Some(opts)).await {
        // The marker is visible: the engine bound the directory beneath the tmpfs.
        Ok(_) => false,
        Err(bollard::errors::Error::DockerResponseServerError {
            status_code: 404, ..
        }) => true,
        Err(e) => {
            tracing::warn!(container = %id, error = %e, "cannot tell whether the engine sees the workspace's tmpfs; accounting instead");
            false
        }
    }
}

/// Gives up the tmpfs: detached, the host sees the directory the engine bound, and the marker
/// goes.
pub fn give_up(mount: CappedMount, workspace: &Path) {
    drop(mount);
    let _ = std::fs::remove_file(workspace.join(MARKER));
}

/// The cap as the session sees it.
pub fn cap(workspace: &Path, mounted: bool, limits: &Limits) -> DiskCap {
    DiskCap {
        limit: disk::DiskLimit::of(limits),
        workspace: workspace.to_path_buf(),
        workspace_mounted: mounted,
        accounted: if mounted {
            vec![]
        } else {
            vec![workspace.to_path_buf()]
        },
    }
}
