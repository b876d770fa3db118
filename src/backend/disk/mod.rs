//! The per-session disk cap (`limits.disk_mb`, `limits.disk_inodes`): what a session may store
//! in the directories it writes to on the host. Two mechanisms, chosen per directory:
//!
//! - **A capped tmpfs** (ENOSPC inside): where sandpit can mount (root) and made the directory
//!   itself, a tmpfs with `size=`, `nr_inodes=`, `mode=0700` and the sandbox's uid/gid, `nosuid`
//!   and `nodev`, is mounted on it before the sandbox starts. A write beyond the cap fails with
//!   ENOSPC inside the sandbox, as on a full disk. The tmpfs is memory: what it holds also counts
//!   toward the memory cgroup of whoever wrote it (the sandbox's). A directory the caller gave
//!   (`--workspace DIR`, a package installer working in a session's workspace) is never mounted
//!   over.
//! - **Accounting**: every other directory (unprivileged sandpit, a caller's directory, a mount
//!   refused) is measured ([`usage`]) while the session lives, and the session layer kills the
//!   sandbox once it holds more than the cap (`session::disk`).
//!
//! Mounts are detached (`MNT_DETACH`) when the session ends, before its directory is removed;
//! the sweep of directories left by dead sandpit processes ([`detach_mounts_under`]) does the
//! same for theirs.

pub mod notify;
pub mod usage;

use crate::error::{Error, Result};
use crate::policy::Limits;
use std::path::{Path, PathBuf};

/// The mount calls: Linux mounts the capped tmpfs and lists its mounts in `mountinfo`.
#[cfg(target_os = "linux")]
mod sys {
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    use std::path::Path;

    pub fn mount_tmpfs(path: &Path, options: &str) -> nix::Result<()> {
        mount(
            Some("tmpfs"),
            path,
            Some("tmpfs"),
            MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
            Some(options),
        )
    }

    pub fn detach(path: &Path) -> nix::Result<()> {
        umount2(path, MntFlags::MNT_DETACH | MntFlags::UMOUNT_NOFOLLOW)
    }

    /// This thread's mount table (`/proc/thread-self/mountinfo`).
    pub fn mountinfo() -> Option<String> {
        std::fs::read_to_string("/proc/thread-self/mountinfo").ok()
    }
}

/// Elsewhere (macOS) sandpit mounts nothing: every directory is accounted.
#[cfg(not(target_os = "linux"))]
mod sys {
    use std::path::Path;

    pub fn mount_tmpfs(_path: &Path, _options: &str) -> nix::Result<()> {
        Err(nix::errno::Errno::ENOSYS)
    }

    pub fn detach(_path: &Path) -> nix::Result<()> {
        Err(nix::errno::Errno::ENOSYS)
    }

    pub fn mountinfo() -> Option<String> {
        None
    }
}

const MIB: u64 = 1024 * 1024;

/// The cap: bytes (in MiB) and inodes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskLimit {
    pub mb: u64,
    pub inodes: u64,
}

impl DiskLimit {
    pub fn of(limits: &Limits) -> Self {
        DiskLimit {
            mb: limits.disk_mb,
            inodes: limits.disk_inodes,
        }
    }

    pub fn bytes(&self) -> u64 {
        self.mb.saturating_mul(MIB)
    }
}

/// How a sandbox's disk cap is enforced, as the session layer needs to know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskCap {
    pub limit: DiskLimit,
    /// The workspace on the host.
    pub workspace: PathBuf,
    /// A tmpfs of `limit` holds the workspace: writes beyond it fail with ENOSPC.
    pub workspace_mounted: bool,
    /// Host directories no filesystem caps (the workspace first, when it is one of them): their
    /// combined usage is measured against `limit`, and the sandbox killed beyond it.
    pub accounted: Vec<PathBuf>,
}

impl DiskCap {
    /// What the figures are about, for messages.
    pub fn subject(&self) -> &'static str {
        match self.accounted.len() {
            0 | 1 => "the session's workspace",
            _ => "the session's files (workspace, tmp and home)",
        }
    }
}

/// A tmpfs mounted on a host directory for one session; detached when dropped.
#[derive(Debug)]
pub struct CappedMount {
    path: PathBuf,
}

