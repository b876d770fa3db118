//! The one reader of the host's process table (`/proc`): which pids exist, and the fields of
//! `/proc/PID/stat` and `/proc/PID/status` sandpit needs (the reaper's tree walk, the signal
//! supervisor's ancestry check, RLIMIT_NPROC's per-uid count, the benchmark's memory figure).

/// Every pid `/proc` lists now (threads are not listed; `/proc/TID` still answers for them).
pub fn pids() -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str().and_then(|s| s.parse().ok()))
        .collect()
}

/// The uids in `range` that own a process now (the owner of `/proc/PID` is the process's
/// effective uid): one directory scan and a `stat` per process.
pub fn uids_with_processes(range: std::ops::Range<u32>) -> std::collections::HashSet<u32> {
    use std::os::unix::fs::MetadataExt;
    pids()
        .into_iter()
        .filter_map(|pid| std::fs::symlink_metadata(format!("/proc/{pid}")).ok())
        .map(|m| m.uid())
        .filter(|u| range.contains(u))
        .collect()
}

/// The fields of `/proc/PID/stat` sandpit reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    pub ppid: i32,
    pub pgrp: i32,
    pub session: i32,
}

/// Parses `/proc/PID/stat`: the fields after the command name, which is in parentheses and may
/// itself hold spaces and parentheses (so the split is at the last `)`).
pub fn parse_stat(text: &str) -> Option<Stat> {
    let rest = &text[text.rfind(')')? + 1..];
    let mut f = rest.split_whitespace().skip(1); // state
    Some(Stat {
        ppid: f.next()?.parse().ok()?,
        pgrp: f.next()?.parse().ok()?,
        session: f.next()?.parse().ok()?,
    })
}

/// `/proc/PID/stat` of a process or thread, if it exists.
pub fn stat(pid: i32) -> Option<Stat> {
    parse_stat(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
}

/// The first number of a `Name:` line of `/proc/PID/status` (`Uid:`, `Threads:`, ...).
pub fn status_field(pid: i32, name: &str) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_survives_odd_command_names() {
        let s = "4242 (a) b (c) d) S 17 4242 4242 34816 4242 4194560 0 0";
        assert_eq!(
            parse_stat(s),
            Some(Stat {
                ppid: 17,
                pgrp: 4242,
                session: 4242
            })
        );
        assert_eq!(parse_stat("garbage"), None);
    }

    #[test]
    fn this_process_is_in_the_table() {
        let me = std::process::id() as i32;
        assert!(pids().contains(&me));
        assert_eq!(
            stat(me).map(|s| s.ppid),
            Some(nix::unistd::getppid().as_raw())
        );
        assert!(status_field(me, "Threads:").unwrap_or(0) >= 1);
    }
}
