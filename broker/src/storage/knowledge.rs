//! Knowledge (seed `homeagent-plugin-sdk-api.md`, "KnowledgeAPI"): entries kept as
//! files, searched through an index in `hearth.db`; one method per rpc of
//! `hearth.v1.Knowledge`.
//!
//! # The files are the truth
//! Each entry is a file `<data_dir>/knowledge/<name>.md` (UTF-8 text; invalid bytes
//! are read as U+FFFD). [`Knowledge::add`] writes one atomically (a temporary file,
//! fsynced, renamed over the old one, the directory fsynced) and indexes it. A user
//! may also drop, edit or delete files in the folder by hand: before every
//! [`search`](Knowledge::search) and [`list`](Knowledge::list), and at
//! [`open`](Knowledge::open), the folder is listed and compared with the index by file
//! size and modification time (nanoseconds); new and changed files are read and
//! indexed, and entries whose file is gone are dropped. A file modified less than
//! [`Knowledge::RACY_WINDOW`] before it was read is read again at the next sync, so an
//! edit that keeps the size within one timestamp tick of the read is not missed.
//!
//! Only the folder's own regular files (or symlinks to them) named `*.md` count;
//! subfolders, hidden files (`.name`, which includes `add`'s temporary files) and other
//! extensions are ignored. A file over [`Knowledge::MAX_ENTRY_BYTES`] or that cannot
//! be read is left out of the index, with one warning per version of the file.
//!
//! # Symlinks stay inside the folder
//! Entries reach plugins (`Knowledge.Search`) and the LLM's prompt (memory recall), so
//! a link must not make a file outside the folder an entry (`secret.md` →
//! `../admin.token`). A symlinked entry is resolved (`canonicalize`, the whole chain)
//! and followed only when its target is inside the folder's own canonical path (a
//! file of the folder or of a subfolder, e.g. `latest.md` → `2024/notes.md`); a link
//! that leaves it is not an entry — not read, not indexed, dropped from the index if it
//! was there — and is named in one warning (per link and target). Reading opens the
//! resolved path with `O_NOFOLLOW`, so a file swapped for a link after the check is not
//! followed either. Hard links cannot be told apart from the file they link and are
//! not checked: making one needs write access to the data dir.
//!
//! # Names
//! An entry's name is its file name without `.md`. [`Knowledge::sanitize_name`] turns
//! the name given to `add` into a file name: surrounding whitespace and one trailing
//! `.md` are removed; control characters and `/ \ : * ? " < > |` become `_`; a leading
//! `.` becomes `_` (no hidden files, no `.` or `..`); the result is cut to
//! [`Knowledge::MAX_NAME_BYTES`] bytes of UTF-8 at a character boundary (file names
//! are limited to 255 bytes, and the temporary file's name is longer), then trailing
//! whitespace is removed; an empty result is refused. `add` returns the name it stored
//! under, e.g. `天气/北京` → `天气_北京`, `../secret` → `_._secret`, `notes.md` →
//! `notes`.
//!
//! # Search
//! An entry's name and content are indexed together by [`search`](super::search)
//! (jieba words and CJK characters, bm25 ranking, score = `-bm25()`, > 0, higher =
//! better).
//!
//! # On PostgreSQL: the database row is the entry
//! With a database shared by several brokers ([`Db::postgres`]) there is no folder to
//! follow: each broker has its own data dir, and a shared file system is not required.
//! The row's `content` is the entry; [`Knowledge::add`] writes the row and its index
//! (`storage::pg::search`, chunked, so entries up to [`Knowledge::MAX_ENTRY_BYTES`] are
//! searchable to their last word) in one transaction, and [`list`](Knowledge::list) and
//! [`search`](Knowledge::search) read the database, so an entry one broker adds is
//! found by every other at once. **Editing `<data_dir>/knowledge` by hand does nothing
//! in this mode** (the folder is not even created) until the files are imported with
//! [`Knowledge::import_dir`].
//!
//! # Import
//! [`Knowledge::import_dir`] brings a folder of `*.md` files (the same rules as above:
//! hidden files, subfolders and links leaving that folder are ignored; files over the
//! size limit or unreadable are reported as skipped) into the store, on both backends:
//! each file whose content differs from the entry of its (sanitized) name is added
//! ([`Knowledge::add`]: on SQLite that writes the file into the knowledge folder), equal
//! ones are left alone, and with `prune` the entries no file of the folder names are
//! removed. It is the way to load or update knowledge in PostgreSQL mode, and to copy
//! a folder into a SQLite data dir.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde::{Deserialize, Serialize};
use tokio::sync::Mutex;

use super::search::{self, FtsTable, Segmented};
use super::{pg, Db, StorageError};

/// `mtime_ns` stored for a file read within [`Knowledge::RACY_WINDOW`] of its
/// modification: it never equals a file's time, so the next sync reads it again.
const MTIME_UNTRUSTED: i64 = -1;

/// One knowledge entry (the proto's `KnowledgeEntry`; the seed's `Knowledge` plus the
/// score).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct KnowledgeEntry {
    /// The file name without `.md`.
    pub name: String,
    /// The file's text as indexed.
    pub content: String,
    /// Relevance to the query (`-bm25()`, > 0, higher = better).
    #[serde(skip_serializing_if = "is_zero")]
    pub score: f64,
}

fn is_zero(score: &f64) -> bool {
    *score == 0.0
}

/// What [`Knowledge::import_dir`] did, by entry name (sanitized, as stored).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[non_exhaustive]
pub struct ImportReport {
    /// Entries that did not exist, now added.
    pub added: Vec<String>,
    /// Entries whose content differed, now replaced.
    pub updated: Vec<String>,
    /// Files whose content equals their entry's (nothing written).
    pub unchanged: usize,
    /// Entries no file of the folder names (only with `prune`), now removed.
    pub removed: Vec<String>,
    /// Files left out, with why: too big, unreadable, a link leaving the folder, or a
    /// name with nothing left once sanitized.
    pub skipped: Vec<(String, String)>,
}

/// The knowledge folder and its index. Cheap to clone; clones share one lock, so
/// syncs, searches and adds of one folder run one at a time.
#[derive(Debug, Clone)]
pub struct Knowledge {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    db: Db,
    dir: PathBuf,
    /// Held for a whole sync (+ search or list) or add.
    state: Mutex<SyncState>,
}

#[derive(Debug, Default)]
struct SyncState {
    /// Versions of files (name, size, mtime) already warned about as too big or
    /// unreadable.
    warned: HashSet<(String, u64, i64)>,
    /// Symlinks (entry name, target) already warned about as leaving the folder.
    warned_links: HashSet<(String, PathBuf)>,
    /// When the folder was last synced, and the folder's own mtime then.
    synced_at: Option<std::time::Instant>,
    dir_mtime: Option<SystemTime>,
}

