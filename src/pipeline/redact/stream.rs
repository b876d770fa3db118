//! Streaming redaction: one [`StreamRedactor`] per output stream.
//!
//! State: `buf` = `context` ++ `pending`. `pending` has not been released yet; `context` is the
//! already-released part of the current line (at most [`CONTEXT_MAX`] bytes), kept so that a
//! pattern whose left part was released (`API_KEY = `, `Bearer `) still matches when its value
//! arrives. Only bytes of `pending` are ever masked or released; context bytes are never
//! re-emitted.
//!
//! The holdback rule (what may be released):
//! * `push`: everything through the last newline of `pending`. No literal or regex match spans a
//!   newline, so every match in those lines is complete. Exception: an open private-key block
//!   (header seen, end not yet) is held from the start of its line; past [`BLOCK_CAP`] it is
//!   replaced by `***` and the rest is discarded up to its end marker (fail safe, memory bound).
//! * a line longer than [`LONG_LINE`] is cut [`TAIL_KEEP`] bytes (or the longest literal) before
//!   its end, at a whitespace if one is near, never inside a match.
//! * `flush_idle`: everything except, from the earliest of: the trailing run of non-whitespace
//!   bytes (a token may still grow: no masked part contains whitespace), the longest suffix that
//!   is a prefix of a literal value containing whitespace, an open or half-written block header,
//!   and the start of any match that reaches the end of `pending` or straddles the cut.
//! * `finish`: everything.
//!
//! Every cut is moved back to a UTF-8 character boundary.
//!
//! Guarantee (tested over random chunkings): without `flush_idle` and with lines shorter than
//! [`LONG_LINE`], the concatenated output equals `redact_bytes` of the whole input. With
//! `flush_idle` anywhere, no byte that `redact_bytes` of the whole input masks is released.

use super::patterns::{apply, merge, Engine, OpenBlock, MASK};
use super::Redactor;
use std::ops::Range;
use std::sync::Arc;

/// Released text of the current line kept as left context for matching.
pub(crate) const CONTEXT_MAX: usize = 1024;
/// A line without a newline longer than this is released in part.
pub(crate) const LONG_LINE: usize = 16 * 1024;
/// What a long-line cut keeps back (at least; the longest literal value if longer).
pub(crate) const TAIL_KEEP: usize = 1024;
/// A long-line cut moves back to a whitespace at most this far.
const SNAP_BACK: usize = 4096;
/// An open private-key block longer than this is masked without waiting for its end.
pub(crate) const BLOCK_CAP: usize = 64 * 1024;
/// A single match longer than this is masked without waiting for its end.
pub(crate) const HARD_CAP: usize = 1024 * 1024;
/// Bytes kept to find an end marker split across chunks while discarding a block.
const END_TAIL: usize = 128;

/// Counters, for tests and diagnostics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct StreamStats {
    /// Masks that started in already-released text (must stay 0: the holdback rule failed).
    pub late_masks: u64,
    /// Long lines released in part.
    pub long_line_cuts: u64,
    /// Private-key blocks masked at [`BLOCK_CAP`] before their end arrived.
    pub capped_blocks: u64,
    /// Matches masked at [`HARD_CAP`] before their end arrived.
    pub capped_matches: u64,
}

/// What is being discarded after a capped block or match.
#[derive(Debug)]
enum Discard {
    /// A private-key block: until its end marker (`tail` holds the last bytes seen).
    Block { rule: usize, tail: Vec<u8> },
    /// An over-long match: until the next whitespace.
    Token,
}

/// The streaming filter for one stream. Get one from [`Redactor::stream`].
pub struct StreamRedactor {
    redactor: Arc<Redactor>,
    buf: Vec<u8>,
    /// Length of the released context at the front of `buf`.
    ctx: usize,
    discard: Option<Discard>,
    /// An open block was found at the last scan (start in `pending`).
    open_block: Option<usize>,
    /// After a long-line cut found nothing to release: retry once `pending` reaches this size.
    retry_len: usize,
    pub(crate) stats: StreamStats,
}

