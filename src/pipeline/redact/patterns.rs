//! The matching engine: literal values, regex rules and multi-line block rules (private keys),
//! loaded from `profiles/redaction.toml`. Everything here works on bytes and returns the byte
//! ranges to mask; [`super::stream`] decides when bytes are final.
//!
//! Invariants the streaming filter relies on (checked by the lint and property tests):
//! * literal and regex matches never contain a newline (literal values are split into lines);
//! * only block rules span lines, and they are found with [`Engine::scan_blocks`].

use super::RedactError;
use base64::Engine as _;
use regex::bytes::{Regex, RegexBuilder};
use serde::Deserialize;
use std::ops::Range;
use std::sync::OnceLock;

/// The built-in patterns, rules as data.
pub(crate) const BUILTIN_TOML: &str = include_str!("../../../profiles/redaction.toml");

/// What a masked span becomes.
pub(crate) const MASK: &[u8] = b"***";

// ------------------------------------------------------------------------------------------
// The file format

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatternFile {
    pub version: u32,
    #[serde(rename = "pattern")]
    pub patterns: Vec<PatternSpec>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct PatternSpec {
    pub id: String,
    #[allow(dead_code)]
    pub description: String,
    pub regex: Option<String>,
    pub group: Option<GroupSpec>,
    pub min_len: Option<usize>,
    pub min_entropy: Option<f64>,
    pub no_digit_min_entropy: Option<f64>,
    pub exclude: Option<String>,
    pub validate: Option<Validate>,
    pub prefilter: Option<String>,
    pub begin: Option<String>,
    pub end: Option<String>,
    pub confirm: Option<String>,
    pub hold: Option<String>,
    #[serde(default)]
    #[cfg_attr(not(test), allow(dead_code))]
    pub examples: Examples,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(crate) enum GroupSpec {
    One(usize),
    Many(Vec<usize>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
pub(crate) enum Validate {
    /// Standard base64 that decodes to UTF-8 text containing `:` (HTTP basic credentials).
    #[serde(rename = "base64-userpass")]
    Base64UserPass,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) struct Examples {
    #[serde(default, rename = "match")]
    pub matches: Vec<Example>,
    #[serde(default)]
    pub no_match: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Example {
    Text(String),
    Pinned { text: String, redacted: String },
}

// ------------------------------------------------------------------------------------------
// Compiled rules

/// A single-line regex rule.
#[derive(Debug, Clone)]
pub(crate) struct Rule {
    #[cfg_attr(not(test), allow(dead_code))]
    pub id: String,
    regex: Regex,
    /// Capture groups to mask; empty: the whole match.
    groups: Vec<usize>,
    min_len: usize,
    min_entropy: f64,
    no_digit_min_entropy: f64,
    exclude: Option<Regex>,
    validate: Option<Validate>,
    /// Lines without a match of this are skipped (speed: the generic rules have no literal
    /// prefix for the regex engine to search for).
    prefilter: Option<Regex>,
}

impl Rule {
    /// Runs the rule over `text`, calling `found(mask or None, whole match)`.
    fn for_each(&self, text: &[u8], found: &mut dyn FnMut(Option<Range<usize>>, Range<usize>)) {
        let Some(pf) = &self.prefilter else {
            self.for_each_in(text, 0, found);
            return;
        };
        let mut pos = 0;
        while pos < text.len() {
            let Some(m) = pf.find_at(text, pos) else {
                break;
            };
            let start = text[..m.start()]
                .iter()
                .rposition(|&b| b == b'\n')
                .map_or(0, |i| i + 1);
            let end = text[m.end()..]
                .iter()
                .position(|&b| b == b'\n')
                .map_or(text.len(), |i| m.end() + i);
            self.for_each_in(&text[start..end], start, found);
            pos = end + 1;
        }
    }

    fn for_each_in(
        &self,
        text: &[u8],
        offset: usize,
        found: &mut dyn FnMut(Option<Range<usize>>, Range<usize>),
    ) {
        let shift = |r: Range<usize>| r.start + offset..r.end + offset;
        if self.groups.is_empty() {
            for m in self.regex.find_iter(text) {
                let mask = self.accepts(m.as_bytes()).then(|| shift(m.range()));
                found(mask, shift(m.range()));
            }
            return;
        }
        for caps in self.regex.captures_iter(text) {
            let Some(whole) = caps.get(0) else {
                continue;
            };
            let mut any = false;
            for &g in &self.groups {
                if let Some(m) = caps.get(g) {
                    if self.accepts(m.as_bytes()) {
                        found(Some(shift(m.range())), shift(whole.range()));
                        any = true;
                    }
                }
            }
            if !any {
                found(None, shift(whole.range()));
            }
        }
    }

    /// Is this candidate (the part that would be masked) a secret?
    fn accepts(&self, value: &[u8]) -> bool {
        if value.is_empty() || value.len() < self.min_len {
            return false;
        }
        if self.exclude.as_ref().is_some_and(|ex| ex.is_match(value)) {
            return false;
        }
        if self.min_entropy > 0.0 || self.no_digit_min_entropy > 0.0 {
            let h = shannon_entropy(value);
            if h < self.min_entropy {
                return false;
            }
            if h < self.no_digit_min_entropy && !value.iter().any(u8::is_ascii_digit) {
                return false;
            }
        }
        match self.validate {
            None => true,
            Some(Validate::Base64UserPass) => base64_userpass(value),
        }
    }
}

/// A multi-line block rule (private keys).
#[derive(Debug, Clone)]
pub(crate) struct BlockRule {
    #[cfg_attr(not(test), allow(dead_code))]
    pub id: String,
    begin: Regex,
    pub(crate) end: Regex,
    confirm: Regex,
    hold: Regex,
}

/// Where a block rule stands in a text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OpenBlock {
    /// Index of the block rule.
    pub rule: usize,
    /// Start of the `begin` header.
    pub start: usize,
    /// End of the `begin` header.
    pub header_end: usize,
}

/// The blocks of a text: complete ones (to mask) and the first one still open, if any.
#[derive(Debug, Default)]
pub(crate) struct BlockScan {
    pub closed: Vec<Range<usize>>,
    pub open: Option<OpenBlock>,
}

/// The built-in rules, compiled once per process.
#[derive(Debug, Clone, Default)]
pub(crate) struct Builtins {
    pub rules: Vec<Rule>,
    pub blocks: Vec<BlockRule>,
}

/// Literal values (configuration values and environment variable values). Its `Debug` shows
/// counts only: the regex source is the secrets themselves.
#[derive(Clone)]
pub(crate) struct Literals {
    regex: Regex,
    /// The literals that contain ASCII whitespace: a stream may end in the middle of one even
    /// outside a token, so the idle flush holds back any suffix that is a prefix of one.
    spaced: Vec<Vec<u8>>,
    max_len: usize,
}

/// Everything one [`super::Redactor`] matches.
#[derive(Debug, Clone, Default)]
pub(crate) struct Engine {
    pub literals: Option<Literals>,
    /// The built-in rules, compiled when first needed ([`builtins`]), not at construction: only
    /// for a text the gate lets through ([`super::gate`]), which ordinary output never is, so
    /// most processes never pay their compile (4.5 ms of CPU).
    pub builtin: bool,
    /// Rules of the engine's own (tests): used where `builtin` is off.
    pub rules: Vec<Rule>,
    pub blocks: Vec<BlockRule>,
}

impl std::fmt::Debug for Literals {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Literals")
            .field("with_whitespace", &self.spaced.len())
            .field("max_len", &self.max_len)
            .finish_non_exhaustive()
    }
}

// ------------------------------------------------------------------------------------------
// Loading

fn compile(id: &str, src: &str, multi_line: bool) -> Result<Regex, RedactError> {
    // Secrets are ASCII: byte-oriented classes compile ~10x faster than Unicode ones, and every
    // process pays the compile once (`sandpit run` included).
    RegexBuilder::new(src)
        .multi_line(multi_line)
        .unicode(false)
        .build()
        .map_err(|e| RedactError::Pattern {
            id: id.to_string(),
            reason: e.to_string(),
        })
}

/// Parses and compiles a pattern file.
pub(crate) fn load(toml_text: &str) -> Result<(PatternFile, Builtins), RedactError> {
    let file: PatternFile =
        toml::from_str(toml_text).map_err(|e| RedactError::PatternFile(e.to_string()))?;
    if file.version != 1 {
        return Err(RedactError::PatternFile(format!(
            "unsupported version {} (expected 1)",
            file.version
        )));
    }
    let mut out = Builtins::default();
    let mut seen = std::collections::HashSet::new();
    for p in &file.patterns {
        if !seen.insert(p.id.as_str()) {
            return Err(RedactError::Pattern {
                id: p.id.clone(),
                reason: "duplicate id".into(),
            });
        }
        let bad = |reason: &str| RedactError::Pattern {
            id: p.id.clone(),
            reason: reason.to_string(),
        };
        match (&p.regex, &p.begin, &p.end) {
            (Some(src), None, None) => {
                if p.confirm.is_some() || p.hold.is_some() {
                    return Err(bad("confirm and hold belong to block rules"));
                }
                let regex = compile(&p.id, src, true)?;
                let groups = match &p.group {
                    None => Vec::new(),
                    Some(GroupSpec::One(g)) => vec![*g],
                    Some(GroupSpec::Many(g)) => g.clone(),
                };
                if groups.iter().any(|&g| g == 0 || g >= regex.captures_len()) {
                    return Err(bad("group out of range"));
                }
                let prefilter = p
                    .prefilter
                    .as_deref()
                    .map(|src| compile(&p.id, src, false))
                    .transpose()?;
                let exclude = p
                    .exclude
                    .as_deref()
                    .map(|src| compile(&p.id, src, false))
                    .transpose()?;
                out.rules.push(Rule {
                    id: p.id.clone(),
                    regex,
                    groups,
                    min_len: p.min_len.unwrap_or(1),
                    min_entropy: p.min_entropy.unwrap_or(0.0),
                    no_digit_min_entropy: p.no_digit_min_entropy.unwrap_or(0.0),
                    exclude,
                    validate: p.validate,
                    prefilter,
                });
            }
            (None, Some(begin), Some(end)) => {
                if p.group.is_some()
                    || p.exclude.is_some()
                    || p.prefilter.is_some()
                    || p.validate.is_some()
                    || p.min_len.is_some()
                    || p.min_entropy.is_some()
                    || p.no_digit_min_entropy.is_some()
                {
                    return Err(bad("block rules take begin, end, confirm and hold only"));
                }
                let (Some(confirm), Some(hold)) = (&p.confirm, &p.hold) else {
                    return Err(bad("a block rule needs confirm and hold"));
                };
                out.blocks.push(BlockRule {
                    id: p.id.clone(),
                    begin: compile(&p.id, begin, false)?,
                    end: compile(&p.id, end, false)?,
                    confirm: compile(&p.id, confirm, false)?,
                    hold: compile(&p.id, hold, false)?,
                });
            }
            _ => return Err(bad("needs either regex, or begin and end")),
        }
    }
    Ok((file, out))
}

/// The built-in rules, compiled on first use: for the first text the gate lets through
/// ([`super::gate`]). They are a constant of the
/// build (profiles/redaction.toml, included at compile time), so whether they compile is
/// decided by the build, not the host, and the unit tests (`builtin_examples`,
/// `builtins_compile`) prove it for every build. Were it ever not so, redaction fails closed:
/// [`Engine::line_spans`] masks every line.
fn compiled_builtins() -> Option<&'static Builtins> {
    match builtins() {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::error!(error = %e, "the built-in redaction patterns do not compile: all output is masked");
            None
        }
    }
}

/// The built-in patterns, parsed and compiled on first use.
pub(crate) fn builtins() -> Result<&'static Builtins, RedactError> {
    static BUILTINS: OnceLock<Result<Builtins, String>> = OnceLock::new();
    BUILTINS
        .get_or_init(|| {
            load(BUILTIN_TOML)
                .map(|(_, b)| b)
                .map_err(|e| e.to_string())
        })
        .as_ref()
        .map_err(|e| RedactError::PatternFile(e.clone()))
}