/// A `*.md` file of the folder, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Listed {
    name: String,
    size: u64,
    mtime_ns: i64,
}

/// The folder as listed: its entry files, and the symlinks left out because they
/// lead outside it (entry name, canonical target).
#[derive(Debug, Default)]
struct Listing {
    files: Vec<Listed>,
    outside: Vec<(String, PathBuf)>,
}

/// What a sync must do to the index.
#[derive(Debug, Default)]
struct Plan {
    read: Vec<String>,
    drop: Vec<String>,
}

/// A file read for indexing.
struct FileRead {
    name: String,
    content: String,
    size: u64,
    /// As stored: the file's, or [`MTIME_UNTRUSTED`].
    mtime_ns: i64,
    segmented: Segmented,
}

/// Result of reading the changed files.
#[derive(Default)]
struct Reads {
    indexed: Vec<FileRead>,
    /// Files gone since listing, too big or unreadable: not in the index.
    drop: Vec<String>,
    /// Too big or unreadable: (name, size, mtime, why), to warn about once.
    problems: Vec<(String, u64, i64, String)>,
}

enum First<T, F> {
    Done(T),
    Sync(Plan, F),
}

impl Knowledge {
    /// Largest entry file read and indexed; bigger files are left out (with a
    /// warning), and `add` refuses bigger content.
    pub const MAX_ENTRY_BYTES: u64 = 8 * 1024 * 1024;

    /// Longest entry name, in bytes of UTF-8 (see the module doc, "Names").
    pub const MAX_NAME_BYTES: usize = 200;

    /// A file whose modification time is this close to the moment it was read is read
    /// again at the next sync: another write within the same timestamp tick that kept
    /// the size would otherwise go unseen.
    pub const RACY_WINDOW: Duration = Duration::from_secs(2);

    /// Opens the folder `<data_dir>/knowledge/` (created if needed) and brings the
    /// index in `db` up to date with it.
    ///
    /// On PostgreSQL the database is the store: the folder is neither created nor read
    /// (see the module doc, "On PostgreSQL").
    pub async fn open(db: Db, data_dir: &Path) -> Result<Knowledge, StorageError> {
        let dir = data_dir.join("knowledge");
        if db.pg().is_some() {
            return Ok(Knowledge {
                inner: Arc::new(Inner {
                    db,
                    dir,
                    state: Mutex::new(SyncState::default()),
                }),
            });
        }
        let create = dir.clone();
        search::blocking(&dir, move || {
            fs::create_dir_all(&create).map_err(|source| StorageError::Io {
                path: create.clone(),
                op: "create the knowledge dir",
                source,
            })
        })
        .await??;
        let knowledge = Knowledge {
            inner: Arc::new(Inner {
                db,
                dir,
                state: Mutex::new(SyncState::default()),
            }),
        };
        knowledge.synced("sync knowledge", |_| Ok(())).await?;
        Ok(knowledge)
    }

    /// The folder of the entry files (on PostgreSQL: where they would be; not used).
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The file name (without `.md`) `add` uses for `name`; see the module doc,
    /// "Names".
    ///
    /// Errors: [`StorageError::Invalid`] if nothing is left of `name`.
    pub fn sanitize_name(name: &str) -> Result<String, StorageError> {
        let trimmed = name.trim();
        let trimmed = trimmed.strip_suffix(".md").unwrap_or(trimmed);
        let mut out = String::with_capacity(trimmed.len().min(Knowledge::MAX_NAME_BYTES));
        for c in trimmed.chars() {
            let c = if c.is_control()
                || matches!(c, '/' | '\\' | ':' | '*' | '?' | '"' | '<' | '>' | '|')
            {
                '_'
            } else {
                c
            };
            if out.len() + c.len_utf8() > Knowledge::MAX_NAME_BYTES {
                break;
            }
            out.push(c);
        }
        if out.starts_with('.') {
            out.replace_range(..1, "_");
        }
        let out = out.trim_end();
        if out.is_empty() {
            return Err(StorageError::Invalid {
                what: format!("knowledge entry name {name:?}"),
                reason: "empty once sanitized".into(),
            });
        }
        Ok(out.to_string())
    }

