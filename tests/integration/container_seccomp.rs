//! What a container runtime's seccomp profile refuses, reproduced on the host: `sandpit` runs
//! under a filter that answers one syscall with `EPERM`, as Docker's default profile does
//! (measured with Docker 20.10: `pivot_root` even with `--cap-add SYS_ADMIN`, and
//! `process_vm_readv` without `CAP_SYS_PTRACE`). The container stage of tests/run-all.sh runs the
//! conformance suite in the real containers; these tests pin the two fixes on any host.

use std::os::unix::process::CommandExt;
use std::process::{Command, Output};

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xC000_003E; // AUDIT_ARCH_X86_64
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xC000_00B7; // AUDIT_ARCH_AARCH64

/// A classic BPF program: `nr` of this ABI fails with `EPERM`, everything else is allowed.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn refuse(nr: libc::c_long) -> Vec<libc::sock_filter> {
    let ins = |code: u32, jt: u8, jf: u8, k: u32| libc::sock_filter {
        code: code as u16,
        jt,
        jf,
        k,
    };
    let (ld, jeq, ret) = (
        libc::BPF_LD | libc::BPF_W | libc::BPF_ABS,
        libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K,
        libc::BPF_RET | libc::BPF_K,
    );
    vec![
        ins(ld, 0, 0, 4), // seccomp_data.arch
        ins(jeq, 0, 3, AUDIT_ARCH),
        ins(ld, 0, 0, 0), // seccomp_data.nr
        ins(jeq, 0, 1, nr as u32),
        ins(ret, 0, 0, libc::SECCOMP_RET_ERRNO | libc::EPERM as u32),
        ins(ret, 0, 0, libc::SECCOMP_RET_ALLOW),
    ]
}

/// Runs `cmd` under a filter refusing `nr` (inherited by everything it starts).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn output_refusing(mut cmd: Command, nr: libc::c_long) -> Output {
    let prog = refuse(nr);
    // SAFETY: the closure runs in the forked child before exec and makes only two
    // async-signal-safe syscalls (prctl, seccomp) on memory allocated before the fork (`prog`,
    // which outlives the spawn, and `fprog` on the child's stack).
    unsafe {
        cmd.pre_exec(move || {
            let fprog = libc::sock_fprog {
                len: prog.len() as u16,
                filter: prog.as_ptr() as *mut libc::sock_filter,
            };
            if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
                || libc::syscall(
                    libc::SYS_seccomp,
                    libc::SECCOMP_SET_MODE_FILTER,
                    0,
                    &fprog as *const libc::sock_fprog,
                ) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    cmd.stdin(std::process::Stdio::null())
        .output()
        .expect("run under the filter")
}

/// `sandpit ARGS`, as this user, or as `nobody` (through runuser) when this is root and
/// `unprivileged` is asked.
fn sandpit(args: &[&str], env: &[(&str, &str)], unprivileged: bool) -> Command {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let mut cmd = if root && unprivileged {
        let mut c = Command::new("runuser");
        c.args(["-u", "nobody", "--", env!("CARGO_BIN_EXE_sandpit")]);
        c.env("HOME", "/tmp");
        c
    } else {
        Command::new(env!("CARGO_BIN_EXE_sandpit"))
    };
    cmd.args(args)
        .env_remove("SANDPIT_HELPER")
        .current_dir("/tmp");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

fn json(out: &Output) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(stdout.trim()).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {stdout:?} stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

/// Docker's default profile with `--cap-add SYS_ADMIN` allows unshare and mount but refuses
/// `pivot_root`: the namespace probe tries it, so `auto` runs the session without namespaces
/// (before: doctor said "own root via namespaces" and every session failed at step mounts with
/// `pivot_root: EPERM`), and doctor names the step.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn a_refused_pivot_root_falls_back_to_no_namespaces_and_says_so() {
    let doctor = json(&output_refusing(
        sandpit(&["doctor", "--json"], &[], false),
        libc::SYS_pivot_root,
    ));
    let linux = doctor["backends"]
        .as_array()
        .expect("backends")
        .iter()
        .find(|b| b["backend"] == "linux")
        .expect("the linux backend")
        .to_string();
    assert!(
        linux.contains("pivot_root: EPERM")
            && linux.contains("Docker's default refuses pivot_root"),
        "doctor does not say why: {linux}"
    );
    let out = output_refusing(
        sandpit(
            &["run", "-b", "linux", "--json", "print(41 + 1)"],
            &[],
            false,
        ),
        libc::SYS_pivot_root,
    );
    let r = json(&out);
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(r["stdout"], "42\n", "{r}");
    assert!(
        r["warnings"][0]
            .as_str()
            .unwrap_or_default()
            .contains("without namespaces, because the host refused them"),
        "{r}"
    );
}

/// Docker's default profile refuses `process_vm_readv` without `CAP_SYS_PTRACE` (while it
/// allows `ptrace`): unprivileged without namespaces, the waiter reads the path of a `chmod` from
/// `/proc/PID/mem` instead. Before: every chmod, chown and utime in the workspace failed `EPERM`
/// (pip could not install, `chmod +x` failed) as uid 1000 in a default container. The change
/// outside the workspace is still refused.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
#[test]
fn metadata_calls_work_where_process_vm_readv_is_refused() {
    let code = "import os\nopen('tool.sh', 'w').close()\nos.chmod('tool.sh', 0o750)\nos.utime('tool.sh', (1, 1))\ntry:\n    os.chmod(os.environ['SANDPIT_WORKSPACE'] + '/..', 0o777)\n    outside = 'changed'\nexcept OSError as e:\n    outside = e.errno\nst = os.stat('tool.sh')\nresult = [oct(st.st_mode & 0o777), int(st.st_mtime), outside]";
    let out = output_refusing(
        sandpit(
            &["run", "-b", "linux", "--json", code],
            &[("SANDPIT_LINUX_NAMESPACES", "off")],
            true,
        ),
        libc::SYS_process_vm_readv,
    );
    let r = json(&out);
    assert_eq!(r["status"], "ok", "{r}");
    assert_eq!(
        r["result"],
        serde_json::json!(["0o750", 1, libc::EPERM]),
        "{r}"
    );
}
