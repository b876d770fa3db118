//! The Python driver, compiled once per host interpreter. `python3 -c SOURCE` compiles the
//! driver's 700 lines at every start (7 ms here: a third of a sandbox's start-up, and most of
//! what a session costs beyond a bare `python3 -c pass`); a code object loads in 0.2 ms. So the
//! backends that run the host's own interpreter (linux, unsandboxed) start it with
//! [`python_driver`]: a `-c` program of a few lines that checks the interpreter's bytecode
//! magic number, reads the driver's code object (`marshal`, compiled beforehand by that same
//! interpreter) from the request channel, where the host writes it before any request, and
//! `exec`s it.
//!
//! The code object travels on the request channel, not in the arguments: a 48 KB argument (the
//! code in base64, as it was first) cost the interpreter 1.3-1.7 ms more to start than this
//! (the kernel copies it, Python decodes it from the locale and compiles it as a literal), and
//! sandpit copied it four times on the way (the helper's plan, its JSON, the helper's parse,
//! the exec).
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

/// Prints the interpreter's bytecode magic number (hex) and a newline, then the driver read
/// from stdin, compiled as `<string>` (what `python -c` calls it: the driver recognises its
/// own frames by that name) and marshalled.
const COMPILER: &str = "import sys, marshal, importlib.util as u\n\
code = compile(sys.stdin.read(), '<string>', 'exec')\n\
sys.stdout.buffer.write(u.MAGIC_NUMBER.hex().encode() + b'\\n' + marshal.dumps(code))\n";

/// How long the one-off compile may take before sandpit gives up on it.
const COMPILE_TIMEOUT: Duration = Duration::from_secs(10);

/// The request channel's descriptor in the driver (`pipeline::wrapper`: requests on fd 3).
const REQUEST_FD: u32 = 3;

/// The Python driver in its compiled form: the interpreter's arguments, and what the host
/// writes on the request channel before the first request (the code object they read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompiledDriver {
    pub args: Vec<String>,
    pub preamble: Vec<u8>,
}

/// The compiled driver for `interpreter`, or `None` when there is none and none can be made
/// (the caller then passes the source).
pub fn python_driver(interpreter: &Path, state_dir: &Path) -> Option<CompiledDriver> {
    let dir = state_dir.join("drivers");
    let file = dir.join(format!("python-{:016x}", key(interpreter)?));
    let mut cached = match read_cached(&file) {
        Some(c) => c,
        None => {
            let made = compile(interpreter)?;
            if let Err(e) = crate::util::private_file::write_own_bytes(&file, &made) {
                tracing::debug!(error = %e, dir = %dir.display(), "the compiled Python driver could not be cached");
            }
            made
        }
    };
    let (magic, code) = parse(&cached)?;
    let args = vec!["-I".into(), "-c".into(), bootstrap(magic, code.len())];
    let header = cached.len() - code.len();
    cached.drain(..header);
    Some(CompiledDriver {
        args,
        preamble: cached,
    })
}

