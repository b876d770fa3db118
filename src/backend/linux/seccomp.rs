//! The seccomp-bpf layer: `profiles/seccomp/sandbox.json` (an allowlist at least as strict as
//! Docker's default profile, commented where it decides something), turned into seccompiler's
//! JSON format per architecture and compiled. Pure until [`install`].
//!
//! Filters installed, in order: `allow` (EPERM for anything not allowed, with an x32 prefix on
//! x86-64), `clone3` (ENOSYS, so libc falls back to `clone`, whose flags `allow` checks), and,
//! when the execution has no network, `network` (EAFNOSUPPORT for every socket family but
//! AF_UNIX), and, when the sandbox sees the host's filesystem (no mount namespace),
//! `unix_sockets` (EACCES for `socket(AF_UNIX)`, since Landlock does not govern connecting to
//! a socket by path; `socketpair` stays). The kernel returns the strictest answer of all filters and, between two errnos,
//! the one of the filter installed last. Syscalls of a foreign ABI (i386 on x86-64, arm32 on
//! aarch64) kill the process: seccompiler puts an architecture check at the head of every
//! filter.

use seccompiler::{BpfProgram, TargetArch};
use serde_json::{json, Value};

const PROFILE: &str = include_str!("../../../profiles/seccomp/sandbox.json");

/// The x32 ABI shares AUDIT_ARCH_X86_64 but sets this bit in the syscall number.
const X32_SYSCALL_BIT: u32 = 0x4000_0000;

#[derive(Debug, thiserror::Error)]
pub enum SeccompError {
    #[error("seccomp profile for {arch}: {message}")]
    Profile { arch: &'static str, message: String },
    #[error("installing seccomp filter {name}: {source}")]
    Install {
        name: String,
        source: seccompiler::Error,
    },
}

/// The architecture this binary runs on, as seccompiler names it.
pub fn native_arch() -> Result<TargetArch, SeccompError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| SeccompError::Profile {
        arch: std::env::consts::ARCH,
        message: format!("unsupported architecture: {e}"),
    })
}

fn arch_name(arch: TargetArch) -> &'static str {
    match arch {
        TargetArch::x86_64 => "x86_64",
        TargetArch::aarch64 => "aarch64",
        TargetArch::riscv64 => "riscv64",
    }
}

/// Drops the `comment` keys seccompiler's format does not have at every level we use.
fn strip_comments(v: &mut Value) {
    match v {
        Value::Object(o) => {
            o.remove("comment");
            o.values_mut().for_each(strip_comments);
        }
        Value::Array(a) => a.iter_mut().for_each(strip_comments),
        _ => {}
    }
}

