//! The full-text index on PostgreSQL, shared by DocMemory (`pg::docs`) and Knowledge
//! (`pg::knowledge`): the same segmentation, the same query alternatives and the same
//! BM25 scores as SQLite's FTS5 index (`storage::search`, whose module doc describes
//! the columns and queries). Design and measurements:
//! `docs/design/postgres-research.md` §3.
//!
//! # Rows
//! A text is [`segment`](crate::storage::search::segment)ed as on SQLite; each column's
//! text is cut into `unicode61`-like tokens ([`search::tokens`]), lower-cased in Rust,
//! and stored as `to_tsvector('hearth_search', …)` of the tokens space-joined, so that
//! token *i* is position *i*. A tsvector keeps positions up to 16383 and at most 1 MB,
//! so a long text is stored in chunks (rows `(seq, chunk)`) of at most
//! [`CHUNK_TOKENS`] tokens (and [`CHUNK_BYTES`] bytes of tokens) per column. Each chunk
//! also holds the next [`OVERLAP`] tokens, so a phrase that starts near its end is
//! matched there; `nwords`/`nchars` count the tokens a chunk *owns* (without the
//! overlap), and an occurrence counts only in the chunk that owns its first token.
//! `ntokens`, the whole text's token count (BM25's |D|), is on every chunk; the first
//! chunk (0) always exists, even for a text without tokens, so it counts in N.
//!
//! # Queries and scores
//! The query's alternatives ([`search::alternatives`]) are tokenized the same way and
//! normalized by the server (`to_tsvector` of the same configuration), then sent as
//! two tsqueries built in Rust — quoted lexemes, phrases with `<->`, so no user text
//! is tsquery syntax — one per column, matched through the GIN indexes. For the
//! candidate rows only the positions of the query's lexemes come back; BM25 is then
//! computed exactly as FTS5's `bm25()` does (k1 = 1.2, b = 0.75, IDF =
//! ln((N − n + 0.5)/(n + 0.5)) floored at 1e-6, every alternative summed in order,
//! N = documents in the index, avgdl = all tokens / N), so a score equals SQLite's
//! `-bm25()` up to floating-point noise. Ties are broken by `seq` (older first).
//!
//! # Stemming and accents: the `hearth_search` configuration
//! Created by the "document memory" migration: PostgreSQL's `simple` configuration
//! with word tokens sent through `unaccent` (when the extension could be created) and a
//! Snowball English stemmer without a stop-word list. Remaining differences from
//! SQLite's `porter unicode61 remove_diacritics 2`, none met by the shared tests:
//! - Snowball (Porter2) is not FTS5's Porter: a few English words stem differently
//!   (e.g. "generously"), so such word pairs can match on one backend only.
//! - Without `unaccent` (the extension could not be created), accents are not folded
//!   ("café" does not find "cafe"); `unaccent` also folds a few ligatures FTS5 keeps.
//! - Token boundaries: [`search::tokens`] approximates `unicode61`'s categories, and the
//!   server's parser may still split an exotic token (e.g. a number such as `1e5` it
//!   reads as one float, or a character its locale does not class as a letter), which
//!   shifts positions and counts by one for that text.
//! - A tsvector keeps at most 256 positions of one lexeme per chunk: a term repeated
//!   more often in one chunk has its count capped there (BM25 saturates long before,
//!   so the score barely moves), and a phrase occurrence after those positions is not
//!   seen. Tokens over [`MAX_TOKEN_BYTES`] are cut (PostgreSQL does not index them).
//! - N and avgdl are read with a scan of the index's first chunks at every query
//!   (`count(*)`, `sum(ntokens)`); at Hearth's sizes that is cheap.

use std::collections::{BTreeMap, HashMap};

use tokio_postgres::Client;

use crate::storage::search::{self, Column, Segmented};

/// The text search configuration of the index (created by the migration).
const CONFIG: &str = "hearth_search";

/// Most tokens a chunk owns per column (positions end at 16383).
pub(crate) const CHUNK_TOKENS: usize = 16_000;

