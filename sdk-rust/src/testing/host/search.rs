//! DocMemory and Knowledge as the broker keeps them (`broker/src/storage/docs.rs`,
//! `knowledge.rs`), in memory, with a simpler search.
//!
//! The broker ranks with SQLite FTS5's bm25 over jieba-segmented words; this fake
//! scores each document by the query terms it contains (English-like words compared
//! whole and case-insensitively, runs of CJK characters as substrings), weighted by
//! how rare the term is. Which documents match is the broker's rule (any term, OR);
//! the order of close scores may differ from the broker's, and there is no stemming.

use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};
use tonic::Status;

use crate::apis::{Doc, KnowledgeEntry};

/// Results for `top_k = 0`.
const DEFAULT_TOP_K: u32 = 5;
/// Most results of one query.
const MAX_TOP_K: u32 = 100;
/// Longest knowledge entry name, in bytes of UTF-8.
const MAX_NAME_BYTES: usize = 200;
/// Largest knowledge entry.
const MAX_ENTRY_BYTES: usize = 8 * 1024 * 1024;

fn now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn is_cjk(c: char) -> bool {
    matches!(c,
        '\u{3040}'..='\u{30FF}' | '\u{3400}'..='\u{4DBF}' | '\u{4E00}'..='\u{9FFF}'
        | '\u{AC00}'..='\u{D7AF}' | '\u{F900}'..='\u{FAFF}')
}

/// A query term.
#[derive(Debug, Clone, PartialEq)]
enum Term {
    /// A word of letters and digits, lower-cased; matches a whole word.
    Word(String),
    /// A run of CJK characters; matches as a substring.
    Cjk(String),
}

/// The distinct terms of `text`.
fn terms(text: &str) -> Vec<Term> {
    let mut out: Vec<Term> = Vec::new();
    let mut word = String::new();
    let mut cjk = String::new();
    let flush = |word: &mut String, cjk: &mut String, out: &mut Vec<Term>| {
        for t in [
            (!word.is_empty()).then(|| Term::Word(std::mem::take(word).to_lowercase())),
            (!cjk.is_empty()).then(|| Term::Cjk(std::mem::take(cjk))),
        ]
        .into_iter()
        .flatten()
        {
            if !out.contains(&t) {
                out.push(t);
            }
        }
    };
    for c in text.chars() {
        if is_cjk(c) {
            if !word.is_empty() {
                flush(&mut word, &mut String::new(), &mut out);
            }
            cjk.push(c);
        } else if c.is_alphanumeric() {
            if !cjk.is_empty() {
                flush(&mut String::new(), &mut cjk, &mut out);
            }
            word.push(c);
        } else {
            flush(&mut word, &mut cjk, &mut out);
        }
    }
    flush(&mut word, &mut cjk, &mut out);
    out
}

/// How often `term` occurs in `text`.
fn count(term: &Term, text: &str) -> usize {
    match term {
        Term::Cjk(run) => text.matches(run.as_str()).count(),
        Term::Word(w) => terms_all(text).iter().filter(|t| *t == w).count(),
    }
}

