//! Redacting writers for logs: [`RedactingStderr`] is a `tracing_subscriber::fmt::MakeWriter`
//! whose writers redact each event before it reaches stderr.

use super::{Redactor, StreamRedactor};
use std::io::{self, Write};
use std::sync::Arc;
use tracing_subscriber::fmt::MakeWriter;

/// A `MakeWriter` for `tracing_subscriber::fmt` that redacts every log event before writing it
/// to stderr:
///
/// ```ignore
/// tracing_subscriber::fmt().with_writer(RedactingStderr::new(redactor)).init();
/// ```
#[derive(Debug, Clone)]
pub struct RedactingStderr {
    redactor: Arc<Redactor>,
}

impl RedactingStderr {
    pub fn new(redactor: Arc<Redactor>) -> Self {
        RedactingStderr { redactor }
    }
}

impl<'a> MakeWriter<'a> for RedactingStderr {
    type Writer = RedactingWriter<io::Stderr>;

    fn make_writer(&'a self) -> Self::Writer {
        RedactingWriter::new(&self.redactor, io::stderr())
    }
}

/// Redacts what is written through it and passes it to `inner`. `fmt` makes one per event:
/// complete lines are written as soon as they are complete (one `write_all` per event in
/// practice), the rest when the writer is dropped. A secret split across `write` calls is still
/// caught (it is a [`StreamRedactor`]).
#[derive(Debug)]
pub struct RedactingWriter<W: Write> {
    stream: StreamRedactor,
    inner: W,
}

impl<W: Write> RedactingWriter<W> {
    pub fn new(redactor: &Arc<Redactor>, inner: W) -> Self {
        RedactingWriter {
            stream: redactor.stream(),
            inner,
        }
    }

    fn finish(&mut self) -> io::Result<()> {
        let out = self.stream.finish();
        if !out.is_empty() {
            self.inner.write_all(&out)?;
        }
        self.inner.flush()
    }
}

impl<W: Write> Write for RedactingWriter<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let out = self.stream.push(data);
        if !out.is_empty() {
            self.inner.write_all(&out)?;
        }
        Ok(data.len())
    }

    /// Flushes the inner writer. Bytes held back (a partial line) stay held until more arrives
    /// or the writer is dropped: releasing them early could release half a secret.
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<W: Write> Drop for RedactingWriter<W> {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