    /// Writes `content` as the entry `name` (its file replaced atomically if it
    /// exists) and indexes it; returns the name it was stored under
    /// ([`sanitize_name`](Knowledge::sanitize_name)). Returns once the file and the
    /// index are durable.
    ///
    /// Errors: [`StorageError::Invalid`] for a name with nothing left once sanitized or
    /// content over [`Knowledge::MAX_ENTRY_BYTES`]; [`StorageError::Io`] naming the
    /// file.
    pub async fn add(&self, name: &str, content: &str) -> Result<String, StorageError> {
        let name = Knowledge::sanitize_name(name)?;
        if content.len() as u64 > Knowledge::MAX_ENTRY_BYTES {
            return Err(StorageError::Invalid {
                what: format!("knowledge entry {name}"),
                reason: format!(
                    "{} bytes of content, more than the {} allowed",
                    content.len(),
                    Knowledge::MAX_ENTRY_BYTES
                ),
            });
        }
        if let Some(pg) = self.inner.db.pg() {
            let (file_name, content) = (name.clone(), content.to_string());
            let (content, rows) = search::blocking(self.inner.db.path(), move || {
                let segmented = search::segment(&format!("{file_name}\n{content}"));
                let rows = pg::search::index_rows(&segmented);
                (content, rows)
            })
            .await?;
            let stat = (content.len() as i64, MTIME_UNTRUSTED);
            pg::knowledge::upsert(pg, &name, &content, stat, &rows, unix_now()).await?;
            return Ok(name);
        }
        let _state = self.inner.state.lock().await;
        let (dir, file_name, content) = (self.inner.dir.clone(), name.clone(), content.to_string());
        let read = search::blocking(
            &self.inner.dir,
            move || -> Result<FileRead, StorageError> {
                let (size, mtime_ns) = write_atomically(&dir, &file_name, content.as_bytes())?;
                let segmented = search::segment(&format!("{file_name}\n{content}"));
                Ok(FileRead {
                    mtime_ns: trusted_mtime(mtime_ns),
                    name: file_name,
                    content,
                    size,
                    segmented,
                })
            },
        )
        .await??;
        self.inner
            .db
            .call(format!("index knowledge entry {name}"), move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                upsert(&tx, &read)?;
                tx.commit()
            })
            .await?;
        Ok(name)
    }

    /// Every entry's name, sorted, after bringing the index up to date with the folder.
    /// On PostgreSQL, the entries in the database.
    pub async fn list(&self) -> Result<Vec<String>, StorageError> {
        if let Some(pg) = self.inner.db.pg() {
            return pg::knowledge::list(pg).await;
        }
        self.synced("list knowledge", |conn| {
            let mut stmt = conn.prepare_cached("SELECT name FROM knowledge ORDER BY name")?;
            let names = stmt.query_map([], |row| row.get(0))?;
            names.collect()
        })
        .await
    }

    /// The entries that best match `query`, best first, with their scores, after
    /// bringing the index up to date with the folder (SQLite; PostgreSQL reads the
    /// database): at most `top_k`
    /// ([`DEFAULT_TOP_K`](super::DEFAULT_TOP_K) for 0, capped at
    /// [`MAX_TOP_K`](super::MAX_TOP_K)). A query without searchable words matches
    /// nothing; no query is an error (FTS5 syntax in it is searched as words).
    pub async fn search(
        &self,
        query: &str,
        top_k: u32,
    ) -> Result<Vec<KnowledgeEntry>, StorageError> {
        self.search_synced_within(query, top_k, Duration::ZERO)
            .await
    }

    /// [`Knowledge::search`], syncing the folder first only when the last sync is
    /// older than `max_age` or the folder itself changed since (a file added, removed
    /// or renamed over, as editors save). The agent's memory recall, which runs for every
    /// message, uses one second: a file edited in place by hand is recalled at most that
    /// much later. On PostgreSQL, the same as [`Knowledge::search`].
    pub async fn search_synced_within(
        &self,
        query: &str,
        top_k: u32,
        max_age: Duration,
    ) -> Result<Vec<KnowledgeEntry>, StorageError> {
        let limit = search::limit(top_k);
        if let Some(pg) = self.inner.db.pg() {
            return pg::knowledge::search(pg, query, limit).await;
        }
        let query = query.to_string();
        self.synced_within("search knowledge", max_age, move |conn| {
            let hits = FtsTable::KNOWLEDGE.search(conn, &query, limit)?;
            let mut row =
                conn.prepare_cached("SELECT name, content FROM knowledge WHERE seq = ?1")?;
            let mut entries = Vec::with_capacity(hits.len());
            for (seq, score) in hits {
                let entry = row
                    .query_row([seq], |r| {
                        Ok(KnowledgeEntry {
                            name: r.get(0)?,
                            content: r.get(1)?,
                            score,
                        })
                    })
                    .optional()?;
                entries.extend(entry);
            }
            Ok(entries)
        })
        .await
    }

    /// Removes the entry `name` (as stored, see [`Knowledge::sanitize_name`]): on SQLite
    /// its file and index entry, on PostgreSQL its row. Returns whether there was one.
    ///
    /// Errors: [`StorageError::Io`] naming the file that could not be deleted.
    pub async fn remove(&self, name: &str) -> Result<bool, StorageError> {
        if let Some(pg) = self.inner.db.pg() {
            return pg::knowledge::remove(pg, name).await;
        }
        let path = self.inner.dir.join(format!("{name}.md"));
        let existed = search::blocking(&self.inner.dir, move || match fs::remove_file(&path) {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(source) => Err(StorageError::Io {
                path,
                op: "remove the knowledge entry",
                source,
            }),
        })
        .await??;
        self.synced("remove knowledge entry", |_| Ok(())).await?;
        Ok(existed)
    }

    /// Imports the `*.md` files of `dir` (see the module doc, "Import"): adds new and
    /// changed entries (compared by content), and with `prune` removes the entries no
    /// file names. Files are read and written one at a time; an error stops the import
    /// where it is (what was written stays).
    ///
    /// Errors: [`StorageError::Io`] when `dir` cannot be listed (or is not a folder);
    /// those of [`add`](Knowledge::add) and [`remove`](Knowledge::remove).
    pub async fn import_dir(&self, dir: &Path, prune: bool) -> Result<ImportReport, StorageError> {
        let src = dir.to_path_buf();
        let (listing, mut reads) = search::blocking(dir, move || {
            if let Err(source) = fs::read_dir(&src) {
                return Err(StorageError::Io {
                    path: src,
                    op: "list the folder to import",
                    source,
                });
            }
            let listing = list_dir(&src)?;
            let names = listing.files.iter().map(|f| f.name.clone()).collect();
            let reads = read_changed(&src, names);
            Ok((listing, reads))
        })
        .await??;
        let mut report = ImportReport::default();
        for (name, target) in listing.outside {
            let why = format!("symlink to {} leads outside the folder", target.display());
            report.skipped.push((name, why));
        }
        for (name, _, _, why) in std::mem::take(&mut reads.problems) {
            report.skipped.push((name, why));
        }
        let mut keep: HashSet<String> = listing
            .files
            .iter()
            .filter_map(|f| Knowledge::sanitize_name(&f.name).ok())
            .collect();
        let mut files = Vec::with_capacity(reads.indexed.len());
        for read in reads.indexed {
            match Knowledge::sanitize_name(&read.name) {
                Ok(name) => files.push((name, read.content)),
                Err(e) => report.skipped.push((read.name, e.to_string())),
            }
        }
        let names: Vec<String> = files.iter().map(|(name, _)| name.clone()).collect();
        let current = self.contents(names).await?;
        for (name, content) in files {
            match current.get(&name) {
                Some(old) if *old == content => report.unchanged += 1,
                old => {
                    let stored = self.add(&name, &content).await?;
                    if old.is_some() {
                        report.updated.push(stored);
                    } else {
                        report.added.push(stored);
                    }
                }
            }
            keep.insert(name);
        }
        if prune {
            for name in self.list().await? {
                if !keep.contains(&name) && self.remove(&name).await? {
                    report.removed.push(name);
                }
            }
        }
        tracing::info!(
            dir = %dir.display(),
            added = report.added.len(),
            updated = report.updated.len(),
            unchanged = report.unchanged,
            removed = report.removed.len(),
            skipped = report.skipped.len(),
            "knowledge imported"
        );
        Ok(report)
    }

    /// The content of each of `names` that is an entry.
    async fn contents(&self, names: Vec<String>) -> Result<HashMap<String, String>, StorageError> {
        if let Some(pg) = self.inner.db.pg() {
            return pg::knowledge::contents(pg, &names).await;
        }
        self.synced("read knowledge entries", move |conn| {
            let mut stmt = conn.prepare_cached("SELECT content FROM knowledge WHERE name = ?1")?;
            let mut found = HashMap::new();
            for name in names {
                if let Some(content) = stmt
                    .query_row([&name], |r| r.get::<_, String>(0))
                    .optional()?
                {
                    found.insert(name, content);
                }
            }
            Ok(found)
        })
        .await
    }

    /// Syncs the index with the folder, then runs `f` on the connection. In the common
    /// case (nothing changed) that is one listing of the folder and one database call.
    async fn synced<T, F>(&self, op: &str, f: F) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        self.synced_within(op, Duration::ZERO, f).await
    }

    /// [`Knowledge::synced`], skipping the sync when the last one is younger than
    /// `max_age`.
    async fn synced_within<T, F>(
        &self,
        op: &str,
        max_age: Duration,
        f: F,
    ) -> Result<T, StorageError>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    {
        let mut state = self.inner.state.lock().await;
        let dir_mtime = fs::metadata(&self.inner.dir)
            .and_then(|m| m.modified())
            .ok();
        if !max_age.is_zero()
            && state.synced_at.is_some_and(|t| t.elapsed() < max_age)
            && dir_mtime.is_some()
            && dir_mtime == state.dir_mtime
        {
            drop(state);
            return self.inner.db.call(op, move |conn| f(conn)).await;
        }
        state.synced_at = Some(std::time::Instant::now());
        state.dir_mtime = dir_mtime;
        let dir = self.inner.dir.clone();
        let listing = search::blocking(&self.inner.dir, move || list_dir(&dir)).await??;
        for (name, target) in listing.outside {
            if state.warned_links.insert((name.clone(), target.clone())) {
                tracing::warn!(
                    link = %self.inner.dir.join(format!("{name}.md")).display(),
                    target = %target.display(),
                    "knowledge: symlink leads outside the knowledge folder; not followed"
                );
            }
        }
        let listed = listing.files;
        let first = self
            .inner
            .db
            .call(op, move |conn| {
                let plan = plan(conn, &listed)?;
                if plan.read.is_empty() && plan.drop.is_empty() {
                    Ok(First::Done(f(conn)?))
                } else {
                    Ok(First::Sync(plan, f))
                }
            })
            .await?;
        let (plan, f) = match first {
            First::Done(value) => return Ok(value),
            First::Sync(plan, f) => (plan, f),
        };
        let dir = self.inner.dir.clone();
        let mut reads =
            search::blocking(&self.inner.dir, move || read_changed(&dir, plan.read)).await?;
        reads.drop.extend(plan.drop);
        for (name, size, mtime_ns, why) in std::mem::take(&mut reads.problems) {
            if state.warned.insert((name.clone(), size, mtime_ns)) {
                tracing::warn!(
                    file = %self.inner.dir.join(format!("{name}.md")).display(),
                    "knowledge: left out of the index: {why}"
                );
            }
        }
        let (indexed, dropped) = (reads.indexed.len(), reads.drop.len());
        let value = self
            .inner
            .db
            .call(op, move |conn| {
                let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
                for name in &reads.drop {
                    let seq: Option<i64> = tx
                        .prepare_cached("DELETE FROM knowledge WHERE name = ?1 RETURNING seq")?
                        .query_row([name], |row| row.get(0))
                        .optional()?;
                    if let Some(seq) = seq {
                        FtsTable::KNOWLEDGE.delete(&tx, seq)?;
                    }
                }
                for read in &reads.indexed {
                    upsert(&tx, read)?;
                }
                tx.commit()?;
                f(conn)
            })
            .await?;
        tracing::debug!(dir = %self.inner.dir.display(), indexed, dropped, "knowledge synced");
        Ok(value)
    }
}

