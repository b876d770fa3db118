//! Collecting a sandbox's processes when it has no PID namespace (`linux.namespaces = "off"`, or
//! a host that refuses namespaces). The helper's waiter is a child subreaper
//! (`PR_SET_CHILD_SUBREAPER`), so a daemon that double-forks and `setsid()`s out of the session's
//! process group is re-parented to the waiter, not to the host's init: every process of the
//! sandbox stays a descendant of the waiter. [`kill_descendants`] walks that tree and kills it,
//! repeating until a walk finds nothing, because killing a parent hands its children to the
//! subreaper, and a process may fork while the walk runs.
//!
//! Both the waiter (when the interpreter ends on its own) and the host (when it ends a session,
//! before the process-group kill reaches the waiter) call it.

use std::collections::HashMap;

/// Walks this many times at most: a fork bomb is bounded by RLIMIT_NPROC, and each walk
/// kills every process it saw.
const MAX_WALKS: usize = 1000;

/// `pid -> ppid` for every process this host's `/proc` shows.
pub(super) fn parents() -> HashMap<i32, i32> {
    super::procfs::pids()
        .into_iter()
        .filter_map(|pid| super::procfs::stat(pid).map(|s| (pid, s.ppid)))
        .collect()
}

/// Every descendant of `root` in `parents` (not `root` itself).
pub(super) fn descendants(root: i32, parents: &HashMap<i32, i32>) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for (&pid, &ppid) in parents {
        children.entry(ppid).or_default().push(pid);
    }
    let mut out = Vec::new();
    let mut stack = vec![root];
    while let Some(p) = stack.pop() {
        for &c in children.get(&p).map(Vec::as_slice).unwrap_or(&[]) {
            out.push(c);
            stack.push(c);
        }
    }
    out
}

/// SIGKILLs every descendant of `root` until none is left (or [`MAX_WALKS`] walks); returns how
/// many kills were sent. `root` itself is left alone: it must live (as the subreaper) while its
/// descendants die, or orphans would escape to the host's init.
pub fn kill_descendants(root: i32) -> usize {
    let mut sent = 0;
    for _ in 0..MAX_WALKS {
        let found = descendants(root, &parents());
        if found.is_empty() {
            break;
        }
        for pid in found {
            // SAFETY: kill has no memory effects; a pid that just exited gives ESRCH.
            unsafe { libc::kill(pid, libc::SIGKILL) };
            sent += 1;
        }
    }
    sent
}

/// Makes the calling process a child subreaper: orphaned descendants are re-parented to it.
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: PR_SET_CHILD_SUBREAPER takes integer arguments only.
    if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descendants_follow_the_whole_tree_and_nothing_else() {
        let map: HashMap<i32, i32> = [(10, 1), (11, 10), (12, 11), (13, 10), (20, 1), (21, 20)]
            .into_iter()
            .collect();
        let mut d = descendants(10, &map);
        d.sort();
        assert_eq!(d, vec![11, 12, 13]);
        assert!(descendants(12, &map).is_empty());
    }
    // The whole mechanism, on real processes: conformance case daemons_die_with_the_session on
    // the linux_no_ns backend.
}
