//! Schema versions of `hearth.db`.
//!
//! `PRAGMA user_version` holds how many entries of [`MIGRATIONS`] a database has had
//! applied. [`Db::open`](super::Db::open) applies the missing ones in order, in one
//! transaction, and refuses a file whose version is newer than this list.
//!
//! To add tables (FTS indexes …), append a [`Migration`]; never edit or reorder one
//! that has shipped.

/// One step of the schema: SQL run once, in order, inside the opening transaction.
#[derive(Debug)]
pub struct Migration {
    /// Short name for errors and logs, e.g. "conversations".
    pub name: &'static str,
    /// Statements, run with `execute_batch`.
    pub sql: &'static str,
}

/// Every schema step, oldest first. Version N means the first N have been applied.
pub const MIGRATIONS: &[Migration] = &[
    Migration {
        name: "conversations",
        // One row per conversation (see `ConversationKey`): scope 'group' is shared by the
        // group's members, scope 'user' is one user's private conversation on a channel.
        // Messages keep the unified JSON text as given; `chars` is its length in
        // characters, the unit of `HistoryBudget::max_chars`. Order is the rowid.
        sql: "
        CREATE TABLE conversations (
            id      INTEGER PRIMARY KEY,
            scope   TEXT NOT NULL CHECK (scope IN ('group', 'user')),
            channel TEXT NOT NULL,
            subject TEXT NOT NULL,
            UNIQUE (scope, channel, subject)
        ) STRICT;
        CREATE TABLE conversation_messages (
            id           INTEGER PRIMARY KEY,
            conversation INTEGER NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            role         TEXT NOT NULL,
            message      TEXT NOT NULL,
            chars        INTEGER NOT NULL,
            created_at   INTEGER NOT NULL
        ) STRICT;
        CREATE INDEX conversation_messages_by_conversation
            ON conversation_messages (conversation, id);
    ",
    },
    Migration {
        name: "settings",
        // Core keys in `config`. Each plugin's keys live in its own table
        // `config_<sanitized name>`, created on the plugin's first write by
        // `storage::settings` with the same columns as `config` (so a later migration
        // that changes that shape must also walk `settings_tables`). `settings_tables`
        // maps each plugin name to its table; the meta tables are named `settings_*` so
        // no plugin table (`config_*`) can take their names. Values are JSON text, so a
        // value keeps its JSON type. `settings_defs` holds each table's ConfigDefs as
        // JSON, `secret` copied out for masking. Times are Unix seconds.
        sql: "
            CREATE TABLE config (
                key        TEXT PRIMARY KEY,
                value      TEXT NOT NULL,
                updated_at INTEGER NOT NULL
            ) STRICT, WITHOUT ROWID;
            CREATE TABLE settings_tables (
                plugin     TEXT PRIMARY KEY,
                table_name TEXT NOT NULL UNIQUE
            ) STRICT, WITHOUT ROWID;
            CREATE TABLE settings_defs (
                table_name TEXT NOT NULL,
                key        TEXT NOT NULL,
                def        TEXT NOT NULL,
                secret     INTEGER NOT NULL CHECK (secret IN (0, 1)),
                PRIMARY KEY (table_name, key)
            ) STRICT, WITHOUT ROWID;
        ",
    },
];

/// The schema version this build creates: the number of [`MIGRATIONS`].
pub fn latest() -> u32 {
    MIGRATIONS.len() as u32
}
