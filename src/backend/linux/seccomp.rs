//! The seccomp-bpf layer: `profiles/seccomp/*.json` (seccompiler's JSON format, commented rule by
//! rule), merged per architecture and compiled with seccompiler. Pure until [`install`].
//!
//! Filters installed, in order: `deny` (EPERM for the syscalls in the profile, with an x32 prefix
//! on x86-64), `clone3` (ENOSYS so libc falls back to an inspectable `clone`), and, when the
//! execution has no network, `network` (EAFNOSUPPORT for every socket family but AF_UNIX).
//! Syscalls of a foreign ABI (i386 on x86-64, arm32 on aarch64) kill the process: seccompiler
//! puts an architecture check at the head of every filter.

use seccompiler::{BpfProgram, TargetArch};

const COMMON: &str = include_str!("../../../profiles/seccomp/common.json");
const X86_64: &str = include_str!("../../../profiles/seccomp/x86_64.json");
const AARCH64: &str = include_str!("../../../profiles/seccomp/aarch64.json");

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

/// The merged JSON profile for `arch`: common rules plus the architecture's own.
fn merged_profile(arch: TargetArch) -> Result<serde_json::Value, SeccompError> {
    let err = |message: String| SeccompError::Profile {
        arch: arch_name(arch),
        message,
    };
    let mut common: serde_json::Value =
        serde_json::from_str(COMMON).map_err(|e| err(e.to_string()))?;
    let extra = match arch {
        TargetArch::x86_64 => X86_64,
        TargetArch::aarch64 => AARCH64,
        TargetArch::riscv64 => return Err(err("no profile for riscv64".into())),
    };
    let extra: serde_json::Value = serde_json::from_str(extra).map_err(|e| err(e.to_string()))?;
    let extra_rules = extra["deny"]["filter"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    common["deny"]["filter"]
        .as_array_mut()
        .ok_or_else(|| err("deny.filter is not a list".into()))?
        .extend(extra_rules);
    // seccompiler's JSON format has no top-level comments; ours are documentation only.
    if let Some(filters) = common.as_object_mut() {
        for f in filters.values_mut() {
            if let Some(o) = f.as_object_mut() {
                o.remove("comment");
            }
        }
    }
    Ok(common)
}

/// The filters to install for `arch`, in installation order, as `(name, program)`.
pub fn compile(
    arch: TargetArch,
    deny_network: bool,
) -> Result<Vec<(String, BpfProgram)>, SeccompError> {
    let profile = merged_profile(arch)?;
    let text = profile.to_string();
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
    let mut deny = take("deny")?;
    if arch == TargetArch::x86_64 {
        deny = with_x32_prefix(deny);
    }
    let mut out = vec![
        ("deny".to_string(), deny),
        ("clone3".to_string(), take("clone3")?),
    ];
    if deny_network {
        out.push(("network".to_string(), take("network")?));
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

    #[test]
    fn compiles_for_every_supported_arch() {
        for arch in [TargetArch::x86_64, TargetArch::aarch64] {
            let f = compile(arch, true).unwrap();
            let names: Vec<_> = f.iter().map(|(n, _)| n.as_str()).collect();
            assert_eq!(names, ["deny", "clone3", "network"]);
            assert!(f.iter().all(|(_, p)| !p.is_empty() && p.len() < 4096));
            assert_eq!(compile(arch, false).unwrap().len(), 2);
        }
    }

    #[test]
    fn x86_64_deny_filter_starts_with_x32_guard() {
        let f = compile(TargetArch::x86_64, false).unwrap();
        let deny = &f[0].1;
        assert_eq!(deny[1].k, X32_SYSCALL_BIT);
        assert_eq!(deny[2].k, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32);
        let a = compile(TargetArch::aarch64, false).unwrap();
        assert_ne!(a[0].1[1].k, X32_SYSCALL_BIT);
    }

    #[test]
    fn profile_denies_what_docker_denies() {
        let p = merged_profile(TargetArch::x86_64).unwrap();
        let names: std::collections::HashSet<_> = p["deny"]["filter"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["syscall"].as_str().unwrap().to_string())
            .collect();
        for s in [
            "mount",
            "umount2",
            "unshare",
            "setns",
            "ptrace",
            "bpf",
            "keyctl",
            "add_key",
            "kexec_load",
            "init_module",
            "finit_module",
            "open_by_handle_at",
            "perf_event_open",
            "userfaultfd",
            "io_uring_setup",
            "modify_ldt",
            "iopl",
            "ioperm",
            "swapon",
            "reboot",
            "pivot_root",
            "process_vm_readv",
            "process_vm_writev",
            "clock_settime",
            "settimeofday",
            "acct",
        ] {
            assert!(names.contains(s), "{s} missing from the deny list");
        }
    }
}