/// Whether any built-in pattern matches anywhere in `text`, accepted as a secret or not: a line
/// rule, a block's header or a partial header (the gate's soundness test).
#[cfg(test)]
pub(crate) fn any_builtin_match(text: &[u8]) -> bool {
    let b = builtins().expect("the built-in patterns compile");
    b.rules.iter().any(|r| r.regex.is_match(text))
        || b.blocks
            .iter()
            .any(|r| r.begin.is_match(text) || r.hold.is_match(text))
}

impl Literals {
    /// Compiles literal values. The caller has already dropped short ones and split multi-line
    /// ones into lines, so no literal contains a newline.
    pub(crate) fn new(values: Vec<Vec<u8>>) -> Result<Option<Literals>, RedactError> {
        let mut values = values;
        values.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        values.dedup();
        if values.is_empty() {
            return Ok(None);
        }
        // Longest first: at one position the longest literal wins (leftmost-first semantics).
        let alternation = values
            .iter()
            .map(|v| regex::escape(&String::from_utf8_lossy(v)))
            .collect::<Vec<_>>()
            .join("|");
        // The error would quote the pattern, i.e. the secrets: report only its kind.
        let regex = RegexBuilder::new(&alternation)
            .size_limit(64 << 20)
            .build()
            .map_err(|e| {
                RedactError::Values(match e {
                    regex::Error::CompiledTooBig(n) => {
                        format!("the values compile to more than {n} bytes")
                    }
                    _ => "the values do not compile".to_string(),
                })
            })?;
        let max_len = values.iter().map(Vec::len).max().unwrap_or(0);
        let spaced = values
            .iter()
            .filter(|v| v.iter().any(u8::is_ascii_whitespace))
            .cloned()
            .collect();
        Ok(Some(Literals {
            regex,
            spaced,
            max_len,
        }))
    }
}