/// Writes or replaces the row of `read` and its index entry.
fn upsert(conn: &Connection, read: &FileRead) -> rusqlite::Result<()> {
    let seq: i64 = conn
        .prepare_cached(
            "INSERT INTO knowledge (name, content, size, mtime_ns, indexed_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (name) DO UPDATE SET content = excluded.content,
                 size = excluded.size, mtime_ns = excluded.mtime_ns,
                 indexed_at = excluded.indexed_at
             RETURNING seq",
        )?
        .query_row(
            params![
                read.name,
                read.content,
                read.size as i64,
                read.mtime_ns,
                unix_now()
            ],
            |row| row.get(0),
        )?;
    FtsTable::KNOWLEDGE.put(conn, seq, &read.segmented)
}

/// Which listed files to (re)read and which indexed names are gone.
fn plan(conn: &Connection, listed: &[Listed]) -> rusqlite::Result<Plan> {
    let mut known: HashMap<String, (i64, i64)> = HashMap::new();
    let mut stmt = conn.prepare_cached("SELECT name, size, mtime_ns FROM knowledge")?;
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, (r.get(1)?, r.get(2)?))))?;
    for row in rows {
        let (name, stat) = row?;
        known.insert(name, stat);
    }
    let mut plan = Plan::default();
    for file in listed {
        if known.remove(&file.name) != Some((file.size as i64, file.mtime_ns)) {
            plan.read.push(file.name.clone());
        }
    }
    plan.drop = known.into_keys().collect();
    Ok(plan)
}

/// Where the entry file `path` really is, given the canonical path `root` of its
/// folder: `Ok(path)` for a file that is not a symlink, `Ok(target)` for a symlink
/// whose canonical target is under `root`, `Err(target)` for one that leaves it.
/// Errors: the link's target does not exist (or cannot be resolved).
fn resolve_inside(root: &Path, path: &Path) -> io::Result<Result<PathBuf, PathBuf>> {
    if !fs::symlink_metadata(path)?.file_type().is_symlink() {
        return Ok(Ok(path.to_path_buf()));
    }
    let target = fs::canonicalize(path)?;
    Ok(if target.starts_with(root) {
        Ok(target)
    } else {
        Err(target)
    })
}

/// The entry files of `dir` (none if it does not exist); symlinks leading outside it
/// are listed apart.
fn list_dir(dir: &Path) -> Result<Listing, StorageError> {
    let io = |op: &'static str| {
        let path = dir.to_path_buf();
        move |source| StorageError::Io { path, op, source }
    };
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Listing::default()),
        Err(e) => return Err(io("list the knowledge dir")(e)),
    };
    let root = match fs::canonicalize(dir) {
        Ok(root) => root,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Listing::default()),
        Err(e) => return Err(io("resolve the knowledge dir")(e)),
    };
    let mut listing = Listing::default();
    for entry in entries {
        let entry = entry.map_err(io("list the knowledge dir"))?;
        let file_name = entry.file_name();
        let Some(name) = file_name
            .to_str()
            .and_then(|f| f.strip_suffix(".md"))
            .filter(|name| !name.is_empty() && !name.starts_with('.'))
        else {
            continue;
        };
        // A symlink is followed only inside the folder; a dangling one, or a file
        // removed since the listing, is skipped.
        let path = match resolve_inside(&root, &entry.path()) {
            Ok(Ok(path)) => path,
            Ok(Err(target)) => {
                listing.outside.push((name.to_string(), target));
                continue;
            }
            Err(_) => continue,
        };
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if meta.is_file() {
            listing.files.push(Listed {
                name: name.to_string(),
                size: meta.len(),
                mtime_ns: mtime_ns(&meta),
            });
        }
    }
    Ok(listing)
}

