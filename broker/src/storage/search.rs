//! The full-text index shared by [`DocMemory`](super::DocMemory) and
//! [`Knowledge`](super::Knowledge): SQLite FTS5 with `bm25()` ranking, fed with words
//! segmented by jieba so that Chinese is searchable as well as English.
//!
//! # Why segmentation before FTS5
//! FTS5's `unicode61` tokenizer makes a whole run of CJK characters one token
//! ("今天天气很好" is a single term), and its `trigram` tokenizer cannot match a
//! 2-character query such as 天气 (both measured; see DESIGN.md, "Known pitfalls").
//! So the text is cut into words by jieba's search mode ([`cut_for_search`], which also
//! offers the dictionary words inside a long word: 中华人民共和国 → 中华, 华人, 人民,
//! 共和, 共和国 …) and the words are indexed space-joined in a `unicode61` table.
//!
//! # The two columns
//! Every index table (`doc_memory_fts`, `knowledge_fts`, see [`migrations`]) is a
//! contentless FTS5 table with two columns, tokenized by
//! `porter unicode61 remove_diacritics 2` (case- and accent-folded; English words
//! also reduced to their Porter stem, so "running" finds "run"; CJK tokens pass the
//! stemmer unchanged):
//! - `words`: the jieba search-mode words that hold a letter or digit.
//! - `chars`: each CJK character (Han, kana, hangul) as its own token, in text order,
//!   with a break token `0` wherever the CJK run is interrupted. A 1-character query
//!   (雨) matches here, and a CJK word of the query is also matched as a phrase of its
//!   characters (天气 → `"天 气"`), so a document that contains the characters
//!   contiguously is found even where jieba cut it differently (明天气温 → 明天 / 气温).
//!
//! # Queries
//! The query text is segmented the same way; each distinct word (at most
//! [`MAX_QUERY_TERMS`]) becomes one alternative of an `OR`:
//! - an all-CJK word of 2+ characters: `words : "天气" OR chars : "天 气"`;
//! - a single CJK character: `chars : "雨"`;
//! - anything else (English words, numbers, mixed): `words : "rust"`.
//!
//! Every word is written as an FTS5 string (in double quotes, inner quotes doubled), so
//! no user text is ever read as FTS5 syntax: `"foo" OR NEAR(` searches for the words
//! foo, or and near. Punctuation-only text gives no terms and no results (not an
//! error). `OR` rather than `AND` because the caller wants the most relevant documents
//! for a message, not only those that contain every word of it; bm25 ranks documents
//! that match more (and rarer) words first.
//!
//! # Scores
//! FTS5's `bm25()` is negative, lower = better. A hit's score is `-bm25()`: positive
//! (FTS5 floors each term's IDF at 1e-6, so a match never scores 0 or less), higher =
//! better, unbounded; a document matching both a word and its character phrase scores
//! both. Scores compare hits of one query on one index, not across queries.
//!
//! # On PostgreSQL
//! `storage::pg::search` indexes the same [`segment`]ed text in tsvector columns and
//! searches the same [`alternatives`], computing these BM25 scores itself, so both
//! backends find the same documents with the same scores (its module doc lists the
//! few differences: Snowball instead of Porter stems, token edge cases).
//!
//! # The segmenter
//! [`super::segmenter`] cuts exactly as `jieba_rs::Jieba::cut_for_search(text, true)`
//! does, with jieba's dictionary read in place from the binary: nothing is loaded at
//! start and the first search pays no dictionary load.
//!
//! [`migrations`]: super::migrations

use std::collections::HashSet;
use std::fmt::Write as _;
use std::path::Path;

use rusqlite::{params, Connection};

use super::segmenter::cut_for_search;
use super::StorageError;

/// Results returned when the caller asks for `top_k = 0` (the proto's unset value).
pub const DEFAULT_TOP_K: u32 = 5;

