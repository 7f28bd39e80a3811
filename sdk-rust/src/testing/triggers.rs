//! LinkZone triggers and `ai.inject`, mirrored from the broker
//! (`broker/src/triggers/mod.rs`, the reference: change both together): which
//! registered triggers the broker accepts, and which message, event or LLM-written
//! command line reaches which trigger with which parameters.
//!
//! | type | name    | matches when                                              | params                                     |
//! |------|---------|-----------------------------------------------------------|--------------------------------------------|
//! | 0    | command | the message is `pattern` or starts with `pattern` + space | the words after the command                |
//! | 1    | keyword | the message contains `pattern` (case-insensitive)         | the words of the message without `pattern` |
//! | 2    | regex   | the regular expression finds a match                      | its capture groups, else the whole match   |
//! | 3    | segment | one segment of the message equals `pattern` (case-insens.)| the other segments, in order               |
//! | 4    | event   | the broker emits the event `pattern` (`*` = every event)  | the event's text, as one parameter         |

use hearth_proto::v1::{InjectSpec, RejectedItem, Trigger, TriggerType};
use regex::Regex;

/// Broker events a type-4 trigger can name.
pub(crate) const EVENTS: &[&str] = &["message", "reply"];

/// One compiled trigger.
#[derive(Debug, Clone)]
pub(crate) struct CompiledTrigger {
    /// The trigger as registered (echoed in `HandleEvent.trigger`).
    pub(crate) trigger: Trigger,
    kind: Kind,
}

#[derive(Debug, Clone)]
enum Kind {
    Command(String),
    Keyword(String),
    Regex(Regex),
    Segment(String),
    Event(String),
}

/// A plugin's triggers and inject spec.
#[derive(Debug, Clone, Default)]
pub(crate) struct TriggerSet {
    /// Compiled triggers in registration order.
    pub(crate) triggers: Vec<CompiledTrigger>,
    /// `ai.inject`, when the plugin has one.
    pub(crate) inject: Option<InjectSpec>,
}

/// A message matched a trigger.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Match {
    /// The trigger that matched.
    pub(crate) trigger: Trigger,
    /// Parsed parameters (`sender.param(i)`).
    pub(crate) params: Vec<String>,
}

fn reject(name: &str, reason: String) -> RejectedItem {
    RejectedItem {
        kind: "trigger".into(),
        name: name.into(),
        reason,
    }
}

