//! Opening a path beneath a directory the sandboxed code controls, so that nothing it plants
//! (a symlink, a `..`, an absolute path, a directory swapped for a symlink mid-way) makes the
//! host open something outside.
//!
//! [`open_beneath`] first checks the path itself (relative, no `..`, no NUL: every platform
//! refuses the same paths the same way), then resolves it:
//!
//! - on Linux by the kernel: `openat2` with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS |
//!   RESOLVE_NO_MAGICLINKS` (and `RESOLVE_NO_XDEV` for [`Beneath::same_filesystem`]);
//! - elsewhere (macOS) by [`walk`]: one `openat` per component, each relative to the directory
//!   the previous one opened, each with `O_NOFOLLOW` (a symlink anywhere is `ELOOP`) and, but
//!   for the last, `O_DIRECTORY`. Every component is looked up in a directory we hold open, so
//!   renaming or replacing a directory after we opened it cannot move the rest of the walk
//!   elsewhere. With `same_filesystem`, each directory's device must be the starting one's
//!   (`EXDEV`). The walk is compiled and tested on Linux too, against the kernel's answers.
//!
//! What the walk cannot see: a bind mount of the same filesystem (same device; macOS has none
//! an unprivileged user can make). It is stricter in one way: it opens each directory for
//! reading, so a directory with search but no read permission stops it (`EACCES`).
//! Neither checks hard links: callers that read a file back check its link count themselves
//! (`session::files`).

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path};

/// How [`open_beneath`] resolves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Beneath {
    /// Refuse to leave the starting directory's filesystem (`EXDEV`).
    pub same_filesystem: bool,
}

/// Opens `path` beneath the directory `dir`: `flags` as for `openat` (`O_CLOEXEC` and
/// `O_NOFOLLOW` are added), `mode` for `O_CREAT`. Refused: an empty path (`ENOENT`), an
/// absolute one or one with `..` (`EXDEV`), a NUL byte (`EINVAL`), a symlink in any component
/// (`ELOOP`; with `O_CREAT | O_EXCL`, a symlink at the last component is `EEXIST`). `.` is
/// the directory itself.
pub fn open_beneath(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: i32,
    mode: u32,
    how: Beneath,
) -> io::Result<OwnedFd> {
    let names = components(path)?;
    resolve(dir, path, &names, flags, mode, how)
}

/// The kernel resolves it (`openat2`).
#[cfg(target_os = "linux")]
fn resolve(
    dir: BorrowedFd<'_>,
    path: &Path,
    _names: &[&OsStr],
    flags: i32,
    mode: u32,
    how: Beneath,
) -> io::Result<OwnedFd> {
    kernel(dir, path, flags, mode, how)
}

/// The walk resolves it.
#[cfg(not(target_os = "linux"))]
fn resolve(
    dir: BorrowedFd<'_>,
    _path: &Path,
    names: &[&OsStr],
    flags: i32,
    mode: u32,
    how: Beneath,
) -> io::Result<OwnedFd> {
    walk_names(dir, names, flags, mode, how)
}

/// `openat2(RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS [| RESOLVE_NO_XDEV])`.
#[cfg(target_os = "linux")]
fn kernel(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: i32,
    mode: u32,
    how: Beneath,
) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    let mut resolve =
        libc::RESOLVE_BENEATH | libc::RESOLVE_NO_SYMLINKS | libc::RESOLVE_NO_MAGICLINKS;
    if how.same_filesystem {
        resolve |= libc::RESOLVE_NO_XDEV;
    }
    let mode = if flags & libc::O_CREAT != 0 {
        u64::from(mode)
    } else {
        0
    };
    super::openat2(
        dir.as_raw_fd(),
        &c,
        flags | libc::O_CLOEXEC | libc::O_NOFOLLOW,
        mode,
        resolve,
    )
}

/// The component-by-component resolution (see the module documentation), on any Unix.
pub fn walk(
    dir: BorrowedFd<'_>,
    path: &Path,
    flags: i32,
    mode: u32,
    how: Beneath,
) -> io::Result<OwnedFd> {
    let names = components(path)?;
    walk_names(dir, &names, flags, mode, how)
}

/// The path's names, or why the path is refused before anything is opened.
fn components(path: &Path) -> io::Result<Vec<&OsStr>> {
    let err = |e| Err(io::Error::from_raw_os_error(e));
    if path.as_os_str().as_bytes().contains(&0) {
        return err(libc::EINVAL);
    }
    let mut names = Vec::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => names.push(n),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return err(libc::EXDEV)
            }
        }
    }
    if path.as_os_str().is_empty() {
        return err(libc::ENOENT);
    }
    // Only `.`: the directory itself.
    if names.is_empty() {
        names.push(OsStr::new("."));
    }
    Ok(names)
}