/// Most results one query returns; a larger `top_k` is capped to it.
pub const MAX_TOP_K: u32 = 100;

/// Most distinct query words used; the rest of a very long query is ignored.
pub const MAX_QUERY_TERMS: usize = 64;

/// The token that separates runs of CJK characters in the `chars` column (never
/// produced by a query phrase, which holds CJK characters only).
const CHAR_BREAK: &str = "0";

/// Words of `text` worth recalling graph memory by: jieba's words of two or more
/// characters for CJK, of three or more for other scripts (lower-cased), without a
/// few English function words; distinct, in order of appearance, at most `max`.
pub fn keywords(text: &str, max: usize) -> Vec<String> {
    const STOP: &[&str] = &[
        "the", "and", "are", "was", "were", "what", "who", "whom", "which", "when", "where", "why",
        "how", "does", "did", "can", "could", "would", "should", "will", "about", "with", "for",
        "from", "this", "that", "these", "those", "you", "your", "have", "has", "had", "not",
        "but", "all", "any", "some", "tell", "know", "please",
    ];
    let mut out: Vec<String> = Vec::new();
    for token in cut_for_search(text) {
        let word = token.trim();
        let cjk = word.chars().any(is_cjk);
        let chars = word.chars().count();
        if !is_term(word) || (cjk && chars < 2) || (!cjk && chars < 3) {
            continue;
        }
        let word = word.to_lowercase();
        if STOP.contains(&word.as_str()) || out.contains(&word) {
            continue;
        }
        out.push(word);
        if out.len() == max {
            break;
        }
    }
    out
}

/// `top_k` as asked (0 = [`DEFAULT_TOP_K`]), capped at [`MAX_TOP_K`].
pub(crate) fn limit(top_k: u32) -> usize {
    match top_k {
        0 => DEFAULT_TOP_K as usize,
        k => k.min(MAX_TOP_K) as usize,
    }
}

/// Chinese, Japanese and Korean characters that are written without spaces between
/// words (and so get a unigram token each).
fn is_cjk(c: char) -> bool {
    matches!(c as u32,
        0x3040..=0x30FF      // hiragana, katakana
        | 0x3400..=0x4DBF    // CJK extension A
        | 0x4E00..=0x9FFF    // CJK unified ideographs
        | 0xAC00..=0xD7AF    // hangul syllables
        | 0xF900..=0xFAFF    // CJK compatibility ideographs
        | 0x20000..=0x3134F  // CJK extensions B–G
    )
}

/// Whether FTS5's tokenizer would keep anything of `word`.
fn is_term(word: &str) -> bool {
    word.chars().any(char::is_alphanumeric)
}

/// The column values of `text` for an index table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Segmented {
    words: String,
    chars: String,
}

impl Segmented {
    /// The `words` column's text: jieba words, space-joined.
    pub(crate) fn words(&self) -> &str {
        &self.words
    }

    /// The `chars` column's text: CJK characters and break tokens, space-joined.
    pub(crate) fn chars(&self) -> &str {
        &self.chars
    }
}

/// Segments `text` for indexing (see the module doc for the columns). Pure CPU work,
/// proportional to the text; loads the dictionary on first use.
pub(crate) fn segment(text: &str) -> Segmented {
    let mut words = String::with_capacity(text.len() + text.len() / 2);
    for token in cut_for_search(text) {
        if is_term(token) {
            if !words.is_empty() {
                words.push(' ');
            }
            words.push_str(token);
        }
    }
    let mut chars = String::new();
    let mut in_run = false;
    for c in text.chars() {
        if is_cjk(c) {
            if !chars.is_empty() {
                chars.push(' ');
            }
            chars.push(c);
            in_run = true;
        } else if in_run {
            chars.push(' ');
            chars.push_str(CHAR_BREAK);
            in_run = false;
        }
    }
    Segmented { words, chars }
}

