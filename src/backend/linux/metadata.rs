//! File metadata (mode, owner, times, extended attributes) when the sandbox shares the caller's
//! uid and the host's filesystem: the native backend without namespaces, unprivileged (what
//! Ubuntu 24.04 laptops get). Landlock has no right for metadata, so `chmod`, `chown`, `utime`
//! and `setxattr` would otherwise reach every file the user owns, by path: `~/.ssh`, sandpit's
//! own state directory and audit log.
//!
//! The sandbox's last seccomp filter turns those syscalls into user notifications (see
//! supervisor.rs). The helper's waiter, which stays outside the confinement, receives them and
//! performs each change itself ([`Roots::handle`]), only when the file lies beneath one of the
//! sandbox's writable roots (workspace, tmp, home):
//!
//! 1. decode the call ([`decode`]: which file, which change);
//! 2. open the file `O_PATH` as the sandbox named it: its path read from the sandbox's memory,
//!    resolved from its cwd or directory descriptor (`/proc/PID/cwd`, `/proc/PID/fd/N`) with
//!    `RESOLVE_NO_MAGICLINKS`, so `/proc/self/...` cannot name the waiter's own descriptors;
//! 3. check the *inode*, not the text: the file's kernel path must lie beneath a root, and
//!    re-opening that path from the root's descriptor with `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS
//!    | RESOLVE_NO_XDEV` must reach the same device and inode;
//! 4. make the change on that descriptor and answer with its result. Nothing is re-resolved
//!    after the check, so swapping a directory for a symlink meanwhile cannot redirect it
//!    (the reason the kernel's "continue the syscall" answer is never used here).
//!
//! Anything else fails with `EPERM`, as a chmod of another user's file would. If the waiter is
//! gone, the kernel fails the calls with `ENOSYS`: closed, never open. Reading the sandbox's
//! memory needs ptrace access to it (`process_vm_readv`, or `/proc/PID/mem` where a seccomp
//! profile refuses that syscall, as Docker's default does): the waiter is its ancestor and has
//! its uid, which Yama's default scope (1) allows; under scope 2 or 3 every such call fails.

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// The syscalls the waiter performs on the sandbox's behalf.
#[cfg(target_arch = "x86_64")]
pub const SUPERVISED: &[libc::c_long] = &[
    libc::SYS_chmod,
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_chown,
    libc::SYS_fchown,
    libc::SYS_lchown,
    libc::SYS_fchownat,
    libc::SYS_utime,
    libc::SYS_utimes,
    libc::SYS_futimesat,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
];
#[cfg(target_arch = "aarch64")]
pub const SUPERVISED: &[libc::c_long] = &[
    libc::SYS_fchmod,
    libc::SYS_fchmodat,
    libc::SYS_fchown,
    libc::SYS_fchownat,
    libc::SYS_utimensat,
    libc::SYS_setxattr,
    libc::SYS_lsetxattr,
    libc::SYS_fsetxattr,
    libc::SYS_removexattr,
    libc::SYS_lremovexattr,
    libc::SYS_fremovexattr,
];
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
pub const SUPERVISED: &[libc::c_long] = &[];

/// Which file a call names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    /// A path in the sandbox's memory, relative to `dirfd` (or its cwd for `AT_FDCWD`).
    Path {
        dirfd: i32,
        addr: u64,
        follow: bool,
        /// `AT_EMPTY_PATH`: an empty path names `dirfd` itself.
        empty_ok: bool,
    },
    /// One of the sandbox's descriptors.
    Fd(i32),
}

/// The times argument of the utime family, as the sandbox passed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Times {
    Now,
    /// `utime`'s `struct utimbuf` (x86-64 only: aarch64 has no `utime`, `utimes` or `futimesat`).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Utimbuf(u64),
    /// `utimes`' and `futimesat`'s two `struct timeval`s (x86-64 only, as above).
    #[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
    Timeval(u64),
    Timespec(u64),
}

/// What a call changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    Mode(u32),
    Owner(u32, u32),
    Times(Times),
    SetXattr {
        name: u64,
        value: u64,
        size: u64,
        flags: i32,
    },
    RemoveXattr {
        name: u64,
    },
}

