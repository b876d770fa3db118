//! The same syscall policy as the native backend (`profiles/seccomp/sandbox.json`), written in
//! Docker's seccomp format and handed to the engine in place of its default profile, so a
//! container refuses exactly what a native sandbox refuses: an allowlist at least as strict as
//! Docker's default, plus io_uring, ptrace, the terminal-injection ioctls, and (without
//! network) every socket family but AF_UNIX. Only the native architecture is listed, so
//! syscalls of any other ABI (i386, x32) kill the process.

use serde_json::{json, Value};

const PROFILE: &str = include_str!("../../../profiles/seccomp/sandbox.json");

fn condition(a: &Value) -> Value {
    let index = a["index"].clone();
    match &a["op"] {
        Value::Object(o) => {
            json!({"index": index, "value": o["masked_eq"], "valueTwo": a["val"], "op": "SCMP_CMP_MASKED_EQ"})
        }
        Value::String(op) if op == "ne" => {
            json!({"index": index, "value": a["val"], "valueTwo": 0, "op": "SCMP_CMP_NE"})
        }
        _ => json!({"index": index, "value": a["val"], "valueTwo": 0, "op": "SCMP_CMP_EQ"}),
    }
}

/// The Docker seccomp profile (JSON text) for this architecture.
pub fn docker_profile(deny_network: bool) -> Result<String, String> {
    let p: Value = serde_json::from_str(PROFILE).map_err(|e| format!("seccomp profile: {e}"))?;
    let (arch, scmp) = match std::env::consts::ARCH {
        "x86_64" => ("x86_64", "SCMP_ARCH_X86_64"),
        "aarch64" => ("aarch64", "SCMP_ARCH_AARCH64"),
        other => return Err(format!("no seccomp profile for {other}")),
    };
    let mut names: Vec<Value> = p["allow"]["common"].as_array().cloned().unwrap_or_default();
    names.extend(p["allow"][arch].as_array().cloned().unwrap_or_default());
    let mut syscalls = vec![json!({"names": names, "action": "SCMP_ACT_ALLOW"})];
    for rule in p["allow_with_arguments"]
        .as_array()
        .cloned()
        .unwrap_or_default()
    {
        let name = rule["syscall"].as_str().unwrap_or_default();
        let args: Vec<Value> = if deny_network && (name == "socket" || name == "socketpair") {
            vec![json!({"index": 0, "value": libc::AF_UNIX, "valueTwo": 0, "op": "SCMP_CMP_EQ"})]
        } else {
            rule["args"]
                .as_array()
                .map(|a| a.iter().map(condition).collect())
                .unwrap_or_default()
        };
        syscalls.push(json!({"names": [name], "action": "SCMP_ACT_ALLOW", "args": args}));
    }
    syscalls
        .push(json!({"names": ["clone3"], "action": "SCMP_ACT_ERRNO", "errnoRet": libc::ENOSYS}));
    let profile = json!({
        "defaultAction": "SCMP_ACT_ERRNO",
        "defaultErrnoRet": libc::EPERM,
        "architectures": [scmp],
        "syscalls": syscalls,
    });
    Ok(profile.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_docker_profile_is_the_sandpit_allowlist() {
        let v: Value = serde_json::from_str(&docker_profile(true).unwrap()).unwrap();
        assert_eq!(v["defaultAction"], "SCMP_ACT_ERRNO");
        assert_eq!(
            v["architectures"].as_array().unwrap().len(),
            1,
            "no foreign ABIs"
        );
        let allowed = v["syscalls"][0]["names"].as_array().unwrap();
        for s in [
            "mount",
            "unshare",
            "ptrace",
            "io_uring_setup",
            "bpf",
            "keyctl",
            "clone3",
        ] {
            assert!(!allowed.iter().any(|n| n == s), "{s} allowed");
        }
        let socket = v["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["names"][0] == "socket")
            .unwrap();
        assert_eq!(socket["args"][0]["op"], "SCMP_CMP_EQ");
        assert_eq!(socket["args"][0]["value"], 1);
        let clone = v["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["names"][0] == "clone")
            .unwrap();
        assert_eq!(clone["args"][0]["op"], "SCMP_CMP_MASKED_EQ");
        assert_eq!(clone["args"][0]["value"], 2114060288u64);
        assert_eq!(clone["args"][0]["valueTwo"], 0);
        let open: Value = serde_json::from_str(&docker_profile(false).unwrap()).unwrap();
        let socket = open["syscalls"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["names"][0] == "socket")
            .unwrap();
        assert_eq!(
            socket["args"][0]["op"], "SCMP_CMP_NE",
            "with network, only AF_VSOCK is refused"
        );
    }
}
