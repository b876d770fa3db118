//! SysV IPC objects (shared memory, semaphores, message queues) live in an IPC namespace, not in
//! a process: a segment a session made outlives it, and a later session that gets the same uid
//! could read it back. Sessions without an IPC namespace of their own cannot make any (seccomp's
//! `sysv_ipc` filter); as a second line, when sandpit runs as root it removes every object
//! owned or created by a session uid when it leases that uid and when the session ends.
//!
//! The objects are listed in `/proc/sysvipc/{shm,sem,msg}` (those of the caller's IPC
//! namespace), with a header line naming the columns.

/// One kind of SysV IPC object: its `/proc/sysvipc` file and the column holding its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Shm,
    Sem,
    Msg,
}

impl Kind {
    const ALL: [Kind; 3] = [Kind::Shm, Kind::Sem, Kind::Msg];

    fn file(self) -> &'static str {
        match self {
            Kind::Shm => "/proc/sysvipc/shm",
            Kind::Sem => "/proc/sysvipc/sem",
            Kind::Msg => "/proc/sysvipc/msg",
        }
    }

    fn id_column(self) -> &'static str {
        match self {
            Kind::Shm => "shmid",
            Kind::Sem => "semid",
            Kind::Msg => "msqid",
        }
    }

    /// Removes object `id` (IPC_RMID); a segment still attached is destroyed at its last detach.
    fn remove(self, id: i32) -> std::io::Result<()> {
        // SAFETY: IPC_RMID takes no buffer (a null pointer, or the unused semnum 0 for semctl).
        let rc = unsafe {
            match self {
                Kind::Shm => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                Kind::Sem => libc::semctl(id, 0, libc::IPC_RMID),
                Kind::Msg => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
            }
        };
        if rc == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// The ids of the objects in `table` (a `/proc/sysvipc` file's text) whose owner (`uid`) or
/// creator (`cuid`) is `uid`.
fn owned_by(table: &str, id_column: &str, uid: u32) -> Vec<i32> {
    let mut lines = table.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let cols: Vec<&str> = header.split_whitespace().collect();
    let at = |name: &str| cols.iter().position(|c| *c == name);
    let (Some(id_at), Some(uid_at), Some(cuid_at)) = (at(id_column), at("uid"), at("cuid")) else {
        return Vec::new();
    };
    lines
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let num = |i: usize| f.get(i).and_then(|v| v.parse::<u64>().ok());
            let mine = num(uid_at) == Some(u64::from(uid)) || num(cuid_at) == Some(u64::from(uid));
            mine.then(|| f.get(id_at).and_then(|v| v.parse().ok()))
                .flatten()
        })
        .collect()
}

/// Removes every SysV IPC object of `uid` in our IPC namespace; returns how many were removed.
/// Only meaningful for a uid that belongs to sandpit alone (a session uid as root).
pub fn remove_owned_by(uid: u32) -> usize {
    let mut removed = 0;
    for kind in Kind::ALL {
        let Ok(table) = std::fs::read_to_string(kind.file()) else {
            continue;
        };
        for id in owned_by(&table, kind.id_column(), uid) {
            match kind.remove(id) {
                Ok(()) => removed += 1,
                Err(e) => {
                    tracing::warn!(?kind, id, uid, error = %e, "could not remove a SysV IPC object of a session uid")
                }
            }
        }
    }
    if removed > 0 {
        tracing::info!(
            uid,
            removed,
            "removed SysV IPC objects left by a session uid"
        );
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHM: &str = "       key      shmid perms                  size  cpid  lpid nattch   uid   gid  cuid  cgid      atime      dtime      ctime                   rss                  swap
         0         32   600              67108864  4242  4242      0 2000001 2000001 2000001 2000001          0          0 1764000000                     0                     0
 305419896         33   666                  1024     1     1      1     0     0     0     0          0          0 1764000000                  4096                     0
         0         34   600                  4096  4243  4243      0     0     0 2000001 2000001          0          0 1764000000                     0                     0
";

    #[test]
    fn finds_objects_by_owner_or_creator() {
        assert_eq!(owned_by(SHM, "shmid", 2_000_001), vec![32, 34]);
        assert_eq!(owned_by(SHM, "shmid", 0), vec![33, 34]);
        assert!(owned_by(SHM, "shmid", 5).is_empty());
    }

    #[test]
    fn tolerates_empty_and_foreign_tables() {
        assert!(owned_by("", "shmid", 0).is_empty());
        assert!(owned_by("key semid perms\n1 2 3\n", "semid", 0).is_empty());
    }

    #[test]
    fn the_kernel_tables_parse() {
        // Whatever this host has, the header names the columns we read.
        for kind in Kind::ALL {
            if let Ok(t) = std::fs::read_to_string(kind.file()) {
                let header = t.lines().next().unwrap_or_default();
                for col in [kind.id_column(), "uid", "cuid"] {
                    assert!(
                        header.split_whitespace().any(|c| c == col),
                        "{col} in {header}"
                    );
                }
            }
        }
    }
}
