//! The memory limit on macOS: a watcher thread per sandbox sums the physical footprint of the
//! sandbox's process group every [`PERIOD`] and ends the sandbox beyond `limits.memory_mb`.
//!
//! Why not an rlimit: every macOS process has the dyld shared cache (gigabytes) in its address
//! space, so an address-space limit does not describe what an interpreter uses, and
//! `RLIMIT_DATA` does not bound what `malloc` maps. The watcher measures what is used (the
//! footprint Activity Monitor shows). What it cannot see: a process that left the process
//! group (`setsid`); and a fast allocator may get past the limit by what it allocates in one
//! period before it is killed.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How often the watcher measures.
pub const PERIOD: Duration = Duration::from_millis(50);

/// The watcher of one sandbox; dropping it stops the thread.
pub struct MemoryWatch {
    stop: Arc<AtomicBool>,
}

impl Drop for MemoryWatch {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// Watches process group `pgid`; beyond `limit` bytes sets `killed` and calls `kill`. Ends
/// when the group is empty, after a kill, or when the returned handle is dropped.
pub fn start(
    pgid: i32,
    limit: u64,
    killed: Arc<AtomicBool>,
    kill: impl Fn() + Send + 'static,
) -> std::io::Result<MemoryWatch> {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    std::thread::Builder::new()
        .name("sandpit-memory".into())
        .spawn(move || {
            while !flag.load(Ordering::SeqCst) {
                let (bytes, members) = super::host::group_footprint(pgid);
                if members == 0 {
                    return;
                }
                if bytes > limit {
                    tracing::info!(pgid, bytes, limit, "memory limit: killing the sandbox");
                    killed.store(true, Ordering::SeqCst);
                    kill();
                    return;
                }
                std::thread::sleep(PERIOD);
            }
        })?;
    Ok(MemoryWatch { stop })
}