impl std::fmt::Debug for StreamRedactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamRedactor")
            .field("pending", &(self.buf.len() - self.ctx))
            .field("context", &self.ctx)
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl StreamRedactor {
    pub(super) fn new(redactor: Arc<Redactor>) -> Self {
        StreamRedactor {
            redactor,
            buf: Vec::new(),
            ctx: 0,
            discard: None,
            open_block: None,
            retry_len: 0,
            stats: StreamStats::default(),
        }
    }

    /// Bytes fed but not released yet.
    pub fn pending_len(&self) -> usize {
        self.buf.len() - self.ctx
    }

    /// Feeds a chunk; returns the bytes now safe to release (already masked). May return fewer
    /// bytes than fed: what could still be part of a secret is held back.
    pub fn push(&mut self, chunk: &[u8]) -> Vec<u8> {
        if !self.redactor.is_enabled() {
            return chunk.to_vec();
        }
        let mut out = Vec::new();
        let rest;
        let mut data = chunk;
        if self.discard.is_some() {
            match self.feed_discard(chunk) {
                Some(r) => {
                    rest = r;
                    data = &rest;
                }
                None => return out,
            }
        }
        if data.is_empty() {
            return out;
        }
        self.buf.extend_from_slice(data);
        let pending = self.pending_len();
        let over = match self.open_block {
            Some(start) => pending - start > BLOCK_CAP,
            None => pending > LONG_LINE && pending >= self.retry_len,
        };
        if over || data.contains(&b'\n') {
            self.release_on_push(&mut out);
        }
        out
    }

    /// Called when the stream has been quiet a while: releases everything that cannot be part
    /// of a secret any more (see the module docs), so a prompt without a newline shows.
    pub fn flush_idle(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.redactor.is_enabled() || self.discard.is_some() || self.pending_len() == 0 {
            return out;
        }
        let red = Arc::clone(&self.redactor);
        let engine = &red.engine;
        let ctx = self.ctx;
        let pending = &self.buf[ctx..];
        let scan = engine.scan_blocks(pending, false);
        let mut target = pending.len();
        if let Some(open) = &scan.open {
            target = target.min(open.start);
        }
        if let Some(p) = engine.partial_header_start(pending) {
            target = target.min(p);
        }
        target = target.min(trailing_run_start(pending));
        target = target.min(pending.len() - engine.literal_prefix_hold(pending));
        if target == 0 {
            return out;
        }
        let (masks, ranges) = full_spans(engine, &self.buf, ctx, &scan.closed);
        let target = settle(target, ctx, &ranges, self.buf.len(), true);
        let target = char_boundary_back(&self.buf[ctx..], target);
        if target > 0 {
            self.release(target, masks, &mut out);
        }
        out
    }

    /// End of stream: releases everything, masked, and resets the filter.
    pub fn finish(&mut self) -> Vec<u8> {
        let mut out = Vec::new();
        if !self.redactor.is_enabled() {
            return out;
        }
        if self.discard.take().is_none() {
            let red = Arc::clone(&self.redactor);
            let engine = &red.engine;
            let ctx = self.ctx;
            let scan = engine.scan_blocks(&self.buf[ctx..], true);
            let mut masks = Vec::new();
            engine.line_spans(&self.buf, &mut masks, None);
            masks.extend(scan.closed.iter().map(|r| r.start + ctx..r.end + ctx));
            let masks = merge(masks);
            self.stats.late_masks += apply(&self.buf, &masks, ctx, self.buf.len(), &mut out);
        }
        self.buf.clear();
        self.ctx = 0;
        self.open_block = None;
        self.retry_len = 0;
        out
    }

    /// Releases complete lines (the `push` policy), or part of a long line.
    fn release_on_push(&mut self, out: &mut Vec<u8>) {
        let red = Arc::clone(&self.redactor);
        let engine = &red.engine;
        let ctx = self.ctx;
        let pending = &self.buf[ctx..];
        let scan = engine.scan_blocks(pending, false);
        self.open_block = scan.open.as_ref().map(|o| o.start);
        if let Some(open) = &scan.open {
            if pending.len() - open.start > BLOCK_CAP {
                let open = open.clone();
                self.cap_block(engine, &open, &scan.closed, out);
                return;
            }
        }
        let mut cut = pending
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        if let Some(open) = &scan.open {
            cut = cut.min(line_start(pending, open.start));
        }
        // A complete block whose end line has no newline yet must not be cut.
        loop {
            let before = cut;
            for r in &scan.closed {
                if r.start < cut && r.end > cut {
                    cut = line_start(pending, r.start);
                }
            }
            if cut == before {
                break;
            }
        }
        if scan.open.is_none() && pending.len() - cut > LONG_LINE && pending.len() >= self.retry_len
        {
            self.cut_long_line(engine, &scan.closed, out);
            return;
        }
        if cut > 0 {
            let mut masks = Vec::new();
            engine.line_spans(&self.buf[..ctx + cut], &mut masks, None);
            masks.extend(
                scan.closed
                    .iter()
                    .filter(|r| r.end <= cut)
                    .map(|r| r.start + ctx..r.end + ctx),
            );
            self.release(cut, masks, out);
        }
    }

    /// Releases most of an over-long line, keeping a tail, never cutting a match.
    fn cut_long_line(&mut self, engine: &Engine, blocks: &[Range<usize>], out: &mut Vec<u8>) {
        let ctx = self.ctx;
        let pending = &self.buf[ctx..];
        let keep = TAIL_KEEP.max(engine.max_literal_len() + 1);
        let mut target = pending.len().saturating_sub(keep);
        let run = run_start(pending, target);
        if target - run <= SNAP_BACK && run > 0 {
            target = run;
        }
        let (masks, ranges) = full_spans(engine, &self.buf, ctx, blocks);
        let target = settle(target, ctx, &ranges, self.buf.len(), false);
        let target = char_boundary_back(&self.buf[ctx..], target);
        if target > 0 {
            self.stats.long_line_cuts += 1;
            self.release(target, masks, out);
        } else if self.pending_len() > HARD_CAP {
            // One match keeps growing past any sensible size: mask it all, drop the rest of
            // the token as it arrives.
            tracing::warn!(
                "redaction: a single match grew past {HARD_CAP} bytes; masked without its end"
            );
            self.stats.capped_matches += 1;
            out.extend_from_slice(MASK);
            self.buf.clear();
            self.ctx = 0;
            self.retry_len = 0;
            self.discard = Some(Discard::Token);
        } else {
            // Nothing to release: retry after geometric growth (bounded work per byte).
            let n = self.pending_len();
            self.retry_len = n + (n / 2).max(LONG_LINE / 4);
        }
    }

    /// An open block past [`BLOCK_CAP`]: release what precedes it, mask it, discard until its end.
    fn cap_block(
        &mut self,
        engine: &Engine,
        open: &OpenBlock,
        blocks: &[Range<usize>],
        out: &mut Vec<u8>,
    ) {
        tracing::warn!(
            "redaction: private key block longer than {BLOCK_CAP} bytes without its end line; \
             masked, and output discarded until its end line"
        );
        self.stats.capped_blocks += 1;
        let ctx = self.ctx;
        if open.start > 0 {
            let mut masks = Vec::new();
            engine.line_spans(&self.buf[..ctx + open.start], &mut masks, None);
            masks.extend(
                blocks
                    .iter()
                    .filter(|r| r.end <= open.start)
                    .map(|r| r.start + ctx..r.end + ctx),
            );
            let masks = merge(masks);
            self.stats.late_masks += apply(&self.buf, &masks, ctx, ctx + open.start, out);
        }
        out.extend_from_slice(MASK);
        let body = &self.buf[ctx + open.header_end..];
        let tail = body[body.len().saturating_sub(END_TAIL)..].to_vec();
        self.buf.clear();
        self.ctx = 0;
        self.open_block = None;
        self.discard = Some(Discard::Block {
            rule: open.rule,
            tail,
        });
    }

    /// While discarding: returns the bytes after the end of what is discarded, if it ended.
    fn feed_discard(&mut self, chunk: &[u8]) -> Option<Vec<u8>> {
        match self.discard.as_mut()? {
            Discard::Block { rule, tail } => {
                tail.extend_from_slice(chunk);
                let end = self.redactor.engine.blocks().get(*rule)?.end.find(tail);
                match end {
                    Some(m) => {
                        let rest = tail[m.end()..].to_vec();
                        self.discard = None;
                        Some(rest)
                    }
                    None => {
                        let drop = tail.len().saturating_sub(END_TAIL);
                        tail.drain(..drop);
                        None
                    }
                }
            }
            Discard::Token => {
                let i = chunk.iter().position(u8::is_ascii_whitespace)?;
                self.discard = None;
                Some(chunk[i..].to_vec())
            }
        }
    }

    /// Emits `pending[..cut]` with `masks` (absolute in `buf`) applied, and keeps the released
    /// part of the current line as context.
    fn release(&mut self, cut: usize, masks: Vec<Range<usize>>, out: &mut Vec<u8>) {
        let ctx = self.ctx;
        let end = ctx + cut;
        let masks = merge(masks);
        self.stats.late_masks += apply(&self.buf, &masks, ctx, end, out);
        let line = self.buf[..end]
            .iter()
            .rposition(|&b| b == b'\n')
            .map_or(0, |i| i + 1);
        let mut keep_from = line.max(end.saturating_sub(CONTEXT_MAX));
        while keep_from < end && (self.buf[keep_from] & 0xC0) == 0x80 {
            keep_from += 1;
        }
        self.buf.drain(..keep_from);
        self.ctx = end - keep_from;
        self.open_block = self.open_block.and_then(|s| s.checked_sub(cut));
        self.retry_len = 0;
    }
}

