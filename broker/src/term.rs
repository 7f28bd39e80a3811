//! Text from plugins and the LLM on a terminal or in the log: control and bidi
//! characters escaped, so a tool result, a plugin's output line or a tool name cannot
//! move the cursor, clear the screen, retitle the window, reorder what follows it
//! (U+202E) or forge a log line.
//!
//! # What is escaped
//! C0 controls (U+0000–U+001F) except tab (and newline where the text may span
//! lines), DEL (U+007F), C1 controls (U+0080–U+009F) and the bidi controls U+061C,
//! U+200E, U+200F, U+202A–U+202E, U+2066–U+2069. They are written as Rust escapes:
//! `\n`, `\r`, `\x1b` for C0 and DEL, `\u{9b}`, `\u{202e}` for the others. A backslash
//! is left as it is, so escaped text reads like the source string literal it came from
//! (and a literal `\x1b` typed by a plugin looks the same as an escaped ESC: what
//! matters is that no raw control byte reaches the terminal).
//!
//! # Where
//! - The broker log ([`EscapedFields`], the field formatter of `hearth`'s log): every
//!   field value and message, single-line (a newline is `\n`), so one event stays one
//!   line. tracing-subscriber 0.3.23 escapes only part of this by itself: the message
//!   and error fields lose ESC, BEL, BS, FF, DEL and C1 (RUSTSEC-2025-0055), but keep
//!   other C0 controls (`\r`, SO, NUL…), newlines and bidi controls; `%display` fields
//!   are written as they are; `?debug` and `&str` fields are escaped by Rust's `Debug`.
//! - CLI output ([`Printer`]): when the stream is a terminal and `--raw` was not given,
//!   text from plugins and the LLM is escaped; `chat` text and tool results keep
//!   newlines and tabs. Pipes and files (and `--json`) get the text as it is.

use std::borrow::Cow;
use std::fmt::{self, Write as _};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::{MakeVisitor, VisitFmt, VisitOutput};
use tracing_subscriber::fmt::format::Writer;

/// True for a character [`escape_controls`] escapes (newline included).
fn is_escaped(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{8}' | '\u{a}'..='\u{1f}' | '\u{7f}'..='\u{9f}'
        | '\u{61c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// Writes `c` escaped: `\n`, `\r`, `\x1b` (C0, DEL), `\u{9b}` (C1, bidi).
fn write_escape(out: &mut impl fmt::Write, c: char) -> fmt::Result {
    match c {
        '\n' => out.write_str("\\n"),
        '\r' => out.write_str("\\r"),
        c if (c as u32) <= 0x7f => write!(out, "\\x{:02x}", c as u32),
        c => write!(out, "\\u{{{:x}}}", c as u32),
    }
}

fn escape_with(s: &str, keep_newlines: bool) -> Cow<'_, str> {
    let escaped = |c: char| is_escaped(c) && !(keep_newlines && c == '\n');
    let Some(first) = s.find(escaped) else {
        return Cow::Borrowed(s);
    };
    let mut out = String::with_capacity(s.len() + 8);
    out.push_str(&s[..first]);
    for c in s[first..].chars() {
        if escaped(c) {
            let _ = write_escape(&mut out, c);
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// `s` with control and bidi characters escaped (see the module doc), newlines
/// included: for one-line fields (a log field, a table cell, an error line). Tabs are
/// kept. Borrowed when there is nothing to escape.
pub fn escape_controls(s: &str) -> Cow<'_, str> {
    escape_with(s, false)
}

/// [`escape_controls`] keeping newlines: for text that may span lines (a tool result,
/// chat text).
pub fn escape_controls_text(s: &str) -> Cow<'_, str> {
    escape_with(s, true)
}

/// A [`fmt::Write`] that escapes what goes through it as [`escape_controls`] does.
pub struct EscapingWriter<W>(pub W);

impl<W: fmt::Write> fmt::Write for EscapingWriter<W> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        let mut rest = s;
        while let Some(i) = rest.find(is_escaped) {
            self.0.write_str(&rest[..i])?;
            let c = rest[i..].chars().next().expect("found at i");
            write_escape(&mut self.0, c)?;
            rest = &rest[i + c.len_utf8()..];
        }
        self.0.write_str(rest)
    }
}

/// `--raw` given: the CLI prints plugin and LLM text as it is, even on a terminal.
static RAW: AtomicBool = AtomicBool::new(false);