fn walk_names(
    dir: BorrowedFd<'_>,
    names: &[&OsStr],
    flags: i32,
    mode: u32,
    how: Beneath,
) -> io::Result<OwnedFd> {
    let device = if how.same_filesystem {
        Some(nix::sys::stat::fstat(dir.as_raw_fd())?.st_dev)
    } else {
        None
    };
    let mut held: Option<OwnedFd> = None;
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let (f, m) = if last {
            (flags | libc::O_CLOEXEC | libc::O_NOFOLLOW, mode)
        } else {
            (
                libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC | libc::O_NOFOLLOW,
                0,
            )
        };
        let at = held.as_ref().map_or(dir.as_raw_fd(), |fd| fd.as_raw_fd());
        let c = CString::new(name.as_bytes())
            .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: `at` is a directory descriptor we hold (or the caller's, alive for the call),
        // `c` a NUL-terminated name; openat returns a new descriptor or -1. The mode is passed
        // as the C variadic's promoted unsigned int.
        let fd = unsafe { libc::openat(at, c.as_ptr(), f, m as libc::c_uint) };
        if fd < 0 {
            let err = io::Error::last_os_error();
            // A symlink met with O_DIRECTORY is ENOTDIR on Linux; the kernel's resolver (and
            // this module's contract) says ELOOP, whatever the symlink points to.
            if !last && err.raw_os_error() == Some(libc::ENOTDIR) && is_symlink(at, &c) {
                return Err(io::Error::from_raw_os_error(libc::ELOOP));
            }
            return Err(err);
        }
        // SAFETY: openat just returned this descriptor; we are its only owner.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        if let Some(dev) = device {
            if nix::sys::stat::fstat(fd.as_raw_fd())?.st_dev != dev {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
        }
        held = Some(fd);
    }
    held.ok_or_else(|| io::Error::from_raw_os_error(libc::ENOENT))
}