// ------------------------------------------------------------------------------------------
// Matching

impl Engine {
    /// The single-line rules in force; `None`: the built-in ones are unavailable.
    pub(crate) fn rules(&self) -> Option<&[Rule]> {
        if self.builtin {
            compiled_builtins().map(|b| b.rules.as_slice())
        } else {
            Some(&self.rules)
        }
    }

    /// The block rules in force (none when the built-in ones are unavailable: every line is
    /// masked then).
    pub(crate) fn blocks(&self) -> &[BlockRule] {
        if self.builtin {
            compiled_builtins().map_or(&[], |b| b.blocks.as_slice())
        } else {
            &self.blocks
        }
    }

    /// The longest literal value, in bytes (the streaming filter keeps at least that much).
    pub(crate) fn max_literal_len(&self) -> usize {
        self.literals.as_ref().map_or(0, |l| l.max_len)
    }

    /// Masks and whole-match ranges of the literal and regex rules in `text`. These never span
    /// a newline, so scanning a text line by line or all at once gives the same ranges.
    /// `matches` (optional) receives every regex match, accepted or not, including its context
    /// (`API_KEY = `), which the streaming filter must not cut through.
    pub(crate) fn line_spans(
        &self,
        text: &[u8],
        masks: &mut Vec<Range<usize>>,
        mut matches: Option<&mut Vec<Range<usize>>>,
    ) {
        if let Some(lit) = &self.literals {
            // Overlapping search: restart one byte after each match start, so literals that
            // overlap each other (or themselves) are all covered.
            let mut pos = 0;
            while pos < text.len() {
                let Some(m) = lit.regex.find_at(text, pos) else {
                    break;
                };
                masks.push(m.range());
                if let Some(mm) = matches.as_deref_mut() {
                    mm.push(m.range());
                }
                pos = m.start() + 1;
            }
        }
        if self.builtin && !super::gate::may_match(text) {
            return;
        }
        let Some(rules) = self.rules() else {
            masks.push(0..text.len());
            return;
        };
        for rule in rules {
            rule.for_each(text, &mut |mask, whole| {
                if let Some(mm) = matches.as_deref_mut() {
                    mm.push(whole);
                }
                if let Some(mask) = mask {
                    masks.push(mask);
                }
            });
        }
    }

