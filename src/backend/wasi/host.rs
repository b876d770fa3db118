//! The wasmtime side: one engine per process, its epoch ticker, loading the precompiled
//! interpreters, and the WASI imports a guest links against.
//!
//! Every import is wasmtime-wasi's WASI preview 1, except these, which sandpit serves itself
//! (passing every other descriptor on to wasmtime-wasi's own implementation, which is why
//! `wiggle`, the crate of its generated bindings, is a dependency too):
//!
//! - the driver's request and response channels (preview 1 has no way to hand a guest
//!   descriptors of one's own, and the channels must not share a stream with the code's
//!   output): the driver opens `requests` and `responses` in the read-only, empty preopened
//!   directory `/run/sandpit`; `path_open` there answers with two host descriptor numbers of
//!   sandpit's own ([`REQUEST_FD`], [`RESPONSE_FD`]), once each (afterwards the names refuse to
//!   open, so code cannot get a second handle on them), and `fd_read` / `fd_write` on those
//!   numbers are the pipes to the session. Opening by path also works through a guest's own
//!   descriptor table (CPython's wasi-vfs layer renumbers descriptors, so a number fixed by the
//!   host would not reach it). A read waits for the host's next request or the session's end.
//! - `poll_oneoff` with only clock subscriptions (`time.sleep`, QuickJS timers, asyncio's
//!   selector): an interruptible sleep. A blocked host call is out of reach of the epoch
//!   deadline, so without this a `time.sleep(3600)` could not be stopped.
//! - `path_open` and `fd_close`: count the guest's open descriptors (each one a host
//!   descriptor) against `limits.open_files`, so a guest cannot exhaust the server's own.
//!
//! Ending a session ([`Stop::stop`]) sets a flag the epoch callback reads at the next tick
//! (every [`TICK`]) and wakes every wait above: the guest traps, its thread unwinds, and its
//! pipes close.

use crate::error::{Error, Result};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use wasmtime::{Caller, Engine, Linker, Module, Trap};
use wasmtime_wasi::p1::WasiP1Ctx;

/// The host descriptor number of the request channel (one wasmtime-wasi never hands out: it
/// numbers descriptors upwards from 3, and a guest holds at most `limits.open_files`).
pub const REQUEST_FD: u32 = 1_000_000_000;
/// The host descriptor number of the response channel.
pub const RESPONSE_FD: u32 = 1_000_000_001;
/// The channels' names in the channel directory.
pub const REQUESTS: &str = "requests";
pub const RESPONSES: &str = "responses";
/// How often the engine's epoch advances, i.e. how late a stop can reach running code.
pub const TICK: Duration = Duration::from_millis(10);
/// The deepest wasm stack a guest may use (CPython recurses deeply in C).
const MAX_WASM_STACK: usize = 8 << 20;
/// The native stack of a guest's thread: the wasm stack above plus the host's own frames.
pub const THREAD_STACK: usize = 24 << 20;

/// WASI preview 1 errno values this module returns.
mod errno {
    pub const SUCCESS: i32 = 0;
    pub const ACCES: i32 = 2;
    pub const BADF: i32 = 8;
    pub const FAULT: i32 = 21;
    pub const INVAL: i32 = 28;
    pub const IO: i32 = 29;
    pub const MFILE: i32 = 33;
    pub const NOENT: i32 = 44;
    pub const PIPE: i32 = 64;
}

const WASI: &str = "wasi_snapshot_preview1";

/// The engine's settings. `.cwasm` files are tied to them: change [`super::runtimes::ENGINE_TAG`]
/// with them.
pub fn engine_config() -> wasmtime::Config {
    let mut c = wasmtime::Config::new();
    // Deadlines: the epoch advances every TICK; each store checks its stop flag then.
    c.epoch_interruption(true);
    // wasmtime-wasi builds wasmtime with async support, whose stack bounds the wasm stack:
    // raise it first (wasi-notes.md, "Engine config pitfall").
    c.async_stack_size(MAX_WASM_STACK + (2 << 20));
    c.max_wasm_stack(MAX_WASM_STACK);
    c.parallel_compilation(true);
    c
}

