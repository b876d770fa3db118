//! The cgroup layer (root only): one cgroup per session for memory (no swap), pids and cpu,
//! on cgroup v2 (`/sys/fs/cgroup` unified) or v1 (per-controller hierarchies). The host creates it
//! and sets the limits; the helper joins it as its first step; dropping the lease kills what is
//! left in it and removes it.

use crate::policy::Limits;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    V1,
    V2,
}

/// Which cgroup version this host offers to us, if we can write it.
pub fn detect() -> Option<Version> {
    probe().ok()
}

/// The cgroup version we can write, or why there is none: not root, no memory+pids
/// controllers, or a hierarchy we may not write (root inside a default container, where
/// `/sys/fs/cgroup` is mounted read-only). Sessions then run on rlimits (and, as root, their
/// own uid's RLIMIT_NPROC), and `sandpit doctor` says why.
pub fn probe() -> Result<Version, String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Err("not as an unprivileged user".into());
    }
    let root = Path::new("/sys/fs/cgroup");
    let (version, parents) = if root.join("cgroup.controllers").exists() {
        let c = std::fs::read_to_string(root.join("cgroup.controllers")).unwrap_or_default();
        if !(c.contains("memory") && c.contains("pids")) {
            return Err("cgroup v2 without the memory and pids controllers".into());
        }
        (Version::V2, vec![root.join("sandpit")])
    } else if root.join("memory/memory.limit_in_bytes").exists() && root.join("pids").is_dir() {
        (
            Version::V1,
            vec![root.join("memory/sandpit"), root.join("pids/sandpit")],
        )
    } else {
        return Err("no memory and pids cgroup controllers".into());
    };
    for p in parents {
        let not_writable = |e: String| {
            format!(
                "{version:?} not writable ({}: {e}; inside a container /sys/fs/cgroup is usually read-only)",
                p.display()
            )
        };
        std::fs::create_dir_all(&p).map_err(|e| not_writable(e.to_string()))?;
        // An existing directory on a read-only mount: access(W_OK) answers EROFS.
        nix::unistd::access(&p, nix::unistd::AccessFlags::W_OK)
            .map_err(|e| not_writable(e.desc().to_string()))?;
    }
    Ok(version)
}

/// Starts, on a thread of its own, the RCU grace period that the session's placement would
/// otherwise wait for (cgroup v1 only).
///
/// Every move into a v1 cgroup takes `cgroup_threadgroup_rwsem` for writing; when no writer
/// came just before, that waits for an RCU grace period (measured here: 5-23 ms, the largest
/// single cost of a native one-shot run). A writer that comes while another's grace period is
/// under way, or soon after one, waits only for what is left of it. So this thread "moves"
/// itself into the pids cgroup it is already in (the kernel takes the lock before it looks;
/// nothing moves) as soon as the session's cgroup exists (the move holds `cgroup_mutex` while
/// it waits, so a cgroup made after it would wait too), and the helper's real placement, a few
/// milliseconds later, finds the grace period under way or passed. The lock is held only for
/// the no-op move itself, as for any move.
pub fn prime_placement(version: Version) {
    if version != Version::V1 {
        return;
    }
    let _ = std::thread::Builder::new()
        .name("sandpit-cgroup-prime".into())
        .spawn(|| {
            let own = std::fs::read_to_string("/proc/thread-self/cgroup").unwrap_or_default();
            let Some(path) = own.lines().find_map(|l| {
                let mut parts = l.splitn(3, ':');
                let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
                controllers
                    .split(',')
                    .any(|c| c == "pids")
                    .then(|| path.to_string())
            }) else {
                return;
            };
            let tasks = Path::new("/sys/fs/cgroup/pids")
                .join(path.trim_start_matches('/'))
                .join("tasks");
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() };
            let _ = std::fs::write(tasks, tid.to_string());
        });
}

/// What `sandpit doctor` says of a session start's move into its cgroups (its `cgroup
/// placement` line, `add_doctor_facts`), from
/// `/sys/kernel/rcu_expedited` and `/proc/mounts`. Each move takes the kernel's
/// `cgroup_threadgroup_rwsem` for writing, which waits for an RCU grace period (0-10 ms on a
/// loaded 2-core VM: the largest and most variable stage of a sandbox's start there, see
/// README "Benchmarks") unless grace periods are expedited or the hierarchy is mounted with
/// `favordynmods` (Linux 6.0+), which keeps the lock ready for writers at some cost to every
/// fork. Both are the host's settings; sandpit only says so.
pub fn placement_note(rcu_expedited: &str, mounts: &str) -> String {
    let favordynmods = mounts.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        f.len() > 3
            && matches!(f[2], "cgroup" | "cgroup2")
            && f[3].split(',').any(|o| o == "favordynmods")
    });
    if favordynmods {
        "moving a sandbox into its cgroups does not wait (favordynmods)".into()
    } else if rcu_expedited.trim() == "1" {
        "moving a sandbox into its cgroups waits for an expedited RCU grace period (rcu_expedited = 1)"
            .into()
    } else {
        "moving a sandbox into its cgroups waits for an RCU grace period, up to ~10 ms on a busy host \
         (echo 1 > /sys/kernel/rcu_expedited, or the hierarchies mounted with favordynmods, \
         shorten or remove it)"
            .into()
    }
}