/// Whether `name` in the directory `at` is a symlink (not followed).
fn is_symlink(at: std::os::fd::RawFd, name: &std::ffi::CStr) -> bool {
    nix::sys::stat::fstatat(Some(at), name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW).is_ok_and(
        |st| {
            nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
                == nix::sys::stat::SFlag::S_IFLNK
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::fs::symlink;

    type Resolver = fn(BorrowedFd<'_>, &Path, i32, u32, Beneath) -> io::Result<OwnedFd>;

    /// The walk, and `open_beneath` as this platform resolves (on Linux: the kernel, so every
    /// case checks that the walk answers as `openat2` does).
    fn resolvers() -> [(&'static str, Resolver); 2] {
        [("walk", walk), ("open_beneath", open_beneath)]
    }

    /// What an attempt came to: `Ok` or the errno.
    fn outcome(r: io::Result<OwnedFd>) -> Result<(), i32> {
        r.map(drop).map_err(|e| e.raw_os_error().unwrap_or(-1))
    }

    /// A workspace with a file, nested directories, and symlinks planted every way the code
    /// could: to a directory outside, to a file outside, to a directory inside, dangling.
    fn fixture() -> (tempfile::TempDir, tempfile::TempDir, OwnedFd) {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        std::fs::create_dir_all(ws.path().join("a/b")).unwrap();
        std::fs::write(ws.path().join("a/b/f"), "f").unwrap();
        symlink(outside.path(), ws.path().join("out")).unwrap();
        symlink(outside.path().join("secret"), ws.path().join("a/secret")).unwrap();
        symlink("b", ws.path().join("a/inner")).unwrap();
        symlink("nowhere", ws.path().join("dangling")).unwrap();
        let root: OwnedFd = std::fs::File::open(ws.path()).unwrap().into();
        (ws, outside, root)
    }

    #[test]
    fn every_resolver_refuses_the_same_paths_the_same_way() {
        let (ws, _outside, root) = fixture();
        let rd = libc::O_RDONLY;
        let dir = libc::O_RDONLY | libc::O_DIRECTORY;
        let create = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL;
        // Each path, the flags, and what may come of it (the first for every resolver alike).
        type Case<'a> = (&'a str, i32, &'a [Result<(), i32>]);
        let cases: &[Case] = &[
            ("a/b/f", rd, &[Ok(())]),
            ("./a/./b/f", rd, &[Ok(())]),
            (".", dir, &[Ok(())]),
            ("a/b", dir, &[Ok(())]),
            ("a/b/new", create, &[Ok(())]),
            ("", rd, &[Err(libc::ENOENT)]),
            ("/etc/passwd", rd, &[Err(libc::EXDEV)]),
            ("../x", rd, &[Err(libc::EXDEV)]),
            ("a/../a/b/f", rd, &[Err(libc::EXDEV)]),
            ("a/b/../../../etc", rd, &[Err(libc::EXDEV)]),
            // A symlink anywhere: to a directory outside, to a file outside, to a directory
            // inside, dangling; as a middle component or the last.
            ("out/secret", rd, &[Err(libc::ELOOP)]),
            // O_DIRECTORY on a final symlink: Linux says ENOTDIR (openat2 too), macOS ELOOP.
            ("out", dir, &[Err(libc::ENOTDIR), Err(libc::ELOOP)]),
            ("a/secret", rd, &[Err(libc::ELOOP)]),
            ("a/inner/f", rd, &[Err(libc::ELOOP)]),
            ("dangling", rd, &[Err(libc::ELOOP)]),
            // Creating over a planted symlink never follows it.
            ("a/secret", create, &[Err(libc::EEXIST)]),
            ("dangling", create, &[Err(libc::EEXIST)]),
            ("missing/f", rd, &[Err(libc::ENOENT)]),
            ("a/b/f/x", rd, &[Err(libc::ENOTDIR)]),
        ];
        for (path, flags, want) in cases {
            let mut outcomes = Vec::new();
            for (name, resolve) in resolvers() {
                let got = outcome(resolve(
                    root.as_fd(),
                    Path::new(path),
                    *flags,
                    0o600,
                    Beneath::default(),
                ));
                assert!(want.contains(&got), "{name}: {path:?}: {got:?}");
                if got.is_ok() && flags & libc::O_CREAT != 0 {
                    std::fs::remove_file(ws.path().join(path)).unwrap();
                }
                outcomes.push((name, got));
            }
            assert_eq!(outcomes[0].1, outcomes[1].1, "{path:?}: {outcomes:?}");
        }
        assert!(
            !ws.path().join("dangling").exists() && !ws.path().join("nowhere").exists(),
            "nothing was created through the dangling symlink"
        );
    }

    #[test]
    fn a_nul_byte_is_refused() {
        let (_ws, _outside, root) = fixture();
        let p = Path::new(OsStr::from_bytes(b"a/b\0/f"));
        for (name, resolve) in resolvers() {
            let got = outcome(resolve(
                root.as_fd(),
                p,
                libc::O_RDONLY,
                0,
                Beneath::default(),
            ));
            assert_eq!(got, Err(libc::EINVAL), "{name}");
        }
    }

    #[test]
    fn same_filesystem_stops_at_a_mount_point() {
        // The root directory and a filesystem mounted on it (`/proc` on Linux, `/dev` on
        // macOS): beneath `/`, that name is another device.
        let root: OwnedFd = std::fs::File::open("/").unwrap().into();
        let root_dev = std::fs::metadata("/").unwrap();
        use std::os::unix::fs::MetadataExt;
        let Some(other) = ["proc", "dev"].into_iter().find(|n| {
            std::fs::metadata(Path::new("/").join(n))
                .map(|m| m.dev() != root_dev.dev())
                .unwrap_or(false)
        }) else {
            eprintln!("SKIPPED: no other filesystem mounted at /proc or /dev here");
            return;
        };
        let dir = libc::O_RDONLY | libc::O_DIRECTORY;
        for (name, resolve) in resolvers() {
            let crossing = outcome(resolve(
                root.as_fd(),
                Path::new(other),
                dir,
                0,
                Beneath {
                    same_filesystem: true,
                },
            ));
            assert_eq!(crossing, Err(libc::EXDEV), "{name}: /{other}");
            let allowed = outcome(resolve(
                root.as_fd(),
                Path::new(other),
                dir,
                0,
                Beneath::default(),
            ));
            assert_eq!(allowed, Ok(()), "{name}: /{other} without same_filesystem");
        }
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_is_not_followed() {
        // The code replaces a directory the host is about to walk through with a symlink to
        // outside: the next lookup meets the symlink and stops.
        let (ws, outside, root) = fixture();
        std::fs::rename(ws.path().join("a/b"), ws.path().join("a/b-moved")).unwrap();
        symlink(outside.path(), ws.path().join("a/b")).unwrap();
        for (name, resolve) in resolvers() {
            let got = outcome(resolve(
                root.as_fd(),
                Path::new("a/b/secret"),
                libc::O_RDONLY,
                0,
                Beneath::default(),
            ));
            assert_eq!(got, Err(libc::ELOOP), "{name}");
        }
    }
}
