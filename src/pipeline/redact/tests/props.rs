//! Property tests of the streaming filter: many inputs with planted secrets of every kind, many
//! chunkings each (random sizes, one byte per chunk, splits inside every secret), with and
//! without idle flushes.
//!
//! * without `flush_idle`: the streamed output equals `redact_bytes` of the whole input;
//! * with `flush_idle` after chunks: no needle (first/middle/last 8 bytes) of any planted secret
//!   appears in the output, no mask ever starts in released text, and every released piece is
//!   valid UTF-8;
//! * always: `redact_bytes` of the whole input contains no needle (true positives).

use super::gen::{self, Literals, Planted, Rng};
use crate::pipeline::redact::{gate, patterns, RedactionConfig, Redactor, StreamRedactor};
use regex::bytes::Regex;
use std::sync::Arc;

pub(super) const ENV_NAME: &str = "SANDPIT_TEST_REDACT_SECRET";

pub(super) fn redactor(lits: &Literals) -> Arc<Redactor> {
    let config = RedactionConfig {
        values: vec![lits.plain.clone(), lits.spaced.clone(), "abc".into()],
        env: vec![ENV_NAME.into()],
        ..RedactionConfig::default()
    };
    let env = lits.env.clone();
    let r =
        Redactor::with_env_lookup(&config, |name| (name == ENV_NAME).then(|| env.clone())).unwrap();
    Arc::new(r)
}

/// An input of ordinary lines with secrets planted among them.
pub(super) struct Input {
    pub bytes: Vec<u8>,
    pub planted: Vec<Planted>,
}