/// A session's cgroup(s); removed on drop.
#[derive(Debug)]
pub struct Cgroup {
    view: CgroupView,
}

/// The cgroup's directories, to query and kill; does not remove anything when dropped.
#[derive(Debug, Clone)]
pub struct CgroupView {
    version: Version,
    dirs: Vec<PathBuf>,
}

fn write(p: &Path, v: &str) -> std::io::Result<()> {
    std::fs::write(p, v)
        .map_err(|e| std::io::Error::new(e.kind(), format!("write {v:?} to {}: {e}", p.display())))
}

impl Cgroup {
    /// Creates the session's cgroup with `limits`.
    pub fn create(version: Version, name: &str, limits: &Limits) -> std::io::Result<Cgroup> {
        let root = Path::new("/sys/fs/cgroup");
        let mem = (limits.memory_mb * 1024 * 1024).to_string();
        let period = 100_000u64;
        let quota = ((limits.cpus * period as f64) as u64).max(1000);
        match version {
            Version::V2 => {
                let parent = root.join("sandpit");
                std::fs::create_dir_all(&parent)?;
                // Controllers must be enabled top-down; errors here surface on the writes below.
                let _ = write(&root.join("cgroup.subtree_control"), "+memory +pids +cpu");
                let _ = write(&parent.join("cgroup.subtree_control"), "+memory +pids +cpu");
                let dir = parent.join(name);
                std::fs::create_dir_all(&dir)?;
                let cg = Cgroup {
                    view: CgroupView {
                        version,
                        dirs: vec![dir.clone()],
                    },
                };
                write(&dir.join("memory.max"), &mem)?;
                let _ = write(&dir.join("memory.swap.max"), "0");
                write(&dir.join("pids.max"), &limits.pids.to_string())?;
                let _ = write(&dir.join("cpu.max"), &format!("{quota} {period}"));
                Ok(cg)
            }
            Version::V1 => {
                let mut cg = Cgroup {
                    view: CgroupView {
                        version,
                        dirs: vec![],
                    },
                };
                for ctl in ["memory", "pids", "cpu"] {
                    let base = root.join(ctl);
                    if !base.is_dir() {
                        continue;
                    }
                    let dir = base.join("sandpit").join(name);
                    std::fs::create_dir_all(&dir)?;
                    cg.view.dirs.push(dir.clone());
                    match ctl {
                        "memory" => {
                            write(&dir.join("memory.limit_in_bytes"), &mem)?;
                            let memsw = dir.join("memory.memsw.limit_in_bytes");
                            if memsw.exists() {
                                write(&memsw, &mem)?;
                            }
                        }
                        "pids" => write(&dir.join("pids.max"), &limits.pids.to_string())?,
                        _ => {
                            let _ = write(&dir.join("cpu.cfs_period_us"), &period.to_string());
                            let _ = write(&dir.join("cpu.cfs_quota_us"), &quota.to_string());
                        }
                    }
                }
                Ok(cg)
            }
        }
    }

    /// The `cgroup.procs` files the helper writes itself into.
    pub fn procs_files(&self) -> Vec<PathBuf> {
        self.view
            .dirs
            .iter()
            .map(|d| d.join("cgroup.procs"))
            .collect()
    }

    pub fn view(&self) -> CgroupView {
        self.view.clone()
    }

    pub fn kill_all(&self) {
        self.view.kill_all()
    }
}

/// Moves process `pid` into every `cgroup.procs` file at once (one thread each: each move waits
/// for its own RCU grace period on cgroup v1, so in parallel they overlap).
pub fn place(procs_files: &[PathBuf], pid: i32) -> std::io::Result<()> {
    std::thread::scope(|scope| {
        let handles: Vec<_> = procs_files
            .iter()
            .map(|f| scope.spawn(move || write(f, &pid.to_string())))
            .collect();
        handles.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err(std::io::Error::other("cgroup placement thread panicked")))
        })
    })
}