/// Decodes a supervised syscall; `Err` is the errno the kernel would give for bad flags.
fn decode(nr: libc::c_long, a: [u64; 6]) -> Option<Result<(Target, Change), i32>> {
    let cwd = libc::AT_FDCWD;
    let path = |dirfd: i32, addr: u64, follow: bool| Target::Path {
        dirfd,
        addr,
        follow,
        empty_ok: false,
    };
    let times = |addr: u64, kind: fn(u64) -> Times| {
        if addr == 0 {
            Times::Now
        } else {
            kind(addr)
        }
    };
    let at_flags = |flags: u64, allowed: i32| -> Result<(bool, bool), i32> {
        let f = flags as i32;
        if f & !allowed != 0 {
            return Err(libc::EINVAL);
        }
        Ok((
            f & libc::AT_SYMLINK_NOFOLLOW == 0,
            f & libc::AT_EMPTY_PATH != 0,
        ))
    };
    let fd = |v: u64| v as i32;
    let xattr = |name: u64, value: u64, size: u64, flags: u64| Change::SetXattr {
        name,
        value,
        size,
        flags: flags as i32,
    };
    let r = match nr {
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chmod => Ok((path(cwd, a[0], true), Change::Mode(a[1] as u32))),
        libc::SYS_fchmod => Ok((Target::Fd(fd(a[0])), Change::Mode(a[1] as u32))),
        libc::SYS_fchmodat => Ok((path(fd(a[0]), a[1], true), Change::Mode(a[2] as u32))),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_chown => Ok((
            path(cwd, a[0], true),
            Change::Owner(a[1] as u32, a[2] as u32),
        )),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_lchown => Ok((
            path(cwd, a[0], false),
            Change::Owner(a[1] as u32, a[2] as u32),
        )),
        libc::SYS_fchown => Ok((
            Target::Fd(fd(a[0])),
            Change::Owner(a[1] as u32, a[2] as u32),
        )),
        libc::SYS_fchownat => at_flags(a[4], libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH).map(
            |(follow, empty)| {
                (
                    Target::Path {
                        dirfd: fd(a[0]),
                        addr: a[1],
                        follow,
                        empty_ok: empty,
                    },
                    Change::Owner(a[2] as u32, a[3] as u32),
                )
            },
        ),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_utime => Ok((
            path(cwd, a[0], true),
            Change::Times(times(a[1], Times::Utimbuf)),
        )),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_utimes => Ok((
            path(cwd, a[0], true),
            Change::Times(times(a[1], Times::Timeval)),
        )),
        #[cfg(target_arch = "x86_64")]
        libc::SYS_futimesat => {
            let target = if a[1] == 0 {
                Target::Fd(fd(a[0]))
            } else {
                path(fd(a[0]), a[1], true)
            };
            Ok((target, Change::Times(times(a[2], Times::Timeval))))
        }
        libc::SYS_utimensat => {
            let change = Change::Times(times(a[2], Times::Timespec));
            if a[1] == 0 {
                // futimens(fd): no flags allowed, and AT_FDCWD names no file.
                if a[3] != 0 {
                    Err(libc::EINVAL)
                } else if fd(a[0]) == cwd {
                    Err(libc::EFAULT)
                } else {
                    Ok((Target::Fd(fd(a[0])), change))
                }
            } else {
                at_flags(a[3], libc::AT_SYMLINK_NOFOLLOW | libc::AT_EMPTY_PATH).map(
                    |(follow, empty)| {
                        (
                            Target::Path {
                                dirfd: fd(a[0]),
                                addr: a[1],
                                follow,
                                empty_ok: empty,
                            },
                            change,
                        )
                    },
                )
            }
        }
        libc::SYS_setxattr => Ok((path(cwd, a[0], true), xattr(a[1], a[2], a[3], a[4]))),
        libc::SYS_lsetxattr => Ok((path(cwd, a[0], false), xattr(a[1], a[2], a[3], a[4]))),
        libc::SYS_fsetxattr => Ok((Target::Fd(fd(a[0])), xattr(a[1], a[2], a[3], a[4]))),
        libc::SYS_removexattr => Ok((path(cwd, a[0], true), Change::RemoveXattr { name: a[1] })),
        libc::SYS_lremovexattr => Ok((path(cwd, a[0], false), Change::RemoveXattr { name: a[1] })),
        libc::SYS_fremovexattr => Ok((Target::Fd(fd(a[0])), Change::RemoveXattr { name: a[1] })),
        _ => return None,
    };
    Some(r)
}

