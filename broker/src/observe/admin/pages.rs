//! The GET pages: plugins, one plugin, LLM sources, chat. Each reads the broker's
//! state at request time and renders it; every value that came from a plugin, a
//! manifest, a source or a log is escaped ([`esc`]).

use std::fmt::Write as _;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hearth_proto::v1::PluginState;

use super::html::{button_form, duration, esc, or_dash, seg, Nav};
use super::settings;
use super::AdminState;
use crate::supervisor::PluginSnapshot;

/// `ready`, `crashed`, … as `hearth plugins list` says it.
pub(super) fn state_name(state: PluginState) -> String {
    state
        .as_str_name()
        .trim_start_matches("PLUGIN_STATE_")
        .to_lowercase()
}

fn state_badge(s: &PluginSnapshot) -> String {
    let name = state_name(s.state);
    format!(r#"<span class="state {name}">{name}</span>"#)
}

fn uptime(s: &PluginSnapshot) -> String {
    s.uptime.map(duration).unwrap_or_else(|| "-".into())
}

fn pid(s: &PluginSnapshot) -> String {
    if s.pid == 0 {
        "-".into()
    } else {
        s.pid.to_string()
    }
}

/// The restart / reload / unload buttons of plugin `name`; `back` returns to its page.
fn plugin_buttons(name: &str, csrf: &str, back: bool) -> String {
    let base = format!("/plugins/{}", seg(name));
    let fields: &[(&str, &str)] = if back { &[("back", "1")] } else { &[] };
    let form = |op: &str, label: &str, confirm: Option<String>| {
        button_form(
            &format!("{base}/{op}"),
            csrf,
            label,
            confirm.as_deref(),
            fields,
        )
    };
    format!(
        "{}{}{}",
        form("restart", "Restart", None),
        form("reload", "Reload", None),
        form(
            "unload",
            "Unload",
            Some(format!(
                "Unload plugin {name}? Its tools go away until it is loaded again."
            ))
        ),
    )
}

/// `GET /`: the plugins table.
pub(super) async fn plugins(State(admin): AdminState, headers: HeaderMap) -> Response {
    let session = match admin.page_session(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let mut snapshots = admin.http.supervisor.snapshots();
    snapshots.sort_by(|a, b| a.name.cmp(&b.name));
    let mut rows = String::new();
    for s in &snapshots {
        let reason = if s.reason.is_empty() {
            String::new()
        } else {
            format!(r#"<div class="reason">{}</div>"#, esc(&s.reason))
        };
        let tools = if s.tools.is_empty() {
            "-".to_string()
        } else {
            s.tools
                .iter()
                .map(|t| format!("<code>{}</code>", esc(t)))
                .collect::<Vec<_>>()
                .join(" ")
        };
        let _ = write!(
            rows,
            r#"<tr data-plugin="{name}"><td class="name"><a href="/plugins/{link}">{name}</a></td><td class="state-cell">{state}{reason}</td><td class="pid">{pid}</td><td class="restarts">{restarts}</td><td class="uptime">{uptime}</td><td class="last-exit">{last_exit}</td><td class="sandbox">{sandbox}</td><td class="tools">{tools}</td><td class="actions">{buttons}</td></tr>"#,
            name = esc(&s.name),
            link = seg(&s.name),
            state = state_badge(s),
            pid = pid(s),
            restarts = s.restarts,
            uptime = uptime(s),
            last_exit = or_dash(&s.last_exit),
            sandbox = esc(&s.sandbox.to_string()),
            buttons = plugin_buttons(&s.name, &session.csrf, false),
        );
    }
    let body = if snapshots.is_empty() {
        "<p>No plugins are loaded (<code>hearth run --plugins DIR</code>, or <code>hearth plugins load DIR</code>).</p>".to_string()
    } else {
        format!(
            r#"<p class="help"><a href="/">Refresh</a> · {} loaded</p>
<table class="plugins"><thead><tr><th>Plugin</th><th>State</th><th>PID</th><th>Restarts</th><th>Uptime</th><th>Last exit</th><th>Sandbox</th><th>Tools</th><th></th></tr></thead><tbody>{rows}</tbody></table>"#,
            crate::term::count(snapshots.len(), "plugin", "plugins")
        )
    };
    admin
        .render(&session, "Plugins", Nav::Plugins, &body)
        .into_response()
}

/// `GET /plugins/{name}`: status, tools, settings, live log.
pub(super) async fn plugin(
    State(admin): AdminState,
    Path(name): Path<String>,
    headers: HeaderMap,
) -> Response {
    let session = match admin.page_session(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let Some(s) = admin
        .http
        .supervisor
        .snapshots()
        .into_iter()
        .find(|s| s.name == name)
    else {
        let body = format!(
            r#"<p class="flash error">No plugin named <code>{}</code> is loaded.</p><p><a href="/">All plugins</a></p>"#,
            esc(&name)
        );
        return (
            StatusCode::NOT_FOUND,
            admin.render(&session, "Unknown plugin", Nav::Plugins, &body),
        )
            .into_response();
    };
    let settings = settings::section(&admin, &session, &name, None).await;
    let body = plugin_body(&s, &admin, &session.csrf, &settings);
    admin
        .render(&session, &format!("Plugin {name}"), Nav::Plugins, &body)
        .into_response()
}

/// The body of a plugin's page around its (rendered) settings section.
pub(super) fn plugin_body(
    s: &PluginSnapshot,
    admin: &super::Admin,
    csrf: &str,
    settings: &str,
) -> String {
    let mut facts = String::new();
    let mut fact = |label: &str, value: String| {
        let _ = write!(facts, "<dt>{label}</dt><dd>{value}</dd>");
    };
    fact("State", state_badge(s));
    if !s.reason.is_empty() {
        fact("Reason", esc(&s.reason));
    }
    fact("PID", format!(r#"<span class="pid">{}</span>"#, pid(s)));
    fact(
        "Restarts",
        format!(r#"<span class="restarts">{}</span>"#, s.restarts),
    );
    fact("Uptime", uptime(s));
    fact(
        "Start-up",
        s.startup.map(duration).unwrap_or_else(|| "-".into()),
    );
    fact("Last exit", or_dash(&s.last_exit));
    fact("Sandbox", esc(&s.sandbox.to_string()));
    fact("Runtime", or_dash(&s.runtime));
    fact("Version", or_dash(&s.version));
    fact("SDK", or_dash(&s.sdk));
    fact("Directory", format!("<code>{}</code>", or_dash(&s.dir)));
    if s.attached {
        fact("Attached", "yes (started by hand)".into());
    }
    let mut tools = String::new();
    for t in admin
        .http
        .supervisor
        .registry()
        .list()
        .into_iter()
        .filter(|t| t.plugin == s.name)
    {
        let _ = write!(
            tools,
            "<li><code>{}</code> — {}</li>",
            esc(&t.name),
            or_dash(&t.description)
        );
    }
    if tools.is_empty() {
        tools = "<li>none</li>".into();
    }
    format!(
        r#"<p><a href="/">← All plugins</a></p>
<div class="actions">{buttons}</div>
<dl class="facts">{facts}</dl>
<h2>Tools</h2><ul class="tools">{tools}</ul>
{settings}
<h2>Log</h2>
<p class="help">The last lines, then live.</p>
<pre id="log" class="log" data-src="/plugins/{link}/logs" aria-live="polite"></pre>
<noscript><p>The live log needs JavaScript.</p></noscript>"#,
        buttons = plugin_buttons(&s.name, csrf, true),
        link = seg(&s.name),
    )
}

/// `GET /llm`: the sources with their state and cooldowns.
pub(super) async fn llm(State(admin): AdminState, headers: HeaderMap) -> Response {
    let session = match admin.page_session(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let statuses = admin.http.sources.statuses();
    let mut rows = String::new();
    for s in &statuses {
        let cooldown = s
            .cooldown
            .map(|d| format!("{} left", duration(d)))
            .unwrap_or_else(|| "-".into());
        let limit = if s.source.max_concurrent == 0 {
            "no limit".to_string()
        } else {
            s.source.max_concurrent.to_string()
        };
        let current = if s.current {
            r#"<span class="state ready">current</span>"#.to_string()
        } else {
            button_form(
                "/llm/use",
                &session.csrf,
                "Use first",
                None,
                &[("source", &s.source.name)],
            )
        };
        let _ = write!(
            rows,
            r#"<tr data-source="{name}"><td class="name">{name}</td><td><span class="state {state}">{state}</span></td><td class="cooldown">{cooldown}</td><td class="failures">{failures}</td><td class="last-error">{last_error}</td><td><code>{model}</code></td><td>{adapter}</td><td><code>{base_url}</code></td><td>{priority}</td><td>{in_flight} / {limit}, {waiting} waiting</td><td>{current}</td></tr>"#,
            name = esc(&s.source.name),
            state = esc(s.state),
            failures = s.failures,
            last_error = or_dash(&s.last_error),
            model = esc(&s.source.model),
            adapter = esc(&s.source.adapter),
            base_url = esc(&s.source.base_url),
            priority = match s.source.priority {
                i64::MIN => "first".to_string(),
                p => p.to_string(),
            },
            in_flight = s.in_flight,
            waiting = s.waiting,
        );
    }
    let body = if statuses.is_empty() {
        "<p>No LLM source is configured (<code>--llm-url</code>, or <code>[[llm.sources]]</code> in <code>hearth.toml</code>).</p>".to_string()
    } else {
        format!(
            r#"<p class="help"><a href="/llm">Refresh</a> · tried in this order; a source that fails cools down, then is tried again.</p>
<table class="sources"><thead><tr><th>Source</th><th>State</th><th>Cooldown</th><th>Failures</th><th>Last error</th><th>Model</th><th>Adapter</th><th>Base URL</th><th>Priority</th><th>In flight</th><th></th></tr></thead><tbody>{rows}</tbody></table>"#
        )
    };
    admin
        .render(&session, "LLM sources", Nav::Llm, &body)
        .into_response()
}

/// `GET /chat`: the chat box (admin.js posts it and shows the streamed turn).
pub(super) async fn chat(State(admin): AdminState, headers: HeaderMap) -> Response {
    let session = match admin.page_session(&headers) {
        Ok(s) => s,
        Err(r) => return r.into_response(),
    };
    let body = format!(
        r#"<p class="help">You speak as user <code>{user}</code> on channel <code>{channel}</code>: one conversation, kept like any other. Tools that need a confirmation are not run from here.</p>
<div id="chat-log" class="chat-log" aria-live="polite"></div>
<form id="chat-form" method="post" action="/chat" class="chat">{csrf}
<textarea name="message" id="chat-message" rows="3" required placeholder="Message"></textarea>
<button type="submit">Send</button>
</form>
<noscript><p>The chat needs JavaScript.</p></noscript>"#,
        csrf = super::html::csrf_field(&session.csrf),
        user = super::live::CHAT_USER,
        channel = super::live::CHAT_CHANNEL,
    );
    admin
        .render(&session, "Chat", Nav::Chat, &body)
        .into_response()
}