/// The process's engine, and the thread that advances its epoch.
pub fn engine() -> Result<Engine> {
    static ENGINE: OnceLock<std::result::Result<Engine, String>> = OnceLock::new();
    ENGINE
        .get_or_init(|| {
            let engine = Engine::new(&engine_config()).map_err(|e| format!("{e:#}"))?;
            let weak = engine.weak();
            std::thread::Builder::new()
                .name("sandpit-wasi-epoch".into())
                .spawn(move || {
                    while let Some(e) = weak.upgrade() {
                        e.increment_epoch();
                        drop(e);
                        std::thread::sleep(TICK);
                    }
                })
                .map_err(|e| format!("start the epoch thread: {e}"))?;
            Ok(engine)
        })
        .clone()
        .map_err(|e| Error::sandbox(format!("cannot create the wasmtime engine: {e}")))
}

/// Compiles a module to native code for [`load`] (`sandpit wasi install`).
pub fn precompile(engine: &Engine, wasm: &[u8]) -> Result<Vec<u8>> {
    engine
        .precompile_module(wasm)
        .map_err(|e| Error::sandbox(format!("compile the module: {e:#}")))
}

/// Loads a precompiled module from the runtime cache.
pub fn load(engine: &Engine, path: &Path) -> Result<Module> {
    // SAFETY: a `.cwasm` is native code that wasmtime maps and runs without verifying it, so
    // it must come from a trusted compiler. This one was written by `sandpit wasi install`
    // with this same engine configuration (from a .wasm whose sha256 was checked against the
    // pin), and `runtimes::precompiled` checked just now that it lies in a directory that is
    // this user's alone (0700, owned by the effective uid, not a symlink) and is itself a
    // regular file of this user that nobody else may write; that directory is never preopened
    // into a sandbox (the planner refuses a workspace that contains it), so no guest can have
    // written it. wasmtime also checks the header (its version and engine settings) before
    // mapping, refusing a file made by another version or configuration.
    unsafe { Module::deserialize_file(engine, path) }.map_err(|e| {
        Error::sandbox(format!(
            "cannot load {}: {e:#} (run `sandpit wasi install` to compile it again)",
            path.display()
        ))
    })
}

/// What a guest's store holds.
pub struct Host {
    pub wasi: WasiP1Ctx,
    pub limits: wasmtime::StoreLimits,
    pub channels: Channels,
}

/// The host ends of a guest's private channels, and what every wait listens to.
pub struct Channels {
    /// The read end of the request pipe (the session writes requests into the other end).
    pub requests: std::fs::File,
    /// The write end of the response pipe.
    pub responses: std::fs::File,
    pub stop: Arc<Stop>,
    /// Zero of the guest's monotonic clock ([`MonotonicClock`]).
    pub clock_base: Instant,
    /// Descriptors the guest opened and has not closed, and how many it may hold.
    pub open_files: u64,
    pub max_open_files: u64,
    /// The host descriptor of the channel directory (its preopen), and which channels the
    /// driver has opened (each once).
    pub dir_fd: u32,
    pub opened: [bool; 2],
}

/// Ends a guest: a flag for the epoch callback, and a pipe whose readability wakes every wait.
pub struct Stop {
    stopped: AtomicBool,
    wake_r: OwnedFd,
    wake_w: OwnedFd,
}

impl Stop {
    pub fn new() -> Result<Arc<Self>> {
        let (wake_r, wake_w) =
            crate::util::pipe(false).map_err(|e| Error::sandbox(format!("pipe: {e}")))?;
        Ok(Arc::new(Stop {
            stopped: AtomicBool::new(false),
            wake_r,
            wake_w,
        }))
    }

    /// Stops the guest: running code traps at the next epoch tick, a blocked call at once.
    pub fn stop(&self) {
        if !self.stopped.swap(true, Ordering::SeqCst) {
            // One byte that nobody reads: the pipe stays readable, so every later wait ends too.
            let _ = nix::unistd::write(&self.wake_w, b"x");
        }
    }