/// Reads `len` bytes at `addr` of process `pid`: with `process_vm_readv`, or, once that has been
/// refused while `/proc/PID/mem` answers, with `pread` of `/proc/PID/mem`. Both pass the same
/// ptrace access check in the kernel, but a seccomp profile may refuse the syscall alone:
/// Docker's default (20.10, measured) allows `ptrace` and refuses `process_vm_readv` without
/// `CAP_SYS_PTRACE`, so as uid 1000 in a default container every supervised call failed `EPERM`.
pub(super) fn read_memory(pid: u32, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    static VM_READV_REFUSED: std::sync::atomic::AtomicBool =
        std::sync::atomic::AtomicBool::new(false);
    read_memory_by(
        pid,
        addr,
        len,
        &VM_READV_REFUSED,
        read_memory_vm,
        read_memory_proc,
    )
}

type Reader = fn(u32, u64, usize) -> Result<Vec<u8>, i32>;

/// [`read_memory`] with its two readers given: `vm` until it is refused (`EPERM`, `ENOSYS`) where
/// `proc_mem` works, then `proc_mem` only (`refused` remembers it for the process).
fn read_memory_by(
    pid: u32,
    addr: u64,
    len: usize,
    refused: &std::sync::atomic::AtomicBool,
    vm: Reader,
    proc_mem: Reader,
) -> Result<Vec<u8>, i32> {
    use std::sync::atomic::Ordering;
    if refused.load(Ordering::Relaxed) {
        return proc_mem(pid, addr, len);
    }
    match vm(pid, addr, len) {
        Err(e @ (libc::EPERM | libc::ENOSYS)) => match proc_mem(pid, addr, len) {
            Ok(b) => {
                refused.store(true, Ordering::Relaxed);
                Ok(b)
            }
            // Refused there too (Yama's scope 2 or 3, another uid): the first answer stands.
            Err(_) => Err(e),
        },
        r => r,
    }
}

/// [`read_memory`] by `process_vm_readv`.
fn read_memory_vm(pid: u32, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        let local = libc::iovec {
            iov_base: buf[done..].as_mut_ptr().cast(),
            iov_len: len - done,
        };
        let remote = libc::iovec {
            iov_base: (addr as usize + done) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: process_vm_readv writes at most `local.iov_len` bytes into our buffer, which
        // is that long; the remote address is only read, in the other process.
        let n = unsafe { libc::process_vm_readv(pid as i32, &local, 1, &remote, 1, 0) };
        if n <= 0 {
            return Err(if n == 0 {
                libc::EFAULT
            } else {
                io::Error::last_os_error()
                    .raw_os_error()
                    .unwrap_or(libc::EFAULT)
            });
        }
        done += n as usize;
    }
    Ok(buf)
}

/// [`read_memory`] by `pread` of `/proc/PID/mem`. An unmapped address answers `EIO` (or a short
/// read) there; it is `EFAULT` here, as from `process_vm_readv`.
fn read_memory_proc(pid: u32, addr: u64, len: usize) -> Result<Vec<u8>, i32> {
    use std::os::unix::fs::FileExt;
    use std::os::unix::fs::OpenOptionsExt;
    let mem = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(format!("/proc/{pid}/mem"))
        .map_err(|e| e.raw_os_error().unwrap_or(libc::EPERM))?;
    let mut buf = vec![0u8; len];
    let mut done = 0;
    while done < len {
        match mem.read_at(&mut buf[done..], addr + done as u64) {
            Ok(0) => return Err(libc::EFAULT),
            Ok(n) => done += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(match e.raw_os_error() {
                    Some(libc::EIO) | None => libc::EFAULT,
                    Some(errno) => errno,
                })
            }
        }
    }
    Ok(buf)
}

