//! Reading a streamed answer: bytes as they arrive → frames (SSE events or NDJSON lines)
//! → the adapter's `transform_stream_chunk` → the [`Assembly`] of the whole answer.
//!
//! The framing is ours, not an SSE crate's, because the providers' streams need:
//! - Lines that end in LF, CRLF or a lone CR. A CR ends its line at once (an LF right
//!   after it is skipped, even in the next read), so no event waits for more bytes.
//! - At the end of the bytes, the last line without its line end and the last event
//!   without its closing blank line are delivered (Gemini's last event, the one with
//!   `finishReason`, may come so), not dropped.
//! - Lines are cut before UTF-8 is decoded, so a character split across reads is whole.
//! - `event: error` is the API's error: the adapter reads its data first (and raises the
//!   API's typed error), else the data is the error's message.
//!
//! The answer ends at `[DONE]` or at the end of the bytes. A stream that ends without
//! `[DONE]` after a tool call began, but before a finish reason (or `done`) came, was cut
//! in the middle of that call: an error, never a shorter answer.

use crate::adapters::{
    Adapter, AdapterError, CompletionResponse, Session, StreamFormat, UpstreamError,
};

use super::{quote, Assembly, Delta};

/// Why a stream could not be read to its end.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StreamError {
    /// The adapter failed on a chunk.
    #[error("{0}")]
    Adapter(AdapterError),
    /// The API sent an error inside the stream.
    #[error("{0}")]
    Upstream(Box<UpstreamError>),
    /// The stream ended before the answer did.
    #[error("{0}")]
    Cut(String),
}

/// Replays a captured stream (the bytes as the API sent them) through `adapter` as a
/// live answer is read: the same framing, chunk transform, assembly and end rules.
pub fn replay_stream(adapter: &Adapter, bytes: Vec<u8>) -> Result<CompletionResponse, StreamError> {
    replay_reads(adapter, [bytes.as_slice()])
}

/// [`replay_stream`] of a body that arrives in `reads`.
pub(crate) fn replay_reads<'b>(
    adapter: &Adapter,
    reads: impl IntoIterator<Item = &'b [u8]>,
) -> Result<CompletionResponse, StreamError> {
    let session = adapter.session();
    let mut reader = Reader::new(&session);
    let mut ignore = |_: Delta| {};
    for bytes in reads {
        if reader.feed(bytes, &mut ignore)? {
            break;
        }
    }
    reader.finish(&mut ignore)
}

/// Splits bytes into lines ending in LF, CRLF or CR, across reads.
#[derive(Debug, Default)]
struct Lines {
    partial: Vec<u8>,
    /// The last byte seen was a CR: an LF now belongs to it.
    after_cr: bool,
}

impl Lines {
    /// The lines `bytes` completes, without their line ends.
    fn feed(&mut self, mut bytes: &[u8]) -> Vec<String> {
        let mut out = Vec::new();
        if bytes.is_empty() {
            return out;
        }
        if self.after_cr && bytes[0] == b'\n' {
            bytes = &bytes[1..];
        }
        self.after_cr = false;
        while let Some(i) = bytes.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.partial.extend_from_slice(&bytes[..i]);
            out.push(String::from_utf8_lossy(&self.partial).into_owned());
            self.partial.clear();
            let crlf = bytes[i] == b'\r' && bytes.get(i + 1) == Some(&b'\n');
            if bytes[i] == b'\r' && i + 1 == bytes.len() {
                self.after_cr = true;
            }
            bytes = &bytes[i + 1 + usize::from(crlf)..];
        }
        self.partial.extend_from_slice(bytes);
        out
    }

    /// The last line, when the bytes ended without a line end.
    fn rest(&mut self) -> Option<String> {
        if self.partial.is_empty() {
            return None;
        }
        let line = String::from_utf8_lossy(&self.partial).into_owned();
        self.partial.clear();
        Some(line)
    }
}

/// One payload for the adapter: an SSE event's type and data, or an NDJSON line.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Frame {
    event: String,
    data: String,
}

