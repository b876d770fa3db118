//! Which interpreters a Mac has, and which directories each needs to read. Pure over a
//! [`Probe`] of the filesystem, so the rules are unit-tested anywhere; `host_probe` is the
//! real one.
//!
//! Where each language is looked for, in order:
//!
//! - the configured path (`[interpreters]`, `SANDPIT_PYTHON` ...) when it is not the built-in
//!   default, and then only it (a configured interpreter that is missing is an error naming
//!   the setting, never a silent substitute); the defaults name Linux paths, and on a Mac
//!   `/usr/bin/python3` is Apple's `xcrun` shim, which may open an installer dialog, and
//!   `/bin/bash` is bash 3.2;
//! - python: Homebrew (`/opt/homebrew/bin/python3`, `/usr/local/bin/python3`), python.org
//!   (`/Library/Frameworks/Python.framework/Versions/Current/bin/python3`), then the Python
//!   of Apple's developer tools that `/usr/bin/python3` would start (the Command Line Tools,
//!   or Xcode's `Contents/Developer`);
//! - javascript: `node` on `PATH`, then Homebrew's;
//! - bash: Homebrew's (the driver needs bash 4.4 or later; macOS ships 3.2).
//!
//! A candidate must be an executable file and not a script (a version manager's shim, such
//! as pyenv's, would run its manager inside the sandbox). Its read-only roots are its install
//! tree: the Homebrew prefix, the `Python.framework`, the developer directory, or the
//! directory above its `bin`.

use crate::types::Language;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// What discovery asks of the filesystem.
pub trait Probe {
    /// An executable regular file (after symlinks).
    fn is_executable(&self, p: &Path) -> bool;
    /// Starts with `#!`.
    fn is_script(&self, p: &Path) -> bool;
    /// `realpath`.
    fn resolve(&self, p: &Path) -> Option<PathBuf>;
    /// The process's `PATH`.
    fn path_var(&self) -> Option<OsString>;
    /// The user's home directory.
    fn home(&self) -> Option<PathBuf>;
}

/// A usable interpreter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Found {
    /// The path it is started by (a Homebrew link, say).
    pub path: PathBuf,
    /// Where that resolves to.
    pub real: PathBuf,
    /// Where it was found, for `doctor`.
    pub source: &'static str,
    /// The directories it reads its libraries and modules from (resolved).
    pub roots: Vec<PathBuf>,
}

/// The Homebrew prefixes (Apple silicon, Intel).
const HOMEBREW: [&str; 2] = ["/opt/homebrew", "/usr/local"];

/// Where Apple's developer tools keep their own Python (what `/usr/bin/python3` runs).
const DEVELOPER_PYTHONS: [&str; 2] = [
    "/Library/Developer/CommandLineTools/usr/bin/python3",
    "/Applications/Xcode.app/Contents/Developer/usr/bin/python3",
];