/// Reads a NUL-terminated string of at most `max` bytes (without the NUL) at `addr`, page by
/// page so that a string ending just before an unmapped page reads fine.
fn read_cstring(pid: u32, addr: u64, max: usize) -> Result<CString, i32> {
    read_cstring_by(pid, addr, max, read_memory)
}

/// [`read_cstring`] with the memory reader given.
fn read_cstring_by(pid: u32, addr: u64, max: usize, read: Reader) -> Result<CString, i32> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    loop {
        let chunk = (PAGE - at % PAGE) as usize;
        let bytes = read(pid, at, chunk)?;
        if let Some(end) = bytes.iter().position(|b| *b == 0) {
            out.extend_from_slice(&bytes[..end]);
            if out.len() > max {
                return Err(libc::ENAMETOOLONG);
            }
            return CString::new(out).map_err(|_| libc::EINVAL);
        }
        out.extend_from_slice(&bytes);
        if out.len() > max {
            return Err(libc::ENAMETOOLONG);
        }
        at += chunk as u64;
    }
}

pub(super) fn errno() -> i32 {
    io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn cstr(p: &Path) -> Result<CString, i32> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| libc::EINVAL)
}

/// `open(path, O_PATH | flags)`.
fn open_path(path: &Path, flags: i32) -> Result<OwnedFd, i32> {
    let c = cstr(path)?;
    // SAFETY: open reads the NUL-terminated path; it returns a new descriptor or -1.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_PATH | libc::O_CLOEXEC | flags) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `openat2(dir, path, O_PATH | flags, resolve)`, failing with the raw errno.
fn openat2(dir: RawFd, path: &CStr, flags: i32, resolve: u64) -> Result<OwnedFd, i32> {
    crate::util::openat2(
        dir,
        path,
        libc::O_PATH | libc::O_CLOEXEC | flags,
        0,
        resolve,
    )
    .map_err(|e| e.raw_os_error().unwrap_or(libc::EIO))
}

fn fstat(fd: RawFd) -> Result<libc::stat, i32> {
    // SAFETY: fstat writes one stat struct we own.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: as above; `fd` is a descriptor we hold.
    if unsafe { libc::fstat(fd, &mut st) } != 0 {
        return Err(errno());
    }
    Ok(st)
}

/// The magic-link path of one of our descriptors, for the calls that have no `AT_EMPTY_PATH`.
fn fd_path(fd: &OwnedFd) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()))
}

/// A writable root of the sandbox: its canonical path and a descriptor of it.
struct Root {
    path: PathBuf,
    fd: OwnedFd,
}

/// The sandbox's writable roots, beneath which the waiter makes metadata changes.
pub struct Roots {
    roots: Vec<Root>,
}

impl Roots {
    /// `roots`: the sandbox's writable directories. One that cannot be opened is left out, so
    /// nothing beneath it can be changed (closed, not open).
    pub fn new(roots: &[PathBuf]) -> Roots {
        let roots = roots
            .iter()
            .filter_map(|r| {
                let path = std::fs::canonicalize(r).ok()?;
                let fd = open_path(&path, libc::O_DIRECTORY).ok()?;
                Some(Root { path, fd })
            })
            .collect();
        Roots { roots }
    }

    /// Handles one metadata call of process `pid`: `None` when `nr` is not one of ours.
    /// `still_valid` tells whether the notification is still pending (the caller alive and its
    /// pid not reused), asked after everything was read from its memory and `/proc/PID`.
    pub fn handle(
        &self,
        pid: u32,
        nr: libc::c_long,
        args: [u64; 6],
        still_valid: &dyn Fn() -> bool,
    ) -> Option<Result<i64, i32>> {
        let decoded = decode(nr, args)?;
        Some((|| {
            let (target, change) = decoded?;
            let file = self.open_target(pid, target)?;
            let data = ChangeData::read(pid, change)?;
            if !still_valid() {
                return Err(libc::ESRCH);
            }
            if !self.beneath_a_root(&file) {
                return Err(libc::EPERM);
            }
            apply(&file, change, &data).map(|()| 0)
        })())
    }