impl TriggerSet {
    /// Compiles `triggers` and checks `inject`. A bad trigger (empty pattern, invalid
    /// regex, unknown type or event) is left out and reported; the others stay. An
    /// inject spec without a `format` is reported (kind `inject`) and dropped.
    pub(crate) fn compile(
        triggers: &[Trigger],
        inject: Option<InjectSpec>,
    ) -> (TriggerSet, Vec<RejectedItem>) {
        let mut set = TriggerSet::default();
        let mut rejected = Vec::new();
        for t in triggers {
            let pattern = t.pattern.trim();
            if pattern.is_empty() {
                rejected.push(reject(
                    &t.pattern,
                    format!("type {} trigger with an empty pattern", t.r#type),
                ));
                continue;
            }
            let kind = match TriggerType::try_from(t.r#type) {
                Ok(TriggerType::TriggerCommand) => Kind::Command(pattern.into()),
                Ok(TriggerType::TriggerKeyword) => Kind::Keyword(pattern.to_lowercase()),
                Ok(TriggerType::TriggerRegex) => match Regex::new(&t.pattern) {
                    Ok(re) => Kind::Regex(re),
                    Err(e) => {
                        rejected.push(reject(&t.pattern, format!("invalid regex: {e}")));
                        continue;
                    }
                },
                Ok(TriggerType::TriggerSegment) => Kind::Segment(pattern.to_lowercase()),
                Ok(TriggerType::TriggerEvent) => {
                    if pattern != "*" && !EVENTS.contains(&pattern) {
                        rejected.push(reject(
                            pattern,
                            format!(
                                "unknown event `{pattern}`; events are {} or `*`",
                                EVENTS.join(", ")
                            ),
                        ));
                        continue;
                    }
                    Kind::Event(pattern.into())
                }
                Err(_) => {
                    rejected.push(reject(
                        &t.pattern,
                        format!("unknown trigger type {}; types are 0 command, 1 keyword, 2 regex, 3 segment, 4 event", t.r#type),
                    ));
                    continue;
                }
            };
            set.triggers.push(CompiledTrigger {
                trigger: t.clone(),
                kind,
            });
        }
        match inject {
            Some(spec) if spec.format.trim().is_empty() => rejected.push(RejectedItem {
                kind: "inject".into(),
                name: spec.usage.clone(),
                reason: "ai.inject has no format: the LLM would not know what to write".into(),
            }),
            other => set.inject = other,
        }
        (set, rejected)
    }

    /// The first message trigger (types 0–3) `text` matches, in registration order.
    pub(crate) fn match_message(&self, text: &str) -> Option<Match> {
        let text = text.trim();
        self.triggers.iter().find_map(|t| {
            let params = match &t.kind {
                Kind::Command(p) => command_params(text, p)?,
                Kind::Keyword(k) => {
                    let lower = text.to_lowercase();
                    let at = lower.find(k.as_str())?;
                    // Lowercasing can change byte lengths (e.g. 'İ'); cut the original
                    // only when the offsets line up, else drop nothing.
                    let rest = if lower.len() == text.len() {
                        format!("{} {}", &text[..at], &text[at + k.len()..])
                    } else {
                        text.to_string()
                    };
                    words(&rest)
                }
                Kind::Regex(re) => {
                    let caps = re.captures(text)?;
                    if caps.len() > 1 {
                        caps.iter()
                            .skip(1)
                            .map(|m| m.map(|m| m.as_str().to_string()).unwrap_or_default())
                            .collect()
                    } else {
                        vec![caps[0].to_string()]
                    }
                }
                Kind::Segment(s) => {
                    let segs = segments(text);
                    let at = segs.iter().position(|x| x.to_lowercase() == *s)?;
                    segs.into_iter()
                        .enumerate()
                        .filter(|(i, _)| *i != at)
                        .map(|(_, x)| x)
                        .collect()
                }
                Kind::Event(_) => return None,
            };
            Some(Match {
                trigger: t.trigger.clone(),
                params,
            })
        })
    }

    /// The event trigger for `event`, if any: `params` is `[text]`.
    pub(crate) fn match_event(&self, event: &str, text: &str) -> Option<Match> {
        self.triggers.iter().find_map(|t| match &t.kind {
            Kind::Event(e) if e == "*" || e == event => Some(Match {
                trigger: t.trigger.clone(),
                params: vec![text.to_string()],
            }),
            _ => None,
        })
    }

    /// The command word of the inject format (`/weather` of `/weather {city}`).
    pub(crate) fn inject_command(&self) -> Option<&str> {
        let format = self.inject.as_ref()?.format.trim();
        let head = format.split('{').next().unwrap_or("").trim();
        (!head.is_empty()).then_some(head)
    }

    /// A line of the LLM's reply taken as this plugin's inject command: the line
    /// starts with the format's command word and matches one of the triggers.
    pub(crate) fn match_llm_line(&self, line: &str) -> Option<Match> {
        let line = line.trim().trim_matches('`').trim();
        let head = self.inject_command()?;
        let rest = line.strip_prefix(head)?;
        if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
            return None;
        }
        self.match_message(line)
    }
}

/// The words after command `p` when `text` is `p` or starts with `p` + whitespace.
fn command_params(text: &str, p: &str) -> Option<Vec<String>> {
    let rest = text.strip_prefix(p)?;
    if !(rest.is_empty() || rest.starts_with(char::is_whitespace)) {
        return None;
    }
    Some(words(rest))
}

/// Splits at whitespace; a double-quoted run is one word (`\"` escapes a quote).
pub(crate) fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    let mut started = false;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if quoted && chars.peek() == Some(&'"') => {
                cur.push('"');
                chars.next();
            }
            '"' => {
                quoted = !quoted;
                started = true;
            }
            c if c.is_whitespace() && !quoted => {
                if started {
                    out.push(std::mem::take(&mut cur));
                    started = false;
                }
            }
            c => {
                cur.push(c);
                started = true;
            }
        }
    }
    if started {
        out.push(cur);
    }
    out
}