    pub fn stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// Waits until `fd` is readable (true), `timeout` passes (false), or the guest is stopped
    /// (an interrupt trap).
    fn wait(
        &self,
        fd: Option<std::os::fd::BorrowedFd<'_>>,
        timeout: Option<Duration>,
    ) -> wasmtime::Result<bool> {
        use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
        let deadline = timeout.map(|t| Instant::now() + t);
        loop {
            if self.stopped() {
                return Err(Trap::Interrupt.into());
            }
            let left = match deadline {
                None => PollTimeout::NONE,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(false);
                    }
                    // At most a day per poll(2); the loop waits again.
                    PollTimeout::try_from(left.min(Duration::from_secs(86_400)))
                        .unwrap_or(PollTimeout::MAX)
                }
            };
            let mut fds = vec![PollFd::new(self.wake_r.as_fd(), PollFlags::POLLIN)];
            if let Some(fd) = fd {
                fds.push(PollFd::new(fd, PollFlags::POLLIN));
            }
            match poll(&mut fds, left) {
                Ok(0) => continue,
                Ok(_) => {
                    if self.stopped() {
                        return Err(Trap::Interrupt.into());
                    }
                    if fds.len() > 1 && fds[1].revents().is_some_and(|r| !r.is_empty()) {
                        return Ok(true);
                    }
                }
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(wasmtime::format_err!("poll: {e}")),
            }
        }
    }
}

/// The guest's monotonic clock: nanoseconds since the store was made, so that an absolute
/// deadline the guest computes from `clock_time_get` means the same to [`poll_oneoff`].
pub struct MonotonicClock(pub Instant);