    /// Opens the file a call names, `O_PATH`, as the sandbox would have resolved it.
    fn open_target(&self, pid: u32, target: Target) -> Result<OwnedFd, i32> {
        let of_fd = |fd: i32| -> Result<OwnedFd, i32> {
            if fd < 0 {
                return Err(libc::EBADF);
            }
            open_path(Path::new(&format!("/proc/{pid}/fd/{fd}")), 0).map_err(|e| match e {
                libc::ENOENT => libc::EBADF,
                e => e,
            })
        };
        match target {
            Target::Fd(fd) => of_fd(fd),
            Target::Path {
                dirfd,
                addr,
                follow,
                empty_ok,
            } => {
                if addr == 0 {
                    return Err(libc::EFAULT);
                }
                let path = read_cstring(pid, addr, libc::PATH_MAX as usize - 1)?;
                if path.as_bytes().is_empty() {
                    if !empty_ok {
                        return Err(libc::ENOENT);
                    }
                    return if dirfd == libc::AT_FDCWD {
                        open_path(Path::new(&format!("/proc/{pid}/cwd")), 0)
                    } else {
                        of_fd(dirfd)
                    };
                }
                let base = if path.as_bytes().starts_with(b"/") {
                    open_path(Path::new("/"), libc::O_DIRECTORY)?
                } else if dirfd == libc::AT_FDCWD {
                    open_path(Path::new(&format!("/proc/{pid}/cwd")), libc::O_DIRECTORY)?
                } else {
                    of_fd(dirfd)?
                };
                let nofollow = if follow { 0 } else { libc::O_NOFOLLOW };
                openat2(
                    base.as_raw_fd(),
                    &path,
                    nofollow,
                    libc::RESOLVE_NO_MAGICLINKS,
                )
            }
        }
    }

    /// Whether the inode `file` refers to lies beneath one of the writable roots: its kernel
    /// path is under a root, and that path re-opened from the root without symlinks, `..` or
    /// mount crossings reaches the same inode.
    fn beneath_a_root(&self, file: &OwnedFd) -> bool {
        let Ok(real) = std::fs::read_link(fd_path(file)) else {
            return false;
        };
        let Ok(st) = fstat(file.as_raw_fd()) else {
            return false;
        };
        self.roots.iter().any(|root| {
            let rel = if real == root.path {
                PathBuf::from(".")
            } else {
                match real.strip_prefix(&root.path) {
                    Ok(r) => r.to_path_buf(),
                    Err(_) => return false,
                }
            };
            let Ok(rel) = cstr(&rel) else { return false };
            let again = openat2(
                root.fd.as_raw_fd(),
                &rel,
                libc::O_NOFOLLOW,
                libc::RESOLVE_BENEATH
                    | libc::RESOLVE_NO_SYMLINKS
                    | libc::RESOLVE_NO_MAGICLINKS
                    | libc::RESOLVE_NO_XDEV,
            );
            match again.and_then(|fd| fstat(fd.as_raw_fd())) {
                Ok(s) => s.st_dev == st.st_dev && s.st_ino == st.st_ino,
                Err(_) => false,
            }
        })
    }
}

/// What a change carries in the sandbox's memory, read once.
#[derive(Default)]
struct ChangeData {
    times: Option<[libc::timespec; 2]>,
    name: Option<CString>,
    value: Vec<u8>,
}

fn i64_at(b: &[u8], i: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i * 8..i * 8 + 8]);
    i64::from_ne_bytes(a)
}

