//! Output limits: a cell's streams are read as they come into a [`BoundedCapture`] that keeps a
//! head and a tail within the byte limit and counts what it dropped, so memory stays flat under an
//! output flood of any size. [`MarkerScanner`] finds a cell's end marker in a byte stream even
//! when the marker is split across reads.

/// Keeps the first `limit/2` and the last `limit/2` bytes of a stream and counts the rest.
#[derive(Debug)]
pub struct BoundedCapture {
    head: Vec<u8>,
    head_cap: usize,
    tail: std::collections::VecDeque<u8>,
    tail_cap: usize,
    dropped: u64,
}

impl BoundedCapture {
    pub fn new(limit: usize) -> Self {
        let head_cap = limit / 2;
        BoundedCapture {
            head: Vec::with_capacity(head_cap.min(64 * 1024)),
            head_cap,
            tail: std::collections::VecDeque::new(),
            tail_cap: limit - head_cap,
            dropped: 0,
        }
    }

    pub fn push(&mut self, mut data: &[u8]) {
        let room = self.head_cap - self.head.len();
        if room > 0 {
            let n = room.min(data.len());
            self.head.extend_from_slice(&data[..n]);
            data = &data[n..];
        }
        if data.is_empty() {
            return;
        }
        if data.len() >= self.tail_cap {
            self.dropped += (self.tail.len() + data.len() - self.tail_cap) as u64;
            self.tail.clear();
            self.tail.extend(&data[data.len() - self.tail_cap..]);
            return;
        }
        let overflow = (self.tail.len() + data.len()).saturating_sub(self.tail_cap);
        self.tail.drain(..overflow);
        self.dropped += overflow as u64;
        self.tail.extend(data);
    }

    /// Bytes that did not fit and were dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    pub fn truncated(&self) -> bool {
        self.dropped > 0
    }

    /// The kept text, with a notice where bytes were dropped; invalid UTF-8 is replaced.
    pub fn finish(self) -> String {
        let mut out = String::from_utf8_lossy(&self.head).into_owned();
        if self.dropped > 0 {
            out.push_str(&format!(
                "\n[... sandpit: {} bytes of output truncated ...]\n",
                self.dropped
            ));
        }
        let (a, b) = self.tail.as_slices();
        let mut tail = Vec::with_capacity(a.len() + b.len());
        tail.extend_from_slice(a);
        tail.extend_from_slice(b);
        out.push_str(&String::from_utf8_lossy(&tail));
        out
    }
}

/// Finds `marker` in a stream fed chunk by chunk. Bytes that might be the start of a marker are
/// held back until the next chunk decides.
#[derive(Debug)]
pub struct MarkerScanner {
    marker: Vec<u8>,
    held: Vec<u8>,
    found: bool,
}

impl MarkerScanner {
    pub fn new(marker: Vec<u8>) -> Self {
        MarkerScanner {
            marker,
            held: Vec::new(),
            found: false,
        }
    }

    pub fn found(&self) -> bool {
        self.found
    }

    /// Feeds a chunk; calls `emit` with the bytes that are certainly output (before the marker).
    /// After the marker is found, everything else is ignored.
    pub fn feed(&mut self, chunk: &[u8], mut emit: impl FnMut(&[u8])) {
        if self.found {
            return;
        }
        let mut buf = std::mem::take(&mut self.held);
        buf.extend_from_slice(chunk);
        if let Some(pos) = find(&buf, &self.marker) {
            emit(&buf[..pos]);
            self.found = true;
            return;
        }
        // Hold back the longest suffix that is a prefix of the marker.
        let max = (self.marker.len() - 1).min(buf.len());
        let keep = (1..=max)
            .rev()
            .find(|&n| buf[buf.len() - n..] == self.marker[..n])
            .unwrap_or(0);
        emit(&buf[..buf.len() - keep]);
        self.held = buf[buf.len() - keep..].to_vec();
    }

    /// The bytes still held back (for a stream that ended without a marker).
    pub fn flush(&mut self, mut emit: impl FnMut(&[u8])) {
        emit(&std::mem::take(&mut self.held));
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_output_is_kept_whole() {
        let mut c = BoundedCapture::new(100);
        c.push(b"hello ");
        c.push(b"world");
        assert!(!c.truncated());
        assert_eq!(c.finish(), "hello world");
    }

    #[test]
    fn flood_keeps_head_and_tail_and_counts() {
        let mut c = BoundedCapture::new(10);
        for i in 0..100_000u32 {
            c.push(format!("{:08}\n", i).as_bytes());
        }
        assert_eq!(c.dropped(), 900_000 - 10);
        let s = c.finish();
        assert!(s.starts_with("00000"), "{s}");
        assert!(s.ends_with("9999\n"), "{s}");
        assert!(s.contains("899990 bytes of output truncated"), "{s}");
    }

    #[test]
    fn invalid_utf8_is_replaced() {
        let mut c = BoundedCapture::new(100);
        c.push(&[b'a', 0xff, 0xfe, b'b']);
        assert_eq!(c.finish(), "a\u{fffd}\u{fffd}b");
    }

    #[test]
    fn marker_split_across_chunks_is_found() {
        let marker = b"\x1esandpit-end:abc\x1e".to_vec();
        let stream = b"out put\x1esandpit-end:abc\x1etrailing".to_vec();
        for split in 0..stream.len() {
            let mut s = MarkerScanner::new(marker.clone());
            let mut got = Vec::new();
            s.feed(&stream[..split], |b| got.extend_from_slice(b));
            s.feed(&stream[split..], |b| got.extend_from_slice(b));
            assert!(s.found(), "split {split}");
            assert_eq!(got, b"out put", "split {split}");
        }
    }

    #[test]
    fn wrong_nonce_is_just_output() {
        let mut s = MarkerScanner::new(b"\x1esandpit-end:abc\x1e".to_vec());
        let mut got = Vec::new();
        s.feed(b"\x1esandpit-end:abd\x1e and \x1esandpit-end:ab", |b| {
            got.extend_from_slice(b)
        });
        assert!(!s.found());
        s.flush(|b| got.extend_from_slice(b));
        assert_eq!(got, b"\x1esandpit-end:abd\x1e and \x1esandpit-end:ab");
    }
}