/// Masks of the literal/regex rules over the whole buffer plus the blocks (relative to
/// `pending`), and every range a cut must not split (masks, matches with their context, blocks).
fn full_spans(
    engine: &Engine,
    buf: &[u8],
    ctx: usize,
    blocks: &[Range<usize>],
) -> (Vec<Range<usize>>, Vec<Range<usize>>) {
    let mut masks = Vec::new();
    let mut matches = Vec::new();
    engine.line_spans(buf, &mut masks, Some(&mut matches));
    masks.extend(blocks.iter().map(|r| r.start + ctx..r.end + ctx));
    let mut ranges = matches;
    ranges.extend(masks.iter().cloned());
    (masks, ranges)
}

/// Moves `target` (in `pending`) back until no range straddles it and, with `hold_at_end`, no
/// range that reaches the end of the buffer starts before it.
fn settle(
    mut target: usize,
    ctx: usize,
    ranges: &[Range<usize>],
    total: usize,
    hold_at_end: bool,
) -> usize {
    loop {
        let cut = ctx + target;
        let blocking = ranges
            .iter()
            .filter(|r| r.start < cut && (r.end > cut || (hold_at_end && r.end >= total)))
            .map(|r| r.start)
            .min();
        match blocking {
            Some(start) => {
                let t = start.saturating_sub(ctx);
                if t >= target {
                    return target;
                }
                target = t;
                if target == 0 {
                    return 0;
                }
            }
            None => return target,
        }
    }
}

/// Start of the line containing `pos`.
fn line_start(text: &[u8], pos: usize) -> usize {
    text[..pos]
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |i| i + 1)
}

/// Start of the run of non-whitespace bytes that ends at the end of `text`.
fn trailing_run_start(text: &[u8]) -> usize {
    text.iter()
        .rposition(u8::is_ascii_whitespace)
        .map_or(0, |i| i + 1)
}

/// Start of the run of non-whitespace bytes containing `pos` (`pos` itself if it follows one).
fn run_start(text: &[u8], pos: usize) -> usize {
    text[..pos]
        .iter()
        .rposition(u8::is_ascii_whitespace)
        .map_or(0, |i| i + 1)
}

/// Moves a cut back so it does not split a UTF-8 character.
fn char_boundary_back(text: &[u8], mut cut: usize) -> usize {
    let floor = cut.saturating_sub(3);
    while cut > floor && cut < text.len() && (text[cut] & 0xC0) == 0x80 {
        cut -= 1;
    }
    cut
}