impl ChangeData {
    fn read(pid: u32, change: Change) -> Result<ChangeData, i32> {
        let ts = |sec: i64, nsec: i64| libc::timespec {
            tv_sec: sec,
            tv_nsec: nsec,
        };
        let mut d = ChangeData::default();
        match change {
            Change::Times(Times::Now) => {}
            Change::Times(Times::Utimbuf(addr)) => {
                let b = read_memory(pid, addr, 16)?;
                d.times = Some([ts(i64_at(&b, 0), 0), ts(i64_at(&b, 1), 0)]);
            }
            Change::Times(Times::Timeval(addr)) => {
                let b = read_memory(pid, addr, 32)?;
                let usec = |i| {
                    let u = i64_at(&b, i);
                    if !(0..1_000_000).contains(&u) {
                        return Err(libc::EINVAL);
                    }
                    Ok(u * 1000)
                };
                d.times = Some([ts(i64_at(&b, 0), usec(1)?), ts(i64_at(&b, 2), usec(3)?)]);
            }
            Change::Times(Times::Timespec(addr)) => {
                let b = read_memory(pid, addr, 32)?;
                d.times = Some([
                    ts(i64_at(&b, 0), i64_at(&b, 1)),
                    ts(i64_at(&b, 2), i64_at(&b, 3)),
                ]);
            }
            Change::SetXattr {
                name, value, size, ..
            } => {
                d.name = Some(read_cstring(pid, name, 255).map_err(|e| match e {
                    libc::ENAMETOOLONG => libc::ERANGE,
                    e => e,
                })?);
                if size > 65536 {
                    return Err(libc::E2BIG);
                }
                if size > 0 {
                    d.value = read_memory(pid, value, size as usize)?;
                }
            }
            Change::RemoveXattr { name } => {
                d.name = Some(read_cstring(pid, name, 255).map_err(|e| match e {
                    libc::ENAMETOOLONG => libc::ERANGE,
                    e => e,
                })?);
            }
            Change::Mode(_) | Change::Owner(..) => {}
        }
        Ok(d)
    }
}

