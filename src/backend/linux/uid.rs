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

/// Takes the first free slot.
pub fn lease(state_dir: &Path, base: u32, count: u32) -> std::io::Result<UidLease> {
    let dir = state_dir.join("uids");
    std::fs::create_dir_all(&dir)?;
    for slot in 0..count {
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
        "all {count} sandbox uids are in use (linux.uid_count); end some sessions or raise it"
    )))
}
