//! The bash driver's builtins: `__sp_recv`, `__sp_arm`, `__sp_disarm` and `__sp_send`
//! (`driver_bash.c`), which read a request, set and clear the cell's traps and write the
//! response in C where the driver's bash functions took a dozen interpreted commands and three
//! redirections (a warm cell: about 0.14 -> 0.09 ms in the driver harness).
//!
//! build.rs compiles the library for Linux targets with the target's C compiler; it is
//! embedded here and handed to each bash sandbox as fd 5: by the linux and unsandboxed
//! backends as a sealed memfd ([`memfd`], `pty_spawn`), by the Docker backend as a file in the
//! session's read-only channels directory, which the container's launch shim opens. The
//! driver loads it with `enable -f /proc/self/fd/5` and closes fd 5 before any cell runs;
//! where that fails (no `/proc`, a shell or C library that cannot load it), or where nothing
//! is on fd 5 (macOS), it defines the same commands as bash functions (`driver.sh`, "Reading a
//! request"). The library runs inside the sandbox, confined like the shell that loads it: it
//! gives the code nothing the shell does not have.

/// The descriptor the driver finds the library on.
pub const FD: i32 = 5;

#[cfg(target_os = "linux")]
const LIBRARY: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/driver_bash.so"));
#[cfg(not(target_os = "linux"))]
const LIBRARY: &[u8] = &[];

/// Whether this build has the library (Linux targets).
pub fn available() -> bool {
    !LIBRARY.is_empty()
}

/// Whether a sandbox for `language` gets the library: bash, where this build has it.
pub fn wanted(language: crate::types::Language) -> bool {
    language == crate::types::Language::Bash && available()
}

/// The library's bytes (empty where this build has none). The Docker backend writes them
/// into the session's read-only channels directory, which the container's launch shim opens
/// as fd 5.
pub fn library() -> &'static [u8] {
    LIBRARY
}

/// A new memfd holding the library, sealed against any change, close-on-exec and numbered
/// at 10 or above (so that the spawn's dup2 onto 3, 4 and 5 cannot clobber it). One per
/// sandbox: sandboxes share no open file. Made with `MFD_NOEXEC_SEAL` where the kernel has it
/// (6.3+; a host with `vm.memfd_noexec = 2` refuses a memfd without it): that forbids
/// `execve` of it, not the `mmap` that loads it.
#[cfg(target_os = "linux")]
pub fn memfd() -> std::io::Result<std::os::fd::OwnedFd> {
    use nix::fcntl::{fcntl, FcntlArg, SealFlag};
    use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    /// `MFD_NOEXEC_SEAL` (linux/memfd.h), which nix 0.29 does not name.
    const NOEXEC_SEAL: MemFdCreateFlag = MemFdCreateFlag::from_bits_retain(0x0008);
    let flags = MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING;
    let name = c"sandpit-bash-builtins";
    let fd = match memfd_create(name, flags | NOEXEC_SEAL) {
        // An older kernel does not know the flag.
        Err(nix::errno::Errno::EINVAL) => memfd_create(name, flags)?,
        r => r?,
    };
    std::io::Write::write_all(&mut std::fs::File::from(fd.try_clone()?), LIBRARY)?;
    fcntl(
        fd.as_raw_fd(),
        FcntlArg::F_ADD_SEALS(
            SealFlag::F_SEAL_SEAL
                | SealFlag::F_SEAL_SHRINK
                | SealFlag::F_SEAL_GROW
                | SealFlag::F_SEAL_WRITE,
        ),
    )?;
    let high = fcntl(fd.as_raw_fd(), FcntlArg::F_DUPFD_CLOEXEC(10))?;
    // SAFETY: fcntl just returned this new descriptor; we are its only owner.
    Ok(unsafe { OwnedFd::from_raw_fd(high) })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    #[test]
    fn the_library_is_a_shared_object_with_the_four_builtins() {
        assert!(available());
        assert_eq!(&LIBRARY[..4], b"\x7fELF");
        for symbol in [
            &b"__sp_recv_struct"[..],
            b"__sp_arm_struct",
            b"__sp_disarm_struct",
            b"__sp_send_struct",
            b"__sp_recv_builtin_load",
            b"bind_variable",
            b"set_signal",
            b"check_signals_and_traps",
        ] {
            assert!(
                LIBRARY.windows(symbol.len()).any(|w| w == symbol),
                "{} is not in the library",
                String::from_utf8_lossy(symbol)
            );
        }
    }

    #[test]
    fn each_memfd_is_sealed_and_high() {
        use std::os::fd::AsRawFd;
        let fd = memfd().unwrap();
        assert!(fd.as_raw_fd() >= 10);
        let mut f = std::fs::File::from(fd);
        assert!(
            std::io::Write::write_all(&mut f, b"x").is_err(),
            "written to"
        );
        let mut back = Vec::new();
        std::io::Read::read_to_end(
            &mut std::fs::File::open(format!("/proc/self/fd/{}", f.as_raw_fd())).unwrap(),
            &mut back,
        )
        .unwrap();
        assert_eq!(back, LIBRARY);
    }
}
