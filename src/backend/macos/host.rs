//! What the macOS backend asks of the host's process table, per platform: libproc on macOS;
//! `/proc` on Linux, where the backend's spawner is exercised with a stand-in `sandbox-exec`
//! (its unit tests); nothing elsewhere.

#[cfg(target_os = "macos")]
pub use imp::os_version;
pub use imp::{footprint, group_members, user_processes};

#[cfg(target_os = "macos")]
mod imp {
    /// `proc_listpids` types (libproc.h).
    const PROC_UID_ONLY: u32 = 4;

    /// A libproc list of pids: asks for the size, then fills a buffer with room to spare.
    fn list(fill: impl Fn(*mut libc::c_void, libc::c_int) -> libc::c_int) -> Vec<i32> {
        let n = fill(std::ptr::null_mut(), 0);
        if n <= 0 {
            return Vec::new();
        }
        let cap = n as usize / std::mem::size_of::<libc::pid_t>() + 64;
        let mut pids: Vec<libc::pid_t> = vec![0; cap];
        let bytes = (cap * std::mem::size_of::<libc::pid_t>()) as libc::c_int;
        let got = fill(pids.as_mut_ptr().cast(), bytes);
        if got <= 0 {
            return Vec::new();
        }
        pids.truncate(got as usize / std::mem::size_of::<libc::pid_t>());
        pids.retain(|p| *p > 0);
        pids
    }

    /// The pids in process group `pgid`.
    pub fn group_members(pgid: i32) -> Vec<i32> {
        // SAFETY: proc_listpgrppids writes at most `size` bytes into `buf` (or only returns the
        // size needed when `buf` is null).
        list(|buf, size| unsafe { libc::proc_listpgrppids(pgid, buf, size) })
    }

    /// How many processes `uid` runs.
    pub fn user_processes(uid: u32) -> u64 {
        // SAFETY: as above, proc_listpids writes at most `size` bytes into `buf`.
        list(|buf, size| unsafe { libc::proc_listpids(PROC_UID_ONLY, uid, buf, size) }).len() as u64
    }

    /// A process's physical footprint (what Activity Monitor calls its memory), in bytes.
    pub fn footprint(pid: i32) -> Option<u64> {
        // SAFETY: rusage_info_v2 is a plain C struct; zeroed is a valid value.
        let mut info: libc::rusage_info_v2 = unsafe { std::mem::zeroed() };
        // SAFETY: proc_pid_rusage fills a struct of the flavor's size, which `info` is.
        let r = unsafe {
            libc::proc_pid_rusage(
                pid,
                libc::RUSAGE_INFO_V2,
                (&mut info as *mut libc::rusage_info_v2).cast(),
            )
        };
        (r == 0).then_some(info.ri_phys_footprint)
    }

    /// `kern.osproductversion` (`15.1`).
    pub fn os_version() -> Option<String> {
        let mut buf = [0u8; 64];
        let mut len = buf.len();
        // SAFETY: a NUL-terminated name; sysctlbyname writes at most `len` bytes into `buf` and
        // sets `len` to what it wrote.
        let r = unsafe {
            libc::sysctlbyname(
                c"kern.osproductversion".as_ptr(),
                buf.as_mut_ptr().cast(),
                &mut len,
                std::ptr::null_mut(),
                0,
            )
        };
        if r != 0 {
            return None;
        }
        let s = &buf[..len.min(buf.len())];
        Some(
            String::from_utf8_lossy(s)
                .trim_end_matches('\0')
                .to_string(),
        )
    }
}

#[cfg(target_os = "linux")]
mod imp {
    use crate::backend::linux::procfs;

    pub fn group_members(pgid: i32) -> Vec<i32> {
        procfs::pids()
            .into_iter()
            .filter(|p| procfs::stat(*p).is_some_and(|s| s.pgrp == pgid))
            .collect()
    }

    pub fn user_processes(uid: u32) -> u64 {
        procfs::pids()
            .into_iter()
            .filter(|p| procfs::status_field(*p, "Uid:") == Some(u64::from(uid)))
            .count() as u64
    }

    /// Resident memory (`VmRSS`), in bytes.
    pub fn footprint(pid: i32) -> Option<u64> {
        procfs::status_field(pid, "VmRSS:").map(|kb| kb * 1024)
    }
}

#[cfg(not(any(target_os = "macos", target_os = "linux")))]
mod imp {
    pub fn group_members(_pgid: i32) -> Vec<i32> {
        Vec::new()
    }

    pub fn user_processes(_uid: u32) -> u64 {
        0
    }

    pub fn footprint(_pid: i32) -> Option<u64> {
        None
    }
}

/// Whether our child `pid` has exited (or is gone: reaped already, or not our child), leaving
/// it to be reaped by whoever waits for it (`waitid` with `WNOWAIT`).
pub fn has_exited(pid: i32) -> bool {
    // SAFETY: siginfo_t is a plain C struct; zeroed is a valid value.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: waitid fills `info`, which we own; WNOWAIT leaves the child waitable.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if r != 0 {
        return std::io::Error::last_os_error().raw_os_error() == Some(libc::ECHILD);
    }
    // SAFETY: waitid succeeded, so `info` was written; si_pid is 0 when nothing has exited.
    unsafe { info.si_pid() == pid }
}

/// The memory of every process in group `pgid`, and how many there are.
pub fn group_footprint(pgid: i32) -> (u64, usize) {
    let members = group_members(pgid);
    let bytes = members.iter().filter_map(|p| footprint(*p)).sum();
    (bytes, members.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_exited_child_is_seen_and_left_to_its_waiter() {
        let mut child = std::process::Command::new("/bin/sh")
            .args(["-c", "exit 7"])
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let t = std::time::Instant::now();
        while !has_exited(pid) {
            assert!(t.elapsed() < std::time::Duration::from_secs(10));
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        assert_eq!(child.wait().unwrap().code(), Some(7), "still waitable");
        assert!(has_exited(pid), "reaped: gone");
        let mut running = std::process::Command::new("sleep")
            .arg("10")
            .spawn()
            .unwrap();
        assert!(!has_exited(running.id() as i32));
        running.kill().unwrap();
        running.wait().unwrap();
    }

    #[test]
    fn a_process_group_is_counted() {
        // A child in a group of its own (not this process: under qemu-user, /proc describes
        // the emulator's view of itself with most fields zero).
        use std::os::unix::process::CommandExt;
        let mut child = std::process::Command::new("sleep")
            .arg("10")
            .process_group(0)
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        // qemu-user runs posix_spawn's vfork as a plain fork: the spawn returns before the
        // child has made its group (at once on a real kernel).
        let t = std::time::Instant::now();
        while group_members(pid).is_empty() && t.elapsed() < std::time::Duration::from_secs(10) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        // SAFETY: getuid has no preconditions.
        let uid = unsafe { libc::getuid() };
        let (bytes, n) = group_footprint(pid);
        let members = group_members(pid);
        child.kill().unwrap();
        child.wait().unwrap();
        if cfg!(any(target_os = "macos", target_os = "linux")) {
            assert_eq!(members, [pid]);
            assert!(n == 1 && bytes > 0, "{n} processes, {bytes} bytes");
            assert!(user_processes(uid) >= 1);
        }
    }
}