impl CappedMount {
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for CappedMount {
    fn drop(&mut self) {
        if let Err(e) = detach(&self.path) {
            tracing::warn!(path = %self.path.display(), error = %e, "could not detach a session's tmpfs");
        }
    }
}

/// The tmpfs options for a capped directory: its size and inode count, private to its owner.
pub fn tmpfs_options(size_mb: u64, inodes: u64, owner: (u32, u32)) -> String {
    format!(
        "size={size_mb}m,nr_inodes={inodes},mode=0700,uid={},gid={}",
        owner.0, owner.1
    )
}

/// Mounts a capped tmpfs (`nosuid`, `nodev`) on `path`, which must be a directory this process
/// made and nothing else uses yet.
pub fn mount_capped(
    path: &Path,
    size_mb: u64,
    inodes: u64,
    owner: (u32, u32),
) -> Result<CappedMount> {
    let options = tmpfs_options(size_mb, inodes, owner);
    sys::mount_tmpfs(path, &options).map_err(|e| {
        Error::io(
            format!(
                "mount a tmpfs ({options}) on {} to cap the session's disk use",
                path.display()
            ),
            e.into(),
        )
    })?;
    Ok(CappedMount {
        path: path.to_path_buf(),
    })
}

/// Detaches the mount at `path` (lazily: it goes once nothing in it is in use).
pub fn detach(path: &Path) -> nix::Result<()> {
    sys::detach(path)
}

/// Caps a session's directories on the host: a tmpfs on each one sandpit made (`made_workspace`
/// for the workspace; `scratch`, the host `tmp` and `home` of a sandbox without its own mount
/// namespace, always are) when `may_mount` (root) and the kernel agrees; every other one is
/// accounted. The workspace's tmpfs holds `limits.disk_mb`, the scratch ones
/// `limits.tmp_size_mb` (as the private `/tmp` and `$HOME` of the other modes), each with
/// `limits.disk_inodes` inodes, owned by `owner`. Keep the mounts until the session's processes
/// are gone.
pub fn cap_session(
    limits: &Limits,
    (workspace, made_workspace): (&Path, bool),
    scratch: &[&Path],
    owner: (u32, u32),
    may_mount: bool,
) -> (Vec<CappedMount>, DiskCap) {
    let limit = DiskLimit::of(limits);
    let mut mounts = Vec::new();
    let mut cap = DiskCap {
        limit,
        workspace: workspace.to_path_buf(),
        workspace_mounted: false,
        accounted: Vec::new(),
    };
    let dirs = std::iter::once((workspace, made_workspace, limit.mb))
        .chain(scratch.iter().map(|d| (*d, true, limits.tmp_size_mb)));
    for (i, (dir, made_here, size_mb)) in dirs.enumerate() {
        let mounted = may_mount
            && made_here
            && match mount_capped(dir, size_mb, limit.inodes, owner) {
                Ok(m) => {
                    mounts.push(m);
                    true
                }
                Err(e) => {
                    // No CAP_SYS_ADMIN (root in a container, say): measure it instead.
                    tracing::warn!(error = %e.message_with_hint(), "the disk cap falls back to accounting");
                    false
                }
            };
        match (mounted, i) {
            (true, 0) => cap.workspace_mounted = true,
            (true, _) => {}
            (false, _) => cap.accounted.push(dir.to_path_buf()),
        }
    }
    (mounts, cap)
}

/// How full a filesystem is (its own figures, by `statvfs`): for a capped tmpfs, how much of
/// its cap the session uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fill {
    pub used_bytes: u64,
    pub total_bytes: u64,
    pub used_inodes: u64,
    pub total_inodes: u64,
}

pub fn fill(path: &Path) -> std::io::Result<Fill> {
    let s = nix::sys::statvfs::statvfs(path)?;
    let frsize = s.fragment_size() as u64;
    Ok(Fill {
        used_bytes: (s.blocks() as u64).saturating_sub(s.blocks_free() as u64) * frsize,
        total_bytes: s.blocks() as u64 * frsize,
        used_inodes: (s.files() as u64).saturating_sub(s.files_free() as u64),
        total_inodes: s.files() as u64,
    })
}

/// The mount points listed in `/proc/self/mountinfo` text (field 5, with the kernel's octal
/// escapes for space, tab, newline and backslash undone).
fn mount_points(mountinfo: &str) -> Vec<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|field| {
            let b = field.as_bytes();
            let mut out = Vec::with_capacity(b.len());
            let mut i = 0;
            while i < b.len() {
                let octal = b
                    .get(i + 1..i + 4)
                    .filter(|d| b[i] == b'\\' && d.iter().all(|c| (b'0'..=b'7').contains(c)));
                match octal {
                    Some(d) => {
                        out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                        i += 4;
                    }
                    None => {
                        out.push(b[i]);
                        i += 1;
                    }
                }
            }
            PathBuf::from(std::ffi::OsString::from_vec(out))
        })
        .collect()
}

