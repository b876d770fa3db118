//! Being told that something in a watched directory was written: inotify on Linux. Elsewhere
//! (macOS) there is no watcher ([`Notifier::new`] is `None`) and the session's disk watcher
//! measures on its shorter unwatched period instead (`session::disk`).

pub use imp::Notifier;

#[cfg(target_os = "linux")]
mod imp {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    use std::os::fd::{AsFd, AsRawFd, BorrowedFd};

    /// An inotify instance, non-blocking and close-on-exec.
    pub struct Notifier(Inotify);

    impl Notifier {
        pub fn new() -> Option<Notifier> {
            Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC)
                .ok()
                .map(Notifier)
        }

        /// Watches the directory open as `dir` for writes and new entries.
        pub fn watch(&self, dir: BorrowedFd<'_>) -> bool {
            let mask =
                AddWatchFlags::IN_MODIFY | AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO;
            let path = format!("/proc/self/fd/{}", dir.as_raw_fd());
            self.0.add_watch(path.as_str(), mask).is_ok()
        }

        /// Reads every queued event; whether there was any.
        pub fn drain(&self) -> bool {
            let mut any = false;
            while let Ok(events) = self.0.read_events() {
                if events.is_empty() {
                    break;
                }
                any = true;
            }
            any
        }

        /// Readable when events are queued (for `poll`).
        pub fn as_fd(&self) -> BorrowedFd<'_> {
            self.0.as_fd()
        }
    }
}

#[cfg(not(target_os = "linux"))]
mod imp {
    use std::os::fd::BorrowedFd;

    /// No notifier exists here: [`Notifier::new`] is always `None`.
    pub enum Notifier {}

    impl Notifier {
        pub fn new() -> Option<Notifier> {
            None
        }

        pub fn watch(&self, _dir: BorrowedFd<'_>) -> bool {
            match *self {}
        }

        pub fn drain(&self) -> bool {
            match *self {}
        }

        pub fn as_fd(&self) -> BorrowedFd<'_> {
            match *self {}
        }
    }
}

/// Raises the calling thread's priority to `nice` where allowed (root, on Linux, where
/// `setpriority` with a thread id sets that thread alone); otherwise it stays as it is.
pub fn prioritize_this_thread(nice: i32) {
    if let Err(e) = imp_priority::raise(nice) {
        tracing::trace!(error = %e, "disk cap: the watcher keeps its priority");
    }
}

#[cfg(target_os = "linux")]
mod imp_priority {
    pub fn raise(nice: i32) -> std::io::Result<()> {
        // SAFETY: gettid and setpriority take and return plain integers; on Linux PRIO_PROCESS
        // with a thread id sets that thread's nice value alone.
        let r = unsafe {
            let tid = libc::gettid();
            libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice)
        };
        if r != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(())
    }
}

/// Elsewhere `setpriority(PRIO_PROCESS)` would renice the whole process: left alone.
#[cfg(not(target_os = "linux"))]
mod imp_priority {
    pub fn raise(_nice: i32) -> std::io::Result<()> {
        Err(std::io::Error::from(std::io::ErrorKind::Unsupported))
    }
}
