//! The audit trail: one JSON line per execution (or refusal), and one per host tool call
//! (`"record": "tool_call"`, `pipeline::tools`), appended to a file that is rotated by size.
//!
//! Every record is built from redacted text (the code, error messages), and the finished line
//! passes through the redactor once more before it is written, so no line holds a secret the
//! redactor knows. The file is opened `O_APPEND` with mode 0600; each record is one `write`
//! under an exclusive `flock`, so several sandpit processes can share one log (the lock also
//! covers rotation: `audit.jsonl` → `audit.jsonl.1` → … → `audit.jsonl.<keep>`, the oldest
//! dropped). Records are not fsynced one by one.

use super::redact::Redactor;
use crate::error::{Error, Result};
pub use crate::policy::pipeline::AuditSettings;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const UNWRITABLE_HINT: &str = "set SANDPIT_AUDIT_PATH to a file you can write, or SANDPIT_AUDIT=false to run without an audit trail";

/// One line of the audit trail.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AuditRecord {
    /// RFC 3339 UTC.
    pub time: String,
    /// `cli`, `repl`, `mcp`, `http` or `library`.
    pub interface: String,
    pub user: String,
    pub session_id: Option<String>,
    pub language: String,
    pub backend: String,
    /// SHA-256 of the code as submitted (before redaction), hex.
    pub code_sha256: String,
    /// The code, redacted.
    pub code: String,
    pub packages: Vec<String>,
    pub network: bool,
    /// `ok`, `error`, `timeout`, `blocked`, `killed`.
    pub status: String,
    pub exit_code: Option<i32>,
    pub duration_ms: f64,
    /// The error code, when there was one.
    pub error_code: Option<String>,
    /// Analyzer findings: `rule@line (action)`.
    pub findings: Vec<String>,
    /// `not_required`, `approved`, `approved_and_trusted_session`, `denied`, or
    /// `trusted_session` (approval skipped because the session was trusted earlier).
    pub approval: String,
    /// How many host tools the code called (each call has its own `tool_call` record).
    #[serde(default)]
    pub tool_calls: usize,
}

/// SHA-256 of `text`, lower-case hex.
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(text.as_bytes());
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

struct Open {
    file: File,
}

/// An append-only, size-rotated JSON Lines file.
pub struct AuditLog {
    path: PathBuf,
    max_bytes: u64,
    keep: u32,
    redactor: Arc<Redactor>,
    open: Mutex<Option<Open>>,
}

impl AuditLog {
    /// Opens (creating it and its directory, mode 0700) the log `settings` name, under
    /// `state_dir` by default.
    pub fn open(
        settings: &AuditSettings,
        state_dir: &Path,
        redactor: Arc<Redactor>,
    ) -> Result<AuditLog> {
        let path = if settings.path.is_empty() {
            // The default place is the state directory, which must be ours: in a directory
            // another user owns (a /tmp/sandpit-UID made by someone else) they could replace
            // or remove the log.
            if let Ok(m) = std::fs::symlink_metadata(state_dir) {
                if m.uid() != crate::util::euid() || m.file_type().is_symlink() {
                    return Err(Error::Config(format!(
                        "the state directory {} is not yours (owner uid {}, or a symlink): the audit log cannot go there; choose another state directory with SANDPIT_STATE_DIR, or SANDPIT_AUDIT_PATH",
                        state_dir.display(),
                        m.uid()
                    )));
                }
            }
            state_dir.join("audit.jsonl")
        } else {
            PathBuf::from(&settings.path)
        };
        if let Some(dir) = path.parent() {
            if !dir.as_os_str().is_empty() && !dir.exists() {
                std::fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o700)
                    .create(dir)
                    .map_err(|e| {
                        Error::io(
                            format!(
                                "create the audit log's directory {} ({UNWRITABLE_HINT})",
                                dir.display()
                            ),
                            e,
                        )
                    })?;
            }
        }
        let log = AuditLog {
            path,
            max_bytes: settings.max_bytes.max(4096),
            keep: settings.keep,
            redactor,
            open: Mutex::new(None),
        };
        let file = log.open_file()?;
        if let Ok(mut o) = log.open.lock() {
            *o = Some(Open { file });
        }
        Ok(log)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens the log for appending: never through a symlink (O_NOFOLLOW), never blocking on a
    /// FIFO someone put in its place (O_NONBLOCK: no reader is ENXIO), and only a regular file.
    fn open_file(&self) -> Result<File> {
        let fail = |e: std::io::Error| {
            Error::io(
                format!(
                    "open the audit log {} ({UNWRITABLE_HINT})",
                    self.path.display()
                ),
                e,
            )
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o600)
            .custom_flags(libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path)
            .map_err(fail)?;
        if !file.metadata().map_err(fail)?.is_file() {
            return Err(fail(std::io::Error::other("not a regular file")));
        }
        Ok(file)
    }

    /// Appends one record (an [`AuditRecord`], or a tool call's record).
    pub fn append<T: Serialize>(&self, record: &T) -> Result<()> {
        let line = serde_json::to_string(record)
            .map_err(|e| Error::sandbox(format!("serialize an audit record: {e}")))?;
        let mut line = self.redactor.redact_str(&line);
        line.push('\n');
        let mut guard = self
            .open
            .lock()
            .map_err(|_| Error::sandbox("the audit log lock is poisoned"))?;
        let mut file = match guard.take() {
            Some(o) => o.file,
            None => self.open_file()?,
        };
        lock(&file, &self.path)?;
        // Another process may have rotated the file since we opened it: follow the path.
        if !self.still_ours(&file) {
            unlock(&file);
            file = self.open_file()?;
            lock(&file, &self.path)?;
        }
        let size = file.metadata().map(|m| m.len()).unwrap_or(0);
        if size > 0 && size + line.len() as u64 > self.max_bytes {
            // Rotated under the old file's lock; later writers see the path moved and reopen.
            self.rotate();
            unlock(&file);
            file = self.open_file()?;
            lock(&file, &self.path)?;
        }
        let written = file
            .write_all(line.as_bytes())
            .map_err(|e| Error::io(format!("write the audit log {}", self.path.display()), e));
        unlock(&file);
        *guard = Some(Open { file });
        written
    }