/// Sets `--raw` for this process (the `hearth` CLI does, once, at start).
pub fn set_raw(raw: bool) {
    RAW.store(raw, Ordering::Relaxed);
}

/// How the CLI prints text that came from plugins or the LLM on one stream: escaped on
/// a terminal, as it is on a pipe or a file or with `--raw`.
#[derive(Debug, Clone, Copy)]
pub struct Printer {
    escape: bool,
}

impl Printer {
    /// For stdout.
    pub fn stdout() -> Printer {
        Printer::new(std::io::stdout().is_terminal())
    }

    /// For stderr.
    pub fn stderr() -> Printer {
        Printer::new(std::io::stderr().is_terminal())
    }

    /// For a stream that is a terminal or not (the `--raw` setting applies).
    pub fn new(terminal: bool) -> Printer {
        Printer {
            escape: terminal && !RAW.load(Ordering::Relaxed),
        }
    }

    /// Whether this printer escapes.
    pub fn escapes(&self) -> bool {
        self.escape
    }

    /// `s` for one line: [`escape_controls`] when escaping.
    pub fn line<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if self.escape {
            escape_controls(s)
        } else {
            Cow::Borrowed(s)
        }
    }

    /// `s` that may span lines: [`escape_controls_text`] when escaping.
    pub fn text<'a>(&self, s: &'a str) -> Cow<'a, str> {
        if self.escape {
            escape_controls_text(s)
        } else {
            Cow::Borrowed(s)
        }
    }
}

/// The field formatter of the broker log: like tracing-subscriber's default (message
/// first, then `name=value` separated by spaces), every value escaped with
/// [`escape_controls`] (see the module doc). Use with
/// `tracing_subscriber::fmt().fmt_fields(EscapedFields)`.
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'w> MakeVisitor<Writer<'w>> for EscapedFields {
    type Visitor = EscapedVisitor<'w>;

    fn make_visitor(&self, target: Writer<'w>) -> EscapedVisitor<'w> {
        EscapedVisitor {
            writer: target,
            first: true,
            result: Ok(()),
        }
    }
}

/// The visitor of [`EscapedFields`].
pub struct EscapedVisitor<'w> {
    writer: Writer<'w>,
    first: bool,
    result: fmt::Result,
}

impl fmt::Debug for EscapedVisitor<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EscapedVisitor").finish_non_exhaustive()
    }
}

impl Visit for EscapedVisitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.record_debug(field, &format_args!("{value}"))
        } else {
            self.record_debug(field, &value)
        }
    }

    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        let mut chain = value.to_string();
        let mut source = value.source();
        while let Some(s) = source {
            chain.push_str(": ");
            chain.push_str(&s.to_string());
            source = s.source();
        }
        self.record_debug(field, &format_args!("{chain}"))
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if self.result.is_err() {
            return;
        }
        let name = field.name();
        // `log` records' metadata, shown by the formatter itself.
        if name.starts_with("log.") {
            return;
        }
        let w = &mut self.writer;
        self.result = (|| {
            if !self.first {
                w.write_char(' ')?;
            }
            if name != "message" {
                write!(w, "{}=", name.strip_prefix("r#").unwrap_or(name))?;
            }
            write!(EscapingWriter(&mut *w), "{value:?}")
        })();
        self.first = false;
    }
}

impl VisitOutput<fmt::Result> for EscapedVisitor<'_> {
    fn finish(self) -> fmt::Result {
        self.result
    }
}

impl VisitFmt for EscapedVisitor<'_> {
    fn writer(&mut self) -> &mut dyn fmt::Write {
        &mut self.writer
    }
}