/// Most bytes of tokens a chunk owns per column (a tsvector holds at most 1 MB).
pub(crate) const CHUNK_BYTES: usize = 256 * 1024;

/// Tokens of the next chunk a chunk repeats, so a phrase of up to `OVERLAP + 1`
/// tokens (jieba's dictionary words are far shorter) that starts in a chunk matches
/// there.
pub(crate) const OVERLAP: usize = 32;

/// Longest token indexed, in bytes (PostgreSQL skips words of 2048 bytes and more);
/// longer tokens are cut at a character boundary.
pub(crate) const MAX_TOKEN_BYTES: usize = 2000;

/// BM25's parameters, FTS5's.
const K1: f64 = 1.2;
const B: f64 = 0.75;

/// One chunk's column values.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Chunk {
    words: String,
    chars: String,
    nwords: i32,
    nchars: i32,
}

/// The index rows of one text, ready to write ([`PgIndex::put`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct IndexRows {
    chunks: Vec<Chunk>,
    ntokens: i64,
}

impl IndexRows {
    /// Number of chunk rows.
    #[cfg(test)]
    pub(crate) fn chunks(&self) -> usize {
        self.chunks.len()
    }
}

/// `token` lower-cased and cut to [`MAX_TOKEN_BYTES`].
fn normal(token: &str) -> String {
    let mut t = token.to_lowercase();
    if t.len() > MAX_TOKEN_BYTES {
        let mut end = MAX_TOKEN_BYTES;
        while !t.is_char_boundary(end) {
            end -= 1;
        }
        t.truncate(end);
    }
    t
}

/// `text`'s tokens cut into chunks: (owned tokens, the chunk's text with overlap).
fn chunk_column(text: &str) -> Vec<(i32, String)> {
    let tokens: Vec<String> = search::tokens(text).map(normal).collect();
    let mut out = Vec::new();
    let mut start = 0;
    while start < tokens.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < tokens.len()
            && end - start < CHUNK_TOKENS
            && (end == start || bytes + tokens[end].len() <= CHUNK_BYTES)
        {
            bytes += tokens[end].len() + 1;
            end += 1;
        }
        let with_overlap = (end + OVERLAP).min(tokens.len());
        out.push(((end - start) as i32, tokens[start..with_overlap].join(" ")));
        start = end;
    }
    out
}

/// The index rows of a [`Segmented`] text. Pure CPU work.
pub(crate) fn index_rows(text: &Segmented) -> IndexRows {
    let words = chunk_column(text.words());
    let chars = chunk_column(text.chars());
    let n = words.len().max(chars.len()).max(1);
    let mut words = words.into_iter();
    let mut chars = chars.into_iter();
    let mut chunks = Vec::with_capacity(n);
    let mut ntokens = 0i64;
    for _ in 0..n {
        let (nwords, words) = words.next().unwrap_or_default();
        let (nchars, chars) = chars.next().unwrap_or_default();
        ntokens += i64::from(nwords) + i64::from(nchars);
        chunks.push(Chunk {
            words,
            chars,
            nwords,
            nchars,
        });
    }
    IndexRows { chunks, ntokens }
}

/// `lexeme` as a quoted tsquery operand (quotes and backslashes doubled).
fn quoted(lexeme: &str) -> String {
    format!("'{}'", lexeme.replace('\\', "\\\\").replace('\'', "''"))
}

/// A query alternative as the server normalized it.
struct Phrase {
    column: Column,
    lexemes: Vec<String>,
}

/// Positions of the query's lexemes in one column of one chunk.
type Positions = HashMap<String, Vec<i16>>;

/// A document some chunk of which matched the query.
struct Candidate {
    /// Tokens of the whole text (BM25's |D|).
    ntokens: i64,
    /// (chunk, column 0 = words / 1 = chars) → (tokens the chunk owns there, positions).
    chunks: HashMap<(i32, i32), (i32, Positions)>,
}

/// One index table on PostgreSQL. The name is a constant of this module, never user
/// input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PgIndex(&'static str);