/// Every word of `text` (lower-cased), repeats kept.
fn terms_all(text: &str) -> Vec<String> {
    text.split(|c: char| !c.is_alphanumeric() || is_cjk(c))
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Scores of `texts` for `query`: `(index, score)` of the matches, best first (ties in
/// `texts` order), at most `top_k` (5 for 0, capped at 100).
fn rank(texts: &[String], query: &str, top_k: u32) -> Vec<(usize, f64)> {
    let limit = match top_k {
        0 => DEFAULT_TOP_K,
        k => k.min(MAX_TOP_K),
    } as usize;
    let terms = terms(query);
    let n = texts.len() as f64;
    let mut scored: Vec<(usize, f64)> = texts
        .iter()
        .enumerate()
        .filter_map(|(i, text)| {
            let score: f64 = terms
                .iter()
                .map(|t| {
                    let tf = count(t, text) as f64;
                    if tf == 0.0 {
                        return 0.0;
                    }
                    let df = texts.iter().filter(|x| count(t, x) > 0).count() as f64;
                    tf / (tf + 1.0) * (1.0 + (n / df).ln())
                })
                .sum();
            (score > 0.0).then_some((i, score))
        })
        .collect();
    scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    scored.truncate(limit);
    scored
}

/// One stored document.
#[derive(Debug, Clone)]
struct DocRow {
    doc: Doc,
    updated_at: i64,
}

/// DocMemory.
#[derive(Debug, Default, Clone)]
pub(crate) struct Docs {
    rows: Vec<DocRow>,
    next: u64,
}

impl Docs {
    /// Stores `doc` (same id replaces); returns its id (`doc_…` when empty).
    pub(crate) fn insert(&mut self, mut doc: Doc) -> Result<String, Status> {
        if doc.id.is_empty() {
            self.next += 1;
            doc.id = format!("doc_{:016x}", self.next);
        }
        if doc.title.trim().is_empty() && doc.content.trim().is_empty() {
            return Err(Status::invalid_argument(format!(
                "insert doc {}: title and content are both empty",
                doc.id
            )));
        }
        doc.score = 0.0;
        let id = doc.id.clone();
        let row = DocRow {
            doc,
            updated_at: now(),
        };
        match self.rows.iter_mut().find(|r| r.doc.id == id) {
            Some(old) => *old = row,
            None => self.rows.push(row),
        }
        Ok(id)
    }

    /// Deletes document `id`; NOT_FOUND when there is none.
    pub(crate) fn remove(&mut self, id: &str) -> Result<(), Status> {
        let before = self.rows.len();
        self.rows.retain(|r| r.doc.id != id);
        if self.rows.len() == before {
            return Err(Status::not_found(format!("no `{id}` in doc_memory")));
        }
        Ok(())
    }

    /// The best matches for `text`, with scores.
    pub(crate) fn query(&self, text: &str, top_k: u32) -> Vec<Doc> {
        let texts: Vec<String> = self
            .rows
            .iter()
            .map(|r| format!("{}\n{}", r.doc.title, r.doc.content))
            .collect();
        rank(&texts, text, top_k)
            .into_iter()
            .map(|(i, score)| Doc {
                score,
                ..self.rows[i].doc.clone()
            })
            .collect()
    }

    /// `docs`, `text_bytes`, `index_bytes` (0 here), `oldest`, `newest`.
    pub(crate) fn stats(&self) -> Value {
        let text_bytes: usize = self
            .rows
            .iter()
            .map(|r| r.doc.title.len() + r.doc.content.len())
            .sum();
        json!({
            "docs": self.rows.len(),
            "text_bytes": text_bytes,
            "index_bytes": 0,
            "oldest": self.rows.iter().map(|r| r.updated_at).min(),
            "newest": self.rows.iter().map(|r| r.updated_at).max(),
        })
    }

    /// Every document, in insertion order.
    pub(crate) fn all(&self) -> Vec<Doc> {
        self.rows.iter().map(|r| r.doc.clone()).collect()
    }
}

/// The knowledge base: entries by name.
#[derive(Debug, Default, Clone)]
pub(crate) struct KnowledgeBase {
    /// (name, content), sorted by name.
    entries: Vec<(String, String)>,
}

/// The name `add` stores under (the broker's `Knowledge::sanitize_name`).
pub(crate) fn sanitize_name(name: &str) -> Result<String, Status> {
    let trimmed = name.trim();
    let trimmed = trimmed.strip_suffix(".md").unwrap_or(trimmed);
    let mut out = String::new();
    for c in trimmed.chars() {
        let c = if c.is_control()
            || matches!(c, '/' | '\\' | ':' | '*' | '?' | '"' | '<' | '>' | '|')
        {
            '_'
        } else {
            c
        };
        if out.len() + c.len_utf8() > MAX_NAME_BYTES {
            break;
        }
        out.push(c);
    }
    if out.starts_with('.') {
        out.replace_range(..1, "_");
    }
    let out = out.trim_end();
    if out.is_empty() {
        return Err(Status::invalid_argument(format!(
            "knowledge entry name {name:?}: empty once sanitized"
        )));
    }
    Ok(out.to_string())
}

impl KnowledgeBase {
    /// Adds or replaces entry `name` (sanitized); returns the name stored under.
    pub(crate) fn add(&mut self, name: &str, content: &str) -> Result<String, Status> {
        let name = sanitize_name(name)?;
        if content.len() > MAX_ENTRY_BYTES {
            return Err(Status::invalid_argument(format!(
                "knowledge entry {name}: {} bytes; at most {MAX_ENTRY_BYTES}",
                content.len()
            )));
        }
        match self
            .entries
            .binary_search_by(|(n, _)| n.as_str().cmp(&name))
        {
            Ok(i) => self.entries[i].1 = content.into(),
            Err(i) => self.entries.insert(i, (name.clone(), content.into())),
        }
        Ok(name)
    }

    /// Entry names, sorted.
    pub(crate) fn list(&self) -> Vec<String> {
        self.entries.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The best matches for `query`, with scores.
    pub(crate) fn search(&self, query: &str, top_k: u32) -> Vec<KnowledgeEntry> {
        let texts: Vec<String> = self
            .entries
            .iter()
            .map(|(n, c)| format!("{n}\n{c}"))
            .collect();
        rank(&texts, query, top_k)
            .into_iter()
            .map(|(i, score)| KnowledgeEntry {
                name: self.entries[i].0.clone(),
                content: self.entries[i].1.clone(),
                score,
            })
            .collect()
    }

    /// Every entry, by name, score 0.
    pub(crate) fn all(&self) -> Vec<KnowledgeEntry> {
        self.entries
            .iter()
            .map(|(name, content)| KnowledgeEntry {
                name: name.clone(),
                content: content.clone(),
                score: 0.0,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(id: &str, title: &str, content: &str) -> Doc {
        Doc {
            id: id.into(),
            title: title.into(),
            content: content.into(),
            score: 0.0,
        }
    }

    #[test]
    fn english_and_chinese_queries_find_their_documents() {
        let mut d = Docs::default();
        for x in [
            doc("sunny", "日记", "今天天气很好"),
            doc("rain", "预报", "明天会下雨，记得带伞"),
            doc(
                "en",
                "Weather report",
                "Heavy rain is expected in the evening",
            ),
        ] {
            d.insert(x).unwrap();
        }
        let ids = |docs: Vec<Doc>| docs.into_iter().map(|d| d.id).collect::<Vec<_>>();
        assert_eq!(ids(d.query("天气", 10)), ["sunny"]);
        assert_eq!(ids(d.query("雨", 10)), ["rain"]);
        assert_eq!(ids(d.query("WEATHER", 10)), ["en"]);
        assert_eq!(ids(d.query("rain 下雨", 10)).len(), 2);
        assert!(d.query("snow", 10).is_empty());
        assert!(d.query("", 10).is_empty());
        assert!(d.query("rain", 0).iter().all(|x| x.score > 0.0));
        let generated = d.insert(doc("", "", "x")).unwrap();
        assert!(generated.starts_with("doc_"));
        d.remove(&generated).unwrap();
        assert_eq!(
            d.remove(&generated).unwrap_err().code(),
            tonic::Code::NotFound
        );
        assert!(d.insert(doc("e", " ", "")).is_err());
        assert_eq!(d.stats()["docs"], 3);
    }

    #[test]
    fn knowledge_names_are_sanitized_and_listed_sorted() {
        let mut k = KnowledgeBase::default();
        assert_eq!(k.add("天气/北京", "晴").unwrap(), "天气_北京");
        assert_eq!(k.add("../secret", "x").unwrap(), "_._secret");
        assert_eq!(k.add("notes.md", "rust notes").unwrap(), "notes");
        k.add("notes", "rust and go notes").unwrap();
        assert_eq!(k.list(), ["_._secret", "notes", "天气_北京"]);
        assert_eq!(k.search("go", 5)[0].content, "rust and go notes");
        assert!(k.add(" ", "x").is_err());
    }
}
