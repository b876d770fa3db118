//! Small files sandpit keeps for itself under its state directory (the compiled Python driver,
//! the namespace probe's answer): believed only when they are regular files of this user that
//! no one else may write, reached without following a symlink; written atomically (a private
//! temporary file renamed into place) in a directory of this user's, mode 0700.

use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

/// The file's text, if it is a regular file of ours that only we may write.
pub fn read_own(file: &Path) -> Option<String> {
    String::from_utf8(read_own_bytes(file)?).ok()
}

/// The file's bytes, if it is a regular file of ours that only we may write.
pub fn read_own_bytes(file: &Path) -> Option<Vec<u8>> {
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(file)
        .ok()?;
    let m = f.metadata().ok()?;
    if !m.is_file() || m.uid() != super::euid() || m.mode() & 0o022 != 0 {
        return None;
    }
    let mut bytes = Vec::with_capacity(m.len() as usize);
    f.read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// Writes `text` to `file` (mode 0600), creating its directory (0700) inside a parent that
/// must already exist and be ours: nothing is made anywhere else.
pub fn write_own(file: &Path, text: &str) -> std::io::Result<()> {
    write_own_bytes(file, text.as_bytes())
}

/// [`write_own`] of bytes.
pub fn write_own_bytes(file: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let ours = |p: &Path| {
        std::fs::symlink_metadata(p).is_ok_and(|m| m.is_dir() && m.uid() == super::euid())
    };
    let refused = || std::io::Error::other("not a directory of ours");
    let dir = file.parent().ok_or_else(refused)?;
    if !dir.parent().is_some_and(ours) {
        return Err(refused());
    }
    if let Err(e) = std::fs::create_dir(dir) {
        if e.kind() != std::io::ErrorKind::AlreadyExists {
            return Err(e);
        }
    }
    if !ours(dir) {
        return Err(refused());
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
    let unique = super::random_hex(4).map_err(|e| std::io::Error::other(e.to_string()))?;
    let tmp = dir.join(format!(".tmp-{}-{unique}", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .and_then(|mut f| f.write_all(bytes).and_then(|_| f.sync_all()))
        .and_then(|_| std::fs::rename(&tmp, file));
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_files_are_private_and_read_back() {
        let state = tempfile::tempdir().unwrap();
        let f = state.path().join("cache").join("x");
        write_own(&f, "hello").unwrap();
        assert_eq!(read_own(&f).as_deref(), Some("hello"));
        assert_eq!(std::fs::metadata(&f).unwrap().mode() & 0o777, 0o600);
        let dir_mode = std::fs::metadata(f.parent().unwrap()).unwrap().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        write_own(&f, "again").unwrap();
        assert_eq!(read_own(&f).as_deref(), Some("again"));
    }

    #[test]
    fn nothing_is_made_outside_an_existing_parent() {
        let state = tempfile::tempdir().unwrap();
        let missing = state.path().join("missing");
        assert!(write_own(&missing.join("cache").join("x"), "x").is_err());
        assert!(!missing.exists());
    }

    #[test]
    fn a_file_others_may_write_or_a_symlink_is_not_believed() {
        let state = tempfile::tempdir().unwrap();
        let f = state.path().join("cache").join("x");
        write_own(&f, "x").unwrap();
        let link = f.with_file_name("link");
        std::os::unix::fs::symlink(&f, &link).unwrap();
        assert_eq!(read_own(&link), None);
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert_eq!(read_own(&f), None);
    }
}