/// Makes the change on the validated descriptor.
fn apply(file: &OwnedFd, change: Change, data: &ChangeData) -> Result<(), i32> {
    let st = fstat(file.as_raw_fd())?;
    let is_symlink = st.st_mode & libc::S_IFMT == libc::S_IFLNK;
    let magic = cstr(&fd_path(file))?;
    let empty = c"";
    let check = |rc: libc::c_int| if rc == 0 { Ok(()) } else { Err(errno()) };
    match change {
        Change::Mode(mode) => {
            if is_symlink {
                return Err(libc::EOPNOTSUPP);
            }
            // SAFETY: chmod reads the NUL-terminated magic-link path of our own descriptor.
            check(unsafe { libc::chmod(magic.as_ptr(), mode as libc::mode_t) })
        }
        Change::Owner(uid, gid) => {
            // SAFETY: fchownat on our O_PATH descriptor with an empty path (AT_EMPTY_PATH).
            check(unsafe {
                libc::fchownat(
                    file.as_raw_fd(),
                    empty.as_ptr(),
                    uid,
                    gid,
                    libc::AT_EMPTY_PATH,
                )
            })
        }
        Change::Times(_) => {
            let times = data.times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
            // SAFETY: utimensat reads the path and, when non-null, two timespecs we own.
            check(unsafe {
                if is_symlink {
                    libc::utimensat(
                        file.as_raw_fd(),
                        empty.as_ptr(),
                        times,
                        libc::AT_EMPTY_PATH | libc::AT_SYMLINK_NOFOLLOW,
                    )
                } else {
                    libc::utimensat(libc::AT_FDCWD, magic.as_ptr(), times, 0)
                }
            })
        }
        Change::SetXattr { flags, .. } => {
            if is_symlink {
                return Err(libc::EPERM);
            }
            let name = data.name.as_ref().ok_or(libc::EINVAL)?;
            // SAFETY: setxattr reads the path, the name and `value.len()` bytes of the value.
            check(unsafe {
                libc::setxattr(
                    magic.as_ptr(),
                    name.as_ptr(),
                    data.value.as_ptr().cast(),
                    data.value.len(),
                    flags,
                )
            })
        }
        Change::RemoveXattr { .. } => {
            if is_symlink {
                return Err(libc::EPERM);
            }
            let name = data.name.as_ref().ok_or(libc::EINVAL)?;
            // SAFETY: removexattr reads the two NUL-terminated strings.
            check(unsafe { libc::removexattr(magic.as_ptr(), name.as_ptr()) })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decodes_the_calls() {
        let at = libc::AT_FDCWD as u32 as u64;
        assert_eq!(
            decode(libc::SYS_fchmodat, [at, 0x1000, 0o755, 0, 0, 0]),
            Some(Ok((
                Target::Path {
                    dirfd: libc::AT_FDCWD,
                    addr: 0x1000,
                    follow: true,
                    empty_ok: false
                },
                Change::Mode(0o755)
            )))
        );
        assert_eq!(
            decode(libc::SYS_fchmod, [3, 0o600, 0, 0, 0, 0]),
            Some(Ok((Target::Fd(3), Change::Mode(0o600))))
        );
        let nofollow = libc::AT_SYMLINK_NOFOLLOW as u64;
        assert!(matches!(
            decode(libc::SYS_fchownat, [at, 0x1000, 1, 2, nofollow, 0]),
            Some(Ok((
                Target::Path { follow: false, .. },
                Change::Owner(1, 2)
            )))
        ));
        assert_eq!(
            decode(libc::SYS_fchownat, [at, 0x1000, 1, 2, 0x8000_0000, 0]),
            Some(Err(libc::EINVAL))
        );
        // utimensat(fd, NULL, times, 0) is futimens; with AT_FDCWD it names nothing.
        assert_eq!(
            decode(libc::SYS_utimensat, [5, 0, 0x2000, 0, 0, 0]),
            Some(Ok((Target::Fd(5), Change::Times(Times::Timespec(0x2000)))))
        );
        assert_eq!(
            decode(libc::SYS_utimensat, [at, 0, 0, 0, 0, 0]),
            Some(Err(libc::EFAULT))
        );
        assert!(matches!(
            decode(libc::SYS_lsetxattr, [0x1000, 0x2000, 0x3000, 4, 0, 0]),
            Some(Ok((
                Target::Path { follow: false, .. },
                Change::SetXattr { size: 4, .. }
            )))
        ));
        assert_eq!(decode(libc::SYS_read, [0; 6]), None);
    }

    /// The supervisor's checks on this process's own files (pid = ourselves, as the sandbox
    /// would be): inside a root a change is made; outside, through a symlink, `..` or a
    /// descriptor, it is refused and the file is unchanged.
    #[test]
    fn changes_only_what_lies_beneath_a_root() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("workspace");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(root.join("sub/in.txt"), "x").unwrap();
        std::fs::write(outside.join("canary"), "x").unwrap();
        std::os::unix::fs::symlink(outside.join("canary"), root.join("link")).unwrap();
        std::os::unix::fs::symlink(&outside, root.join("dirlink")).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        std::fs::set_permissions(
            outside.join("canary"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();

        let sup = Roots::new(std::slice::from_ref(&root));
        let me = std::process::id();
        let try_chmod = |path: &Path, follow: bool| -> Result<(), i32> {
            let c = cstr(path).unwrap();
            let f = sup.open_target(
                me,
                Target::Path {
                    dirfd: libc::AT_FDCWD,
                    addr: c.as_ptr() as u64,
                    follow,
                    empty_ok: false,
                },
            )?;
            if !sup.beneath_a_root(&f) {
                return Err(libc::EPERM);
            }
            apply(&f, Change::Mode(0o640), &ChangeData::default())
        };
        assert_eq!(try_chmod(&root.join("sub/in.txt"), true), Ok(()));
        assert_eq!(mode(&root.join("sub/in.txt")), 0o640);
        assert_eq!(
            try_chmod(&root, true),
            Ok(()),
            "the root itself is the sandbox's"
        );
        for escape in [
            root.join("link"),
            root.join("dirlink/canary"),
            root.join("sub/../../outside/canary"),
            outside.join("canary"),
            PathBuf::from("/proc/self/fd/0"),
        ] {
            assert!(try_chmod(&escape, true).is_err(), "{}", escape.display());
        }
        assert_eq!(mode(&outside.join("canary")), 0o600, "the canary changed");

        // By descriptor: an fd of a file outside the root is refused too.
        let f = std::fs::File::open(outside.join("canary")).unwrap();
        let t = sup.open_target(me, Target::Fd(f.as_raw_fd())).unwrap();
        assert!(!sup.beneath_a_root(&t));
        let inside = std::fs::File::open(root.join("sub/in.txt")).unwrap();
        let t = sup.open_target(me, Target::Fd(inside.as_raw_fd())).unwrap();
        assert!(sup.beneath_a_root(&t));

        // Times and owner through the same descriptor.
        let t = sup.open_target(me, Target::Fd(inside.as_raw_fd())).unwrap();
        let data = ChangeData {
            times: Some([
                libc::timespec {
                    tv_sec: 1_000_000,
                    tv_nsec: 0,
                },
                libc::timespec {
                    tv_sec: 2_000_000,
                    tv_nsec: 0,
                },
            ]),
            ..ChangeData::default()
        };
        apply(&t, Change::Times(Times::Timespec(1)), &data).unwrap();
        assert_eq!(
            std::fs::metadata(root.join("sub/in.txt")).unwrap().mtime(),
            2_000_000
        );
        apply(
            &t,
            Change::Owner(u32::MAX, u32::MAX),
            &ChangeData::default(),
        )
        .unwrap();
    }

    #[test]
    fn reads_strings_across_pages() {
        // Both readers: process_vm_readv, and /proc/PID/mem where a seccomp profile refuses it.
        for read in [read_memory_vm as Reader, read_memory_proc, read_memory] {
            let s = c"/workspace/some/file";
            let me = std::process::id();
            assert_eq!(
                read_cstring_by(me, s.as_ptr() as u64, 4095, read)
                    .unwrap()
                    .as_c_str(),
                s
            );
            assert_eq!(
                read_cstring_by(me, s.as_ptr() as u64, 5, read),
                Err(libc::ENAMETOOLONG)
            );
            // A string that ends exactly at a page's end, followed by an unmapped page. The
            // kernel's page size, not 4096: a Raspberry Pi 5's default kernel has 16 KiB pages,
            // where unmapping 4 KiB at a 4 KiB offset fails (EINVAL) and leaves the "hole" mapped.
            // SAFETY: sysconf has no preconditions.
            let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap();
            assert!(page >= 4096 && page.is_power_of_two(), "page size {page}");
            // SAFETY: an anonymous private mapping of two pages, the second then unmapped.
            unsafe {
                let m = libc::mmap(
                    std::ptr::null_mut(),
                    2 * page,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                ) as *mut u8;
                assert_ne!(m as *mut libc::c_void, libc::MAP_FAILED);
                assert_eq!(
                    libc::munmap(m.add(page).cast(), page),
                    0,
                    "unmap the second page"
                );
                let start = m.add(page - 4);
                std::ptr::copy_nonoverlapping(c"abc".as_ptr().cast::<u8>(), start, 4);
                assert_eq!(
                    read_cstring_by(me, start as u64, 100, read)
                        .unwrap()
                        .as_bytes(),
                    b"abc"
                );
                // Without a NUL before the hole: EFAULT, not a crash.
                std::ptr::copy_nonoverlapping(b"abcd".as_ptr(), start, 4);
                assert_eq!(
                    read_cstring_by(me, start as u64, 100, read),
                    Err(libc::EFAULT)
                );
                libc::munmap(m.cast(), page);
            }
        }
    }

    #[test]
    fn a_refused_process_vm_readv_falls_back_to_proc_mem() {
        use std::sync::atomic::{AtomicBool, Ordering};
        let refused: Reader = |_, _, _| Err(libc::EPERM);
        let works: Reader = |_, _, len| Ok(vec![7; len]);
        let not_called: Reader = |_, _, _| panic!("this reader must not be asked");
        // Refused (a seccomp profile): /proc/PID/mem answers, and is used from then on.
        let flag = AtomicBool::new(false);
        assert_eq!(
            read_memory_by(1, 0, 2, &flag, refused, works),
            Ok(vec![7, 7])
        );
        assert!(flag.load(Ordering::Relaxed));
        assert_eq!(
            read_memory_by(1, 0, 1, &flag, not_called, works),
            Ok(vec![7])
        );
        // Refused by both (Yama's scope, another uid): the syscall's answer, nothing remembered.
        let flag = AtomicBool::new(false);
        let eacces: Reader = |_, _, _| Err(libc::EACCES);
        assert_eq!(
            read_memory_by(1, 0, 1, &flag, refused, eacces),
            Err(libc::EPERM)
        );
        assert!(!flag.load(Ordering::Relaxed));
        // Any other failure (an unmapped address) is the answer: no second try.
        let fault: Reader = |_, _, _| Err(libc::EFAULT);
        assert_eq!(
            read_memory_by(1, 0, 1, &flag, fault, not_called),
            Err(libc::EFAULT)
        );
    }
}