/// The names allowed unconditionally on `arch`.
fn allowed_names(profile: &Value, arch: TargetArch) -> Vec<String> {
    let allow = &profile["allow"];
    ["common", arch_name(arch)]
        .iter()
        .flat_map(|k| allow[*k].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect()
}

/// seccompiler's JSON for `arch`: the `allow`, `clone3` and `network` filters.
fn seccompiler_json(arch: TargetArch) -> Result<Value, SeccompError> {
    let err = |message: String| SeccompError::Profile {
        arch: arch_name(arch),
        message,
    };
    if arch == TargetArch::riscv64 {
        return Err(err("no profile for riscv64".into()));
    }
    let profile: Value = serde_json::from_str(PROFILE).map_err(|e| err(e.to_string()))?;
    let mut rules: Vec<Value> = allowed_names(&profile, arch)
        .into_iter()
        .map(|n| json!({ "syscall": n }))
        .collect();
    rules.extend(
        profile["allow_with_arguments"]
            .as_array()
            .cloned()
            .ok_or_else(|| err("allow_with_arguments is not a list".into()))?,
    );
    let mut out = json!({
        "allow": { "mismatch_action": { "errno": libc::EPERM }, "match_action": "allow", "filter": rules },
        "clone3": profile["clone3"].clone(),
        "network": profile["network"].clone(),
        "unix_sockets": profile["unix_sockets"].clone(),
    });
    strip_comments(&mut out);
    Ok(out)
}

/// The filters to install for `arch`, in installation order, as `(name, program)`.
pub fn compile(
    arch: TargetArch,
    deny_network: bool,
    deny_unix_sockets: bool,
) -> Result<Vec<(String, BpfProgram)>, SeccompError> {
    let text = seccompiler_json(arch)?.to_string();
    let mut map = seccompiler::compile_from_json(text.as_bytes(), arch).map_err(|e| {
        SeccompError::Profile {
            arch: arch_name(arch),
            message: e.to_string(),
        }
    })?;
    let mut take = |name: &str| {
        map.remove(name).ok_or_else(|| SeccompError::Profile {
            arch: arch_name(arch),
            message: format!("filter {name} missing"),
        })
    };
    let mut allow = take("allow")?;
    if arch == TargetArch::x86_64 {
        allow = with_x32_prefix(allow);
    }
    let mut out = vec![
        ("allow".to_string(), allow),
        ("clone3".to_string(), take("clone3")?),
    ];
    if deny_network {
        out.push(("network".to_string(), take("network")?));
    }
    if deny_unix_sockets {
        out.push(("unix_sockets".to_string(), take("unix_sockets")?));
    }
    Ok(out)
}

/// Prepends: load the syscall number; if the x32 bit is set, fail with EPERM. The rest of the
/// program (seccompiler's) starts with its own architecture check and loads what it needs.
fn with_x32_prefix(program: BpfProgram) -> BpfProgram {
    const BPF_LD_W_ABS: u16 = 0x20; // BPF_LD (0x00) | BPF_W (0x00) | BPF_ABS (0x20)
    const BPF_JMP_JSET_K: u16 = 0x45; // BPF_JMP (0x05) | BPF_JSET (0x40) | BPF_K (0x00)
    const BPF_RET_K: u16 = 0x06; // BPF_RET (0x06) | BPF_K (0x00)
    let nr_offset = 0; // offsetof(struct seccomp_data, nr)
    let mut prefix = vec![
        seccompiler::sock_filter {
            code: BPF_LD_W_ABS,
            jt: 0,
            jf: 0,
            k: nr_offset,
        },
        seccompiler::sock_filter {
            code: BPF_JMP_JSET_K,
            jt: 0,
            jf: 1,
            k: X32_SYSCALL_BIT,
        },
        seccompiler::sock_filter {
            code: BPF_RET_K,
            jt: 0,
            jf: 0,
            k: libc::SECCOMP_RET_ERRNO | libc::EPERM as u32,
        },
    ];
    prefix.extend(program);
    prefix
}

/// Installs the filters on the calling thread. `PR_SET_NO_NEW_PRIVS` must already be set.
pub fn install(filters: &[(String, BpfProgram)]) -> Result<(), SeccompError> {
    for (name, prog) in filters {
        seccompiler::apply_filter(prog).map_err(|source| SeccompError::Install {
            name: name.clone(),
            source,
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn profile() -> Value {
        serde_json::from_str(PROFILE).unwrap()
    }

    #[test]
    fn compiles_for_every_supported_arch() {
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            let f = compile(arch, true, true).unwrap();
            let names: Vec<_> = f.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["allow", "clone3", "network", "unix_sockets"]);
            assert!(
                f.iter().all(|(_, p)| !p.is_empty() && p.len() < 4096),
                "BPF programs are limited to 4096 instructions"
            );
            assert_eq!(compile(arch, false, false).unwrap().len(), 2);
            assert_eq!(compile(arch, false, true).unwrap().len(), 3);
        }
    }

    #[test]
    fn x86_64_allow_filter_starts_with_x32_guard() {
        let f = compile(TargetArch::x86_64, false, false).unwrap();
        assert_eq!(f[0].1[1].k, X32_SYSCALL_BIT);
        assert_eq!(f[0].1[2].k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        let a = compile(TargetArch::aarch64, false, false).unwrap();
        assert_ne!(a[0].1[1].k, X32_SYSCALL_BIT);
    }

    #[test]
    fn dangerous_syscalls_are_not_allowed_on_any_arch() {
        let p = profile();
        let conditional: Vec<&str> = p["allow_with_arguments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["syscall"].as_str().unwrap())
            .collect();
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            let allowed = allowed_names(&p, arch);
            for s in [
                "mount",
                "umount2",
                "pivot_root",
                "chroot",
                "unshare",
                "setns",
                "ptrace",
                "process_vm_readv",
                "process_vm_writev",
                "bpf",
                "perf_event_open",
                "keyctl",
                "add_key",
                "request_key",
                "userfaultfd",
                "io_uring_setup",
                "io_uring_enter",
                "kexec_load",
                "kexec_file_load",
                "init_module",
                "finit_module",
                "delete_module",
                "open_by_handle_at",
                "name_to_handle_at",
                "modify_ldt",
                "iopl",
                "ioperm",
                "swapon",
                "swapoff",
                "reboot",
                "clock_settime",
                "settimeofday",
                "acct",
                "syslog",
                "quotactl",
                "lookup_dcookie",
                "fsopen",
                "fsmount",
                "fsconfig",
                "fspick",
                "move_mount",
                "open_tree",
                "mount_setattr",
                "kcmp",
                "pidfd_getfd",
                "sethostname",
                "setdomainname",
                "vhangup",
                "fanotify_init",
                "clone3",
            ] {
                assert!(
                    !allowed.iter().any(|a| a == s),
                    "{s} is allowed on {arch:?}"
                );
                assert!(
                    !conditional.contains(&s) || s == "clone",
                    "{s} is conditionally allowed"
                );
            }
        }
    }

    #[test]
    fn refusals_beyond_docker_are_documented_and_in_force() {
        let p = profile();
        let allowed = allowed_names(&p, TargetArch::x86_64);
        let refused = p["refused_beyond_docker"].as_object().unwrap();
        assert!(refused.len() > 5);
        for name in refused.keys().filter(|k| *k != "comment") {
            assert!(
                !allowed.contains(name),
                "{name} is documented as refused but allowed"
            );
        }
    }

    #[test]
    fn interpreters_basics_are_allowed() {
        let allowed = allowed_names(&profile(), TargetArch::aarch64);
        for s in [
            "read",
            "write",
            "openat",
            "mmap",
            "futex",
            "execve",
            "wait4",
            "rt_sigaction",
            "getrandom",
            "epoll_pwait",
            "pipe2",
            "rseq",
            "statx",
        ] {
            assert!(allowed.iter().any(|a| a == s), "{s} missing");
        }
    }
}