/// Opens the entry file `path` for reading: a symlink only when it resolves inside the
/// folder `dir` (checked again here: it may have been swapped since the listing), and
/// the resolved path with `O_NOFOLLOW`, so no link is followed after the check.
fn open_inside(dir: &Path, path: &Path) -> io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt;
    let root = fs::canonicalize(dir)?;
    let real = resolve_inside(&root, path)?.map_err(|target| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!(
                "symlink to {} leads outside the knowledge folder; not followed",
                target.display()
            ),
        )
    })?;
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(real)
}

/// Reads and segments the files `names` of `dir`. Size and time come from the open
/// file, so they describe (at least) the version that was read.
fn read_changed(dir: &Path, names: Vec<String>) -> Reads {
    let mut reads = Reads::default();
    for name in names {
        let path = dir.join(format!("{name}.md"));
        let mut file = match open_inside(dir, &path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                reads.drop.push(name);
                continue;
            }
            Err(e) => {
                reads
                    .problems
                    .push((name.clone(), 0, 0, format!("open: {e}")));
                reads.drop.push(name);
                continue;
            }
        };
        let meta = match file.metadata() {
            Ok(meta) => meta,
            Err(e) => {
                reads
                    .problems
                    .push((name.clone(), 0, 0, format!("stat: {e}")));
                reads.drop.push(name);
                continue;
            }
        };
        let (size, mtime) = (meta.len(), mtime_ns(&meta));
        if size > Knowledge::MAX_ENTRY_BYTES {
            let why = format!(
                "{size} bytes, more than the {} indexed",
                Knowledge::MAX_ENTRY_BYTES
            );
            reads.problems.push((name.clone(), size, mtime, why));
            reads.drop.push(name);
            continue;
        }
        let mut bytes = Vec::with_capacity(size as usize);
        if let Err(e) = Read::take(&mut file, Knowledge::MAX_ENTRY_BYTES).read_to_end(&mut bytes) {
            reads
                .problems
                .push((name.clone(), size, mtime, format!("read: {e}")));
            reads.drop.push(name);
            continue;
        }
        let content = match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        };
        let segmented = search::segment(&format!("{name}\n{content}"));
        reads.indexed.push(FileRead {
            name,
            content,
            size,
            mtime_ns: trusted_mtime(mtime),
            segmented,
        });
    }
    reads
}

/// Writes `<dir>/<name>.md` through a temporary file and a rename, everything fsynced;
/// returns the new file's size and modification time.
fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<(u64, i64), StorageError> {
    let path = dir.join(format!("{name}.md"));
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| StorageError::Io { path, op, source }
    };
    fs::create_dir_all(dir).map_err(io("create the knowledge dir", dir))?;
    let mut suffix = [0u8; 6];
    getrandom::fill(&mut suffix).expect("the OS random source is available");
    let suffix: String = suffix.iter().map(|b| format!("{b:02x}")).collect();
    let tmp = dir.join(format!(".{name}.md.tmp-{suffix}"));
    let written = (|| {
        let mut file = OpenOptions::new().write(true).create_new(true).open(&tmp)?;
        file.write_all(bytes)?;
        file.sync_all()?;
        let meta = file.metadata()?;
        Ok::<_, io::Error>((meta.len(), mtime_ns(&meta)))
    })();
    let stat = match written {
        Ok(stat) => stat,
        Err(e) => {
            let _ = fs::remove_file(&tmp);
            return Err(io("write", &tmp)(e));
        }
    };
    if let Err(e) = fs::rename(&tmp, &path) {
        let _ = fs::remove_file(&tmp);
        return Err(io("rename into place", &path)(e));
    }
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("fsync", dir))?;
    Ok(stat)
}

/// `mtime_ns` to store: the file's, unless it is within [`Knowledge::RACY_WINDOW`] of
/// now (or in the future).
fn trusted_mtime(mtime_ns: i64) -> i64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    if now - mtime_ns < Knowledge::RACY_WINDOW.as_nanos() as i64 {
        MTIME_UNTRUSTED
    } else {
        mtime_ns
    }
}

/// Modification time in nanoseconds since the Unix epoch (negative before it; 0 if the
/// platform has none).
fn mtime_ns(meta: &fs::Metadata) -> i64 {
    match meta.modified() {
        Ok(t) => match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_nanos() as i64,
            Err(e) => -(e.duration().as_nanos() as i64),
        },
        Err(_) => 0,
    }
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

#[cfg(test)]
mod tests {
    use std::fs::FileTimes;

    use super::*;
    use crate::storage::test_db::{on_both_backends, TestDb};

    async fn open(data_dir: &Path) -> Knowledge {
        Knowledge::open(Db::open(data_dir).await.unwrap(), data_dir)
            .await
            .unwrap()
    }

    fn names(entries: &[KnowledgeEntry]) -> Vec<&str> {
        entries.iter().map(|e| e.name.as_str()).collect()
    }

    /// Sets a file's modification time `secs_ago` seconds back, as an editor that
    /// wrote it a while ago would have left it.
    fn age(path: &Path, secs_ago: u64) {
        let t = SystemTime::now() - Duration::from_secs(secs_ago);
        File::options()
            .write(true)
            .open(path)
            .unwrap()
            .set_times(FileTimes::new().set_modified(t))
            .unwrap();
    }

    #[test]
    fn names_are_sanitized_into_plain_file_names() {
        let ok = |name: &str| Knowledge::sanitize_name(name).unwrap();
        assert_eq!(ok("天气/北京"), "天气_北京");
        assert_eq!(ok("  notes.md "), "notes");
        assert_eq!(ok("../secret"), "_._secret");
        assert_eq!(ok(".hidden"), "_hidden");
        assert_eq!(ok(".."), "_.");
        assert_eq!(ok("a\\b:c*d?e\"f<g>h|i\nj\0k"), "a_b_c_d_e_f_g_h_i_j_k");
        assert_eq!(ok("My Notes (2024)"), "My Notes (2024)");
        let long = ok(&"雨".repeat(100));
        assert!(long.len() <= Knowledge::MAX_NAME_BYTES, "{}", long.len());
        assert_eq!(long, "雨".repeat(Knowledge::MAX_NAME_BYTES / 3));
        for empty in ["", "   ", ".md", " .md "] {
            let err = Knowledge::sanitize_name(empty).unwrap_err();
            assert!(
                matches!(err, StorageError::Invalid { .. }),
                "{empty:?}: {err}"
            );
        }
    }

