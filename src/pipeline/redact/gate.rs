//! The redaction gate: whether a text could contain a match of any built-in pattern, answered
//! without compiling the patterns.
//!
//! `build.rs` loosens every built-in pattern (regex, block `begin` and `hold`) into one that
//! matches a superset of what it matches, and compiles those into a few DFAs embedded in the
//! binary. A text none of them matches contains no match of any built-in pattern, so the
//! engine skips the patterns for it; the patterns themselves (4.5 ms of CPU) are compiled only
//! for the first text that gets through. The DFAs load without their full check (which cost
//! 0.1 ms of every process start, perf): a unit test gives the same bytes the full check.
//!
//! Fails open towards redaction: if the DFAs cannot be loaded or a search cannot finish, every
//! text is let through to the patterns, as if there were no gate.

use regex_automata::dfa::dense::DFA;
use regex_automata::dfa::Automaton;
use regex_automata::Input;
use std::sync::OnceLock;

/// Bytes aligned for a zero-copy DFA (`DFA::from_bytes` needs 4-byte alignment).
#[repr(C)]
struct AlignedBytes<B: ?Sized> {
    _align: [u32; 0],
    bytes: B,
}

// `static GATE_DFAS: [&AlignedBytes<[u8]>; N]`, written by build.rs.
include!(concat!(env!("OUT_DIR"), "/redaction_gate.rs"));

/// The gate's DFAs, checked once per process; None: unusable (every text goes through).
fn dfas() -> Option<&'static [DFA<&'static [u32]>]> {
    static DFAS: OnceLock<Option<Vec<DFA<&'static [u32]>>>> = OnceLock::new();
    DFAS.get_or_init(|| {
        let loaded: Result<Vec<_>, _> = GATE_DFAS.iter().map(|a| load(&a.bytes)).collect();
        match loaded {
            Ok(dfas) => Some(dfas),
            Err(e) => {
                tracing::warn!(error = %e, "the redaction gate does not load: every output is matched against the patterns");
                None
            }
        }
    })
    .as_deref()
}

/// One embedded DFA, without the check of its transition table.
fn load(
    bytes: &'static [u8],
) -> Result<DFA<&'static [u32]>, regex_automata::util::wire::DeserializeError> {
    // SAFETY: `from_bytes_unchecked` skips only the check that every transition and state id
    // of the table is valid (it still checks the header, version, endianness, alignment and
    // sizes). These bytes are what `DFA::to_bytes_*` wrote, for this target's endianness, in
    // build.rs, for DFAs regex-automata itself built, with the same regex-automata as this
    // code (Cargo.lock holds one version for both); and the unit test
    // `the_embedded_dfas_pass_the_full_check` loads the same bytes with the checked
    // `DFA::from_bytes`.
    unsafe { DFA::from_bytes_unchecked(bytes) }.map(|(dfa, _)| dfa)
}

/// Whether `text` may contain a match of a built-in pattern (false: it certainly does not).
pub(crate) fn may_match(text: &[u8]) -> bool {
    let Some(dfas) = dfas() else {
        return true;
    };
    let input = Input::new(text).earliest(true);
    dfas.iter()
        .any(|dfa| dfa.try_search_fwd(&input).map_or(true, |m| m.is_some()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::redact::patterns;

    #[test]
    fn the_dfas_load() {
        assert!(dfas().is_some_and(|d| !d.is_empty()));
    }

    /// What makes `load`'s unchecked deserialization sound: the same bytes pass the check.
    #[test]
    fn the_embedded_dfas_pass_the_full_check() {
        for a in GATE_DFAS.iter() {
            let (dfa, _) = DFA::from_bytes(&a.bytes[..]).unwrap();
            let unchecked = load(&a.bytes).unwrap();
            assert_eq!(dfa.memory_usage(), unchecked.memory_usage());
        }
    }

    /// Every example a pattern must match gets through the gate.
    #[test]
    fn every_example_match_gets_through() {
        let (file, _) = patterns::load(patterns::BUILTIN_TOML).unwrap();
        let mut n = 0;
        for p in &file.patterns {
            for ex in &p.examples.matches {
                let text = match ex {
                    patterns::Example::Text(t) => t,
                    patterns::Example::Pinned { text, .. } => text,
                };
                assert!(may_match(text.as_bytes()), "{}: {text:?} stopped", p.id);
                n += 1;
            }
        }
        assert!(n > 20, "only {n} examples");
    }

    /// Ordinary output is stopped: the gate is what spares a run the patterns' compile.
    #[test]
    fn ordinary_output_is_stopped() {
        for text in [
            "",
            "42\n",
            "hello world\n",
            "[1, 2, 3]\n{'a': 1, 'b': [2.5, None]}\n",
            "Traceback (most recent call last):\n  File \"<cell>\", line 1, in <module>\nKeyError: 'key'\n",
            "total 12\ndrwxr-xr-x 2 root root 4096 Nov 27 16:00 .\n-rw-r--r-- 1 root root   42 out.json\n",
            "See https://docs.python.org/3/library/json.html for details\n",
            "Successfully installed requests-2.32.3 urllib3-2.2.3\n",
        ] {
            assert!(!may_match(text.as_bytes()), "{text:?} got through");
        }
    }
}
