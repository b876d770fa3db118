//! Measuring what a directory tree holds the way a filesystem counts it against a cap: allocated
//! bytes (`st_blocks * 512`, so sparse files count what they use) and inodes (files,
//! directories, links, the root included; a file with several hard links once).
//!
//! The tree belongs to a sandbox that may change it while it is measured, so the walk never
//! follows a symlink and never leaves the tree: every directory is opened by the kernel beneath
//! one the walk already holds (`openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//! RESOLVE_NO_XDEV`), entries are `lstat`ed relative to their directory's descriptor, and
//! entries on another filesystem (mount points) are skipped. Entries that vanish mid-walk are
//! skipped; directories the walk may not read are counted in [`Usage::unreadable`], because
//! what they hold cannot be known.

use nix::dir::Dir;
use nix::fcntl::AtFlags;
use nix::sys::stat::{fstat, fstatat, FileStat, SFlag};
use std::collections::HashSet;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

/// What a tree holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Allocated bytes (`st_blocks * 512`).
    pub bytes: u64,
    /// Files, directories, symlinks and other entries, each inode once.
    pub inodes: u64,
    /// Directories the walk could not read: their contents are not in the figures.
    pub unreadable: u64,
}

impl Usage {
    /// What `self` holds beyond `base` (never below zero).
    pub fn since(self, base: Usage) -> Usage {
        Usage {
            bytes: self.bytes.saturating_sub(base.bytes),
            inodes: self.inodes.saturating_sub(base.inodes),
            unreadable: self.unreadable,
        }
    }
}

/// A directory is reopened from a closer descriptor once its path from the last one grows this
/// long, so no path the walk hands the kernel comes near `PATH_MAX` (4096) and each lookup
/// stays short, however deep the tree.
const ANCHOR_BYTES: usize = 2048;
const ANCHOR_DEPTH: usize = 128;

/// A directory still to read: `rel` beneath the directory `anchor` holds.
struct Pending {
    anchor: Rc<OwnedFd>,
    rel: PathBuf,
    depth: usize,
}

/// Measures the trees at `roots`, summed. `on_dir` sees every directory's descriptor before its
/// entries are read (the disk watcher adds an inotify watch there, so nothing written after it
/// looked goes unnoticed). A root that does not exist counts as empty.
pub fn measure(
    roots: &[PathBuf],
    on_dir: &mut dyn FnMut(BorrowedFd<'_>),
) -> std::io::Result<Usage> {
    let mut usage = Usage::default();
    let mut seen = HashSet::new();
    for root in roots {
        measure_tree(root, &mut usage, &mut seen, on_dir)?;
    }
    Ok(usage)
}

fn measure_tree(
    root: &Path,
    usage: &mut Usage,
    seen: &mut HashSet<(libc::dev_t, libc::ino_t)>,
    on_dir: &mut dyn FnMut(BorrowedFd<'_>),
) -> std::io::Result<()> {
    let root_fd: OwnedFd = match std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(root)
    {
        Ok(f) => f.into(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(std::io::Error::new(
                e.kind(),
                format!("open {}: {e}", root.display()),
            ))
        }
    };
    let st = fstat(root_fd.as_raw_fd()).map_err(std::io::Error::from)?;
    let dev = st.st_dev;
    add(usage, seen, &st);
    let mut stack = vec![Pending {
        anchor: Rc::new(root_fd),
        rel: PathBuf::from("."),
        depth: 0,
    }];
    while let Some(p) = stack.pop() {
        let fd = match open_beneath(&p.anchor, &p.rel) {
            Ok(fd) => fd,
            // Unreadable: its contents cannot be counted.
            Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
                usage.unreadable += 1;
                continue;
            }
            // Gone, replaced by a file or a symlink, or a mount point since it was listed.
            Err(e)
                if matches!(
                    e.raw_os_error(),
                    Some(libc::ENOENT | libc::ENOTDIR | libc::ELOOP | libc::EXDEV)
                ) =>
            {
                continue
            }
            Err(e) => {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("open {} in {}: {e}", p.rel.display(), root.display()),
                ))
            }
        };
        on_dir(fd.as_fd());
        // Far enough from the anchor: this directory anchors its children.
        let (anchor, base, depth) =
            if p.rel.as_os_str().len() > ANCHOR_BYTES || p.depth >= ANCHOR_DEPTH {
                (Rc::new(fd.try_clone()?), PathBuf::new(), 0)
            } else {
                (p.anchor.clone(), p.rel.clone(), p.depth)
            };
        let mut dir = Dir::from(fd).map_err(std::io::Error::from)?;
        let dirfd = dir.as_raw_fd();
        for entry in dir.iter() {
            let entry = entry.map_err(std::io::Error::from)?;
            let name = entry.file_name();
            if name.to_bytes() == b"." || name.to_bytes() == b".." {
                continue;
            }
            let st = match fstatat(Some(dirfd), name, AtFlags::AT_SYMLINK_NOFOLLOW) {
                Ok(st) => st,
                Err(nix::errno::Errno::ENOENT) => continue,
                Err(nix::errno::Errno::EACCES) => {
                    // Listable but not searchable: nothing in it can be measured.
                    usage.unreadable += 1;
                    break;
                }
                Err(e) => return Err(e.into()),
            };
            if st.st_dev != dev {
                continue;
            }
            add(usage, seen, &st);
            if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR {
                let name = std::ffi::OsStr::from_bytes(name.to_bytes());
                stack.push(Pending {
                    anchor: anchor.clone(),
                    rel: base.join(name),
                    depth: depth + 1,
                });
            }
        }
    }
    Ok(())
}

