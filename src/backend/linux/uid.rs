//! As root, every live session runs as its own uid (`uid_base + slot`), so per-uid limits
//! (RLIMIT_NPROC) are per session and sessions cannot signal or read each other. A slot is held
//! by an exclusive `flock` on `STATE_DIR/uids/SLOT.lock`, which the kernel releases if sandpit dies.

use std::os::fd::AsRawFd;
use std::path::Path;

#[derive(Debug)]
pub struct UidLease {
    pub uid: u32,
    _lock: std::fs::File,
}

/// Takes the first free slot: unlocked, and with no process of its uid alive. Another sandpit
/// with another state directory (a second server, or one in a container on the same kernel)
/// leases from the same range without seeing our locks; a uid that still runs processes is
/// someone's live session (or one being torn down), and RLIMIT_NPROC would count them against
/// ours, so it is passed over. (Give each instance its own `linux.uid_base` to keep them
/// apart entirely: a container does not see the host's processes.)
pub fn lease(state_dir: &Path, base: u32, count: u32) -> std::io::Result<UidLease> {
    let dir = state_dir.join("uids");
    std::fs::create_dir_all(&dir)?;
    let busy = super::procfs::uids_with_processes(base..base.saturating_add(count));
    for slot in 0..count {
        if busy.contains(&(base + slot)) {
            continue;
        }
        let path = dir.join(format!("{slot}.lock"));
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        // SAFETY: flock on a descriptor we own; no memory is touched.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            // A sandpit killed before its teardown may have left objects of this uid behind.
            super::sysv_ipc::remove_owned_by(base + slot);
            return Ok(UidLease {
                uid: base + slot,
                _lock: f,
            });
        }
    }
    Err(std::io::Error::other(format!(
        "all {count} sandbox uids are in use (linux.uid_count), by sessions of this or another sandpit; end some sessions or raise it"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A uid that runs processes (this test's own) is passed over even though its slot's lock
    /// is free: another sandpit may be using it.
    #[test]
    fn a_uid_with_live_processes_is_not_leased() {
        let dir = std::env::temp_dir().join(format!(
            "sandpit-uid-test-{}-{}",
            std::process::id(),
            crate::util::random_hex(4).unwrap()
        ));
        let me = crate::util::euid();
        let lease = lease(&dir, me, 3).expect("a slot");
        assert_ne!(lease.uid, me, "our own uid has live processes");
        drop(lease);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
