//! Where a run's time goes: named marks on the monotonic clock, taken by the host and by the
//! Linux helper (another process, but `CLOCK_MONOTONIC` is one clock for both, so its marks
//! interleave with the host's). Off unless `SANDPIT_TIMINGS` is set in the environment: then
//! `sandpit run` prints the breakdown on stderr after the result, and `sandpit bench` collects
//! it over many runs. A mark costs one clock read and a short lock when on, one relaxed atomic
//! load when off.
//!
//! `SANDPIT_TIMINGS=since:NS` also gives the monotonic time (ns) at which the caller started the
//! process (`sandpit bench` sets it just before the spawn): the first stage is then "sandpit
//! starts" (exec, dynamic linking, the Rust runtime), which no mark inside the process can see.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Mutex;

/// The variable that turns the marks on (any value; `since:NS` adds the caller's start time).
pub const ENV: &str = "SANDPIT_TIMINGS";

/// 0: not yet read, 1: off, 2: on.
static STATE: AtomicU8 = AtomicU8::new(0);
static MARKS: Mutex<Vec<Mark>> = Mutex::new(Vec::new());

/// One stage's end: its name and the monotonic time (ns) at which it ended.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Mark {
    pub stage: String,
    pub at_ns: u64,
}

/// The monotonic clock, in ns (the same clock in every process of the host).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the local it is given.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Whether marks are being taken (`SANDPIT_TIMINGS` is set).
pub fn enabled() -> bool {
    match STATE.load(Ordering::Relaxed) {
        0 => {
            let on = std::env::var_os(ENV).is_some();
            STATE.store(if on { 2 } else { 1 }, Ordering::Relaxed);
            if on {
                let since = std::env::var(ENV)
                    .ok()
                    .and_then(|v| v.strip_prefix("since:").and_then(|n| n.parse::<u64>().ok()));
                if let Some(t0) = since {
                    push(Mark {
                        stage: "caller spawns sandpit".into(),
                        at_ns: t0,
                    });
                }
            }
            on
        }
        s => s == 2,
    }
}

fn push(m: Mark) {
    if let Ok(mut v) = MARKS.lock() {
        v.push(m);
    }
}

/// Marks the end of `stage` now (nothing when timings are off).
pub fn mark(stage: &str) {
    if enabled() {
        push(Mark {
            stage: stage.to_string(),
            at_ns: now_ns(),
        });
    }
}

/// Adds marks taken elsewhere (the Linux helper's).
pub fn extend(marks: impl IntoIterator<Item = Mark>) {
    if enabled() {
        for m in marks {
            push(m);
        }
    }
}

/// Every mark so far, in time order.
pub fn marks() -> Vec<Mark> {
    let mut v = MARKS.lock().map(|v| v.clone()).unwrap_or_default();
    v.sort_by_key(|m| m.at_ns);
    v
}

/// Each stage with its duration (from the mark before it), in time order; the first mark only
/// starts the clock.
pub fn stages(marks: &[Mark]) -> Vec<(String, f64)> {
    marks
        .windows(2)
        .map(|w| {
            (
                w[1].stage.clone(),
                w[1].at_ns.saturating_sub(w[0].at_ns) as f64 / 1e6,
            )
        })
        .collect()
}

/// The breakdown as text, one stage a line with its milliseconds, and the total.
pub fn render(marks: &[Mark]) -> String {
    let stages = stages(marks);
    let mut out = String::from("sandpit timings (ms):\n");
    for (stage, ms) in &stages {
        out.push_str(&format!("  {ms:8.3}  {stage}\n"));
    }
    let total: f64 = stages.iter().map(|(_, ms)| ms).sum();
    out.push_str(&format!("  {total:8.3}  total\n"));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stages_are_the_gaps_between_marks_in_time_order() {
        let m = |stage: &str, at_ns| Mark {
            stage: stage.into(),
            at_ns,
        };
        let marks = vec![m("start", 1_000_000), m("a", 3_500_000), m("b", 4_000_000)];
        assert_eq!(
            stages(&marks),
            vec![("a".to_string(), 2.5), ("b".to_string(), 0.5)]
        );
        let text = render(&marks);
        assert!(text.contains("   2.500  a\n"), "{text}");
        assert!(text.ends_with("   3.000  total\n"), "{text}");
    }

    #[test]
    fn the_clock_moves_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a > 0);
    }
}