    fn still_ours(&self, file: &File) -> bool {
        match (file.metadata(), std::fs::symlink_metadata(&self.path)) {
            (Ok(a), Ok(b)) => a.ino() == b.ino() && a.dev() == b.dev(),
            _ => false,
        }
    }

    /// `audit.jsonl.(keep-1)` → `.keep`, …, `audit.jsonl` → `.1`; with keep 0 the file is
    /// simply started anew.
    fn rotate(&self) {
        let name = |n: u32| {
            let mut p = self.path.clone().into_os_string();
            p.push(format!(".{n}"));
            PathBuf::from(p)
        };
        if self.keep == 0 {
            let _ = std::fs::remove_file(&self.path);
            return;
        }
        let _ = std::fs::remove_file(name(self.keep));
        for n in (1..self.keep).rev() {
            let _ = std::fs::rename(name(n), name(n + 1));
        }
        let _ = std::fs::rename(&self.path, name(1));
    }
}

/// Takes an exclusive `flock` on `file` (shared by every process appending to the log).
fn lock(file: &File, path: &Path) -> Result<()> {
    // SAFETY: flock on a descriptor that `file` keeps open for the call.
    if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
        return Err(Error::io(
            format!("lock {}", path.display()),
            std::io::Error::last_os_error(),
        ));
    }
    Ok(())
}

fn unlock(file: &File) {
    // SAFETY: flock on a descriptor that `file` keeps open for the call.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_UN) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(i: usize, code: &str) -> AuditRecord {
        AuditRecord {
            time: "2026-11-22T00:00:00Z".into(),
            interface: "library".into(),
            user: "u".into(),
            session_id: Some(format!("s{i}")),
            language: "python".into(),
            backend: "linux".into(),
            code_sha256: sha256_hex(code),
            code: code.into(),
            packages: vec![],
            network: false,
            status: "ok".into(),
            exit_code: Some(0),
            duration_ms: 1.0,
            error_code: None,
            findings: vec![],
            approval: "not_required".into(),
            tool_calls: 0,
        }
    }

    #[test]
    fn a_fifo_or_a_symlink_in_place_of_the_log_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo.jsonl");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", dir.path().join("link.jsonl")).unwrap();
        for name in ["fifo.jsonl", "link.jsonl"] {
            let settings = AuditSettings {
                enabled: true,
                path: dir.path().join(name).display().to_string(),
                max_bytes: 4096,
                keep: 2,
            };
            // Would block forever on the FIFO without O_NONBLOCK.
            assert!(AuditLog::open(&settings, dir.path(), Arc::new(Redactor::disabled())).is_err());
        }
    }

    #[test]
    fn appends_lines_and_rotates_by_size() {
        let dir = tempfile::tempdir().unwrap();
        let settings = AuditSettings {
            enabled: true,
            path: dir.path().join("a/audit.jsonl").display().to_string(),
            max_bytes: 4096,
            keep: 2,
        };
        let log = AuditLog::open(&settings, dir.path(), Arc::new(Redactor::disabled())).unwrap();
        for i in 0..100 {
            log.append(&record(i, &"x".repeat(100))).unwrap();
        }
        let main = std::fs::read_to_string(log.path()).unwrap();
        assert!(main.len() as u64 <= 4096);
        for line in main.lines() {
            let r: AuditRecord = serde_json::from_str(line).unwrap();
            assert_eq!(r.code_sha256, sha256_hex(&"x".repeat(100)));
        }
        let last: AuditRecord = serde_json::from_str(main.lines().last().unwrap()).unwrap();
        assert_eq!(last.session_id.as_deref(), Some("s99"));
        assert!(dir.path().join("a/audit.jsonl.1").exists());
        assert!(dir.path().join("a/audit.jsonl.2").exists());
        assert!(!dir.path().join("a/audit.jsonl.3").exists());
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(log.path()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn two_writers_share_one_log_without_losing_lines() {
        let dir = tempfile::tempdir().unwrap();
        let settings = AuditSettings {
            enabled: true,
            path: String::new(),
            max_bytes: 1 << 20,
            keep: 1,
        };
        let a = Arc::new(
            AuditLog::open(&settings, dir.path(), Arc::new(Redactor::disabled())).unwrap(),
        );
        let b = Arc::new(
            AuditLog::open(&settings, dir.path(), Arc::new(Redactor::disabled())).unwrap(),
        );
        let t: Vec<_> = [a, b]
            .into_iter()
            .map(|log| {
                std::thread::spawn(move || {
                    for i in 0..200 {
                        log.append(&record(i, "print(1)")).unwrap();
                    }
                })
            })
            .collect();
        for h in t {
            h.join().unwrap();
        }
        let text = std::fs::read_to_string(dir.path().join("audit.jsonl")).unwrap();
        assert_eq!(text.lines().count(), 400);
        assert!(text
            .lines()
            .all(|l| serde_json::from_str::<AuditRecord>(l).is_ok()));
    }

    #[test]
    fn sha256_is_hex() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