    #[tokio::test]
    async fn recall_searches_resync_on_folder_changes_and_at_most_every_max_age() {
        let dir = tempfile::tempdir().unwrap();
        let knowledge = open(dir.path()).await;
        let within = |q: &'static str, age: u64| {
            let k = knowledge.clone();
            async move {
                let found = k
                    .search_synced_within(q, 5, Duration::from_millis(age))
                    .await
                    .unwrap();
                found.into_iter().map(|e| e.content).collect::<Vec<_>>()
            }
        };
        assert!(within("weather", 60_000).await.is_empty());
        // A file dropped into the folder changes the folder: synced at once.
        let file = knowledge.dir().join("w.md");
        fs::write(&file, "weather is sunny").unwrap();
        assert_eq!(within("weather", 60_000).await, ["weather is sunny"]);
        // Edited in place: the folder is the same, so within max_age the index is kept…
        fs::write(&file, "weather is rainy").unwrap();
        age(&file, 5);
        assert_eq!(within("weather", 60_000).await, ["weather is sunny"]);
        // …and re-read once it has passed (and by every plain search).
        assert_eq!(within("weather", 1).await, ["weather is rainy"]);
        fs::write(&file, "weather is snowy").unwrap();
        age(&file, 4);
        assert_eq!(names(&knowledge.search("weather", 5).await.unwrap()), ["w"]);
        assert_eq!(within("weather", 60_000).await, ["weather is snowy"]);
    }

    /// A store on `t`'s database with the data dir `data_dir`.
    async fn open_on(t: &TestDb, data_dir: &Path) -> Knowledge {
        Knowledge::open(t.open().await, data_dir).await.unwrap()
    }

    on_both_backends!(
        added_entries_are_found_with_scores,
        a_long_entry_is_found_by_its_last_word,
        an_entry_one_handle_adds_is_found_by_another,
        import_adds_new_and_changed_files_and_prunes_on_request,
    );

    async fn added_entries_are_found_with_scores(t: TestDb) {
        let dir = tempfile::tempdir().unwrap();
        let knowledge = open_on(&t, dir.path()).await;
        assert!(knowledge.list().await.unwrap().is_empty());

        let name = knowledge
            .add("天气/北京", "北京今天天气很好，明天下雨")
            .await
            .unwrap();
        assert_eq!(name, "天气_北京");
        knowledge
            .add("rust", "Rust is a systems programming language")
            .await
            .unwrap();
        knowledge
            .add("tea", "绿茶和红茶 green tea and black tea")
            .await
            .unwrap();
        knowledge
            .add("Zed", "upper case sorts first")
            .await
            .unwrap();
        assert_eq!(
            knowledge.list().await.unwrap(),
            ["Zed", "rust", "tea", "天气_北京"],
            "byte-wise order"
        );

        let found = knowledge.search("天气", 5).await.unwrap();
        assert_eq!(names(&found), ["天气_北京"]);
        assert!(found[0].score > 0.0);
        assert_eq!(found[0].content, "北京今天天气很好，明天下雨");
        assert_eq!(
            names(&knowledge.search("雨", 5).await.unwrap()),
            ["天气_北京"]
        );
        assert_eq!(
            names(&knowledge.search("programming", 5).await.unwrap()),
            ["rust"]
        );
        // The name is indexed too.
        assert_eq!(names(&knowledge.search("RUST", 5).await.unwrap()), ["rust"]);

        let tea = knowledge.search("tea 茶 北京", 5).await.unwrap();
        assert_eq!(names(&tea), ["tea", "天气_北京"]);
        assert!(
            tea[0].score >= tea[1].score && tea[1].score > 0.0,
            "{tea:?}"
        );
        assert_eq!(knowledge.search("tea 茶 北京", 1).await.unwrap().len(), 1);
        for hostile in [r#""foo" OR NEAR("#, "*", "name: rust", "", "a & !b | 'c'"] {
            knowledge
                .search(hostile, 5)
                .await
                .unwrap_or_else(|e| panic!("{hostile:?}: {e}"));
        }
        let recalled = knowledge
            .search_synced_within("tea", 5, Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(names(&recalled), ["tea"]);

        // Adding under an existing name replaces the entry and its index entry.
        knowledge
            .add("rust.md", "Rust has ownership")
            .await
            .unwrap();
        assert!(knowledge.search("programming", 5).await.unwrap().is_empty());
        assert_eq!(
            names(&knowledge.search("ownership", 5).await.unwrap()),
            ["rust"]
        );
        assert_eq!(knowledge.list().await.unwrap().len(), 4);

        assert!(knowledge.remove("Zed").await.unwrap());
        assert!(!knowledge.remove("Zed").await.unwrap());
        assert!(knowledge.search("upper", 5).await.unwrap().is_empty());
        assert_eq!(knowledge.list().await.unwrap().len(), 3);

        assert_eq!(knowledge.add("/", "x").await.unwrap(), "_");
        let err = knowledge.add("  ", "x").await.unwrap_err();
        assert!(matches!(err, StorageError::Invalid { .. }), "{err}");
        let err = knowledge
            .add("huge", &"x".repeat(Knowledge::MAX_ENTRY_BYTES as usize + 1))
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::Invalid { .. }), "{err}");
        assert!(!knowledge.list().await.unwrap().contains(&"huge".into()));
    }

    /// An entry of the largest size, whose only matching words are at its very end.
    async fn a_long_entry_is_found_by_its_last_word(t: TestDb) {
        let dir = tempfile::tempdir().unwrap();
        let knowledge = open_on(&t, dir.path()).await;
        let tail = " zebra 彩虹";
        let filler = "lorem ipsum dolor sit amet 今天很好 ";
        let mut content =
            filler.repeat((Knowledge::MAX_ENTRY_BYTES as usize - tail.len()) / filler.len());
        content.push_str(tail);
        assert!(content.len() as u64 <= Knowledge::MAX_ENTRY_BYTES);
        knowledge.add("long", &content).await.unwrap();
        knowledge.add("short", "lorem 今天").await.unwrap();
        for query in ["zebra", "彩虹", "虹"] {
            let found = knowledge.search(query, 5).await.unwrap();
            assert_eq!(names(&found), ["long"], "{query}");
            assert_eq!(found[0].content.len(), content.len());
        }
        assert_eq!(knowledge.search("lorem", 5).await.unwrap().len(), 2);
    }

    async fn an_entry_one_handle_adds_is_found_by_another(t: TestDb) {
        let dir = tempfile::tempdir().unwrap();
        let one = open_on(&t, dir.path()).await;
        let two = open_on(&t, dir.path()).await;
        one.add("共享", "两个代理共享同一个知识库").await.unwrap();
        assert_eq!(names(&two.search("知识库", 5).await.unwrap()), ["共享"]);
        assert_eq!(two.list().await.unwrap(), ["共享"]);
        two.add("共享", "replaced by the second broker")
            .await
            .unwrap();
        assert_eq!(names(&one.search("broker", 5).await.unwrap()), ["共享"]);
        assert!(one.search("知识库", 5).await.unwrap().is_empty());
    }

    async fn import_adds_new_and_changed_files_and_prunes_on_request(t: TestDb) {
        let dir = tempfile::tempdir().unwrap();
        let knowledge = open_on(&t, dir.path()).await;
        knowledge.add("kept", "kept entry").await.unwrap();
        knowledge.add("same", "same text").await.unwrap();
        knowledge.add("changed", "old text").await.unwrap();
        let src = tempfile::tempdir().unwrap();
        fs::write(src.path().join("same.md"), "same text").unwrap();
        fs::write(src.path().join("changed.md"), "new text 新的").unwrap();
        fs::write(src.path().join("fresh.md"), "fresh entry 新鲜").unwrap();
        fs::write(src.path().join("ignored.txt"), "not an entry").unwrap();
        fs::write(src.path().join(".hidden.md"), "not an entry").unwrap();
        File::create(src.path().join("big.md"))
            .unwrap()
            .set_len(Knowledge::MAX_ENTRY_BYTES + 1)
            .unwrap();

        let report = knowledge.import_dir(src.path(), false).await.unwrap();
        assert_eq!(report.added, ["fresh"]);
        assert_eq!(report.updated, ["changed"]);
        assert_eq!(report.unchanged, 1);
        assert!(report.removed.is_empty());
        assert_eq!(report.skipped.len(), 1, "{report:?}");
        assert_eq!(report.skipped[0].0, "big");
        assert_eq!(
            knowledge.list().await.unwrap(),
            ["changed", "fresh", "kept", "same"]
        );
        assert_eq!(names(&knowledge.search("新", 5).await.unwrap()).len(), 2);
        assert!(knowledge.search("old", 5).await.unwrap().is_empty());

        // Again: nothing to do. With prune: the entry no file names goes; the file too
        // big to import keeps nothing (there is no entry "big").
        let again = knowledge.import_dir(src.path(), true).await.unwrap();
        assert!(
            again.added.is_empty() && again.updated.is_empty(),
            "{again:?}"
        );
        assert_eq!(again.unchanged, 3);
        assert_eq!(again.removed, ["kept"]);
        assert_eq!(
            knowledge.list().await.unwrap(),
            ["changed", "fresh", "same"]
        );

        let missing = knowledge
            .import_dir(&src.path().join("missing"), false)
            .await
            .unwrap_err();
        assert!(missing.to_string().contains("missing"), "{missing}");
    }

    #[tokio::test]
    async fn added_entries_are_files() {
        let dir = tempfile::tempdir().unwrap();
        let knowledge = open(dir.path()).await;
        assert_eq!(knowledge.dir(), dir.path().join("knowledge"));
        knowledge
            .add("天气/北京", "北京今天天气很好，明天下雨")
            .await
            .unwrap();
        let file = knowledge.dir().join("天气_北京.md");
        assert_eq!(
            fs::read_to_string(&file).unwrap(),
            "北京今天天气很好，明天下雨"
        );
        knowledge.add("rust", "Rust").await.unwrap();
        knowledge.add("tea", "tea").await.unwrap();
        // No temporary file is left behind.
        let mut files: Vec<String> = fs::read_dir(knowledge.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        files.sort();
        assert_eq!(files, ["rust.md", "tea.md", "天气_北京.md"]);
        knowledge
            .add("rust.md", "Rust has ownership")
            .await
            .unwrap();
        assert_eq!(
            fs::read_to_string(knowledge.dir().join("rust.md")).unwrap(),
            "Rust has ownership"
        );
        assert!(knowledge.remove("tea").await.unwrap());
        assert!(!knowledge.dir().join("tea.md").exists());
    }

    /// In PostgreSQL mode the folder is not the store: files put there are not entries
    /// until imported.
    #[tokio::test]
    async fn on_postgres_the_folder_counts_only_when_imported() {
        let Some(t) = TestDb::postgres() else {
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        let knowledge = open_on(&t, dir.path()).await;
        knowledge
            .add("in-db", "stored in the database")
            .await
            .unwrap();
        assert!(!knowledge.dir().exists(), "no folder in PostgreSQL mode");
        fs::create_dir_all(knowledge.dir()).unwrap();
        fs::write(knowledge.dir().join("by-hand.md"), "written by hand").unwrap();
        assert_eq!(knowledge.list().await.unwrap(), ["in-db"]);
        assert!(knowledge.search("hand", 5).await.unwrap().is_empty());
        let report = knowledge.import_dir(knowledge.dir(), false).await.unwrap();
        assert_eq!(report.added, ["by-hand"]);
        assert_eq!(
            names(&knowledge.search("hand", 5).await.unwrap()),
            ["by-hand"]
        );
        // A reopened store (another broker) reads the database, not its folder.
        let other_dir = tempfile::tempdir().unwrap();
        let other = open_on(&t, other_dir.path()).await;
        assert_eq!(other.list().await.unwrap(), ["by-hand", "in-db"]);
    }

    #[tokio::test]
    async fn files_dropped_edited_and_deleted_on_disk_are_followed() {
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path();
        // A file that is there before the first open is indexed at open.
        fs::create_dir_all(data_dir.join("knowledge")).unwrap();
        fs::write(
            data_dir.join("knowledge/before.md"),
            "早就在这里的笔记 early note",
        )
        .unwrap();
        let knowledge = open(data_dir).await;
        assert_eq!(
            names(&knowledge.search("early", 5).await.unwrap()),
            ["before"]
        );
        let kdir = knowledge.dir().to_path_buf();

        // Dropped by a user: found by the next search.
        fs::write(kdir.join("菜谱.md"), "番茄炒蛋：先炒鸡蛋，再炒番茄").unwrap();
        // Ignored: other extensions, hidden files, subfolders.
        fs::write(kdir.join("readme.txt"), "番茄 txt").unwrap();
        fs::write(kdir.join(".draft.md"), "番茄 hidden").unwrap();
        fs::create_dir(kdir.join("sub.md")).unwrap();
        fs::write(kdir.join("sub.md/inner.md"), "番茄 nested").unwrap();
        let found = knowledge.search("番茄", 5).await.unwrap();
        assert_eq!(names(&found), ["菜谱"]);
        assert_eq!(found[0].content, "番茄炒蛋：先炒鸡蛋，再炒番茄");
        assert_eq!(knowledge.list().await.unwrap(), ["before", "菜谱"]);

        // Edited in place to the same size, with the time set back as a copy tool
        // might (and then out of the racy window): re-indexed because the time differs.
        let recipe = kdir.join("菜谱.md");
        age(&recipe, 3600);
        knowledge.search("番茄", 5).await.unwrap();
        fs::write(&recipe, "土豆炒蛋：先炒鸡蛋，再炒土豆").unwrap();
        age(&recipe, 600);
        assert!(knowledge.search("番茄", 5).await.unwrap().is_empty());
        let found = knowledge.search("土豆", 5).await.unwrap();
        assert_eq!(names(&found), ["菜谱"]);
        assert_eq!(found[0].content, "土豆炒蛋：先炒鸡蛋，再炒土豆");

        // Edited twice within the racy window with the same size and the same time:
        // the second edit is still seen (the first read did not trust the time).
        fs::write(&recipe, "AAAA").unwrap();
        let t = fs::metadata(&recipe).unwrap().modified().unwrap();
        assert_eq!(names(&knowledge.search("aaaa", 5).await.unwrap()), ["菜谱"]);
        fs::write(&recipe, "BBBB").unwrap();
        File::options()
            .write(true)
            .open(&recipe)
            .unwrap()
            .set_times(FileTimes::new().set_modified(t))
            .unwrap();
        assert!(knowledge.search("aaaa", 5).await.unwrap().is_empty());
        assert_eq!(names(&knowledge.search("bbbb", 5).await.unwrap()), ["菜谱"]);

        // Deleted: gone from search and list.
        fs::remove_file(&recipe).unwrap();
        assert!(knowledge.search("bbbb", 5).await.unwrap().is_empty());
        assert_eq!(knowledge.list().await.unwrap(), ["before"]);

        // A reopened store (another broker run) sees what changed while it was away.
        drop(knowledge);
        fs::remove_file(kdir.join("before.md")).unwrap();
        fs::write(kdir.join("after.md"), "later note").unwrap();
        let knowledge = open(data_dir).await;
        assert_eq!(knowledge.list().await.unwrap(), ["after"]);
        assert!(knowledge.search("early", 5).await.unwrap().is_empty());
        assert_eq!(
            names(&knowledge.search("later", 5).await.unwrap()),
            ["after"]
        );
    }

    #[tokio::test]
    async fn symlinks_are_followed_only_inside_the_folder() {
        use std::os::unix::fs::symlink;
        let dir = tempfile::tempdir().unwrap();
        let data_dir = dir.path();
        let secret = "SECRET-ADMIN-TOKEN-zebra";
        fs::write(data_dir.join("admin.token"), secret).unwrap();
        let outside = tempfile::tempdir().unwrap();
        fs::write(
            outside.path().join("notes.md"),
            "zebra notes from elsewhere",
        )
        .unwrap();
        let kdir = data_dir.join("knowledge");
        fs::create_dir_all(kdir.join("2024")).unwrap();
        fs::write(kdir.join("2024/plan.md"), "zebra plan inside a subfolder").unwrap();
        fs::write(kdir.join("real.md"), "zebra real entry").unwrap();
        // Leaving the folder: relative, absolute, through a chain, and into the
        // folder's parent by a path that starts like the folder's.
        symlink("../admin.token", kdir.join("token.md")).unwrap();
        symlink(outside.path().join("notes.md"), kdir.join("abs.md")).unwrap();
        symlink("token.md", kdir.join("chain.md")).unwrap();
        fs::create_dir(data_dir.join("knowledge-evil")).unwrap();
        fs::write(data_dir.join("knowledge-evil/x.md"), "zebra sibling").unwrap();
        symlink("../knowledge-evil/x.md", kdir.join("sibling.md")).unwrap();
        // Inside: to a file of the folder and of a subfolder.
        symlink("real.md", kdir.join("alias.md")).unwrap();
        symlink("2024/plan.md", kdir.join("latest.md")).unwrap();
        // Dangling.
        symlink("missing.md", kdir.join("dangling.md")).unwrap();

        let knowledge = open(data_dir).await;
        assert_eq!(knowledge.list().await.unwrap(), ["alias", "latest", "real"]);
        let found = knowledge.search("zebra", 20).await.unwrap();
        let mut got = names(&found);
        got.sort();
        assert_eq!(got, ["alias", "latest", "real"]);
        for e in &found {
            assert!(
                !e.content.contains("SECRET")
                    && !e.content.contains("elsewhere")
                    && !e.content.contains("sibling"),
                "{e:?}"
            );
        }
        assert!(knowledge.search("SECRET", 5).await.unwrap().is_empty());

        // A link that was an entry (inside) and is pointed outside later is dropped
        // from the index, contents and all.
        fs::remove_file(kdir.join("alias.md")).unwrap();
        symlink("../admin.token", kdir.join("alias.md")).unwrap();
        assert_eq!(knowledge.list().await.unwrap(), ["latest", "real"]);
        assert!(knowledge.search("SECRET", 5).await.unwrap().is_empty());

        // Read time checks again: a listed file swapped for an outside link before it is
        // read is not followed.
        let swapped = kdir.join("swapped.md");
        fs::write(&swapped, "x").unwrap();
        let err = open_inside(&kdir, &swapped).map(|_| ());
        assert!(err.is_ok(), "{err:?}");
        fs::remove_file(&swapped).unwrap();
        symlink("../admin.token", &swapped).unwrap();
        let err = open_inside(&kdir, &swapped).unwrap_err();
        assert!(
            err.to_string().contains("outside the knowledge folder"),
            "{err}"
        );
        let reads = read_changed(&kdir, vec!["swapped".into(), "latest".into()]);
        assert_eq!(reads.drop, ["swapped"]);
        assert_eq!(reads.indexed.len(), 1);
        assert_eq!(reads.indexed[0].content, "zebra plan inside a subfolder");
    }

    #[tokio::test]
    async fn oversized_and_invalid_files() {
        let dir = tempfile::tempdir().unwrap();
        let knowledge = open(dir.path()).await;
        let kdir = knowledge.dir().to_path_buf();
        // Invalid UTF-8 is read lossily, not refused.
        fs::write(kdir.join("bytes.md"), b"caf\xe9 latte \xff").unwrap();
        let found = knowledge.search("latte", 5).await.unwrap();
        assert_eq!(names(&found), ["bytes"]);
        assert!(found[0].content.contains('\u{FFFD}'));

        // A file over the limit is left out; shrunk below it, it is indexed.
        let big = kdir.join("big.md");
        let file = File::create(&big).unwrap();
        file.set_len(Knowledge::MAX_ENTRY_BYTES + 1).unwrap();
        drop(file);
        assert_eq!(knowledge.list().await.unwrap(), ["bytes"]);
        fs::write(&big, "small now").unwrap();
        assert_eq!(names(&knowledge.search("small", 5).await.unwrap()), ["big"]);

        let err = knowledge
            .add("huge", &"x".repeat(Knowledge::MAX_ENTRY_BYTES as usize + 1))
            .await
            .unwrap_err();
        assert!(matches!(err, StorageError::Invalid { .. }), "{err}");
        assert!(!kdir.join("huge.md").exists());

        // The folder removed by hand: empty, and `add` creates it again.
        fs::remove_dir_all(&kdir).unwrap();
        assert!(knowledge.list().await.unwrap().is_empty());
        knowledge.add("again", "back").await.unwrap();
        assert_eq!(knowledge.list().await.unwrap(), ["again"]);
    }
}
