//! The Python driver, compiled once per host interpreter. `python3 -c SOURCE` compiles the
//! driver's 700 lines at every start (7 ms here: a third of a sandbox's start-up, and most of
//! what a session costs beyond a bare `python3 -c pass`); a code object loads in 0.1 ms. So the
//! backends that run the host's own interpreter (linux, unsandboxed, macos) start it with
//! [`python_driver_args`]: a few lines that check the interpreter's bytecode magic number and
//! `exec` the driver from `marshal`, compiled beforehand by that same interpreter.
//!
//! The compiled form is cached in the state directory (`drivers/`, mode 0700, files 0600,
//! `util::private_file`), one
//! file per (driver source, interpreter file: path, device, inode, size, modification time).
//! It is made by running the interpreter on the host, outside any sandbox, with `-I -S`, an empty
//! environment and sandpit's own constant source on stdin: no code of anyone else's runs. What
//! the cache holds runs only inside the sandbox, like the source it replaces, and it gets no
//! say in what the host believes (the host trusts nothing the driver says; see the module
//! above). Anything that fails (no state directory, a read-only one, an interpreter that
//! cannot compile) leaves the source form in place: slower, never different.

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Prints the interpreter's bytecode magic number (hex) on one line, then the driver read from
/// stdin, compiled as `<string>` (what `python -c` calls it: the driver recognises its own
/// frames by that name) and marshalled, in base64 on one line.
const COMPILER: &str = "import sys, marshal, binascii, importlib.util as u\n\
sys.stdout.write(u.MAGIC_NUMBER.hex() + '\\n')\n\
code = compile(sys.stdin.read(), '<string>', 'exec')\n\
sys.stdout.write(binascii.b2a_base64(marshal.dumps(code), newline=False).decode() + '\\n')\n";

/// How long the one-off compile may take before sandpit gives up on it.
const COMPILE_TIMEOUT: Duration = Duration::from_secs(10);

/// The arguments (after the interpreter) that start the Python driver from its compiled form,
/// or `None` when there is none and none can be made (the caller then passes the source).
pub fn python_driver_args(interpreter: &Path, state_dir: &Path) -> Option<Vec<String>> {
    let dir = state_dir.join("drivers");
    let file = dir.join(format!("python-{:016x}", key(interpreter)?));
    let cached = match read_cached(&file) {
        Some(c) => c,
        None => {
            let made = compile(interpreter)?;
            if let Err(e) = crate::util::private_file::write_own(&file, &made) {
                tracing::debug!(error = %e, dir = %dir.display(), "the compiled Python driver could not be cached");
            }
            made
        }
    };
    let (magic, code) = parse(&cached)?;
    Some(vec!["-I".into(), "-c".into(), bootstrap(magic, code)])
}

/// The `-c` program: check the magic number, load the code, forget the names, run it.
fn bootstrap(magic: &str, code: &str) -> String {
    format!(
        "import _frozen_importlib_external as _e, marshal as _m, binascii as _b\n\
if _e.MAGIC_NUMBER.hex() != '{magic}':\n    \
raise SystemExit('sandpit: the compiled driver is not for this Python (remove the drivers directory of the state directory)')\n\
_c = _m.loads(_b.a2b_base64(b'{code}'))\n\
del _e, _m, _b\n\
exec(_c)\n"
    )
}

/// What identifies the compiled form: the driver's source and the interpreter file.
fn key(interpreter: &Path) -> Option<u64> {
    let path = std::fs::canonicalize(interpreter).ok()?;
    let m = std::fs::metadata(&path).ok()?;
    let mut h = std::collections::hash_map::DefaultHasher::new();
    super::PYTHON_DRIVER.hash(&mut h);
    COMPILER.hash(&mut h);
    path.hash(&mut h);
    (m.dev(), m.ino(), m.size(), m.mtime(), m.mtime_nsec()).hash(&mut h);
    Some(h.finish())
}

/// The two lines (magic, base64 code), checked for shape: hex, then base64 only.
fn parse(text: &str) -> Option<(&str, &str)> {
    let mut lines = text.lines();
    let magic = lines.next()?;
    let code = lines.next()?;
    let hex =
        !magic.is_empty() && magic.len() <= 16 && magic.bytes().all(|b| b.is_ascii_hexdigit());
    let b64 = !code.is_empty()
        && code
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=');
    (hex && b64 && lines.next().is_none()).then_some((magic, code))
}

/// A cached form: a file of ours no one else may write, of the right shape.
fn read_cached(file: &Path) -> Option<String> {
    crate::util::private_file::read_own(file).filter(|t| parse(t).is_some())
}

/// Runs the interpreter on the compiler with the driver on stdin; its two lines.
fn compile(interpreter: &Path) -> Option<String> {
    let started = Instant::now();
    let mut child = Command::new(interpreter)
        .args(["-I", "-S", "-c", COMPILER])
        .env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .ok()?;
    let mut stdin = child.stdin.take()?;
    let writer = std::thread::spawn(move || stdin.write_all(super::PYTHON_DRIVER.as_bytes()));
    let mut stdout = child.stdout.take()?;
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        stdout.read_to_string(&mut out).map(|_| out)
    });
    let status = loop {
        match child.try_wait() {
            Ok(Some(s)) => break s,
            Ok(None) if started.elapsed() < COMPILE_TIMEOUT => {
                std::thread::sleep(Duration::from_millis(2))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let _ = writer.join();
    let out = reader.join().ok()?.ok()?;
    tracing::debug!(
        took_ms = started.elapsed().as_millis() as u64,
        ok = status.success(),
        "compiled the Python driver for {}",
        interpreter.display()
    );
    (status.success() && parse(&out).is_some()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_two_well_formed_lines_are_a_compiled_form() {
        assert_eq!(parse("a70d0d0a\nYWJj\n"), Some(("a70d0d0a", "YWJj")));
        assert_eq!(parse("a70d0d0a\nYWJj"), Some(("a70d0d0a", "YWJj")));
        assert_eq!(
            parse("a70d\nYW'Jj\n"),
            None,
            "a quote could end the literal"
        );
        assert_eq!(parse("xyz\nYWJj\n"), None);
        assert_eq!(parse("a70d\n"), None);
        assert_eq!(parse("a70d\nYWJj\nmore\n"), None);
    }

    /// The real interpreter, end to end: the compiled driver starts, says it is ready on fd 4,
    /// and a second call reads the cache instead of compiling again.
    #[test]
    fn the_compiled_driver_starts_and_is_cached() {
        let python = Path::new("/usr/bin/python3");
        if !python.exists() {
            eprintln!("skipped: needs /usr/bin/python3");
            return;
        }
        let state = tempfile::tempdir().unwrap();
        let args = python_driver_args(python, state.path()).expect("a compiled driver");
        let cached: Vec<_> = std::fs::read_dir(state.path().join("drivers"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(cached.len(), 1, "{cached:?}");
        let mode = std::fs::metadata(&cached[0]).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(python_driver_args(python, state.path()), Some(args.clone()));

        // fd 3: no requests (EOF ends the driver); fd 4: its ready line.
        let responses = tempfile::NamedTempFile::new().unwrap();
        let script = format!(
            "exec 3</dev/null 4>{}; exec \"$0\" \"$@\"",
            responses.path().display()
        );
        let status = Command::new("/bin/sh")
            .arg("-c")
            .arg(script)
            .arg(python)
            .args(&args)
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        let ready = std::fs::read_to_string(responses.path()).unwrap();
        assert!(ready.starts_with("{\"ready\":true"), "{status:?} {ready:?}");
    }
}
