//! Signals of a sandbox that shares the caller's uid and the host's PID namespace, on kernels
//! whose Landlock cannot scope signals (ABI < 6, e.g. Ubuntu 24.04's 6.8): without this,
//! `kill(-1, SIGKILL)` would end every process of the user. Each signal syscall goes to the
//! waiter (see supervisor.rs), which lets it reach only its own descendants, i.e. the sandbox's
//! processes (the waiter is a child subreaper, so orphans stay its descendants):
//!
//! - `kill(pid)`: the waiter opens a pidfd of `pid` (which pins that process), checks it is a
//!   descendant, and signals through the pidfd; `kill(0)`, `kill(-1)` and `kill(-pgid)` signal
//!   the descendants in the group (all of them for -1, except the caller), never the waiter;
//! - `tkill`, `tgkill`, `rt_sigqueueinfo`, `rt_tgsigqueueinfo`, `pidfd_open`: the (thread
//!   group) id is checked, then the kernel runs the call as made (all its targets are in
//!   registers; only a pid reused within that instant could differ);
//! - `fcntl(F_SETOWN)` and friends, which route SIGIO to a pid, are refused by seccomp
//!   (`sigio_owner`) in this mode.
//!
//! A pid that exists but is not the sandbox's gets `EPERM`, as Landlock's scoping answers;
//! one that does not exist gets `ESRCH`.

use super::reaper;
use super::supervisor::Answer;

/// The syscalls the waiter decides.
pub const SUPERVISED: &[libc::c_long] = &[
    libc::SYS_kill,
    libc::SYS_tkill,
    libc::SYS_tgkill,
    libc::SYS_rt_sigqueueinfo,
    libc::SYS_rt_tgsigqueueinfo,
    libc::SYS_pidfd_open,
];

/// The waiter whose descendants the sandbox may signal.
pub struct Scope {
    waiter: i32,
}

/// `(ppid, pgrp)` of a process (or thread).
fn ppid_pgrp(pid: i32) -> Option<(i32, i32)> {
    super::procfs::stat(pid).map(|s| (s.ppid, s.pgrp))
}

fn errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

/// A pidfd of `pid`, or the errno.
fn pidfd_open(pid: i32) -> Result<std::os::fd::OwnedFd, i32> {
    use std::os::fd::FromRawFd;
    // SAFETY: pidfd_open takes integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: a descriptor the kernel just gave us.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) })
}

fn pidfd_signal(fd: &std::os::fd::OwnedFd, sig: i32) -> Result<(), i32> {
    use std::os::fd::AsRawFd;
    // SAFETY: pidfd_send_signal with a null siginfo (the kernel fills in SI_USER).
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            fd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(errno())
    }
}

impl Scope {
    /// The calling process is the waiter.
    pub fn of_this_waiter() -> Scope {
        Scope {
            waiter: nix::unistd::getpid().as_raw(),
        }
    }

    /// Whether `pid` (a process or a thread) is a descendant of the waiter: `Ok`, else
    /// `ESRCH` (no such process) or `EPERM` (not the sandbox's).
    fn check(&self, pid: i32) -> Result<(), i32> {
        if pid <= 0 {
            return Err(libc::EINVAL);
        }
        if pid == self.waiter {
            return Err(libc::EPERM);
        }
        let mut p = pid;
        // A chain longer than this cannot be real (RLIMIT_NPROC bounds the sandbox).
        for _ in 0..65536 {
            let Some((ppid, _)) = ppid_pgrp(p) else {
                return Err(if p == pid { libc::ESRCH } else { libc::EPERM });
            };
            if ppid == self.waiter {
                return Ok(());
            }
            if ppid <= 1 {
                return Err(libc::EPERM);
            }
            p = ppid;
        }
        Err(libc::EPERM)
    }

