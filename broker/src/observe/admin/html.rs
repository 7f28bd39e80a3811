//! HTML building blocks: escaping (every plugin-provided string is untrusted: names,
//! descriptions, settings, log lines, reasons), URL path segments, the page frame and
//! small formatters. Pages are `format!` strings; nothing here knows a template
//! language.

use std::fmt::Write as _;
use std::time::Duration;

/// `s` safe as HTML text and as a double- or single-quoted attribute value.
pub(crate) fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// `s` as one URL path segment: every byte but the unreserved ones percent-encoded
/// (a plugin name with `/`, `?` or `#` stays one segment).
pub(crate) fn seg(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

/// A message shown once at the top of the next page (after a POST's redirect).
#[derive(Debug, Clone)]
pub(crate) struct Flash {
    /// An error (red) rather than a confirmation.
    pub(crate) error: bool,
    /// The text (escaped when shown).
    pub(crate) text: String,
}

impl Flash {
    pub(crate) fn ok(text: impl Into<String>) -> Flash {
        Flash {
            error: false,
            text: text.into(),
        }
    }

    pub(crate) fn error(text: impl Into<String>) -> Flash {
        Flash {
            error: true,
            text: text.into(),
        }
    }

    fn html(&self) -> String {
        let (class, role) = if self.error {
            ("flash error", "alert")
        } else {
            ("flash ok", "status")
        };
        format!(
            r#"<p class="{class}" role="{role}">{}</p>"#,
            esc(&self.text)
        )
    }
}

/// Which navigation entry is current.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nav {
    Plugins,
    Llm,
    Chat,
    None,
}

/// A whole page: `body` (already HTML) in the frame with the navigation, the logout
/// form and the session's CSRF token (hidden fields, and a `<meta>` admin.js reads for
/// its `fetch` posts). `csrf` is `None` on the login page.
pub(crate) fn page(
    title: &str,
    nav: Nav,
    csrf: Option<&str>,
    flash: Option<&Flash>,
    body: &str,
) -> String {
    let mut head_extra = String::new();
    let mut header = String::new();
    if let Some(csrf) = csrf {
        let _ = write!(
            head_extra,
            r#"<meta name="csrf-token" content="{}">"#,
            esc(csrf)
        );
        let link = |to: Nav, href: &str, label: &str| {
            let current = if nav == to {
                r#" aria-current="page""#
            } else {
                ""
            };
            format!(r#"<a href="{href}"{current}>{label}</a>"#)
        };
        header = format!(
            r#"<header><nav><span class="brand">Hearth</span>{}{}{}<form method="post" action="/logout" class="logout">{}<button type="submit">Log out</button></form></nav></header>"#,
            link(Nav::Plugins, "/", "Plugins"),
            link(Nav::Llm, "/llm", "LLM sources"),
            link(Nav::Chat, "/chat", "Chat"),
            csrf_field(csrf),
        );
    }
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">{head_extra}<title>{} · Hearth admin</title><link rel="stylesheet" href="/static/admin.css"><script src="/static/admin.js" defer></script></head>
<body>{header}<main><h1>{}</h1>{}{body}</main></body></html>
"#,
        esc(title),
        esc(title),
        flash.map(Flash::html).unwrap_or_default(),
    )
}

/// The hidden CSRF field every state-changing form carries.
pub(crate) fn csrf_field(csrf: &str) -> String {
    format!(r#"<input type="hidden" name="csrf" value="{}">"#, esc(csrf))
}

/// A one-button POST form (restart, reload, unload, use) with hidden `fields`;
/// `confirm`: a question admin.js asks before it is sent.
pub(crate) fn button_form(
    action: &str,
    csrf: &str,
    label: &str,
    confirm: Option<&str>,
    fields: &[(&str, &str)],
) -> String {
    let confirm = confirm
        .map(|c| format!(r#" data-confirm="{}""#, esc(c)))
        .unwrap_or_default();
    let hidden: String = fields
        .iter()
        .map(|(k, v)| {
            format!(
                r#"<input type="hidden" name="{}" value="{}">"#,
                esc(k),
                esc(v)
            )
        })
        .collect();
    format!(
        r#"<form method="post" action="{}" class="inline"{confirm}>{}{hidden}<button type="submit">{}</button></form>"#,
        esc(action),
        csrf_field(csrf),
        esc(label)
    )
}

/// `1h 02m`, `3m 07s`, `12s`, `850 ms`.
pub(crate) fn duration(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0 => format!("{} ms", d.as_millis()),
        1..=59 => format!("{s}s"),
        60..=3599 => format!("{}m {:02}s", s / 60, s % 60),
        3600..=86_399 => format!("{}h {:02}m", s / 3600, (s % 3600) / 60),
        _ => format!("{}d {:02}h", s / 86_400, (s % 86_400) / 3600),
    }
}

/// `-` for an empty string, else `s` escaped.
pub(crate) fn or_dash(s: &str) -> String {
    if s.is_empty() {
        "-".into()
    } else {
        esc(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc(r#"<script>alert('x')</script> & "q""#),
            "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt; &amp; &quot;q&quot;"
        );
    }

    #[test]
    fn path_segments_stay_one_segment() {
        assert_eq!(seg("calc-1_x.y"), "calc-1_x.y");
        assert_eq!(seg("a/b?c#d e"), "a%2Fb%3Fc%23d%20e");
        assert_eq!(seg("é"), "%C3%A9");
    }

    #[test]
    fn durations_read_well() {
        assert_eq!(duration(Duration::from_millis(850)), "850 ms");
        assert_eq!(duration(Duration::from_secs(12)), "12s");
        assert_eq!(duration(Duration::from_secs(187)), "3m 07s");
        assert_eq!(duration(Duration::from_secs(3720)), "1h 02m");
    }
}
