//! A sandbox's output stream (its terminal, or its stderr), read by the session's own task.
//!
//! There is no reader task per stream: the session reads its streams where it waits for them
//! (a cell's watch loop, the start-up handshake, the end of a sandbox), so that a chunk of
//! output wakes one task, not a pump and then, through a channel, the session (on a
//! multi-thread runtime that hand-over often crossed threads: 0.01-0.02 ms of every warm cell).
//!
//! Between cells nothing reads: what the sandbox writes then waits in the kernel's buffer (a
//! PTY's or a pipe's), and a writer that fills it blocks until the next cell, which discards
//! it first ([`OutputPipe::discard_pending`]): output from between cells belongs to no cell.

use crate::backend::Reader;
use crate::pipeline::output::BoundedCapture;
use futures_util::FutureExt;
use std::time::Duration;
use tokio::io::AsyncReadExt;

/// The most read at once (a chunk).
const CHUNK: usize = 64 * 1024;

pub(super) struct OutputPipe {
    reader: Reader,
    buf: Vec<u8>,
    ended: bool,
}

impl OutputPipe {
    pub(super) fn new(reader: Reader) -> Self {
        OutputPipe {
            reader,
            // Filled through its spare capacity: a zeroed buffer would fault in all of its
            // pages at every session start, where most cells print a few bytes.
            buf: Vec::new(),
            ended: false,
        }
    }

    /// The next chunk, or `None` once the stream has ended (EOF, or the EIO of a PTY whose
    /// other side is gone). Cancel-safe (`read_buf` is): a `select!` that takes another
    /// branch loses nothing.
    pub(super) async fn recv(&mut self) -> Option<&[u8]> {
        if self.ended {
            return None;
        }
        self.buf.clear();
        self.buf.reserve(CHUNK);
        match self.reader.read_buf(&mut self.buf).await {
            Ok(n) if n > 0 => Some(&self.buf[..n]),
            _ => {
                self.ended = true;
                None
            }
        }
    }

    /// Reads and drops what is readable now, without waiting (a background process's output
    /// from between cells). Stops after 16 reads, so a writer that never stops
    /// cannot hold the next cell back; what it writes later is that cell's output.
    pub(super) fn discard_pending(&mut self) {
        for _ in 0..16 {
            match self.recv().now_or_never() {
                Some(Some(_)) => continue,
                _ => return,
            }
        }
    }

    /// Everything the stream still gives within `wait`, into `cap` (which keeps its head and
    /// tail): a sandbox's last words, when it ended before it was ready.
    pub(super) async fn collect_into(&mut self, cap: &mut BoundedCapture, wait: Duration) {
        let _ = tokio::time::timeout(wait, async {
            while let Some(c) = self.recv().await {
                cap.push(c);
            }
        })
        .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncWriteExt;

    #[tokio::test]
    async fn reads_chunks_then_ends() {
        let (r, mut w) = tokio::io::duplex(1024);
        let mut p = OutputPipe::new(Box::new(r));
        w.write_all(b"hello").await.unwrap();
        assert_eq!(p.recv().await, Some(&b"hello"[..]));
        drop(w);
        assert_eq!(p.recv().await, None);
        // An ended stream stays ended without reading again.
        assert_eq!(p.recv().await, None);
    }

    #[tokio::test]
    async fn discard_pending_drops_what_is_there_and_does_not_wait() {
        let (r, mut w) = tokio::io::duplex(1024);
        let mut p = OutputPipe::new(Box::new(r));
        w.write_all(b"from between cells").await.unwrap();
        p.discard_pending();
        // Nothing left, and the writer is still there: this would wait if anything had
        // been kept, so a short timeout shows the old bytes are gone.
        let next = tokio::time::timeout(Duration::from_millis(50), p.recv()).await;
        assert!(next.is_err(), "old output was not discarded");
        w.write_all(b"cell").await.unwrap();
        assert_eq!(p.recv().await, Some(&b"cell"[..]));
    }

    #[tokio::test]
    async fn collect_into_reads_to_the_end_within_the_capture_limit() {
        let (r, mut w) = tokio::io::duplex(1 << 16);
        let mut p = OutputPipe::new(Box::new(r));
        w.write_all(&[b'x'; 5000]).await.unwrap();
        w.write_all(b"the end").await.unwrap();
        drop(w);
        let mut cap = BoundedCapture::new(100);
        p.collect_into(&mut cap, Duration::from_secs(5)).await;
        assert!(cap.truncated());
        assert!(cap.finish().ends_with("the end"));
        assert_eq!(p.recv().await, None);
    }
}
