//! Delivering what triggers matched (LinkZone `handleEvent`): a message a plugin's
//! trigger matches, the broker events `message` and `reply`, and the command lines
//! the LLM writes in an `ai.inject` format. Every `sender.reply` streams to the client
//! as a `PluginReply` event as it arrives.
//!
//! # Commands the LLM writes ([`run_llm_commands`], [`CommandFilter`])
//! A line of the LLM's final reply written in a plugin's inject format is delivered
//! to that plugin, and the plugin's replies take the line's place in the answer
//! (lines joined with `\n`; no reply = the line is removed; a failed handler = one
//! line `[plugin] error: …`). Commands run one after another, in the order written.
//!
//! While the reply streams, the client is not shown command lines: a line that may
//! still turn out to be a command (its start is a prefix of a command word) is held
//! back until it is known, and from the first command line on the rest of the reply
//! is held until the commands have run; it is then sent with the replies in place
//! (`PluginReply` events with `inline` set, and the text as `TextDelta`s). So the
//! streamed text of the final answer is the answer as it is kept.

use hearth_proto::v1::{chat_event::Event, HandleEvent, PluginReply, Sender, TextDelta};
use tokio::sync::mpsc;

use super::{Match, TriggerSet};
use crate::router::ToolRouter;

/// Every plugin (in load order) whose message trigger (types 0–3) `text` matches.
pub fn match_message(
    sets: &[(String, std::sync::Arc<TriggerSet>)],
    text: &str,
) -> Vec<(String, Match)> {
    sets.iter()
        .filter_map(|(plugin, set)| Some((plugin.clone(), set.match_message(text)?)))
        .collect()
}

/// Delivers broker event `name` (`message`, `reply`) with `text` to every plugin with
/// a matching event trigger; returns their replies.
pub async fn deliver_events(
    router: &ToolRouter,
    sets: &[(String, std::sync::Arc<TriggerSet>)],
    name: &str,
    text: &str,
    sender: &Sender,
    emit: &(impl Fn(Event) + Sync),
) -> Vec<String> {
    let matched: Vec<_> = sets
        .iter()
        .filter_map(|(plugin, set)| Some((plugin.clone(), set.match_event(name, text)?)))
        .collect();
    if matched.is_empty() {
        return Vec::new();
    }
    deliver_all(router, matched, text, sender, false, emit).await
}

/// Delivers `message` to each matched plugin concurrently as `HandleEvent`, emitting
/// every `sender.reply` as a `PluginReply` event (`inline`: it takes the place of an
/// LLM-written command). Returns the replies, by plugin in the given order; a failed
/// handler adds a line naming the plugin.
pub async fn deliver_all(
    router: &ToolRouter,
    matched: Vec<(String, Match)>,
    message: &str,
    sender: &Sender,
    inline: bool,
    emit: &(impl Fn(Event) + Sync),
) -> Vec<String> {
    let runs = matched.into_iter().map(|(plugin, m)| async move {
        let (tx, mut rx) = mpsc::unbounded_channel::<String>();
        let ev = HandleEvent {
            call_id: 0,
            message: message.to_string(),
            params: m.params,
            sender: Some(sender.clone()),
            trigger: Some(m.trigger),
            timeout_ms: 0,
            ..Default::default()
        };
        let span = crate::observe::trace::event_span(
            &plugin,
            ev.trigger.as_ref().map_or("", |t| t.pattern.as_str()),
        );
        let call = async {
            use opentelemetry::context::FutureExt as _;
            let call = router.handle_event(&plugin, ev, tx);
            let done = match &span {
                Some(span) => call.with_context(span.context().clone()).await,
                None => call.await,
            };
            if let (Some(span), Err(e)) = (&span, &done) {
                span.fail(e.error_type(), e.to_string());
            }
            done
        };
        let mut texts = Vec::new();
        let forward = async {
            while let Some(text) = rx.recv().await {
                emit(Event::PluginReply(PluginReply {
                    plugin: plugin.clone(),
                    text: text.clone(),
                    inline,
                }));
                texts.push(text);
            }
        };
        let (done, ()) = tokio::join!(call, forward);
        let failure = match done {
            Ok(d) if d.error.is_empty() => None,
            Ok(d) => Some(d.error),
            Err(e) => Some(e.to_string()),
        };
        if let Some(e) = failure {
            tracing::warn!(plugin = %plugin, "event handler failed: {e}");
            texts.push(format!("[{plugin}] error: {e}"));
        }
        texts
    });
    futures_util::future::join_all(runs)
        .await
        .into_iter()
        .flatten()
        .collect()
}