/// Counts one inode (a file with several links once).
fn add(usage: &mut Usage, seen: &mut HashSet<(libc::dev_t, libc::ino_t)>, st: &FileStat) {
    let is_dir = SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR;
    if !is_dir && st.st_nlink > 1 && !seen.insert((st.st_dev, st.st_ino)) {
        return;
    }
    usage.inodes += 1;
    usage.bytes += (st.st_blocks as u64).saturating_mul(512);
}

/// Opens the directory `rel` beneath `dir`: no symlink, no `..` out of it, no other filesystem.
fn open_beneath(dir: &OwnedFd, rel: &Path) -> std::io::Result<OwnedFd> {
    crate::util::open_beneath(
        dir.as_fd(),
        rel,
        libc::O_RDONLY | libc::O_DIRECTORY,
        0,
        crate::util::Beneath {
            same_filesystem: true,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::FromRawFd;
    use std::os::unix::fs::PermissionsExt;

    fn measure_dir(p: &Path) -> Usage {
        measure(&[p.to_path_buf()], &mut |_| {}).unwrap()
    }

    #[test]
    fn counts_allocated_bytes_and_every_inode() {
        let t = tempfile::tempdir().unwrap();
        let empty = measure_dir(t.path());
        assert_eq!(empty.inodes, 1, "the root itself");
        std::fs::create_dir_all(t.path().join("a/b/c")).unwrap();
        std::fs::write(t.path().join("a/b/c/data"), vec![7u8; 1 << 20]).unwrap();
        std::fs::write(t.path().join("small"), b"x").unwrap();
        let u = measure_dir(t.path());
        assert_eq!(u.inodes, 1 + 3 + 2);
        assert!(
            u.bytes - empty.bytes >= 1 << 20,
            "a 1 MiB file counts at least 1 MiB: {u:?}"
        );
        assert_eq!(u.unreadable, 0);
        // A sparse file counts what it uses, not its length.
        let f = std::fs::File::create(t.path().join("sparse")).unwrap();
        f.set_len(1 << 30).unwrap();
        let v = measure_dir(t.path());
        assert!(v.bytes - u.bytes < 1 << 20, "{v:?}");
        assert_eq!(v.inodes, u.inodes + 1);
    }

    #[test]
    fn hard_links_count_once_and_symlinks_are_not_followed() {
        let t = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("big"), vec![1u8; 4 << 20]).unwrap();
        std::fs::write(t.path().join("f"), vec![1u8; 1 << 20]).unwrap();
        let before = measure_dir(t.path());
        std::fs::hard_link(t.path().join("f"), t.path().join("g")).unwrap();
        std::os::unix::fs::symlink(outside.path(), t.path().join("link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("big"), t.path().join("flink")).unwrap();
        let after = measure_dir(t.path());
        // Two symlinks are two small inodes; the hard link adds nothing; nothing outside counts.
        assert_eq!(after.inodes, before.inodes + 2);
        assert!(
            after.bytes - before.bytes < 64 << 10,
            "{before:?} {after:?}"
        );
    }

    #[test]
    fn roots_are_summed_and_a_missing_root_is_empty() {
        let a = tempfile::tempdir().unwrap();
        let b = tempfile::tempdir().unwrap();
        std::fs::write(a.path().join("x"), vec![1u8; 1 << 20]).unwrap();
        std::fs::write(b.path().join("y"), vec![1u8; 1 << 20]).unwrap();
        let both = measure(
            &[
                a.path().to_path_buf(),
                b.path().to_path_buf(),
                b.path().join("missing"),
            ],
            &mut |_| {},
        )
        .unwrap();
        assert_eq!(both.inodes, 4);
        assert!(both.bytes >= 2 << 20);
    }

    #[test]
    fn deep_trees_are_measured_to_the_bottom() {
        // Deeper than PATH_MAX from the root: the walk re-anchors on the way down.
        let t = tempfile::tempdir().unwrap();
        let name = "d".repeat(200);
        let mut fd: OwnedFd = std::fs::File::open(t.path()).unwrap().into();
        let levels = 40; // 40 * 201 bytes > 4096
        for _ in 0..levels {
            nix::sys::stat::mkdirat(
                Some(fd.as_raw_fd()),
                name.as_str(),
                nix::sys::stat::Mode::S_IRWXU,
            )
            .unwrap();
            fd = open_beneath(&fd, Path::new(&name)).unwrap();
        }
        let raw = nix::fcntl::openat(
            Some(fd.as_raw_fd()),
            "bottom",
            nix::fcntl::OFlag::O_CREAT | nix::fcntl::OFlag::O_WRONLY,
            nix::sys::stat::Mode::S_IRUSR | nix::sys::stat::Mode::S_IWUSR,
        )
        .unwrap();
        // SAFETY: openat just returned this descriptor; we own it.
        let bottom = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
        std::io::Write::write_all(&mut &bottom, &vec![3u8; 1 << 20]).unwrap();
        drop(bottom);
        let mut dirs = 0;
        let u = measure(&[t.path().to_path_buf()], &mut |_| dirs += 1).unwrap();
        assert_eq!(u.inodes, 1 + levels + 1);
        assert_eq!(dirs, 1 + levels, "every directory is seen");
        assert!(u.bytes >= 1 << 20, "{u:?}");
        // Clean up from the inside (remove_dir_all of a tree this deep works by descriptor).
        drop(fd);
    }

    #[test]
    fn unreadable_directories_are_reported() {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            eprintln!("SKIPPED: root reads every directory");
            return;
        }
        let t = tempfile::tempdir().unwrap();
        let d = t.path().join("hidden");
        std::fs::create_dir(&d).unwrap();
        std::fs::write(d.join("x"), b"x").unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o000)).unwrap();
        let u = measure_dir(t.path());
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert_eq!(u.unreadable, 1, "{u:?}");
    }
}