impl PgIndex {
    /// DocMemory's index; `seq` = `doc_memory.seq`.
    pub(crate) const DOCS: PgIndex = PgIndex("doc_memory_fts");
    /// Knowledge's index; `seq` = `knowledge.seq`.
    pub(crate) const KNOWLEDGE: PgIndex = PgIndex("knowledge_fts");

    /// The table's name.
    pub(crate) fn table(self) -> &'static str {
        self.0
    }

    /// Replaces the index rows of `seq` with `rows`. Run it in the transaction that
    /// writes the row itself.
    pub(crate) async fn put(
        self,
        tx: &tokio_postgres::Transaction<'_>,
        seq: i64,
        rows: &IndexRows,
    ) -> Result<(), tokio_postgres::Error> {
        let table = self.0;
        tx.execute(&format!("DELETE FROM {table} WHERE seq = $1"), &[&seq])
            .await?;
        let words: Vec<&str> = rows.chunks.iter().map(|c| c.words.as_str()).collect();
        let chars: Vec<&str> = rows.chunks.iter().map(|c| c.chars.as_str()).collect();
        let nwords: Vec<i32> = rows.chunks.iter().map(|c| c.nwords).collect();
        let nchars: Vec<i32> = rows.chunks.iter().map(|c| c.nchars).collect();
        tx.execute(
            &format!(
                "INSERT INTO {table} (seq, chunk, words, chars, nwords, nchars, ntokens)
                 SELECT $1, (c.n - 1)::int, to_tsvector('{CONFIG}', c.w),
                        to_tsvector('{CONFIG}', c.ch), c.nw, c.nc, $6
                   FROM unnest($2::text[], $3::text[], $4::int[], $5::int[])
                        WITH ORDINALITY AS c (w, ch, nw, nc, n)"
            ),
            &[&seq, &words, &chars, &nwords, &nchars, &rows.ntokens],
        )
        .await?;
        Ok(())
    }

    /// [`PgIndex::search`], each hit joined to its stored row: `select` is a query
    /// taking the hits' seqs as `$1` (`… WHERE seq = ANY($1)`) whose first column is
    /// the seq. Best first, as (row, score); a row removed between the two statements
    /// is left out.
    pub(crate) async fn search_rows(
        self,
        client: &Client,
        query: &str,
        limit: usize,
        select: &str,
    ) -> Result<Vec<(tokio_postgres::Row, f64)>, tokio_postgres::Error> {
        let hits = self.search(client, query, limit).await?;
        if hits.is_empty() {
            return Ok(Vec::new());
        }
        let seqs: Vec<i64> = hits.iter().map(|(seq, _)| *seq).collect();
        let mut rows: HashMap<i64, tokio_postgres::Row> = client
            .query(select, &[&seqs])
            .await?
            .into_iter()
            .map(|r| (r.get(0), r))
            .collect();
        Ok(hits
            .into_iter()
            .filter_map(|(seq, score)| rows.remove(&seq).map(|r| (r, score)))
            .collect())
    }

    /// The best `limit` rows for `query`, best first, as (seq, score) with the score
    /// SQLite's `-bm25()` gives (positive, higher = better). A query without
    /// searchable words gives no rows.
    pub(crate) async fn search(
        self,
        client: &Client,
        query: &str,
        limit: usize,
    ) -> Result<Vec<(i64, f64)>, tokio_postgres::Error> {
        let alternatives = search::alternatives(query);
        if alternatives.is_empty() {
            return Ok(Vec::new());
        }
        // The server's normal form of each alternative's tokens.
        let texts: Vec<String> = alternatives
            .iter()
            .map(|a| {
                search::tokens(&a.text)
                    .map(normal)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        let normalized = client
            .query(
                &format!(
                    "SELECT a.i, u.lexeme, u.positions
                       FROM unnest($1::text[]) WITH ORDINALITY AS a (t, i),
                            unnest(to_tsvector('{CONFIG}', a.t)) AS u"
                ),
                &[&texts],
            )
            .await?;
        let mut positioned: Vec<Vec<(i16, String)>> = vec![Vec::new(); alternatives.len()];
        for row in &normalized {
            let i: i64 = row.get(0);
            let lexeme: String = row.get(1);
            let positions: Vec<i16> = row.get(2);
            for p in positions {
                positioned[(i - 1) as usize].push((p, lexeme.clone()));
            }
        }
        let phrases: Vec<Phrase> = alternatives
            .iter()
            .zip(positioned)
            .map(|(a, mut lexemes)| {
                lexemes.sort();
                Phrase {
                    column: a.column,
                    lexemes: lexemes.into_iter().map(|(_, l)| l).collect(),
                }
            })
            .collect();
        let tsquery = |column: Column| {
            let parts: Vec<String> = phrases
                .iter()
                .filter(|p| p.column == column && !p.lexemes.is_empty())
                .map(|p| {
                    let q: Vec<String> = p.lexemes.iter().map(|l| quoted(l)).collect();
                    format!("({})", q.join(" <-> "))
                })
                .collect();
            (!parts.is_empty()).then(|| parts.join(" | "))
        };
        let lexemes = |column: Column| {
            let mut all: Vec<&str> = phrases
                .iter()
                .filter(|p| p.column == column)
                .flat_map(|p| p.lexemes.iter().map(String::as_str))
                .collect();
            all.sort_unstable();
            all.dedup();
            all
        };
        let (words_query, chars_query) = (tsquery(Column::Words), tsquery(Column::Chars));
        if words_query.is_none() && chars_query.is_none() {
            return Ok(Vec::new());
        }
        let (words_lexemes, chars_lexemes) = (lexemes(Column::Words), lexemes(Column::Chars));
        let table = self.0;
        let candidates = format!(
            "WITH c AS MATERIALIZED (
                 SELECT seq, chunk, words, chars, nwords, nchars, ntokens FROM {table}
                  WHERE words @@ $1::text::tsquery OR chars @@ $2::text::tsquery)
             SELECT c.seq, c.chunk, 0::int, c.nwords, c.ntokens, u.lexeme, u.positions
               FROM c, unnest(c.words) AS u WHERE u.lexeme = ANY($3::text[])
             UNION ALL
             SELECT c.seq, c.chunk, 1::int, c.nchars, c.ntokens, u.lexeme, u.positions
               FROM c, unnest(c.chars) AS u WHERE u.lexeme = ANY($4::text[])"
        );
        let totals = format!(
            "SELECT count(*), coalesce(sum(ntokens), 0)::bigint FROM {table} WHERE chunk = 0"
        );
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 4] =
            [&words_query, &chars_query, &words_lexemes, &chars_lexemes];
        let (rows, totals) = tokio::try_join!(
            client.query(candidates.as_str(), &params),
            client.query_one(totals.as_str(), &[]),
        )?;
        let n_docs: i64 = totals.get(0);
        let n_tokens: i64 = totals.get(1);

        let mut docs: BTreeMap<i64, Candidate> = BTreeMap::new();
        for row in &rows {
            let seq: i64 = row.get(0);
            let (chunk, column, owned): (i32, i32, i32) = (row.get(1), row.get(2), row.get(3));
            let doc = docs.entry(seq).or_insert_with(|| Candidate {
                ntokens: row.get(4),
                chunks: HashMap::new(),
            });
            doc.chunks
                .entry((chunk, column))
                .or_insert_with(|| (owned, HashMap::new()))
                .1
                .insert(row.get(5), row.get(6));
        }
        // Occurrences of each phrase in each candidate, counted where they start.
        let column_id = |c: Column| match c {
            Column::Words => 0,
            Column::Chars => 1,
        };
        let mut freq: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
        let mut hits = vec![0i64; phrases.len()];
        for (seq, doc) in &docs {
            let mut f = vec![0f64; phrases.len()];
            for ((_, column), (owned, positions)) in &doc.chunks {
                for (i, phrase) in phrases.iter().enumerate() {
                    if *column != column_id(phrase.column) || phrase.lexemes.is_empty() {
                        continue;
                    }
                    f[i] += occurrences(&phrase.lexemes, positions, *owned) as f64;
                }
            }
            for (i, n) in f.iter().enumerate() {
                if *n > 0.0 {
                    hits[i] += 1;
                }
            }
            if f.iter().any(|n| *n > 0.0) {
                freq.insert(*seq, f);
            }
        }
        // FTS5's fts5Bm25GetData and fts5Bm25Function, operation for operation.
        let avgdl = n_tokens as f64 / n_docs as f64;
        let idf: Vec<f64> = hits
            .iter()
            .map(|&n| {
                let idf = (((n_docs - n) as f64 + 0.5) / (n as f64 + 0.5)).ln();
                if idf <= 0.0 {
                    1e-6
                } else {
                    idf
                }
            })
            .collect();
        let mut scored: Vec<(i64, f64)> = freq
            .into_iter()
            .map(|(seq, f)| {
                let d = docs[&seq].ntokens as f64;
                let mut score = 0.0;
                for (i, tf) in f.iter().enumerate() {
                    score += idf[i] * ((tf * (K1 + 1.0)) / (tf + K1 * (1.0 - B + B * d / avgdl)));
                }
                (seq, score)
            })
            .collect();
        scored.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        scored.truncate(limit);
        Ok(scored)
    }
}