/// Detaches every mount at or beneath `dir` in this mount namespace, deepest first: the capped
/// tmpfs of a session whose sandpit process died. Returns how many were detached.
pub fn detach_mounts_under(dir: &Path) -> usize {
    let Some(text) = sys::mountinfo() else {
        return 0;
    };
    let mut under: Vec<PathBuf> = mount_points(&text)
        .into_iter()
        .filter(|m| m.starts_with(dir))
        .collect();
    under.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
    under.dedup();
    under.iter().filter(|m| detach(m).is_ok()).count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmpfs_options_cap_size_and_inodes_for_the_owner() {
        assert_eq!(
            tmpfs_options(1024, 65536, (2000001, 2000001)),
            "size=1024m,nr_inodes=65536,mode=0700,uid=2000001,gid=2000001"
        );
        let l = DiskLimit::of(&crate::policy::Policy::default().limits);
        assert_eq!(
            l,
            DiskLimit {
                mb: 1024,
                inodes: 65536
            }
        );
        assert_eq!(l.bytes(), 1 << 30);
    }

    #[test]
    fn what_cannot_be_mounted_is_accounted() {
        let mut limits = crate::policy::Policy::default().limits;
        limits.disk_mb = 32;
        let (ws, tmp, home) = (
            Path::new("/s/ws"),
            Path::new("/s/tmp"),
            Path::new("/s/home"),
        );
        // Unprivileged: nothing is mounted, everything is measured, the workspace first.
        let (mounts, cap) = cap_session(&limits, (ws, true), &[tmp, home], (1, 1), false);
        assert!(mounts.is_empty());
        assert!(!cap.workspace_mounted);
        assert_eq!(
            cap.limit,
            DiskLimit {
                mb: 32,
                inodes: 65536
            }
        );
        assert_eq!(cap.accounted, [ws, tmp, home]);
        assert_eq!(
            cap.subject(),
            "the session's files (workspace, tmp and home)"
        );
        // A caller's workspace is never mounted over, even where mounting is possible.
        let (mounts, cap) = cap_session(&limits, (ws, false), &[], (1, 1), true);
        assert!(mounts.is_empty() && !cap.workspace_mounted);
        assert_eq!(cap.accounted, [ws]);
        assert_eq!(cap.subject(), "the session's workspace");
    }

    #[test]
    fn mountinfo_mount_points_are_unescaped() {
        let text = "36 35 98:0 /mnt1 /mnt/parent rw,noatime master:1 - ext3 /dev/root rw\n\
                    40 36 0:50 / /var/lib/sandpit/sessions/ab\\040c/workspace rw,nosuid,nodev - tmpfs tmpfs rw,size=1024k\n";
        assert_eq!(
            mount_points(text),
            [
                PathBuf::from("/mnt/parent"),
                PathBuf::from("/var/lib/sandpit/sessions/ab c/workspace")
            ]
        );
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_capped_tmpfs_refuses_writes_beyond_its_size_and_inodes() {
        use nix::mount::{mount, MsFlags};
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("SKIPPED: mounting a tmpfs needs root");
            return;
        }
        // In a thread with its own mount namespace (unshare(CLONE_NEWNS) affects the calling
        // thread only), so nothing reaches the host's; it goes when the thread ends.
        let t = tempfile::tempdir().unwrap();
        let dir = t.path().join("ws");
        std::fs::create_dir(&dir).unwrap();
        let status = std::thread::spawn(move || -> std::result::Result<(), String> {
            nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS).map_err(|e| e.to_string())?;
            mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .map_err(|e| e.to_string())?;
            let m = mount_capped(&dir, 1, 16, (0, 0)).map_err(|e| e.to_string())?;
            let big = std::fs::write(dir.join("big"), vec![0u8; 2 << 20]);
            if big.as_ref().err().and_then(|e| e.raw_os_error()) != Some(libc::ENOSPC) {
                return Err(format!("a 2 MiB write into 1 MiB: {big:?}"));
            }
            std::fs::remove_file(dir.join("big")).map_err(|e| e.to_string())?;
            let mut made = 0;
            while std::fs::write(dir.join(format!("f{made}")), b"").is_ok() {
                made += 1;
                if made > 100 {
                    break;
                }
            }
            if made >= 16 {
                return Err(format!("{made} files on a 16-inode tmpfs"));
            }
            let f = fill(&dir).map_err(|e| e.to_string())?;
            if f.total_bytes != 1 << 20 || f.total_inodes != 16 {
                return Err(format!("{f:?}"));
            }
            drop(m);
            if mount_points(
                &std::fs::read_to_string("/proc/thread-self/mountinfo").unwrap_or_default(),
            )
            .contains(&dir)
            {
                return Err("still mounted after drop".into());
            }
            Ok(())
        })
        .join()
        .unwrap();
        assert_eq!(status, Ok(()));
    }
}