/// `n` and the noun that fits it, for messages: `count(1, "turn", "turns")` is
/// `1 turn`, `count(3, "crash", "crashes")` is `3 crashes` (no `turn(s)`).
pub fn count(n: usize, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use std::io;
    use std::sync::{Arc, Mutex};

    use super::*;

    #[test]
    fn controls_and_bidi_are_escaped_and_clean_text_is_borrowed() {
        let clean = "plain 天气 text\twith tab, ü, é, 🙂 and \\x1b typed";
        assert!(matches!(escape_controls(clean), Cow::Borrowed(_)));
        assert!(matches!(escape_controls_text("a\nb"), Cow::Borrowed(_)));

        assert_eq!(escape_controls("\x1b[2J"), "\\x1b[2J");
        assert_eq!(escape_controls("t\x1bred"), "t\\x1bred");
        assert_eq!(escape_controls("a\nb\r\n"), "a\\nb\\r\\n");
        assert_eq!(escape_controls_text("a\nb\r\n"), "a\nb\\r\n");
        assert_eq!(
            escape_controls("\0\x07\x08\x0b\x0c\x0e\x7f"),
            "\\x00\\x07\\x08\\x0b\\x0c\\x0e\\x7f"
        );
        assert_eq!(
            escape_controls("\u{80}\u{9b}31m\u{9f}"),
            "\\u{80}\\u{9b}31m\\u{9f}"
        );
        assert_eq!(
            escape_controls("abc\u{202e}fed\u{202c}"),
            "abc\\u{202e}fed\\u{202c}"
        );
        for c in [
            '\u{61c}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202d}', '\u{2066}',
            '\u{2067}', '\u{2068}', '\u{2069}',
        ] {
            let s = c.to_string();
            assert_eq!(escape_controls(&s), format!("\\u{{{:x}}}", c as u32));
        }
        // Neighbours that are not controls stay.
        for c in [
            '\u{a0}', '\u{200d}', '\u{2065}', '\u{206a}', '\u{2029}', '\u{fffd}',
        ] {
            let s = c.to_string();
            assert_eq!(escape_controls(&s), s);
        }
        // The writer agrees with the function.
        let mut out = String::new();
        writeln!(EscapingWriter(&mut out), "x\x1by\u{202e}z").unwrap();
        assert_eq!(out, "x\\x1by\\u{202e}z\\n");
    }

    #[test]
    fn printers_escape_only_terminals_without_raw() {
        let s = "a\x1b[2Jb\u{202e}c\nd";
        assert_eq!(Printer::new(false).text(s), s);
        assert!(!Printer::new(false).escapes());
        let tty = Printer::new(true);
        assert_eq!(tty.text(s), "a\\x1b[2Jb\\u{202e}c\nd");
        assert_eq!(tty.line(s), "a\\x1b[2Jb\\u{202e}c\\nd");
    }

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// What one event with hostile fields looks like in the log, with `fields` as the
    /// field formatter or tracing-subscriber's default.
    fn logged(escaped: bool) -> String {
        let buf = Buf::default();
        let out = buf.clone();
        let builder = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .without_time();
        let emit = || {
            let name = String::from("t\x1bred");
            let err = io::Error::other("bad\u{202e}\r\x0e");
            let error: &(dyn std::error::Error + 'static) = &err;
            tracing::error!(
                plugin = %name,
                sdk = ?"s\x1b",
                tool = "a\x07b",
                error,
                "line one\nfake\x1b]0;title\x07 \u{202e}\u{9b}"
            );
        };
        if escaped {
            tracing::subscriber::with_default(builder.fmt_fields(EscapedFields).finish(), emit);
        } else {
            tracing::subscriber::with_default(builder.finish(), emit);
        }
        let bytes = buf.0.lock().unwrap().clone();
        String::from_utf8(bytes).unwrap()
    }

    #[test]
    fn the_log_formatter_escapes_every_field_and_the_message() {
        // What tracing-subscriber 0.3.23 does by itself (why EscapedFields exists): the
        // message loses ESC and BEL, but keeps its newline and bidi characters, the
        // error field its \r and SO, and a Display field its ESC.
        let plain = logged(false);
        assert!(plain.contains("fake\\x1b]0;title\\x07"), "{plain:?}");
        assert!(plain.contains("plugin=t\x1bred"), "{plain:?}");
        assert!(plain.contains("line one\nfake"), "{plain:?}");
        assert!(
            plain.contains('\u{202e}') && plain.contains('\u{e}'),
            "{plain:?}"
        );

        let line = logged(true);
        assert!(
            !line.chars().any(|c| c != '\n' && is_escaped(c)),
            "raw control in {line:?}"
        );
        assert_eq!(line.matches('\n').count(), 1, "{line:?}");
        assert!(line.ends_with('\n'));
        assert!(
            line.contains(
                "line one\\nfake\\x1b]0;title\\x07 \\u{202e}\\u{9b} plugin=t\\x1bred sdk=\"s\\u{1b}\" tool=\"a\\u{7}b\" error=bad\\u{202e}\\r\\x0e"
            ),
            "{line:?}"
        );
    }
}