/// The fields of the SSE event being read (WHATWG "event stream interpretation";
/// `id` and `retry` do not matter here).
#[derive(Debug, Default)]
struct SseEvent {
    event: String,
    data: String,
    has_data: bool,
    started: bool,
}

impl SseEvent {
    /// Takes one line; a blank line completes the event.
    fn line(&mut self, mut line: &str) -> Option<Frame> {
        if !self.started {
            self.started = true;
            line = line.strip_prefix('\u{feff}').unwrap_or(line);
        }
        if line.is_empty() {
            return self.dispatch();
        }
        if line.starts_with(':') {
            return None; // a comment (keep-alive)
        }
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (line, ""),
        };
        match name {
            "event" => self.event = value.to_owned(),
            "data" => {
                if self.has_data {
                    self.data.push('\n');
                }
                self.data.push_str(value);
                self.has_data = true;
            }
            _ => {}
        }
        None
    }

    /// The event read so far, if it has data; the fields start afresh.
    fn dispatch(&mut self) -> Option<Frame> {
        let event = std::mem::take(&mut self.event);
        let data = std::mem::take(&mut self.data);
        std::mem::take(&mut self.has_data).then_some(Frame { event, data })
    }
}

/// A streamed answer being read.
pub(crate) struct Reader<'a> {
    /// The completion's session: every chunk goes to its one VM.
    adapter: &'a Session<'a>,
    format: StreamFormat,
    lines: Lines,
    sse: SseEvent,
    acc: Assembly,
    /// A finish reason or `done` came.
    finished: bool,
    /// `[DONE]` came: nothing after it is read.
    closed: bool,
    /// The latest tool call begun, to name it when the stream is cut: (name, id).
    call: Option<(String, String)>,
}