impl wasmtime_wasi::HostMonotonicClock for MonotonicClock {
    fn resolution(&self) -> u64 {
        1
    }
    fn now(&self) -> u64 {
        u64::try_from(self.0.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// The linker for guests: wasmtime-wasi's WASI preview 1, with sandpit's shadows over it.
pub fn linker(engine: &Engine) -> Result<Linker<Host>> {
    let err = |e: wasmtime::Error| Error::sandbox(format!("link WASI: {e:#}"));
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p1::add_to_linker_sync(&mut linker, |h: &mut Host| &mut h.wasi).map_err(err)?;
    linker.allow_shadowing(true);
    linker.func_wrap(WASI, "fd_read", fd_read).map_err(err)?;
    linker.func_wrap(WASI, "fd_write", fd_write).map_err(err)?;
    linker
        .func_wrap(WASI, "poll_oneoff", poll_oneoff)
        .map_err(err)?;
    linker.func_wrap(WASI, "fd_close", fd_close).map_err(err)?;
    linker
        .func_wrap(WASI, "path_open", path_open)
        .map_err(err)?;
    Ok(linker)
}

/// Calls wasmtime-wasi's own implementation of a WASI function, for what a shadow passes on,
/// the way wasmtime-wasi's generated binding calls it (the guest's memory, the store's
/// host-call fuel, blocking on wasmtime-wasi's runtime).
macro_rules! wasi_original {
    ($caller:expr, $func:ident ( $($arg:expr),* $(,)? )) => {{
        let caller: &mut Caller<'_, Host> = $caller;
        let fuel = wasmtime::AsContextMut::as_context_mut(&mut *caller).hostcall_fuel();
        let mem = memory(caller)?;
        let (data, host) = mem.data_and_store_mut(&mut *caller);
        let ctx = &mut host.wasi;
        wasmtime_wasi::p1::wasi_snapshot_preview1::WasiSnapshotPreview1::set_hostcall_fuel(ctx, fuel);
        let mut guest = wiggle::GuestMemory::Unshared(data);
        wasmtime_wasi::runtime::in_tokio(wasmtime_wasi::p1::wasi_snapshot_preview1::$func(
            ctx, &mut guest, $($arg),*
        ))
    }};
}

fn memory(caller: &mut Caller<'_, Host>) -> wasmtime::Result<wasmtime::Memory> {
    match caller.get_export("memory") {
        Some(wasmtime::Extern::Memory(m)) => Ok(m),
        _ => Err(wasmtime::format_err!("the guest exports no memory")),
    }
}

fn u32_at(mem: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(mem.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(mem: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(mem.get(at..at + 8)?.try_into().ok()?))
}

/// The most iovecs one channel read or write takes (Linux's IOV_MAX): the host walks them.
const IOV_MAX: usize = 1024;

/// The (pointer, length) pairs of an iovec array in guest memory (`None`: out of bounds, or
/// more than [`IOV_MAX`]).
fn iovecs(mem: &[u8], iovs: i32, n: i32) -> Option<Vec<(usize, usize)>> {
    let (iovs, n) = (iovs as u32 as usize, n as u32 as usize);
    if n > IOV_MAX {
        return None;
    }
    (0..n)
        .map(|i| {
            let at = iovs.checked_add(i.checked_mul(8)?)?;
            let (ptr, len) = (u32_at(mem, at)? as usize, u32_at(mem, at + 4)? as usize);
            mem.get(ptr..ptr.checked_add(len)?)?;
            Some((ptr, len))
        })
        .collect()
}

fn put_u32(mem: &mut [u8], at: i32, v: u32) -> bool {
    match mem.get_mut(at as u32 as usize..(at as u32 as usize).saturating_add(4)) {
        Some(s) if s.len() == 4 => {
            s.copy_from_slice(&v.to_le_bytes());
            true
        }
        _ => false,
    }
}

fn fd_read(
    mut caller: Caller<'_, Host>,
    fd: i32,
    iovs: i32,
    n: i32,
    nread: i32,
) -> wasmtime::Result<i32> {
    if fd as u32 != REQUEST_FD {
        return wasi_original!(&mut caller, fd_read(fd, iovs, n, nread));
    }
    let mem = memory(&mut caller)?;
    let Some(target) =
        iovecs(mem.data(&caller), iovs, n).and_then(|v| v.into_iter().find(|(_, l)| *l > 0))
    else {
        return Ok(if put_u32(mem.data_mut(&mut caller), nread, 0) {
            errno::SUCCESS
        } else {
            errno::FAULT
        });
    };
    // Wait for a request (or the end of the session), then read what is there.
    let ch = &caller.data().channels;
    ch.stop.wait(Some(ch.requests.as_fd()), None)?;
    let mut buf = vec![0u8; target.1.min(1 << 16)];
    let got = loop {
        match nix::unistd::read(caller.data().channels.requests.as_raw_fd(), &mut buf) {
            Ok(k) => break k,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Ok(errno::IO),
        }
    };
    let data = mem.data_mut(&mut caller);
    data[target.0..target.0 + got].copy_from_slice(&buf[..got]);
    Ok(if put_u32(data, nread, got as u32) {
        errno::SUCCESS
    } else {
        errno::FAULT
    })
}

fn fd_write(
    mut caller: Caller<'_, Host>,
    fd: i32,
    iovs: i32,
    n: i32,
    nwritten: i32,
) -> wasmtime::Result<i32> {
    if fd as u32 != RESPONSE_FD {
        if fd as u32 == REQUEST_FD {
            return Ok(errno::BADF);
        }
        return wasi_original!(&mut caller, fd_write(fd, iovs, n, nwritten));
    }
    let mem = memory(&mut caller)?;
    let Some(parts) = iovecs(mem.data(&caller), iovs, n) else {
        return Ok(errno::FAULT);
    };
    let bytes: Vec<u8> = parts
        .iter()
        .flat_map(|(p, l)| mem.data(&caller)[*p..*p + *l].to_vec())
        .collect();
    {
        use std::io::Write;
        let mut out = &caller.data().channels.responses;
        if out.write_all(&bytes).is_err() {
            return Ok(errno::PIPE); // the session is gone
        }
    }
    Ok(
        if put_u32(mem.data_mut(&mut caller), nwritten, bytes.len() as u32) {
            errno::SUCCESS
        } else {
            errno::FAULT
        },
    )
}

fn fd_close(mut caller: Caller<'_, Host>, fd: i32) -> wasmtime::Result<i32> {
    if fd as u32 == REQUEST_FD || fd as u32 == RESPONSE_FD {
        return Ok(errno::BADF); // the channels are the driver's, never closed
    }
    let r = wasi_original!(&mut caller, fd_close(fd))?;
    if r == errno::SUCCESS {
        let ch = &mut caller.data_mut().channels;
        ch.open_files = ch.open_files.saturating_sub(1);
    }
    Ok(r)
}

#[allow(clippy::too_many_arguments)]
fn path_open(
    mut caller: Caller<'_, Host>,
    dirfd: i32,
    dirflags: i32,
    path: i32,
    path_len: i32,
    oflags: i32,
    rights_base: i64,
    rights_inheriting: i64,
    fdflags: i32,
    opened: i32,
) -> wasmtime::Result<i32> {
    let ch = &caller.data().channels;
    if dirfd as u32 == ch.dir_fd {
        return open_channel(&mut caller, path, path_len, opened);
    }
    if ch.open_files >= ch.max_open_files {
        return Ok(errno::MFILE);
    }
    let r = wasi_original!(
        &mut caller,
        path_open(
            dirfd,
            dirflags,
            path,
            path_len,
            oflags,
            rights_base,
            rights_inheriting,
            fdflags,
            opened
        )
    )?;
    if r == errno::SUCCESS {
        caller.data_mut().channels.open_files += 1;
    }
    Ok(r)
}

/// `path_open` in the channel directory: the driver's two channels, once each; nothing else
/// is there.
fn open_channel(
    caller: &mut Caller<'_, Host>,
    path: i32,
    len: i32,
    opened: i32,
) -> wasmtime::Result<i32> {
    let mem = memory(caller)?;
    let (p, l) = (path as u32 as usize, len as u32 as usize);
    let Some(name) = mem
        .data(&*caller)
        .get(p..p.saturating_add(l))
        .map(|b| b.to_vec())
    else {
        return Ok(errno::FAULT);
    };
    let (slot, fd) = match name.as_slice() {
        n if n == REQUESTS.as_bytes() => (0, REQUEST_FD),
        n if n == RESPONSES.as_bytes() => (1, RESPONSE_FD),
        _ => return Ok(errno::NOENT),
    };
    let ch = &mut caller.data_mut().channels;
    if ch.opened[slot] {
        return Ok(errno::ACCES); // the driver has it; nobody gets a second handle
    }
    ch.opened[slot] = true;
    Ok(if put_u32(mem.data_mut(&mut *caller), opened, fd) {
        errno::SUCCESS
    } else {
        errno::FAULT
    })
}

/// One clock subscription of `poll_oneoff`: its userdata and when it fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ClockSub {
    userdata: u64,
    due: Instant,
}

/// Reads `poll_oneoff`'s subscriptions: `Some` when every one is a clock of a kind this module
/// serves (realtime or monotonic, relative or absolute), else `None` (passed on). `Err(errno)`
/// for a malformed array.
fn clock_subs(
    mem: &[u8],
    subs: i32,
    n: i32,
    base: Instant,
    now: Instant,
) -> Result<Option<Vec<ClockSub>>, i32> {
    const SIZE: usize = 48;
    let (subs, n) = (subs as u32 as usize, n as u32 as usize);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let at = subs.checked_add(i * SIZE).ok_or(errno::FAULT)?;
        let s = mem.get(at..at + SIZE).ok_or(errno::FAULT)?;
        if s[8] != 0 {
            return Ok(None); // an fd subscription
        }
        let userdata = u64_at(s, 0).ok_or(errno::FAULT)?;
        let id = u32_at(s, 16).ok_or(errno::FAULT)?;
        let timeout = u64_at(s, 24).ok_or(errno::FAULT)?;
        let abstime = u16::from_le_bytes([s[40], s[41]]) & 1 == 1;
        // Deadlines past what an Instant can hold are a century away: never, in effect.
        let at = |from: Instant, nanos: u64| {
            from.checked_add(Duration::from_nanos(nanos))
                .unwrap_or(now + Duration::from_secs(100 * 365 * 86_400))
        };
        let due = match (id, abstime) {
            (0 | 1, false) => at(now, timeout),
            (1, true) => at(base, timeout),
            (0, true) => {
                let wall = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(0);
                at(now, timeout.saturating_sub(wall))
            }
            _ => return Ok(None), // cputime clocks: wasmtime-wasi answers them (EINVAL)
        };
        out.push(ClockSub { userdata, due });
    }
    Ok(Some(out))
}

fn poll_oneoff(
    mut caller: Caller<'_, Host>,
    subs: i32,
    events: i32,
    n: i32,
    nevents: i32,
) -> wasmtime::Result<i32> {
    let mem = memory(&mut caller)?;
    let now = Instant::now();
    let parsed = clock_subs(
        mem.data(&caller),
        subs,
        n,
        caller.data().channels.clock_base,
        now,
    );
    let clocks = match parsed {
        Err(e) => return Ok(e),
        Ok(Some(c)) if !c.is_empty() => c,
        Ok(_) => return wasi_original!(&mut caller, poll_oneoff(subs, events, n, nevents)),
    };
    let first = clocks.iter().map(|c| c.due).min().unwrap_or(now);
    caller
        .data()
        .channels
        .stop
        .wait(None, Some(first.saturating_duration_since(now)))?;
    let now = Instant::now();
    let data = mem.data_mut(&mut caller);
    let mut count = 0u32;
    for c in clocks.iter().filter(|c| c.due <= now) {
        let at = (events as u32 as usize).saturating_add(count as usize * 32);
        let Some(ev) = data.get_mut(at..at + 32) else {
            return Ok(errno::FAULT);
        };
        ev.fill(0);
        ev[0..8].copy_from_slice(&c.userdata.to_le_bytes());
        // error 0 (success), type 0 (clock)
        count += 1;
    }
    if count == 0 {
        return Ok(errno::INVAL);
    }
    Ok(if put_u32(data, nevents, count) {
        errno::SUCCESS
    } else {
        errno::FAULT
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sub(userdata: u64, tag: u8, id: u32, timeout: u64, abstime: bool) -> Vec<u8> {
        let mut s = vec![0u8; 48];
        s[0..8].copy_from_slice(&userdata.to_le_bytes());
        s[8] = tag;
        s[16..20].copy_from_slice(&id.to_le_bytes());
        s[24..32].copy_from_slice(&timeout.to_le_bytes());
        s[40] = u8::from(abstime);
        s
    }

    #[test]
    fn clock_subscriptions_are_read_and_fd_ones_passed_on() {
        let base = Instant::now();
        let now = base + Duration::from_secs(5);
        let mut mem = vec![0u8; 16];
        mem.extend(sub(7, 0, 1, 1_000_000, false)); // monotonic, 1 ms from now
        mem.extend(sub(8, 0, 1, 6_000_000_000, true)); // monotonic, 6 s after the base
        let subs = clock_subs(&mem, 16, 2, base, now).unwrap().unwrap();
        assert_eq!(
            subs[0],
            ClockSub {
                userdata: 7,
                due: now + Duration::from_millis(1)
            }
        );
        assert_eq!(
            subs[1],
            ClockSub {
                userdata: 8,
                due: base + Duration::from_secs(6)
            }
        );
        let mut with_fd = mem.clone();
        with_fd.extend(sub(9, 1, 0, 0, false));
        assert_eq!(clock_subs(&with_fd, 16, 3, base, now), Ok(None));
        // A cputime clock is wasmtime-wasi's to refuse.
        let cpu = [vec![0u8; 16], sub(1, 0, 2, 5, false)].concat();
        assert_eq!(clock_subs(&cpu, 16, 1, base, now), Ok(None));
        // Past the end of memory: a fault, not a panic.
        assert_eq!(clock_subs(&mem, 16, 3, base, now), Err(errno::FAULT));
        assert_eq!(clock_subs(&mem, -8, 1, base, now), Err(errno::FAULT));
    }

    #[test]
    fn iovecs_stay_inside_guest_memory() {
        let mut mem = vec![0u8; 64];
        mem[0..4].copy_from_slice(&32u32.to_le_bytes());
        mem[4..8].copy_from_slice(&16u32.to_le_bytes());
        assert_eq!(iovecs(&mem, 0, 1), Some(vec![(32, 16)]));
        mem[4..8].copy_from_slice(&33u32.to_le_bytes()); // 32 + 33 > 64
        assert_eq!(iovecs(&mem, 0, 1), None);
        assert_eq!(iovecs(&vec![0u8; 1 << 16], 0, 1025), None, "past IOV_MAX");
        assert_eq!(iovecs(&mem, 60, 1), None);
        assert!(!put_u32(&mut mem, 62, 1));
        assert!(put_u32(&mut mem, 60, 1));
    }

    #[test]
    fn a_stop_ends_waits_at_once_and_for_good() {
        let stop = Stop::new().unwrap();
        assert!(!stop.wait(None, Some(Duration::from_millis(1))).unwrap());
        stop.stop();
        stop.stop();
        for _ in 0..2 {
            let e = stop.wait(None, None).unwrap_err();
            assert_eq!(e.downcast_ref::<Trap>(), Some(&Trap::Interrupt));
        }
    }
}