/// The plugin and match of `line` when it is an inject command of one of `sets`.
fn command(sets: &[(String, std::sync::Arc<TriggerSet>)], line: &str) -> Option<(String, Match)> {
    sets.iter()
        .filter(|(_, set)| set.inject.is_some())
        .find_map(|(plugin, set)| Some((plugin.clone(), set.match_llm_line(line)?)))
}

/// Delivers the inject commands among the lines of the LLM's reply `text` (see the
/// module docs) and returns the reply with each command line replaced by its
/// plugin's replies.
pub async fn run_llm_commands(
    router: &ToolRouter,
    sets: &[(String, std::sync::Arc<TriggerSet>)],
    text: &str,
    sender: &Sender,
    emit: &(impl Fn(Event) + Sync),
) -> String {
    if !sets.iter().any(|(_, s)| s.inject.is_some()) {
        return text.to_string();
    }
    let mut out: Vec<String> = Vec::new();
    let mut any = false;
    for line in text.lines() {
        let Some((plugin, m)) = command(sets, line) else {
            out.push(line.to_string());
            continue;
        };
        any = true;
        let line = line.trim().trim_matches('`').trim().to_string();
        tracing::info!(plugin = %plugin, command = %line, "LLM wrote an inject command");
        let replies = deliver_all(router, vec![(plugin, m)], &line, sender, true, emit).await;
        out.extend(replies);
    }
    if !any {
        return text.to_string();
    }
    out.join("\n").trim().to_string()
}

/// Holds inject command lines back from a streamed reply (see the module docs). Feed
/// it the text deltas of one LLM answer with [`CommandFilter::push`]; it returns what
/// may be shown now.
#[derive(Debug, Default)]
pub struct CommandFilter {
    /// Command words (`/weather`) of every inject spec.
    commands: Vec<String>,
    /// The current line, held while it may be a command.
    line: String,
    /// The current line is known not to be a command: pass it through.
    passing: bool,
    /// A command line was seen: everything from it on is held.
    holding: bool,
    /// Everything held since the first command line.
    held: String,
    /// Everything shown so far.
    shown: String,
}

impl CommandFilter {
    /// A filter for the inject formats of `sets`; a no-op when none has one.
    pub fn new(sets: &[(String, std::sync::Arc<TriggerSet>)]) -> CommandFilter {
        CommandFilter {
            commands: sets
                .iter()
                .filter_map(|(_, s)| s.inject_command().map(str::to_string))
                .collect(),
            ..CommandFilter::default()
        }
    }

    /// True when some inject format exists (otherwise `push` returns its input).
    pub fn active(&self) -> bool {
        !self.commands.is_empty()
    }

    /// Takes one text delta; returns the part that may be shown now.
    pub fn push(&mut self, delta: &str) -> String {
        if !self.active() {
            self.shown.push_str(delta);
            return delta.to_string();
        }
        if self.holding {
            self.held.push_str(delta);
            return String::new();
        }
        let mut out = String::new();
        for (i, c) in delta.char_indices() {
            if self.passing {
                out.push(c);
                if c == '\n' {
                    self.passing = false;
                }
                continue;
            }
            self.line.push(c);
            let head = self.line.trim_start().trim_start_matches('`');
            let is_command = self.commands.iter().any(|cmd| {
                head.strip_prefix(cmd.as_str())
                    .is_some_and(|rest| rest.starts_with(char::is_whitespace))
            });
            if is_command {
                self.holding = true;
                self.held = std::mem::take(&mut self.line);
                self.held.push_str(&delta[i + c.len_utf8()..]);
                break;
            }
            if c == '\n' {
                out.push_str(&std::mem::take(&mut self.line));
                continue;
            }
            // Still a prefix of a command word (or of one and the space after it).
            let undecided =
                head.is_empty() || self.commands.iter().any(|cmd| cmd.starts_with(head));
            if !undecided {
                out.push_str(&std::mem::take(&mut self.line));
                self.passing = true;
            }
        }
        self.shown.push_str(&out);
        out
    }