    /// Finds the blocks of `text`. With `finished`, an open block runs to the end of the text
    /// and is returned as closed; otherwise scanning stops at the first open block (one whose
    /// end has not arrived, or whose confirmation cannot be decided yet).
    pub(crate) fn scan_blocks(&self, text: &[u8], finished: bool) -> BlockScan {
        let mut scan = BlockScan::default();
        if self.builtin && !super::gate::may_match(text) {
            return scan;
        }
        for (index, rule) in self.blocks().iter().enumerate() {
            let mut pos = 0;
            while pos < text.len() {
                let Some(b) = rule.begin.find_at(text, pos) else {
                    break;
                };
                let after = &text[b.end()..];
                if !rule.confirm.is_match(after) {
                    if finished || confirm_decided(after) {
                        pos = b.end();
                        continue;
                    }
                } else if let Some(e) = rule.end.find_at(text, b.end()) {
                    scan.closed.push(b.start()..e.end());
                    pos = e.end();
                    continue;
                }
                // Unconfirmed-but-undecided, or confirmed without an end yet.
                if finished {
                    if rule.confirm.is_match(after) {
                        scan.closed.push(b.start()..text.len());
                    }
                    break;
                }
                let open = OpenBlock {
                    rule: index,
                    start: b.start(),
                    header_end: b.end(),
                };
                match &scan.open {
                    Some(o) if o.start <= open.start => {}
                    _ => scan.open = Some(open),
                }
                break;
            }
        }
        scan
    }