pub(super) fn build_input(rng: &mut Rng, lits: &Literals, kinds: &[&'static str]) -> Input {
    let crlf = rng.chance(0.25);
    let nl = if crlf { "\r\n" } else { "\n" };
    let mut text = String::new();
    let mut planted = Vec::new();
    for &kind in kinds {
        for _ in 0..rng.below(4) {
            text.push_str(&gen::ordinary_line(rng));
            text.push_str(nl);
        }
        let p = gen::plant(rng, kind, lits);
        let body = if crlf {
            p.text.replace('\n', "\r\n")
        } else {
            p.text.clone()
        };
        match rng.below(4) {
            // alone on its line
            0 | 1 => text.push_str(&body),
            // after other text on the same line
            2 => {
                text.push_str("[log] ");
                text.push_str(&body);
            }
            // two secrets on one line
            _ => {
                text.push_str(&body);
                text.push(' ');
                let k = gen::KINDS[rng.below(22)];
                let q = gen::plant(rng, k, lits);
                text.push_str(&q.text.replace('\n', nl));
                planted.push(q);
            }
        }
        planted.push(p);
        text.push_str(nl);
    }
    if rng.chance(0.5) {
        // the last line has no newline, and may end with a secret
        let k = gen::KINDS[rng.below(gen::KINDS.len())];
        let p = gen::plant(rng, k, lits);
        text.push_str(&p.text);
        planted.push(p);
    }
    Input {
        bytes: text.into_bytes(),
        planted,
    }
}

pub(super) fn needle_regex(planted: &[Planted]) -> Regex {
    let alts: Vec<String> = planted
        .iter()
        .flat_map(|p| p.needles.iter())
        .map(|n| regex::escape(n))
        .collect();
    Regex::new(&alts.join("|")).unwrap()
}

/// Chunkings of `input`: lists of cut positions.
fn chunkings(rng: &mut Rng, input: &Input) -> Vec<(String, Vec<usize>)> {
    let len = input.bytes.len();
    let mut out = Vec::new();
    out.push(("one byte per chunk".to_string(), (1..len).collect()));
    for max in [2, 3, 7, 16, 64, 300, 4096] {
        for _ in 0..2 {
            let mut cuts = Vec::new();
            let mut pos = 0;
            loop {
                pos += rng.range(1, max);
                if pos >= len {
                    break;
                }
                cuts.push(pos);
            }
            out.push((format!("random chunks of 1..={max}"), cuts));
        }
    }
    // Cuts inside every needle occurrence (i.e. inside every secret), at several offsets.
    for offset in [1, 3, 5, 7] {
        let mut cuts: Vec<usize> = Vec::new();
        for p in &input.planted {
            for n in &p.needles {
                let hay = &input.bytes;
                if let Some(i) = find(hay, n.as_bytes()) {
                    cuts.push(i + offset.min(n.len()));
                }
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        cuts.retain(|&c| c > 0 && c < len);
        out.push((format!("splits inside secrets at +{offset}"), cuts));
    }
    out
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[derive(Clone, Copy, PartialEq)]
pub(super) enum Idle {
    Never,
    EveryChunk,
    Random,
}

/// Streams `input` cut at `cuts`; returns the output, the released pieces and the filter.
pub(super) fn run(
    red: &Arc<Redactor>,
    input: &[u8],
    cuts: &[usize],
    idle: Idle,
    rng: &mut Rng,
) -> (Vec<u8>, Vec<Vec<u8>>, StreamRedactor) {
    let mut s = red.stream();
    let mut pieces = Vec::new();
    let mut prev = 0;
    for &c in cuts.iter().chain(std::iter::once(&input.len())) {
        pieces.push(s.push(&input[prev..c]));
        let flush = match idle {
            Idle::Never => false,
            Idle::EveryChunk => true,
            Idle::Random => rng.chance(0.3),
        };
        if flush {
            pieces.push(s.flush_idle());
        }
        prev = c;
    }
    pieces.push(s.finish());
    pieces.retain(|p| !p.is_empty());
    (pieces.concat(), pieces, s)
}

fn show(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn streaming_matches_whole_text_and_never_leaks() {
    let mut rng = Rng::new(0x5eed_0001);
    let lits = Literals::new(&mut rng);
    let red = redactor(&lits);
    let mut runs = 0;
    let mut idle_runs = 0;
    let mut idle_equal = 0;
    let mut planted_total = 0;
    let kinds = gen::KINDS;
    let per_input = 6;
    let rounds = kinds.len().div_ceil(per_input);
    let inputs = 3 * rounds;
    for i in 0..inputs {
        let chosen: Vec<&'static str> = (0..per_input)
            .map(|j| kinds[(i * per_input + j) % kinds.len()])
            .collect();
        let input = build_input(&mut rng, &lits, &chosen);
        planted_total += input.planted.len();
        let needles = needle_regex(&input.planted);
        let expected = red.redact_bytes(&input.bytes);
        assert!(
            !needles.is_match(&expected),
            "whole-text redaction leaks a secret ({:?})\n{}",
            chosen,
            show(&expected)
        );
        let valid_utf8 = std::str::from_utf8(&input.bytes).is_ok();
        for (name, cuts) in chunkings(&mut rng, &input) {
            for idle in [Idle::Never, Idle::EveryChunk, Idle::Random] {
                // one byte per chunk is the slowest case: once per kind (the first round)
                if name.starts_with("one byte") && i >= rounds {
                    continue;
                }
                let (out, pieces, s) = run(&red, &input.bytes, &cuts, idle, &mut rng);
                runs += 1;
                assert_eq!(
                    s.stats.late_masks, 0,
                    "{name}: a mask started in released text"
                );
                if idle == Idle::Never {
                    assert!(
                        out == expected,
                        "{name}: streamed output differs from whole-text redaction\nexpected:\n{}\ngot:\n{}",
                        show(&expected),
                        show(&out)
                    );
                } else {
                    idle_runs += 1;
                    if let Some(m) = needles.find(&out) {
                        panic!(
                            "{name} ({}): secret fragment {:?} released\n{}",
                            if idle == Idle::EveryChunk {
                                "idle flush after every chunk"
                            } else {
                                "random idle flushes"
                            },
                            show(m.as_bytes()),
                            show(&out)
                        );
                    }
                    // Not part of the guarantee, but holds while lines are shorter than
                    // CONTEXT_MAX: the context is then the whole released part of the line, so
                    // matching sees the same line as whole-text redaction does.
                    assert!(
                        out == expected,
                        "{name}: with idle flushes, output differs from whole-text redaction\nexpected:\n{}\ngot:\n{}",
                        show(&expected),
                        show(&out)
                    );
                    idle_equal += 1;
                }
                if valid_utf8 {
                    for p in &pieces {
                        assert!(
                            std::str::from_utf8(p).is_ok(),
                            "{name}: a released piece splits a UTF-8 character: {p:?}"
                        );
                    }
                }
            }
        }
    }
    let planted: usize = planted_total;
    println!(
        "streaming property: {inputs} inputs, {planted} planted secrets, {runs} chunked runs \
         ({idle_runs} with idle flushes): no leak, no late mask; output identical to \
         whole-text redaction in {}/{runs} runs",
        runs - idle_runs + idle_equal
    );
}

/// The redaction gate's soundness on generated text: wherever it says no, no built-in pattern
/// matches (line rules, block headers, partial block headers), over random windows (up to 200
/// bytes) of ordinary lines with secrets of every kind planted among them.
#[test]
fn the_gate_stops_no_text_a_pattern_matches() {
    let mut rng = Rng::new(0x5eed_9a7e);
    let lits = gen::Literals::new(&mut rng);
    let (mut stopped, mut passed) = (0, 0);
    for _ in 0..300 {
        let input = build_input(&mut rng, &lits, gen::KINDS);
        let bytes = &input.bytes;
        for _ in 0..40 {
            let a = rng.below(bytes.len() + 1);
            let b = a + rng.below(bytes.len() - a + 1).min(200);
            let window = &bytes[a..b];
            if gate::may_match(window) {
                passed += 1;
            } else {
                stopped += 1;
                assert!(
                    !patterns::any_builtin_match(window),
                    "the gate stopped {:?}, which a pattern matches",
                    String::from_utf8_lossy(window)
                );
            }
        }
    }
    assert!(
        stopped > 1000 && passed > 1000,
        "stopped {stopped}, passed {passed}"
    );
}
