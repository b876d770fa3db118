//! The Landlock layer: read-only (+exec) paths, read-write paths, nothing else; TCP bind and
//! connect denied when the execution has no network (ABI >= 4); abstract unix sockets and
//! signals scoped to the sandbox (ABI >= 6). Best effort on older kernels, reported exactly;
//! fails closed when the plan says the filesystem has no other confinement.

use super::plan::LandlockPlan;
use landlock::{
    path_beneath_rules, Access, AccessFs, AccessNet, CompatLevel, Compatible, Ruleset, RulesetAttr,
    RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};

/// The newest ABI whose features sandpit asks for.
const TARGET_ABI: ABI = ABI::V6;

/// The Landlock ABI the running kernel offers (0: none).
pub fn kernel_abi() -> i32 {
    // SAFETY: landlock_create_ruleset with a NULL attr, size 0 and the VERSION flag only
    // returns the ABI version (or -1 with errno); it touches no memory.
    let v = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            1u32, // LANDLOCK_CREATE_RULESET_VERSION
        )
    };
    if v < 0 {
        0
    } else {
        v as i32
    }
}

/// Applies the rules to the calling thread (and everything it later forks or execs).
/// Returns a one-line description of what is in force.
pub fn apply(plan: &LandlockPlan) -> Result<String, String> {
    let abi = kernel_abi().min(plan.abi);
    if abi <= 0 {
        // No Landlock in this kernel, or `linux.landlock = "off"` (the plan's ABI is 0).
        if plan.required {
            return Err("landlock is unavailable (no Landlock in this kernel, or linux.landlock = \"off\"), and without a mount namespace it is the only filesystem confinement: refusing to run".into());
        }
        return Ok("landlock not in force (unavailable or turned off); the mount namespace confines the filesystem".into());
    }
    // The rights of the plan's ABI (capped at what sandpit knows), never more.
    let target = ABI::from(abi.min(TARGET_ABI as i32));
    let fail = |e: landlock::RulesetError| format!("landlock: {e}");
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(AccessFs::from_all(target))
        .map_err(fail)?;
    if plan.deny_tcp && abi >= 4 {
        ruleset = ruleset
            .handle_access(AccessNet::BindTcp | AccessNet::ConnectTcp)
            .map_err(fail)?;
    }
    if abi >= 6 {
        ruleset = ruleset
            .scope(Scope::AbstractUnixSocket | Scope::Signal)
            .map_err(fail)?;
    }
    let status = ruleset
        .create()
        .map_err(fail)?
        .add_rules(path_beneath_rules(
            &plan.read_exec,
            AccessFs::from_read(target),
        ))
        .map_err(fail)?
        .add_rules(path_beneath_rules(
            &plan.read_write,
            AccessFs::from_all(target),
        ))
        .map_err(fail)?
        .restrict_self()
        .map_err(fail)?;
    let state = match status.ruleset {
        RulesetStatus::FullyEnforced => "fully enforced",
        RulesetStatus::PartiallyEnforced => "partially enforced",
        RulesetStatus::NotEnforced => "not enforced",
    };
    if plan.required && status.ruleset == RulesetStatus::NotEnforced {
        return Err(format!(
            "landlock is not enforced (kernel ABI {abi}), and without a mount namespace it is the only filesystem confinement: refusing to run"
        ));
    }
    Ok(format!("landlock {state} (kernel ABI {abi})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(required: bool) -> LandlockPlan {
        LandlockPlan {
            read_exec: vec!["/usr".into()],
            read_write: vec!["/tmp".into()],
            deny_tcp: true,
            required,
            abi: 0,
        }
    }

    /// ABI 0 (no Landlock, or `linux.landlock = "off"`) applies nothing, and refuses where
    /// Landlock is the only filesystem confinement. Nothing is restricted, so this runs in the
    /// test process.
    #[test]
    fn no_landlock_is_refused_only_where_it_is_required() {
        let off = apply(&plan(false)).unwrap();
        assert!(off.contains("not in force"), "{off}");
        let refused = apply(&plan(true)).unwrap_err();
        assert!(refused.contains("refusing to run"), "{refused}");
    }
}