/// How often the phrase `lexemes` occurs in a chunk's column (`positions` of its
/// lexemes), counting only occurrences that start within the chunk's first `owned`
/// tokens.
fn occurrences(lexemes: &[String], positions: &Positions, owned: i32) -> usize {
    let Some(first) = positions.get(&lexemes[0]) else {
        return 0;
    };
    first
        .iter()
        .filter(|&&p| i32::from(p) <= owned)
        .filter(|&&p| {
            lexemes[1..].iter().enumerate().all(|(k, lexeme)| {
                positions
                    .get(lexeme)
                    .is_some_and(|ps| ps.binary_search(&(p + k as i16 + 1)).is_ok())
            })
        })
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_texts_are_chunked_with_overlap_and_owned_counts() {
        let text = format!("{} tail", "word ".repeat(CHUNK_TOKENS + 100));
        let rows = index_rows(&search::segment(&text));
        assert_eq!(rows.chunks(), 2);
        assert_eq!(rows.chunks[0].nwords as usize, CHUNK_TOKENS);
        assert_eq!(rows.chunks[1].nwords, 101);
        assert_eq!(rows.ntokens, CHUNK_TOKENS as i64 + 101);
        assert_eq!(
            rows.chunks[0].words.split(' ').count(),
            CHUNK_TOKENS + OVERLAP
        );
        assert!(rows.chunks[1].words.ends_with("word tail"));
        // An empty text still has its first chunk.
        let empty = index_rows(&search::segment(""));
        assert_eq!(empty.chunks(), 1);
        assert_eq!(empty.ntokens, 0);
    }

    #[test]
    fn tokens_are_lower_cased_and_cut() {
        let rows = index_rows(&search::segment("Rust GPT-4 天气"));
        assert_eq!(rows.chunks[0].chars, "天 气");
        let words = &rows.chunks[0].words;
        assert!(
            words.starts_with("rust ") && words.contains("gpt 4"),
            "{rows:?}"
        );
        assert!(!words.chars().any(char::is_uppercase), "{rows:?}");
        let long = normal(&"é".repeat(MAX_TOKEN_BYTES));
        assert!(long.len() <= MAX_TOKEN_BYTES && long.len() >= MAX_TOKEN_BYTES - 1);
    }

    #[test]
    fn quoted_lexemes_cannot_escape() {
        assert_eq!(quoted("it's"), "'it''s'");
        assert_eq!(quoted(r"a\'"), r"'a\\'''");
    }

    #[test]
    fn phrases_count_where_they_start() {
        let positions: HashMap<String, Vec<i16>> = [
            ("天".to_string(), vec![1, 3, 5]),
            ("气".to_string(), vec![2, 6]),
        ]
        .into();
        let phrase = ["天".to_string(), "气".to_string()];
        assert_eq!(occurrences(&phrase, &positions, 10), 2);
        assert_eq!(
            occurrences(&phrase, &positions, 4),
            1,
            "5-6 is the next chunk's"
        );
        assert_eq!(occurrences(&phrase[..1], &positions, 10), 3);
    }
}