    /// Start of an unfinished block header at the very end of `text` (`-----BEGIN RSA PRI`).
    pub(crate) fn partial_header_start(&self, text: &[u8]) -> Option<usize> {
        if self.builtin && !super::gate::may_match(text) {
            return None;
        }
        self.blocks()
            .iter()
            .filter_map(|r| r.hold.find(text).map(|m| m.start()))
            .min()
    }

    /// How many bytes at the end of `text` could be the beginning of a literal value that
    /// contains whitespace (a value without whitespace is covered by the token rule).
    pub(crate) fn literal_prefix_hold(&self, text: &[u8]) -> usize {
        let Some(lit) = &self.literals else {
            return 0;
        };
        let mut hold = 0;
        for v in &lit.spaced {
            let longest = (v.len() - 1).min(text.len());
            for k in (hold + 1..=longest).rev() {
                if text.ends_with(&v[..k]) {
                    hold = k;
                    break;
                }
            }
        }
        hold
    }

    /// Whole-text redaction.
    pub(crate) fn redact(&self, text: &[u8]) -> Vec<u8> {
        let mut masks = Vec::new();
        self.line_spans(text, &mut masks, None);
        masks.extend(self.scan_blocks(text, true).closed);
        if masks.is_empty() {
            return text.to_vec();
        }
        let masks = merge(masks);
        let mut out = Vec::with_capacity(text.len());
        apply(text, &masks, 0, text.len(), &mut out);
        out
    }
}

/// A failed confirmation is final once the text after the header is long enough that the
/// confirm pattern (at most two line breaks and ~80 bytes) could no longer match with more data.
fn confirm_decided(after: &[u8]) -> bool {
    after.len() >= 256 || after.iter().filter(|&&b| b == b'\n').count() >= 3
}

/// Sorts and merges overlapping ranges (adjacent ones stay apart: each becomes its own `***`).
pub(crate) fn merge(mut spans: Vec<Range<usize>>) -> Vec<Range<usize>> {
    spans.retain(|r| r.start < r.end);
    spans.sort_by_key(|r| (r.start, r.end));
    let mut out: Vec<Range<usize>> = Vec::with_capacity(spans.len());
    for r in spans {
        match out.last_mut() {
            Some(last) if r.start < last.end => last.end = last.end.max(r.end),
            _ => out.push(r),
        }
    }
    out
}

/// Writes `text[from..to]` to `out` with every span (sorted, merged) replaced by `***`.
/// Returns how many spans started before `from`: their beginning was already released.
pub(crate) fn apply(
    text: &[u8],
    spans: &[Range<usize>],
    from: usize,
    to: usize,
    out: &mut Vec<u8>,
) -> u64 {
    let mut late = 0;
    let mut pos = from;
    for s in spans {
        if s.end <= from || s.start >= to {
            continue;
        }
        if s.start < from {
            late += 1;
        }
        let a = s.start.max(pos);
        let b = s.end.min(to);
        out.extend_from_slice(&text[pos..a]);
        out.extend_from_slice(MASK);
        pos = b;
    }
    out.extend_from_slice(&text[pos..to]);
    late
}

/// Shannon entropy in bits per byte.
pub(crate) fn shannon_entropy(data: &[u8]) -> f64 {
    if data.is_empty() {
        return 0.0;
    }
    let mut counts = [0u32; 256];
    for &b in data {
        counts[b as usize] += 1;
    }
    let n = data.len() as f64;
    counts
        .iter()
        .filter(|&&c| c > 0)
        .map(|&c| {
            let p = f64::from(c) / n;
            -p * p.log2()
        })
        .sum()
}

fn base64_userpass(value: &[u8]) -> bool {
    let engine = base64::engine::GeneralPurpose::new(
        &base64::alphabet::STANDARD,
        base64::engine::GeneralPurposeConfig::new()
            .with_decode_padding_mode(base64::engine::DecodePaddingMode::Indifferent),
    );
    engine
        .decode(value)
        .ok()
        .and_then(|d| String::from_utf8(d).ok())
        .is_some_and(|s| {
            s.find(':')
                .is_some_and(|i| i > 0 && !s.chars().any(char::is_control))
        })
}