/// The `-c` program: check the magic number, read the code object (`len` bytes) from the
/// request channel, forget the names, run it.
fn bootstrap(magic: &str, len: usize) -> String {
    format!(
        "import _frozen_importlib_external as _e, marshal as _m, os as _o\n\
if _e.MAGIC_NUMBER.hex() != '{magic}':\n    \
raise SystemExit('sandpit: the compiled driver is not for this Python (remove the drivers directory of the state directory)')\n\
_d = b''\n\
while len(_d) < {len}:\n    \
_x = _o.read({REQUEST_FD}, {len} - len(_d))\n    \
if not _x:\n        \
raise SystemExit('sandpit: the driver ended early on the request channel')\n    \
_d += _x\n\
_c = _m.loads(_d)\n\
del _e, _m, _o, _d, _x\n\
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

/// The magic number (hex, one line) and the marshalled code object after it, checked for
/// shape: the magic goes into the `-c` program, so it must be hex; the code must be a
/// marshalled code object (its first byte: `TYPE_CODE`, with or without `FLAG_REF`).
fn parse(bytes: &[u8]) -> Option<(&str, &[u8])> {
    let newline = bytes.iter().position(|&b| b == b'\n')?;
    let (magic, code) = (&bytes[..newline], &bytes[newline + 1..]);
    let hex = !magic.is_empty() && magic.len() <= 16 && magic.iter().all(u8::is_ascii_hexdigit);
    let code_object = matches!(code.first(), Some(b'c' | 0xe3));
    (hex && code_object)
        .then(|| std::str::from_utf8(magic).ok().map(|m| (m, code)))
        .flatten()
}

/// A cached form: a file of ours no one else may write, of the right shape.
fn read_cached(file: &Path) -> Option<Vec<u8>> {
    crate::util::private_file::read_own_bytes(file).filter(|b| parse(b).is_some())
}

/// Runs the interpreter on the compiler with the driver on stdin; what it printed.
fn compile(interpreter: &Path) -> Option<Vec<u8>> {
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
        let mut out = Vec::new();
        stdout.read_to_end(&mut out).map(|_| out)
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
    fn only_a_hex_magic_line_and_a_code_object_are_a_compiled_form() {
        assert_eq!(
            parse(b"a70d0d0a\n\xe3\x00\x01"),
            Some(("a70d0d0a", &b"\xe3\x00\x01"[..]))
        );
        assert_eq!(parse(b"a70d0d0a\nc\n"), Some(("a70d0d0a", &b"c\n"[..])));
        assert_eq!(parse(b"a70d'\n\xe3"), None, "a quote could end the literal");
        assert_eq!(parse(b"xyz\n\xe3"), None);
        assert_eq!(parse(b"a70d\n"), None, "no code");
        assert_eq!(parse(b"a70d\nYWJj"), None, "not a code object");
        assert_eq!(parse(b"a70d0d0a\xe3"), None, "no magic line");
        assert_eq!(parse(b"0123456789abcdef0\n\xe3"), None, "too long a magic");
    }

    /// The `-c` program stays small whatever the driver's size: the code object is not in it.
    #[test]
    fn the_bootstrap_names_the_length_and_not_the_code() {
        let b = bootstrap("a70d0d0a", 36_000);
        assert!(b.contains("!= 'a70d0d0a'"), "{b}");
        assert!(b.contains("_o.read(3, 36000 - len(_d))"), "{b}");
        assert!(b.len() < 600, "{} bytes", b.len());
    }

    /// The real interpreter, end to end: the compiled driver starts from the preamble on its
    /// request channel, says it is ready on fd 4, and a second call reads the cache instead
    /// of compiling again.
    #[test]
    fn the_compiled_driver_starts_and_is_cached() {
        let python = Path::new("/usr/bin/python3");
        if !python.exists() {
            eprintln!("skipped: needs /usr/bin/python3");
            return;
        }
        let state = tempfile::tempdir().unwrap();
        let driver = python_driver(python, state.path()).expect("a compiled driver");
        let cached: Vec<_> = std::fs::read_dir(state.path().join("drivers"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(cached.len(), 1, "{cached:?}");
        let mode = std::fs::metadata(&cached[0]).unwrap().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert_eq!(python_driver(python, state.path()), Some(driver.clone()));
        assert!(driver.args.iter().map(String::len).sum::<usize>() < 1000);

        // fd 3: the preamble, then no requests (EOF ends the driver); fd 4: its ready line.
        let requests = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(requests.path(), &driver.preamble).unwrap();
        let responses = tempfile::NamedTempFile::new().unwrap();
        let run = |requests: &Path| {
            let script = format!(
                "exec 3<{} 4>{}; exec \"$0\" \"$@\"",
                requests.display(),
                responses.path().display()
            );
            let status = Command::new("/bin/sh")
                .arg("-c")
                .arg(script)
                .arg(python)
                .args(&driver.args)
                .env_clear()
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .output()
                .unwrap();
            let ready = std::fs::read_to_string(responses.path()).unwrap();
            (status, ready)
        };
        let (out, ready) = run(requests.path());
        assert!(ready.starts_with("{\"ready\":true"), "{out:?} {ready:?}");

        // A preamble cut short: the interpreter says why and exits, nothing runs.
        std::fs::write(requests.path(), &driver.preamble[..100]).unwrap();
        let (out, ready) = run(requests.path());
        assert!(!out.status.success());
        assert_eq!(ready, "");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("the driver ended early on the request channel"),
            "{err}"
        );
    }
}