/// Runs `f` (file I/O, segmenting a long text) on tokio's blocking pool, not on a
/// runtime worker. A panic in `f` is resumed in the caller; if the runtime is shutting
/// down and `f` never ran, the error is [`StorageError::Closed`] naming `path` (the
/// store `f` was for).
pub(crate) async fn blocking<T, F>(path: &Path, f: F) -> Result<T, StorageError>
where
    T: Send + 'static,
    F: FnOnce() -> T + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(value) => Ok(value),
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(_) => Err(StorageError::Closed {
            path: path.to_path_buf(),
        }),
    }
}

/// `s` as an FTS5 string: in double quotes, inner double quotes doubled. Inside one,
/// FTS5 reads no operator, column filter or prefix mark; its content is tokenized like
/// the indexed text.
fn fts_string(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The column of an index table that a query alternative searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Column {
    /// The jieba words.
    Words,
    /// The CJK characters (with break tokens).
    Chars,
}

impl Column {
    /// The column's name in the index tables.
    fn name(self) -> &'static str {
        match self {
            Column::Words => "words",
            Column::Chars => "chars",
        }
    }
}

/// One alternative of a query's `OR`: a phrase (its tokens as the indexed text has
/// them, space-separated for CJK characters) to find in one column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Alternative {
    /// Where to look.
    pub(crate) column: Column,
    /// The phrase, as the query wrote it (FTS5 and [`tokens`] split it further).
    pub(crate) text: String,
}

/// The alternatives of a user query, in the order [`match_expr`] writes them (FTS5's
/// phrase order, which BM25 sums in): see the module doc, "Queries". Empty when the
/// query has no searchable word.
pub(crate) fn alternatives(query: &str) -> Vec<Alternative> {
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for token in cut_for_search(query) {
        let word = token;
        if !is_term(word) || !seen.insert(word.to_lowercase()) {
            continue;
        }
        if seen.len() > MAX_QUERY_TERMS {
            break;
        }
        if word.chars().all(is_cjk) {
            let phrase = word.chars().map(String::from).collect::<Vec<_>>().join(" ");
            if word.chars().count() > 1 {
                out.push(Alternative {
                    column: Column::Words,
                    text: word.to_string(),
                });
            }
            out.push(Alternative {
                column: Column::Chars,
                text: phrase,
            });
        } else {
            out.push(Alternative {
                column: Column::Words,
                text: word.to_string(),
            });
        }
    }
    out
}

/// The FTS5 `MATCH` expression for a user query, or `None` if it has no searchable
/// word. Never fails and never lets the query's text act as FTS5 syntax.
pub(crate) fn match_expr(query: &str) -> Option<String> {
    let mut expr = String::new();
    for alt in alternatives(query) {
        if !expr.is_empty() {
            expr.push_str(" OR ");
        }
        let _ = write!(expr, "{} : {}", alt.column.name(), fts_string(&alt.text));
    }
    (!expr.is_empty()).then_some(expr)
}

/// The tokens of `text` as FTS5's `unicode61` tokenizer cuts them, approximately:
/// maximal runs of alphanumeric characters ([`char::is_alphanumeric`]; `unicode61`
/// uses the Unicode categories L*, N* and Co). The PostgreSQL index feeds these,
/// lower-cased, to its parser, so that one token here is one position there.
pub(crate) fn tokens(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|t| !t.is_empty())
}

/// One index table. The name is a constant of this module, never user input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FtsTable(&'static str);

impl FtsTable {
    /// DocMemory's index; rowid = `doc_memory.seq`.
    pub(crate) const DOCS: FtsTable = FtsTable("doc_memory_fts");
    /// Knowledge's index; rowid = `knowledge.seq`.
    pub(crate) const KNOWLEDGE: FtsTable = FtsTable("knowledge_fts");