/// The candidates for `language`, with where each comes from.
fn candidates(
    language: Language,
    configured: &Path,
    default: &Path,
    probe: &dyn Probe,
) -> Vec<(PathBuf, &'static str)> {
    let mut c: Vec<(PathBuf, &'static str)> = Vec::new();
    if configured != default {
        c.push((configured.to_path_buf(), "configured"));
        return c;
    }
    let homebrew = |name: &str| {
        HOMEBREW
            .iter()
            .map(|p| (Path::new(p).join("bin").join(name), "Homebrew"))
            .collect::<Vec<_>>()
    };
    match language {
        Language::Python => {
            c.extend(homebrew("python3"));
            c.push((
                "/Library/Frameworks/Python.framework/Versions/Current/bin/python3".into(),
                "python.org",
            ));
            c.extend(
                DEVELOPER_PYTHONS
                    .iter()
                    .map(|p| (PathBuf::from(p), "Apple's developer tools")),
            );
        }
        Language::Javascript => {
            if let Some(path) = probe.path_var() {
                c.extend(std::env::split_paths(&path).map(|d| (d.join("node"), "PATH")));
            }
            c.extend(homebrew("node"));
        }
        Language::Bash => c.extend(homebrew("bash")),
    }
    c
}

/// The first usable interpreter for `language`, or why there is none.
pub fn find(
    language: Language,
    configured: &Path,
    default: &Path,
    probe: &dyn Probe,
) -> Result<Found, String> {
    let mut passed = Vec::new();
    for (path, source) in candidates(language, configured, default, probe) {
        if !path.is_absolute() || !probe.is_executable(&path) {
            continue;
        }
        if probe.is_script(&path) {
            passed.push(format!(
                "{} (a script, not the interpreter)",
                path.display()
            ));
            continue;
        }
        let Some(real) = probe.resolve(&path) else {
            continue;
        };
        let home = probe.home();
        let mut roots = install_roots(&real, home.as_deref());
        for r in install_roots(&path, home.as_deref()) {
            if !roots.contains(&r) {
                roots.push(r);
            }
        }
        return Ok(Found {
            path,
            real,
            source,
            roots,
        });
    }
    if configured != default {
        let var = match language {
            Language::Python => "SANDPIT_PYTHON",
            Language::Javascript => "SANDPIT_NODE",
            Language::Bash => "SANDPIT_BASH",
        };
        return Err(format!(
            "the configured {language} interpreter {} is not usable here{} (set it in sandpit.toml [interpreters] or {var})",
            configured.display(),
            if passed.is_empty() { "" } else { ": a script, not the interpreter" }
        ));
    }
    let hint = match language {
        Language::Python => "install Python (brew install python, or python.org) or set SANDPIT_PYTHON",
        Language::Javascript => "install Node.js (brew install node, or nodejs.org) or set SANDPIT_NODE",
        Language::Bash => "the driver needs bash 4.4 or later and macOS ships 3.2: brew install bash, or set SANDPIT_BASH",
    };
    Err(if passed.is_empty() {
        format!("no {language} interpreter found: {hint}")
    } else {
        format!(
            "no {language} interpreter found (passed over {}): {hint}",
            passed.join(", ")
        )
    })
}

/// The install tree an interpreter at `p` reads from. Never a home directory (`home`, any
/// `/Users/NAME`, root's), an ancestor of one, or a top-level directory: an interpreter in
/// `~/bin` gets `~/bin`, one directly in a home only its own file.
pub fn install_roots(p: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let s = p.to_string_lossy();
    for prefix in HOMEBREW {
        // /usr/local is beneath /usr, which the base profile reads already.
        if prefix == "/opt/homebrew" && p.starts_with(prefix) {
            return vec![prefix.into()];
        }
    }
    // Apple's developer tools (Command Line Tools, Xcode), then a framework build (python.org,
    // or one inside another tree).
    for marker in [
        "/CommandLineTools/",
        "/Contents/Developer/",
        "/Python.framework/",
        "/Python3.framework/",
    ] {
        if let Some(at) = s.find(marker) {
            let root = PathBuf::from(&s[..at + marker.len() - 1]);
            if !too_broad(&root, home) {
                return vec![root];
            }
        }
    }
    if p.starts_with("/usr") || p.starts_with("/bin") || p.starts_with("/sbin") {
        return vec![];
    }
    let dir = p.parent().unwrap_or(Path::new("/"));
    let tree = if dir.file_name().is_some_and(|n| n == "bin") {
        dir.parent().unwrap_or(dir)
    } else {
        dir
    };
    let root = [tree, dir, p]
        .into_iter()
        .find(|r| !too_broad(r, home))
        .unwrap_or(p);
    vec![root.to_path_buf()]
}

/// A directory too broad to hand a sandbox for reading: `/` or a top-level directory, a home
/// directory, or an ancestor of the user's home.
fn too_broad(p: &Path, home: Option<&Path>) -> bool {
    let depth = p
        .components()
        .filter(|c| matches!(c, std::path::Component::Normal(_)))
        .count();
    let a_home = (p.starts_with("/Users") && depth <= 2)
        || p == Path::new("/var/root")
        || p == Path::new("/private/var/root");
    depth < 2 || a_home || home.is_some_and(|h| h.starts_with(p))
}

/// The real filesystem.
pub struct HostProbe;

impl Probe for HostProbe {
    fn is_executable(&self, p: &Path) -> bool {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    }

    fn is_script(&self, p: &Path) -> bool {
        use std::io::Read;
        let mut head = [0u8; 2];
        std::fs::File::open(p)
            .and_then(|mut f| f.read_exact(&mut head))
            .is_ok_and(|()| &head == b"#!")
    }

    fn resolve(&self, p: &Path) -> Option<PathBuf> {
        std::fs::canonicalize(p).ok()
    }

    fn path_var(&self) -> Option<OsString> {
        std::env::var_os("PATH")
    }

    fn home(&self) -> Option<PathBuf> {
        dirs::home_dir()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// A made-up Mac: executables (with what they resolve to) and scripts.
    struct FakeMac {
        files: HashMap<PathBuf, PathBuf>,
        scripts: Vec<PathBuf>,
        path: &'static str,
    }

    impl FakeMac {
        fn new(files: &[(&str, &str)], scripts: &[&str], path: &'static str) -> Self {
            FakeMac {
                files: files
                    .iter()
                    .map(|(a, b)| (PathBuf::from(a), PathBuf::from(b)))
                    .collect(),
                scripts: scripts.iter().map(PathBuf::from).collect(),
                path,
            }
        }
    }

    impl Probe for FakeMac {
        fn is_executable(&self, p: &Path) -> bool {
            self.files.contains_key(p)
        }
        fn is_script(&self, p: &Path) -> bool {
            self.scripts.iter().any(|s| s == p)
        }
        fn resolve(&self, p: &Path) -> Option<PathBuf> {
            self.files.get(p).cloned()
        }
        fn path_var(&self) -> Option<OsString> {
            Some(self.path.into())
        }
        fn home(&self) -> Option<PathBuf> {
            Some("/Users/me".into())
        }
    }

    fn defaults(lang: Language) -> PathBuf {
        crate::policy::Policy::default()
            .interpreters
            .path(lang)
            .to_path_buf()
    }

    fn find_on(mac: &FakeMac, lang: Language) -> Result<Found, String> {
        find(lang, &defaults(lang), &defaults(lang), mac)
    }

    #[test]
    fn homebrew_is_preferred_and_its_whole_prefix_is_read() {
        let mac = FakeMac::new(
            &[
                ("/opt/homebrew/bin/python3", "/opt/homebrew/Cellar/python@3.12/3.12.4/Frameworks/Python.framework/Versions/3.12/bin/python3.12"),
                ("/Library/Developer/CommandLineTools/usr/bin/python3", "/Library/Developer/CommandLineTools/usr/bin/python3"),
                ("/opt/homebrew/bin/bash", "/opt/homebrew/Cellar/bash/5.2.37/bin/bash"),
                ("/bin/bash", "/bin/bash"),
            ],
            &[],
            "/usr/bin:/bin",
        );
        let py = find_on(&mac, Language::Python).unwrap();
        assert_eq!(py.path, Path::new("/opt/homebrew/bin/python3"));
        assert_eq!(
            (py.source, py.roots.clone()),
            ("Homebrew", vec![PathBuf::from("/opt/homebrew")])
        );
        let bash = find_on(&mac, Language::Bash).unwrap();
        assert_eq!(bash.path, Path::new("/opt/homebrew/bin/bash"));
    }

    #[test]
    fn apple_python_and_python_org_are_found_with_their_trees() {
        let clt = FakeMac::new(
            &[(
                "/Library/Developer/CommandLineTools/usr/bin/python3",
                "/Library/Developer/CommandLineTools/usr/bin/python3",
            )],
            &[],
            "",
        );
        let py = find_on(&clt, Language::Python).unwrap();
        assert_eq!(py.source, "Apple's developer tools");
        assert_eq!(
            py.roots,
            [PathBuf::from("/Library/Developer/CommandLineTools")]
        );
        let org = FakeMac::new(
            &[(
                "/Library/Frameworks/Python.framework/Versions/Current/bin/python3",
                "/Library/Frameworks/Python.framework/Versions/3.13/bin/python3.13",
            )],
            &[],
            "",
        );
        let py = find_on(&org, Language::Python).unwrap();
        assert_eq!(py.source, "python.org");
        assert_eq!(
            py.roots,
            [PathBuf::from("/Library/Frameworks/Python.framework")]
        );
    }

    #[test]
    fn node_comes_from_path_and_version_manager_shims_are_passed_over() {
        let mac = FakeMac::new(
            &[
                ("/Users/me/.volta/bin/node", "/Users/me/.volta/bin/node"),
                (
                    "/Users/me/.nvm/versions/node/v20.11.0/bin/node",
                    "/Users/me/.nvm/versions/node/v20.11.0/bin/node",
                ),
                (
                    "/opt/homebrew/bin/node",
                    "/opt/homebrew/Cellar/node/22.1.0/bin/node",
                ),
            ],
            &["/Users/me/.volta/bin/node"],
            "/Users/me/.volta/bin:/Users/me/.nvm/versions/node/v20.11.0/bin:/opt/homebrew/bin",
        );
        let node = find_on(&mac, Language::Javascript).unwrap();
        assert_eq!(node.source, "PATH");
        assert_eq!(
            node.path,
            Path::new("/Users/me/.nvm/versions/node/v20.11.0/bin/node")
        );
        assert_eq!(
            node.roots,
            [PathBuf::from("/Users/me/.nvm/versions/node/v20.11.0")]
        );
    }

    #[test]
    fn a_home_directory_is_never_a_root() {
        let home = Some(Path::new("/Users/me"));
        // ~/bin/node: the tree above bin would be the home itself.
        assert_eq!(
            install_roots(Path::new("/Users/me/bin/node"), home),
            [PathBuf::from("/Users/me/bin")]
        );
        // An interpreter directly in a home: only its own file.
        assert_eq!(
            install_roots(Path::new("/Users/me/python3"), home),
            [PathBuf::from("/Users/me/python3")]
        );
        // Another user's home, the top level, and an ancestor of the home are refused too.
        assert_eq!(
            install_roots(Path::new("/Users/other/bin/node"), home),
            [PathBuf::from("/Users/other/bin")]
        );
        assert_eq!(
            install_roots(Path::new("/opt/bin/node"), home),
            [PathBuf::from("/opt/bin")]
        );
        assert_eq!(
            install_roots(
                Path::new("/srv/me/home/bin/node"),
                Some(Path::new("/srv/me/home"))
            ),
            [PathBuf::from("/srv/me/home/bin")]
        );
        // A deep tree is fine.
        assert_eq!(
            install_roots(
                Path::new("/Users/me/.local/share/fnm/node-versions/v22/installation/bin/node"),
                home
            ),
            [PathBuf::from(
                "/Users/me/.local/share/fnm/node-versions/v22/installation"
            )]
        );
    }

    #[test]
    fn a_configured_path_wins_and_a_missing_one_says_what_to_do() {
        let mac = FakeMac::new(
            &[
                (
                    "/Users/me/.pyenv/versions/3.12.1/bin/python3",
                    "/Users/me/.pyenv/versions/3.12.1/bin/python3.12",
                ),
                ("/opt/homebrew/bin/python3", "/opt/homebrew/bin/python3"),
            ],
            &[],
            "",
        );
        let py = find(
            Language::Python,
            Path::new("/Users/me/.pyenv/versions/3.12.1/bin/python3"),
            &defaults(Language::Python),
            &mac,
        )
        .unwrap();
        assert_eq!(py.source, "configured");
        assert_eq!(
            py.roots,
            [PathBuf::from("/Users/me/.pyenv/versions/3.12.1")]
        );
        // Apple's /bin/bash (3.2) is not a candidate: bash needs Homebrew's or a setting.
        let bare = FakeMac::new(&[("/bin/bash", "/bin/bash")], &[], "/bin");
        let e = find_on(&bare, Language::Bash).unwrap_err();
        assert!(e.contains("bash 4") && e.contains("SANDPIT_BASH"), "{e}");
    }
}