impl CgroupView {
    /// How many times the OOM killer ended a process here.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V2 => "memory.events",
            Version::V1 => "memory.oom_control",
        };
        self.dirs
            .iter()
            .filter_map(|d| std::fs::read_to_string(d.join(file)).ok())
            .flat_map(|t| {
                t.lines()
                    .filter_map(|l| {
                        l.strip_prefix("oom_kill ")
                            .and_then(|n| n.trim().parse::<u64>().ok())
                    })
                    .collect::<Vec<_>>()
            })
            .sum()
    }

    /// Kills every process still in the cgroup.
    pub fn kill_all(&self) {
        for d in &self.dirs {
            if self.version == Version::V2 && write(&d.join("cgroup.kill"), "1").is_ok() {
                continue;
            }
            if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
                for pid in t.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                    // SAFETY: kill has no memory effects; a stale pid at worst gets ESRCH.
                    unsafe { libc::kill(pid, libc::SIGKILL) };
                }
            }
        }
    }
}

/// Removes the directories that can be removed now; returns those still busy.
fn remove_dirs(dirs: Vec<PathBuf>) -> Vec<PathBuf> {
    dirs.into_iter()
        .filter(|d| std::fs::remove_dir(d).is_err() && d.exists())
        .collect()
}

fn kill_members(dirs: &[PathBuf]) {
    for d in dirs {
        if let Ok(t) = std::fs::read_to_string(d.join("cgroup.procs")) {
            for pid in t.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
                // SAFETY: kill has no memory effects; a stale pid at worst gets ESRCH.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
}

/// An empty session cgroup older than this is a leftover of a killed sandpit process.
const STALE_AGE: std::time::Duration = std::time::Duration::from_secs(60);

/// Removes session cgroups left behind by sandpit processes that were killed before they could
/// clean up. `rmdir` only succeeds on an empty cgroup, so live sessions are untouched, and a
/// young one may be another process's sandbox about to be placed, so only old ones go.
pub fn remove_stale(version: Version) {
    let root = Path::new("/sys/fs/cgroup");
    let parents: Vec<PathBuf> = match version {
        Version::V2 => vec![root.join("sandpit")],
        Version::V1 => ["memory", "pids", "cpu"]
            .iter()
            .map(|c| root.join(c).join("sandpit"))
            .collect(),
    };
    for parent in parents {
        let Ok(entries) = std::fs::read_dir(&parent) else {
            continue;
        };
        for e in entries.flatten() {
            // Another sandpit process may have just created a cgroup it has not placed its
            // sandbox in yet (empty, so rmdir would succeed): only old ones are leftovers.
            let old = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| t.elapsed().ok())
                .is_some_and(|age| age >= STALE_AGE);
            if old && e.file_name().to_string_lossy().starts_with("s-") {
                let _ = std::fs::remove_dir(e.path());
            }
        }
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        // By now the session's processes are normally gone: remove the directories at once,
        // retrying briefly while the last ones finish exiting. Whatever is still busy after that
        // is retried off-thread (a one-shot `sandpit run` may exit first: then `remove_stale`
        // at the next start takes it).
        // The waits start short and double (0.1, 0.2, 0.4 ... 6.4 ms, then 6.4 ms each, about
        // 100 ms in all): the last exits usually take well under a millisecond, and a fixed 5 ms
        // wait was a tenth of a one-shot run's time.
        let mut left = remove_dirs(std::mem::take(&mut self.view.dirs));
        let mut wait = std::time::Duration::from_micros(100);
        let mut waited = std::time::Duration::ZERO;
        while waited < std::time::Duration::from_millis(100) {
            if left.is_empty() {
                return;
            }
            kill_members(&left);
            std::thread::sleep(wait);
            waited += wait;
            wait = (wait * 2).min(std::time::Duration::from_micros(6400));
            left = remove_dirs(left);
        }
        if left.is_empty() {
            return;
        }
        std::thread::spawn(move || {
            for _ in 0..100 {
                kill_members(&left);
                left = remove_dirs(left);
                if left.is_empty() {
                    return;
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_placement_note_names_the_host_setting_in_force() {
        let plain = "cgroup /sys/fs/cgroup/pids cgroup rw,relatime,pids 0 0\n";
        let fav = "cgroup /sys/fs/cgroup/pids cgroup rw,relatime,favordynmods,pids 0 0\n";
        let v2 = "cgroup2 /sys/fs/cgroup cgroup2 rw,nsdelegate,favordynmods 0 0\n";
        assert!(placement_note("0\n", plain).contains("waits for an RCU grace period, up to"));
        assert!(placement_note("1\n", plain).contains("expedited"));
        assert!(placement_note("0\n", fav).contains("does not wait"));
        assert!(placement_note("0\n", v2).contains("does not wait"));
        let other = "tmpfs /tmp tmpfs rw,favordynmods 0 0\n";
        assert!(
            placement_note("", other).contains("up to"),
            "only cgroup mounts count"
        );
    }
}