/// Splits at whitespace and punctuation (ASCII and CJK), dropping empty pieces.
fn segments(text: &str) -> Vec<String> {
    text.split(|c: char| {
        c.is_whitespace() || (c.is_ascii_punctuation() && c != '\'' && c != '-') || is_cjk_punct(c)
    })
    .filter(|s| !s.is_empty())
    .map(str::to_string)
    .collect()
}

fn is_cjk_punct(c: char) -> bool {
    matches!(c, '\u{3000}'..='\u{303F}' | '\u{FF00}'..='\u{FF0F}' | '\u{FF1A}'..='\u{FF20}' | '\u{FF3B}'..='\u{FF40}' | '\u{FF5B}'..='\u{FF65}')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(triggers: &[(i32, &str)]) -> TriggerSet {
        let t: Vec<Trigger> = triggers
            .iter()
            .map(|(k, p)| Trigger {
                r#type: *k,
                pattern: p.to_string(),
            })
            .collect();
        let (s, rejected) = TriggerSet::compile(&t, None);
        assert!(rejected.is_empty(), "{rejected:?}");
        s
    }

    fn params(s: &TriggerSet, text: &str) -> Option<Vec<String>> {
        s.match_message(text).map(|m| m.params)
    }

    #[test]
    fn command_is_a_prefix_followed_by_space_or_end() {
        let s = set(&[(0, "/weather")]);
        assert_eq!(params(&s, "/weather Paris"), Some(vec!["Paris".into()]));
        assert_eq!(params(&s, "  /weather  "), Some(vec![]));
        assert_eq!(params(&s, "/weatherman Paris"), None);
        assert_eq!(params(&s, "what is /weather"), None);
        assert_eq!(
            params(&s, r#"/weather "New York" 3"#),
            Some(vec!["New York".into(), "3".into()])
        );
    }

    #[test]
    fn keyword_anywhere_case_insensitive() {
        let s = set(&[(1, "Weather")]);
        assert_eq!(
            params(&s, "the WEATHER in Paris"),
            Some(vec!["the".into(), "in".into(), "Paris".into()])
        );
        assert_eq!(params(&s, "北京weather"), Some(vec!["北京".into()]));
        let zh = set(&[(1, "天气")]);
        assert_eq!(
            params(&zh, "北京天气怎么样"),
            Some(vec!["北京".into(), "怎么样".into()])
        );
        assert_eq!(params(&zh, "hello"), None);
    }

    #[test]
    fn regex_captures_or_whole_match() {
        let s = set(&[(2, r"^roll (\d+)d(\d+)$")]);
        assert_eq!(params(&s, "roll 2d6"), Some(vec!["2".into(), "6".into()]));
        assert_eq!(params(&s, "roll two dice"), None);
        let whole = set(&[(2, r"\d{3}-\d{4}")]);
        assert_eq!(
            params(&whole, "call 555-1234 now"),
            Some(vec!["555-1234".into()])
        );
    }

    #[test]
    fn segment_is_a_whole_segment() {
        let s = set(&[(3, "weather")]);
        assert_eq!(
            params(&s, "what's the weather, Paris?"),
            Some(vec!["what's".into(), "the".into(), "Paris".into()])
        );
        assert_eq!(params(&s, "Weather?"), Some(vec![]));
        assert_eq!(params(&s, "weathering heights"), None);
        let zh = set(&[(3, "天气")]);
        assert_eq!(params(&zh, "北京，天气。"), Some(vec!["北京".into()]));
        assert_eq!(params(&zh, "北京天气"), None);
    }

    #[test]
    fn event_triggers_match_events_only() {
        let s = set(&[(4, "message")]);
        assert_eq!(params(&s, "message"), None);
        assert_eq!(s.match_event("message", "hi").unwrap().params, vec!["hi"]);
        assert!(s.match_event("reply", "x").is_none());
        assert!(set(&[(4, "*")]).match_event("reply", "x").is_some());
    }

    #[test]
    fn bad_triggers_are_rejected_by_name_and_the_rest_kept() {
        let t = |k: i32, p: &str| Trigger {
            r#type: k,
            pattern: p.into(),
        };
        let (s, rejected) = TriggerSet::compile(
            &[
                t(0, "/ok"),
                t(2, "(unclosed"),
                t(0, " "),
                t(9, "x"),
                t(4, "sunrise"),
            ],
            Some(InjectSpec::default()),
        );
        assert_eq!(s.triggers.len(), 1);
        let reasons: Vec<_> = rejected.iter().map(|r| r.reason.as_str()).collect();
        assert_eq!(rejected.len(), 5, "{reasons:?}");
        assert!(reasons[0].contains("invalid regex"), "{reasons:?}");
        assert!(reasons[2].contains("unknown trigger type 9"), "{reasons:?}");
        assert!(
            reasons[3].contains("unknown event `sunrise`"),
            "{reasons:?}"
        );
        assert!(reasons[4].contains("no format"), "{reasons:?}");
        assert!(s.inject.is_none());
    }

    #[test]
    fn llm_lines_need_the_inject_command() {
        let (s, _) = TriggerSet::compile(
            &[Trigger {
                r#type: 0,
                pattern: "/translate".into(),
            }],
            Some(InjectSpec {
                usage: "translate".into(),
                format: "/translate {text} {lang}".into(),
                args: Default::default(),
            }),
        );
        assert_eq!(s.inject_command(), Some("/translate"));
        assert_eq!(
            s.match_llm_line("`/translate \"good morning\" ja`")
                .unwrap()
                .params,
            vec!["good morning", "ja"]
        );
        assert!(s.match_llm_line("Sure, I can translate that.").is_none());
        assert!(s.match_llm_line("/translated x").is_none());
    }

    // ------------------------------------------------------------ the golden cases

    use serde_json::{json, Value};
    use std::collections::BTreeMap;

    fn trigger_of(t: &Value) -> Trigger {
        Trigger {
            r#type: t[0].as_i64().unwrap() as i32,
            pattern: t[1].as_str().unwrap().into(),
        }
    }

    /// What the broker does with one case of the trigger golden: `compiled` (per trigger,
    /// null = kept, else the reason it was rejected) and `match` (null, or the index of
    /// the trigger that matched and its params).
    fn trigger_outcome(case: &Value) -> BTreeMap<&'static str, Value> {
        let triggers: Vec<Trigger> = case["triggers"]
            .as_array()
            .unwrap()
            .iter()
            .map(trigger_of)
            .collect();
        let (set, rejected) = TriggerSet::compile(&triggers, None);
        let mut out = BTreeMap::new();
        let mut rejected = rejected.into_iter();
        let mut compiled = Vec::new();
        let mut kept = set.triggers.iter().map(|t| &t.trigger).peekable();
        for t in &triggers {
            if kept.peek() == Some(&t) {
                kept.next();
                compiled.push(Value::Null);
            } else {
                let r = rejected.next().expect("a trigger left out is reported");
                // Regex error texts are the engine's own; the SDKs only say "invalid regex".
                let reason = if t.r#type == TriggerType::TriggerRegex as i32 {
                    r.reason
                        .split_once(':')
                        .map_or(r.reason.clone(), |(head, _)| head.to_string())
                } else {
                    r.reason
                };
                compiled.push(Value::String(reason));
            }
        }
        out.insert("compiled", Value::Array(compiled));
        let index_of = |m: &Match| {
            triggers
                .iter()
                .position(|t| *t == m.trigger)
                .expect("the trigger that matched is one registered")
        };
        let found = if let Some(event) = case.get("event").and_then(Value::as_str) {
            set.match_event(event, case["message"].as_str().unwrap())
        } else {
            set.match_message(case["message"].as_str().unwrap())
        };
        out.insert(
            "match",
            match found {
                None => Value::Null,
                Some(m) => json!({"trigger": index_of(&m), "params": m.params}),
            },
        );
        out
    }

    /// `tests/golden/triggers.json`: which triggers the broker keeps and what it matches.
    #[test]
    fn compiling_and_matching_match_the_broker_golden() {
        let Some(golden) = crate::testing::golden_file("triggers.json") else {
            return;
        };
        let cases = golden["cases"].as_array().unwrap();
        assert!(cases.len() > 20);
        let mut wrong = Vec::new();
        for case in cases {
            for (k, v) in trigger_outcome(case) {
                if case[k] != v {
                    wrong.push(format!(
                        "{} {} {:?}: {k}: golden {}, harness {v}",
                        case["triggers"],
                        case["message"],
                        case.get("event"),
                        case[k]
                    ));
                }
            }
        }
        assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    }
}