    /// Indexes `text` (already [`segment`]ed) as row `rowid`, replacing what that row
    /// had. Run it in the transaction that writes the row itself.
    pub(crate) fn put(
        self,
        conn: &Connection,
        rowid: i64,
        text: &Segmented,
    ) -> rusqlite::Result<()> {
        let table = self.0;
        conn.prepare_cached(&format!(
            "INSERT OR REPLACE INTO {table} (rowid, words, chars) VALUES (?1, ?2, ?3)"
        ))?
        .execute(params![rowid, text.words, text.chars])?;
        Ok(())
    }

    /// Drops row `rowid` from the index (nothing if it is not there).
    pub(crate) fn delete(self, conn: &Connection, rowid: i64) -> rusqlite::Result<()> {
        let table = self.0;
        conn.prepare_cached(&format!("DELETE FROM {table} WHERE rowid = ?1"))?
            .execute([rowid])?;
        Ok(())
    }

    /// The best `limit` rows for `query`, best first, as (rowid, score) with score =
    /// `-bm25()` (positive, higher = better). A query without searchable words gives
    /// no rows.
    pub(crate) fn search(
        self,
        conn: &Connection,
        query: &str,
        limit: usize,
    ) -> rusqlite::Result<Vec<(i64, f64)>> {
        let Some(expr) = match_expr(query) else {
            return Ok(Vec::new());
        };
        let table = self.0;
        let mut stmt = conn.prepare_cached(&format!(
            "SELECT rowid, -bm25({table}) FROM {table} WHERE {table} MATCH ?1 \
             ORDER BY bm25({table}) LIMIT ?2"
        ))?;
        let rows = stmt.query_map(params![expr, limit as i64], |row| {
            Ok((row.get(0)?, row.get(1)?))
        })?;
        rows.collect()
    }

    /// Bytes of the index's storage (its `_data` shadow table), for stats.
    pub(crate) fn index_bytes(self, conn: &Connection) -> rusqlite::Result<i64> {
        let table = self.0;
        conn.query_row(
            &format!("SELECT coalesce(sum(length(block)), 0) FROM {table}_data"),
            [],
            |row| row.get(0),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_skip_short_and_function_words() {
        assert_eq!(
            keywords("What does Alice like? Alice likes coffee.", 8),
            ["alice", "like", "likes", "coffee"]
        );
        let zh = keywords("小明住在北京吗", 8);
        assert!(
            zh.contains(&"小明".to_string()) && zh.contains(&"北京".to_string()),
            "{zh:?}"
        );
        assert_eq!(keywords("a b c d e f", 8), Vec::<String>::new());
        assert_eq!(keywords("alpha beta gamma delta", 2).len(), 2);
    }

    /// A connection with one index table shaped like those of the migrations.
    fn index() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(
            "CREATE VIRTUAL TABLE doc_memory_fts USING fts5 (
                 words, chars, content = '', contentless_delete = 1,
                 tokenize = 'porter unicode61 remove_diacritics 2'
             );",
        )
        .unwrap();
        conn
    }

    fn put_all(conn: &Connection, texts: &[&str]) {
        for (i, text) in texts.iter().enumerate() {
            FtsTable::DOCS
                .put(conn, i as i64 + 1, &segment(text))
                .unwrap();
        }
    }

    fn hits(conn: &Connection, query: &str) -> Vec<i64> {
        FtsTable::DOCS
            .search(conn, query, 10)
            .unwrap()
            .into_iter()
            .map(|(id, _)| id)
            .collect()
    }

    #[test]
    fn segments_words_and_cjk_unigrams() {
        let s = segment("今天天气很好, Rust is fast 雨");
        let words: Vec<&str> = s.words.split(' ').collect();
        assert!(words.contains(&"天气"), "{s:?}");
        assert!(words.contains(&"Rust"), "{s:?}");
        assert!(
            !words.iter().any(|w| w.trim().is_empty() || *w == ","),
            "{s:?}"
        );
        assert_eq!(s.chars, "今 天 天 气 很 好 0 雨");
    }

