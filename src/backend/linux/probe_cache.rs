//! The namespace probe's answer, kept between runs. The probe ([`super::probe_main`]) execs
//! sandpit once more and tries everything a sandbox needs (unshare, mounts, a PID namespace's
//! /proc, pivot_root): 4-5 ms of every one-shot `sandpit run`. Its answer depends only on the
//! host and on this process's place in it, so a positive answer is kept in the state
//! directory (`probe/namespaces-KEY`, 0600) under a key made of everything it depends on:
//! - the boot (`/proc/sys/kernel/random/boot_id`) and the sandpit executable (its path,
//!   device, inode, size and modification time);
//! - the user (euid) and the namespaces this process is in (`/proc/self/ns/*`: another
//!   container is another key);
//! - the sysctls that allow or forbid namespaces (`user.max_*_namespaces`,
//!   `kernel.unprivileged_userns_clone`, `kernel.apparmor_restrict_unprivileged_userns`);
//! - this process's seccomp mode, no_new_privs and capabilities (`/proc/self/status`).
//!
//! Only "available" is kept: a host that refuses namespaces probes again every time, so a
//! fix there (an AppArmor profile, a sysctl) counts at once. Were a kept answer ever wrong,
//! the helper's unshare fails and the launch stops with the namespaces step's error (closed,
//! never weaker); `sandpit doctor` never reads the cache, and replaces it with what it finds.

use super::NamespaceProbe;
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// The cache file for this process's key under `state_dir`, when a key can be made.
pub fn file(state_dir: &Path, helper: &Path) -> Option<PathBuf> {
    Some(
        state_dir
            .join("probe")
            .join(format!("namespaces-{:016x}", key(helper)?)),
    )
}

fn key(helper: &Path) -> Option<u64> {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
    read("/proc/sys/kernel/random/boot_id").hash(&mut h);
    let exe = std::fs::canonicalize(helper).ok()?;
    let m = std::fs::metadata(&exe).ok()?;
    (&exe, m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()).hash(&mut h);
    crate::util::euid().hash(&mut h);
    for ns in ["user", "mnt", "pid", "net", "ipc", "uts", "cgroup"] {
        std::fs::read_link(format!("/proc/self/ns/{ns}"))
            .ok()
            .hash(&mut h);
    }
    for sysctl in [
        "/proc/sys/user/max_user_namespaces",
        "/proc/sys/user/max_mnt_namespaces",
        "/proc/sys/user/max_pid_namespaces",
        "/proc/sys/user/max_net_namespaces",
        "/proc/sys/kernel/unprivileged_userns_clone",
        "/proc/sys/kernel/apparmor_restrict_unprivileged_userns",
    ] {
        read(sysctl).hash(&mut h);
    }
    let status = read("/proc/self/status");
    for line in status.lines().filter(|l| {
        ["Seccomp:", "NoNewPrivs:", "CapEff:", "CapBnd:"]
            .iter()
            .any(|p| l.starts_with(p))
    }) {
        line.hash(&mut h);
    }
    Some(h.finish())
}

/// A kept positive answer, from a file of ours no one else may write.
pub fn load(file: &Path) -> Option<NamespaceProbe> {
    let text = crate::util::private_file::read_own(file)?;
    let probe: NamespaceProbe = serde_json::from_str(&text).ok()?;
    probe.ok.then_some(probe)
}

/// Keeps a positive answer, in a state directory that exists and is ours; a negative one
/// removes what was kept. Anything that fails leaves nothing behind and is not an error.
pub fn store(file: &Path, probe: &NamespaceProbe) {
    if !probe.ok {
        let _ = std::fs::remove_file(file);
        return;
    }
    if let Ok(text) = serde_json::to_string(probe) {
        let _ = crate::util::private_file::write_own(file, &text);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn helper() -> PathBuf {
        std::env::current_exe().unwrap()
    }

    #[test]
    fn a_positive_answer_is_kept_and_a_negative_one_is_not() {
        let state = tempfile::tempdir().unwrap();
        let f = file(state.path(), &helper()).unwrap();
        assert_eq!(
            f,
            file(state.path(), &helper()).unwrap(),
            "the key is stable"
        );
        let no = NamespaceProbe {
            ok: false,
            detail: "unshare: EPERM".into(),
        };
        store(&f, &no);
        assert!(load(&f).is_none());
        let yes = NamespaceProbe {
            ok: true,
            detail: "user, mount, pid, net, ipc, uts".into(),
        };
        store(&f, &yes);
        let kept = load(&f).unwrap();
        assert!(kept.ok && kept.detail == yes.detail);
        let mode = std::fs::metadata(&f).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        // A later negative answer (doctor's fresh probe) forgets it.
        store(&f, &no);
        assert!(!f.exists());
    }
}
