//! Everything the broker keeps: in one data dir, or in a PostgreSQL database several
//! brokers share ([`pg`], `[storage] url`; issue 18).
//!
//! - [`Db`]: `<data_dir>/hearth.db`, SQLite in WAL mode, owned by one thread; schema
//!   versions in `PRAGMA user_version` ([`migrations`]). Or PostgreSQL
//!   ([`Db::postgres`]): a pool, the same schema steps ([`migrations::MIGRATIONS_PG`]),
//!   conversation leases and notifications between brokers ([`pg`]).
//! - [`Conversations`]: chat history per [`ConversationKey`], trimmed to a
//!   [`HistoryBudget`] without splitting a tool exchange.
//! - [`TextMemory`]: the raw chronological log of [`TextEvent`]s: JSONL files under
//!   `<data_dir>/memory/text/`, each append fsynced before it is acknowledged, files
//!   rotated by size and deleted by age ([`TextMemoryOptions`]); or `text_events` rows
//!   on PostgreSQL.
//! - [`Settings`]: core keys in `config`, each plugin's keys in its own
//!   `config_<name>` table (on PostgreSQL, `plugin_config` rows under that name),
//!   [`ConfigDef`]s, a [`Settings::dump`] with secrets masked; [`PluginSettings`] is one
//!   plugin's view, one method per `hearth.v1.Settings` rpc.
//! - [`GraphMemory`]: entities and relations, committed as [`Triple`]s, recalled by
//!   keyword and breadth-first walk, merged and purged.
//! - [`DocMemory`]: [`Doc`]s, inserted, replaced by id, removed and queried by
//!   full-text search with scores.
//! - [`Knowledge`]: entries as files `<data_dir>/knowledge/<name>.md`, indexed and
//!   re-indexed when the files change on disk; on PostgreSQL the database holds the
//!   entries and the folder is imported.
//! - `search` (internal): the index under both, jieba-segmented words and CJK
//!   characters in SQLite FTS5 (PostgreSQL: tsvectors), BM25 ranking.
//!
//! Every handle here is cheap to clone and usable from async code: the blocking I/O
//! happens on the thread that owns the connection or the file, never on a runtime
//! worker.

pub mod config;
mod conversations;
mod db;
mod docs;
mod knowledge;
mod memory;
pub mod migrations;
pub mod pg;
mod search;
mod segmenter;
mod settings;
#[cfg(test)]
pub(crate) mod test_db;
mod text_memory;

use std::path::PathBuf;

pub use config::StorageConfig;
pub use conversations::{ConversationKey, Conversations, HistoryBudget};
pub use db::{Db, DB_FILE, STORAGE_MARK};
pub use docs::{Doc, DocMemory};
pub use knowledge::{ImportReport, Knowledge, KnowledgeEntry};
pub use memory::{
    Entity, GraphMemory, MemoryStats, PurgeCriteria, PurgeMode, Relation, Subgraph, Triple,
};
pub use search::{keywords, DEFAULT_TOP_K, MAX_QUERY_TERMS, MAX_TOP_K};
pub use segmenter::cut_for_search;
pub use settings::{
    secret_by_name, ConfigDef, PluginSettings, Scope, Secrets, Settings, MAX_NAME_CHARS,
    SECRET_KEY_SUFFIXES, SECRET_MASK,
};
pub(crate) use text_memory::log_files as text_memory_files;
pub use text_memory::{TextEvent, TextMemory, TextMemoryOptions};