    /// Signals every descendant that `select` picks; `ESRCH` when it picks none.
    fn signal_descendants(&self, sig: i32, select: &dyn Fn(i32) -> bool) -> Result<Answer, i32> {
        let parents = reaper::parents();
        let mut sent = false;
        let mut last_error = libc::ESRCH;
        for pid in reaper::descendants(self.waiter, &parents) {
            if !select(pid) {
                continue;
            }
            match pidfd_open(pid).and_then(|fd| pidfd_signal(&fd, sig)) {
                Ok(()) => sent = true,
                Err(e) => last_error = e,
            }
        }
        if sent {
            Ok(Answer::Value(0))
        } else {
            Err(last_error)
        }
    }

    fn kill(&self, caller: i32, pid: i32, sig: i32) -> Result<Answer, i32> {
        let in_group = |g: i32| move |p: i32| ppid_pgrp(p).map(|(_, pg)| pg) == Some(g);
        match pid {
            p if p > 0 => {
                // Pin the process first, then check it: a pid reused meanwhile is either not
                // ours (refused) or makes the pidfd's signal fail (its process is gone).
                let fd = pidfd_open(p)?;
                self.check(p)?;
                pidfd_signal(&fd, sig).map(|()| Answer::Value(0))
            }
            0 => {
                let (_, group) = ppid_pgrp(caller).ok_or(libc::ESRCH)?;
                self.signal_descendants(sig, &in_group(group))
            }
            -1 => self.signal_descendants(sig, &|p| p != caller),
            p => self.signal_descendants(sig, &in_group(-p)),
        }
    }

    /// Decides one signal call of process `caller`: `None` when `nr` is not one of ours.
    pub fn handle(
        &self,
        caller: u32,
        nr: libc::c_long,
        a: [u64; 6],
    ) -> Option<Result<Answer, i32>> {
        let pid = |v: u64| v as i32;
        let checked = |p: i32| self.check(p).map(|()| Answer::Continue);
        Some(match nr {
            libc::SYS_kill => self.kill(caller as i32, pid(a[0]), a[1] as i32),
            libc::SYS_tkill => checked(pid(a[0])),
            libc::SYS_tgkill | libc::SYS_rt_tgsigqueueinfo | libc::SYS_rt_sigqueueinfo => {
                checked(pid(a[0]))
            }
            libc::SYS_pidfd_open => checked(pid(a[0])),
            _ => return None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test process plays the waiter: its children are "the sandbox".
    #[test]
    fn only_descendants_are_reachable() {
        let scope = Scope::of_this_waiter();
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        assert_eq!(scope.check(pid), Ok(()));
        assert_eq!(scope.check(scope.waiter), Err(libc::EPERM), "the waiter");
        assert_eq!(
            scope.check(1),
            Err(libc::EPERM),
            "init is nobody's descendant"
        );
        let parent = nix::unistd::getppid().as_raw();
        assert_eq!(scope.check(parent), Err(libc::EPERM));
        assert_eq!(scope.check(i32::MAX - 1), Err(libc::ESRCH));
        // tkill/tgkill/pidfd_open of our child continue; of our parent they are refused.
        let a = |p: i32| [p as u32 as u64, 0, 0, 0, 0, 0];
        assert_eq!(
            scope.handle(0, libc::SYS_pidfd_open, a(pid)),
            Some(Ok(Answer::Continue))
        );
        assert_eq!(
            scope.handle(0, libc::SYS_tgkill, a(parent)),
            Some(Err(libc::EPERM))
        );
        assert_eq!(scope.handle(0, libc::SYS_read, a(pid)), None);
        // kill(-1, 0) reaches the child (signal 0: a probe); kill(parent, 0) does not.
        let kill = |p: i32, sig: i32| {
            scope.handle(
                u32::MAX,
                libc::SYS_kill,
                [p as u32 as u64, sig as u64, 0, 0, 0, 0],
            )
        };
        assert_eq!(kill(-1, 0), Some(Ok(Answer::Value(0))));
        assert_eq!(kill(parent, libc::SIGTERM), Some(Err(libc::EPERM)));
        assert_eq!(kill(pid, libc::SIGKILL), Some(Ok(Answer::Value(0))));
        child.wait().unwrap();
    }
}