    /// The end of the answer without commands (it called tools, or was cut): what is
    /// still held, to be shown now.
    pub fn flush(&mut self) -> String {
        let rest = std::mem::take(&mut self.line) + &std::mem::take(&mut self.held);
        self.holding = false;
        self.passing = false;
        self.shown.push_str(&rest);
        rest
    }

    /// What the client has not seen of `answer` (the final text after commands ran),
    /// given what was shown: the part after the shown prefix. When the answer no
    /// longer starts with it (nothing to add that would read right), empty.
    pub fn remainder(&self, answer: &str) -> String {
        match answer.strip_prefix(self.shown.as_str()) {
            Some(rest) => rest.to_string(),
            None => match answer.strip_prefix(self.shown.trim_end()) {
                Some(rest) => rest.to_string(),
                None => String::new(),
            },
        }
    }

    /// Emits the text the client may see now of `delta` as a `TextDelta`.
    pub fn emit(&mut self, delta: &str, emit: &impl Fn(Event)) {
        let text = self.push(delta);
        if !text.is_empty() {
            emit(Event::TextDelta(TextDelta {
                text,
                reasoning: false,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hearth_proto::v1::{InjectSpec, Trigger, TriggerType};
    use std::sync::Arc;

    fn sets() -> Vec<(String, Arc<TriggerSet>)> {
        let (set, rejected) = TriggerSet::compile(
            &[Trigger {
                r#type: TriggerType::TriggerCommand as i32,
                pattern: "/note".into(),
            }],
            Some(InjectSpec {
                usage: "notes".into(),
                format: "/note {text}".into(),
                args: Default::default(),
            }),
        );
        assert!(rejected.is_empty());
        vec![("note".into(), Arc::new(set))]
    }

    fn stream(f: &mut CommandFilter, chunks: &[&str]) -> String {
        chunks.iter().map(|c| f.push(c)).collect()
    }

    #[test]
    fn command_lines_and_what_follows_are_held_back() {
        let mut f = CommandFilter::new(&sets());
        let text = "Sure.\n/note buy milk\nAnything else?\n/note call mom";
        // Any chunking gives the same result.
        for size in [1, 3, 7, 100] {
            let mut f2 = CommandFilter::new(&sets());
            let chars: Vec<char> = text.chars().collect();
            let chunks: Vec<String> = chars.chunks(size).map(|c| c.iter().collect()).collect();
            let refs: Vec<&str> = chunks.iter().map(String::as_str).collect();
            assert_eq!(stream(&mut f2, &refs), "Sure.\n", "chunk size {size}");
            let answer = "Sure.\nnoted: buy milk\nAnything else?\nnoted: call mom";
            assert_eq!(
                f2.remainder(answer),
                "noted: buy milk\nAnything else?\nnoted: call mom"
            );
        }
        // Lines that only start like a command pass once they differ.
        assert_eq!(
            stream(&mut f, &["/no", "w you ", "know\n/n", "otes\n"]),
            "/now you know\n/notes\n"
        );
        // Indented and backticked commands are commands too.
        let mut g = CommandFilter::new(&sets());
        assert_eq!(stream(&mut g, &["ok\n  `/note x`"]), "ok\n");
        assert_eq!(g.flush(), "  `/note x`");
    }

    #[test]
    fn without_inject_formats_everything_passes() {
        let mut f = CommandFilter::new(&[]);
        assert!(!f.active());
        assert_eq!(f.push("/note x\n"), "/note x\n");
    }
}