/// Why a storage operation failed. Each variant names the file, operation or message
/// concerned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// SQLite refused an operation.
    #[error("{path}: {op}: {source}")]
    Sqlite {
        /// The database file.
        path: PathBuf,
        /// What was being done, e.g. "append to conversation group:qq/123".
        op: String,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// PostgreSQL refused an operation, or could not be reached.
    #[error("{target}: {op}: {detail}")]
    Postgres {
        /// The server and database, `postgres://user@host:port/db` (no password).
        target: String,
        /// What was being done, e.g. "append to conversation group:qq/123".
        op: String,
        /// The server's message (severity, message, detail, hint) or the client's
        /// error chain.
        detail: String,
    },
    /// A turn's history write was refused: its broker's lease of the conversation was
    /// taken by another broker (this one did not renew it in time: frozen or cut off).
    /// Nothing of that write was stored.
    #[error("conversation {conversation}: broker {holder} no longer holds its lease (another broker took it over); the turn's messages were not stored")]
    LeaseLost {
        /// The conversation, as [`ConversationKey`]'s `Display` shows it.
        conversation: String,
        /// This broker's id.
        holder: String,
    },
    /// A file or directory could not be created, written or synced.
    #[error("{path}: {op}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What was being done, e.g. "fsync".
        op: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The database was written by a newer Hearth whose schema this one does not know.
    #[error(
        "{path}: schema version {found} is newer than this broker knows ({known}); \
         upgrade Hearth or use another data dir"
    )]
    SchemaTooNew {
        /// The database file.
        path: PathBuf,
        /// `PRAGMA user_version` found in the file.
        found: u32,
        /// The newest version this build migrates to.
        known: u32,
    },
    /// A conversation message is not in the unified shape (a JSON object with a string
    /// `role`); nothing of that append was stored.
    #[error("conversation {conversation}: message {index}: {reason}")]
    InvalidMessage {
        /// The conversation, as [`ConversationKey`]'s `Display` shows it.
        conversation: String,
        /// Position of the message in the appended slice.
        index: usize,
        /// What is wrong with it.
        reason: String,
    },
    /// No such key or entity: `key` is not in `table` (a settings table such as
    /// `config` or `config_qq`, or `entities`). A gRPC handler maps it to NOT_FOUND.
    #[error("no `{key}` in {table}")]
    NotFound {
        /// The table looked in.
        table: String,
        /// The setting key or entity name looked for.
        key: String,
    },
    /// The request itself is wrong (an empty key, plugin or entity name, a purge
    /// without criteria or with an unknown mode …); nothing was written. A gRPC
    /// handler maps it to INVALID_ARGUMENT.
    #[error("{what}: {reason}")]
    Invalid {
        /// The operation or item, e.g. "purge", "commit: triple 2".
        what: String,
        /// What is wrong, e.g. "empty `subject`".
        reason: String,
    },
    /// The thread that owns the database or the log file is gone (it panicked during
    /// an operation); the handle cannot be used any more.
    #[error("{path}: storage thread stopped")]
    Closed {
        /// The database file or log directory the thread served.
        path: PathBuf,
    },
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader};
    use std::path::Path;
    use std::process::{Command, Stdio};

    use serde_json::json;

    use super::*;

    /// Data dir of [`durability_writer`] when it runs as the child of
    /// [`acknowledged_writes_survive_sigkill`].
    const WRITER_DIR: &str = "HEARTH_TEST_DURABILITY_DIR";

    /// The child half of [`acknowledged_writes_survive_sigkill`]: alternates settings
    /// writes and graph commits forever, printing `acked <i>` after each pair returns.
    /// Does nothing unless [`WRITER_DIR`] is set.
    #[tokio::test]
    #[ignore]
    async fn durability_writer() {
        let Some(dir) = std::env::var_os(WRITER_DIR) else {
            return;
        };
        let db = Db::open(Path::new(&dir)).await.unwrap();
        let settings = Settings::new(db.clone()).for_plugin("durable");
        let memory = GraphMemory::new(db);
        for i in 0u64.. {
            settings.set(&format!("k{i}"), json!(i)).await.unwrap();
            memory
                .commit(vec![Triple::new(format!("s{i}"), "r", format!("o{i}"))])
                .await
                .unwrap();
            // Line-buffered: each line is in the pipe once printed.
            println!("acked {i}");
        }
    }

    /// A process SIGKILLed in the middle of a stream of set and commit calls loses no
    /// write it acknowledged: every `acked` line the child printed before it died is
    /// in the database when it is opened again.
    #[test]
    fn acknowledged_writes_survive_sigkill() {
        let dir = tempfile::tempdir().unwrap();
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "storage::tests::durability_writer",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WRITER_DIR, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut acked = Vec::new();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let read = |acked: &mut Vec<u64>, line: std::io::Result<String>| {
            if let Some(i) = line.unwrap().strip_prefix("acked ") {
                acked.push(i.parse().unwrap());
            }
        };
        while acked.len() < 150 {
            let line = lines
                .next()
                .expect("the writer stopped before it was killed");
            read(&mut acked, line);
        }
        child.kill().unwrap(); // SIGKILL, mid-stream
                               // Lines printed before the kill are acknowledged writes too.
        for line in lines {
            read(&mut acked, line);
        }
        child.wait().unwrap();

        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let db = Db::open(dir.path()).await.unwrap();
            let settings = Settings::new(db.clone()).for_plugin("durable");
            let memory = GraphMemory::new(db);
            for &i in &acked {
                assert_eq!(settings.get(&format!("k{i}")).await.unwrap(), json!(i));
                let graph = memory.recall([format!("s{i}")], 1).await.unwrap();
                assert!(
                    graph.relations.contains(&Relation {
                        source_name: format!("s{i}"),
                        target_name: format!("o{i}"),
                        relation_type: "r".into(),
                    }),
                    "commit {i} was acknowledged but is lost"
                );
            }
        });
    }
}