impl<'a> Reader<'a> {
    pub(crate) fn new(adapter: &'a Session<'a>) -> Reader<'a> {
        Reader {
            adapter,
            format: adapter.adapter().stream_format(),
            lines: Lines::default(),
            sse: SseEvent::default(),
            acc: Assembly::default(),
            finished: false,
            closed: false,
            call: None,
        }
    }

    /// Reads `bytes`, the next part of the body. `Ok(true)`: `[DONE]` came, the answer
    /// is complete.
    pub(crate) fn feed(
        &mut self,
        bytes: &[u8],
        on_delta: &mut impl FnMut(Delta),
    ) -> Result<bool, StreamError> {
        for line in self.lines.feed(bytes) {
            if let Some(frame) = self.frame_of(&line) {
                self.handle(&frame, on_delta)?;
                if self.closed {
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// The body ended: what is pending is delivered, then the whole answer, or the error
    /// of a stream cut in the middle of an event or a tool call.
    pub(crate) fn finish(
        mut self,
        on_delta: &mut impl FnMut(Delta),
    ) -> Result<CompletionResponse, StreamError> {
        if !self.closed {
            let rest = self.lines.rest();
            let unterminated = rest.is_some();
            let mut frames: Vec<Frame> = rest.and_then(|l| self.frame_of(&l)).into_iter().collect();
            if self.format == StreamFormat::Sse {
                frames.extend(self.sse.dispatch());
            }
            for frame in frames {
                match self.handle(&frame, on_delta) {
                    // A last line cut short reads as broken JSON: say what happened.
                    Err(StreamError::Adapter(e)) if unterminated => {
                        return Err(StreamError::Cut(format!(
                            "the stream ended in the middle of an event ({e})"
                        )))
                    }
                    other => other?,
                }
            }
        }
        if !self.closed && !self.finished {
            if let Some((name, id)) = &self.call {
                let id = match id.is_empty() {
                    true => String::new(),
                    false => format!(" ({id})"),
                };
                return Err(StreamError::Cut(format!(
                    "the stream ended in the middle of tool call {name}{id}: no finish reason came"
                )));
            }
        }
        self.adapter.stream_ended();
        Ok(self.acc.finish())
    }

    fn frame_of(&mut self, line: &str) -> Option<Frame> {
        match self.format {
            StreamFormat::Sse => self.sse.line(line),
            StreamFormat::Ndjson => Some(Frame {
                event: String::new(),
                data: line.to_owned(),
            }),
        }
    }

    fn handle(
        &mut self,
        frame: &Frame,
        on_delta: &mut impl FnMut(Delta),
    ) -> Result<(), StreamError> {
        let data = frame.data.trim();
        if data == "[DONE]" {
            self.closed = true;
            return Ok(());
        }
        let error_event = frame.event == "error";
        if data.is_empty() && !error_event {
            return Ok(());
        }
        // An `event: error` the adapter does not raise as the API's error is one anyway.
        let untyped = || {
            StreamError::Upstream(Box::new(UpstreamError::message(match data.is_empty() {
                true => "error event without data".to_owned(),
                false => quote(data),
            })))
        };
        let chunk = match self.adapter.transform_stream_chunk(data) {
            Err(AdapterError::Upstream { error, .. }) => return Err(StreamError::Upstream(error)),
            Err(_) | Ok(_) if error_event => return Err(untyped()),
            Err(e) => return Err(StreamError::Adapter(e)),
            Ok(None) => return Ok(()),
            Ok(Some(chunk)) => chunk,
        };
        if chunk.done
            || chunk
                .finish_reason
                .as_deref()
                .is_some_and(|r| !r.is_empty())
        {
            self.finished = true;
        }
        for d in &chunk.tool_calls {
            let name = d.name.as_deref().filter(|n| !n.is_empty());
            match (&mut self.call, name) {
                (_, Some(name)) => {
                    self.call = Some((name.to_owned(), d.id.clone().unwrap_or_default()))
                }
                (None, None) => self.call = Some(("(unnamed)".to_owned(), String::new())),
                (Some(_), None) => {}
            }
        }
        self.acc.add(chunk, on_delta);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lines(reads: &[&[u8]]) -> (Vec<String>, Option<String>) {
        let mut l = Lines::default();
        let mut out = Vec::new();
        for r in reads {
            out.extend(l.feed(r));
        }
        (out, l.rest())
    }

    #[test]
    fn line_ends_lf_crlf_and_cr_across_reads() {
        let want: Vec<String> = ["a", "b", "", "c", "d"].map(String::from).to_vec();
        for body in [
            &b"a\nb\n\nc\nd"[..],
            b"a\r\nb\r\n\r\nc\r\nd",
            b"a\rb\r\rc\rd",
            b"a\r\nb\r\rc\nd",
        ] {
            // Every split of the body into two reads, CR|LF splits included.
            for cut in 0..=body.len() {
                let (got, rest) = lines(&[&body[..cut], &body[cut..]]);
                let mut got = got;
                got.extend(rest);
                assert_eq!(
                    got,
                    want,
                    "{:?} cut at {cut}",
                    String::from_utf8_lossy(body)
                );
            }
        }
        // A CR ends its line at once: nothing waits for the next read.
        assert_eq!(lines(&[b"data: x\r"]).0, ["data: x"]);
        // UTF-8 split across reads stays whole.
        let text = "data: 天气\n".as_bytes();
        assert_eq!(lines(&[&text[..8], &text[8..]]).0, ["data: 天气"]);
    }

    fn events(body: &[u8]) -> Vec<Frame> {
        let mut l = Lines::default();
        let mut e = SseEvent::default();
        let mut out: Vec<Frame> = l.feed(body).iter().filter_map(|x| e.line(x)).collect();
        out.extend(l.rest().and_then(|x| e.line(&x)));
        out.extend(e.dispatch());
        out
    }

    #[test]
    fn sse_fields_comments_multiline_data_and_a_pending_last_event() {
        let frame = |event: &str, data: &str| Frame {
            event: event.into(),
            data: data.into(),
        };
        let got = events(
            "\u{feff}: keep-alive\r\revent: error\rdata: {\"a\":\r\rdata:1\ndata: 2\nid: 7\nretry: 9\n\n\
             event: ping\n\ndata\n\ndata: last"
                .as_bytes(),
        );
        assert_eq!(
            got,
            [
                frame("error", "{\"a\":"),
                frame("", "1\n2"),
                frame("", ""),
                frame("", "last"),
            ]
        );
    }
}