    #[test]
    fn query_words_are_quoted_strings() {
        assert_eq!(match_expr("雨").unwrap(), r#"chars : "雨""#);
        assert_eq!(
            match_expr("天气").unwrap(),
            r#"words : "天气" OR chars : "天 气""#
        );
        assert_eq!(
            match_expr(r#"foo" OR NEAR("#).unwrap(),
            r#"words : "foo" OR words : "OR" OR words : "NEAR""#
        );
        assert_eq!(match_expr("  ,.!?（）\"\" "), None);
        // Repeated words (any case) count once.
        assert_eq!(match_expr("Rain rain RAIN").unwrap(), r#"words : "Rain""#);
    }

    #[test]
    fn finds_chinese_by_word_by_character_and_by_substring() {
        let conn = index();
        put_all(
            &conn,
            &[
                "今天天气很好",
                "明天会下雨吗",
                "明天气温很低",
                "the weather is fine",
            ],
        );
        assert_eq!(hits(&conn, "天气")[0], 1);
        assert!(
            hits(&conn, "天气").contains(&3),
            "substring 天气 of 明天气温"
        );
        assert_eq!(hits(&conn, "下雨"), [2]);
        assert_eq!(hits(&conn, "雨"), [2]);
        assert_eq!(hits(&conn, "Weather"), [4]);
        assert_eq!(hits(&conn, "weathers"), [4], "porter stem");
        assert!(hits(&conn, "雪").is_empty());
    }

    #[test]
    fn hostile_queries_neither_fail_nor_act_as_syntax() {
        let conn = index();
        put_all(&conn, &["foo bar", "near the or gate", "*"]);
        for query in [
            r#""foo" OR NEAR("#,
            "NEAR(foo bar, 2)",
            "foo*",
            "^foo",
            "words: foo",
            "chars : 雨",
            "{words chars}: foo",
            "\"",
            "\"\"\"",
            "(",
            ")",
            "AND",
            "NOT foo",
            "foo -bar",
            "'; DROP TABLE doc_memory_fts; --",
            "\0",
            "",
            "   ",
            "🌧🌧",
            &"很长的问题".repeat(500),
        ] {
            FtsTable::DOCS
                .search(&conn, query, 10)
                .unwrap_or_else(|e| panic!("{query:?}: {e}"));
        }
        // The operator words are searched as words.
        assert_eq!(hits(&conn, "NEAR("), [2]);
        assert_eq!(hits(&conn, "OR"), [2]);
    }

    #[test]
    fn scores_are_positive_and_best_first() {
        let conn = index();
        put_all(
            &conn,
            &[
                "rust rust rust rust",
                "rust and go",
                "python and go and java and c and more words here",
            ],
        );
        let found = FtsTable::DOCS.search(&conn, "rust go", 10).unwrap();
        assert_eq!(found.len(), 3);
        assert!(found.iter().all(|(_, s)| *s > 0.0), "{found:?}");
        assert!(found.windows(2).all(|w| w[0].1 >= w[1].1), "{found:?}");
        assert_eq!(
            found[2].0, 3,
            "one common word in a long document ranks last"
        );
    }

    #[test]
    fn replaced_and_deleted_rows_leave_the_index() {
        let conn = index();
        put_all(&conn, &["old words"]);
        FtsTable::DOCS.put(&conn, 1, &segment("new text")).unwrap();
        assert!(hits(&conn, "old").is_empty());
        assert_eq!(hits(&conn, "new"), [1]);
        FtsTable::DOCS.delete(&conn, 1).unwrap();
        assert!(hits(&conn, "new").is_empty());
        assert!(FtsTable::DOCS.index_bytes(&conn).unwrap() >= 0);
    }

    #[test]
    fn top_k_defaults_and_cap() {
        assert_eq!(limit(0), DEFAULT_TOP_K as usize);
        assert_eq!(limit(3), 3);
        assert_eq!(limit(u32::MAX), MAX_TOP_K as usize);
    }
}
