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
    Migration {
        name: "graph memory",
        // Entities are identified by their name folded to lower case (`folded`, Unicode
        // lowercase of the trimmed name, computed by `storage::memory`); `name` keeps
        // the first spelling seen. `entities_fts` is a trigram index over `folded`, kept
        // in step by triggers: keyword recall of 3+ characters is an index lookup, not
        // a scan. Relations point at entity ids; `active = 0` marks a soft purge
        // (`purged_at` set), and at most one active row exists per (source, target,
        // type), enforced by the partial index `relations_active_triple`, which also
        // serves recall's walk from sources. (target_id, active) serves the walk from
        // targets; both (…_id, active) indexes serve merge, purge and the foreign-key
        // checks when an entity is deleted. Times are Unix seconds.
        sql: "
            CREATE TABLE entities (
                id            INTEGER PRIMARY KEY,
                name          TEXT NOT NULL,
                folded        TEXT NOT NULL UNIQUE,
                type          TEXT NOT NULL DEFAULT '',
                mention_count INTEGER NOT NULL DEFAULT 0,
                created_at    INTEGER NOT NULL,
                updated_at    INTEGER NOT NULL
            ) STRICT;
            CREATE VIRTUAL TABLE entities_fts USING fts5 (
                folded, content = 'entities', content_rowid = 'id', tokenize = 'trigram'
            );
            CREATE TRIGGER entities_fts_insert AFTER INSERT ON entities BEGIN
                INSERT INTO entities_fts (rowid, folded) VALUES (new.id, new.folded);
            END;
            CREATE TRIGGER entities_fts_delete AFTER DELETE ON entities BEGIN
                INSERT INTO entities_fts (entities_fts, rowid, folded)
                    VALUES ('delete', old.id, old.folded);
            END;
            CREATE TRIGGER entities_fts_update AFTER UPDATE OF folded ON entities BEGIN
                INSERT INTO entities_fts (entities_fts, rowid, folded)
                    VALUES ('delete', old.id, old.folded);
                INSERT INTO entities_fts (rowid, folded) VALUES (new.id, new.folded);
            END;
            CREATE TABLE relations (
                id            INTEGER PRIMARY KEY,
                source_id     INTEGER NOT NULL REFERENCES entities (id),
                target_id     INTEGER NOT NULL REFERENCES entities (id),
                relation_type TEXT NOT NULL,
                session_id    TEXT NOT NULL DEFAULT '',
                active        INTEGER NOT NULL DEFAULT 1 CHECK (active IN (0, 1)),
                created_at    INTEGER NOT NULL,
                purged_at     INTEGER
            ) STRICT;
            CREATE UNIQUE INDEX relations_active_triple
                ON relations (source_id, target_id, relation_type) WHERE active = 1;
            CREATE INDEX relations_by_source ON relations (source_id, active);
            CREATE INDEX relations_by_target ON relations (target_id, active);
        ",
    },
    Migration {
        name: "document memory",
        // DocMemory (`storage::docs`): one row per document, `id` given by the caller or
        // generated. `doc_memory_fts` is its search index (`storage::search`): rowid =
        // `seq`, contentless (the segmented text is not stored twice; rows are deleted
        // and replaced by rowid), columns `words` (jieba words) and `chars` (CJK
        // unigrams), ranked with bm25(). Times are Unix seconds.
        sql: "
            CREATE TABLE doc_memory (
                seq        INTEGER PRIMARY KEY,
                id         TEXT NOT NULL UNIQUE,
                title      TEXT NOT NULL,
                content    TEXT NOT NULL,
                created_at INTEGER NOT NULL,
                updated_at INTEGER NOT NULL
            ) STRICT;
            CREATE VIRTUAL TABLE doc_memory_fts USING fts5 (
                words, chars, content = '', contentless_delete = 1,
                tokenize = 'porter unicode61 remove_diacritics 2'
            );
        ",
    },
    Migration {
        name: "knowledge index",
        // Knowledge (`storage::knowledge`): the entries are the files
        // `<data_dir>/knowledge/<name>.md`; this is their index. One row per file as
        // last read: `name` is the file name without `.md`, `content` what was indexed,
        // `size` and `mtime_ns` the file's stat then (mtime_ns = -1: modified too close
        // to the read to trust, read again at the next sync). `knowledge_fts` is shaped
        // like `doc_memory_fts`, rowid = `seq`.
        sql: "
            CREATE TABLE knowledge (
                seq        INTEGER PRIMARY KEY,
                name       TEXT NOT NULL UNIQUE,
                content    TEXT NOT NULL,
                size       INTEGER NOT NULL,
                mtime_ns   INTEGER NOT NULL,
                indexed_at INTEGER NOT NULL
            ) STRICT;
            CREATE VIRTUAL TABLE knowledge_fts USING fts5 (
                words, chars, content = '', contentless_delete = 1,
                tokenize = 'porter unicode61 remove_diacritics 2'
            );
        ",
    },
    Migration {
        name: "injected input",
        // The plugin that injected a history message as input (`Input` host service,
        // `storage::conversations`); NULL for a client's message and for what the
        // agent wrote. Only the input message of a turn carries it.
        sql: "
            ALTER TABLE conversation_messages ADD COLUMN injected_by TEXT;
        ",
    },
    Migration {
        name: "shared state",
        // What brokers sharing one PostgreSQL database need (conversation leases, the
        // TextMemory log in the database); nothing on SQLite, whose one broker keeps
        // TextMemory in files and needs no leases. Kept as a step so one version means
        // one schema on both backends.
        sql: "-- nothing on SQLite",
    },
];

/// The schema version this build creates: the number of [`MIGRATIONS`].
pub fn latest() -> u32 {
    MIGRATIONS.len() as u32
}

/// The PostgreSQL schema (`storage::pg`), step for step the same as [`MIGRATIONS`]
/// (same count, same names, same tables and meaning), so a version means one schema on
/// both backends and `hearth storage migrate` copies table to table. Differences, all
/// from `docs/design/postgres-research.md` §6:
/// - ids are `BIGINT GENERATED BY DEFAULT AS IDENTITY` (order by id as by rowid; BY
///   DEFAULT so a migration from SQLite keeps them);
/// - JSON stays `TEXT` (exactly the bytes given; JSONB would refuse `\u0000` and
///   reorder keys), flags are `BOOLEAN`;
/// - plugin settings live in one table, `plugin_config`, keyed by the same
///   `table_name`s SQLite gives its `config_<plugin>` tables: no DDL at run time, which
///   two brokers would race on;
/// - the entity keyword index is `pg_trgm` (when the extension can be created) instead
///   of an FTS5 trigram table;
/// - full-text indexes are `tsvector` columns with GIN indexes, one row per chunk of at
///   most [`super::search`]'s chunk size (a tsvector keeps positions up to 16383).
pub const MIGRATIONS_PG: &[Migration] = &[
    Migration {
        name: "conversations",
        sql: "
        CREATE TABLE conversations (
            id      BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            scope   TEXT NOT NULL CHECK (scope IN ('group', 'user')),
            channel TEXT NOT NULL,
            subject TEXT NOT NULL,
            UNIQUE (scope, channel, subject)
        );
        CREATE TABLE conversation_messages (
            id           BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
            conversation BIGINT NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
            role         TEXT NOT NULL,
            message      TEXT NOT NULL,
            chars        BIGINT NOT NULL,
            created_at   BIGINT NOT NULL
        );
        CREATE INDEX conversation_messages_by_conversation
            ON conversation_messages (conversation, id);
    ",
    },
    Migration {
        name: "settings",
        sql: "
            CREATE TABLE config (
                key        TEXT PRIMARY KEY,
                value      TEXT NOT NULL,
                updated_at BIGINT NOT NULL
            );
            CREATE TABLE settings_tables (
                plugin     TEXT PRIMARY KEY,
                table_name TEXT NOT NULL UNIQUE
            );
            CREATE TABLE settings_defs (
                table_name TEXT NOT NULL,
                key        TEXT NOT NULL,
                def        TEXT NOT NULL,
                secret     BOOLEAN NOT NULL,
                PRIMARY KEY (table_name, key)
            );
            CREATE TABLE plugin_config (
                table_name TEXT NOT NULL,
                key        TEXT NOT NULL,
                value      TEXT NOT NULL,
                updated_at BIGINT NOT NULL,
                PRIMARY KEY (table_name, key)
            );
        ",
    },
    Migration {
        name: "graph memory",
        sql: "
            CREATE TABLE entities (
                id            BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                name          TEXT NOT NULL,
                folded        TEXT NOT NULL UNIQUE,
                type          TEXT NOT NULL DEFAULT '',
                mention_count BIGINT NOT NULL DEFAULT 0,
                created_at    BIGINT NOT NULL,
                updated_at    BIGINT NOT NULL
            );
            DO $$ BEGIN
                CREATE EXTENSION IF NOT EXISTS pg_trgm;
            EXCEPTION WHEN OTHERS THEN
                RAISE NOTICE 'pg_trgm not available (%): entity keyword search scans', SQLERRM;
            END $$;
            DO $$ BEGIN
                IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm') THEN
                    CREATE INDEX entities_folded_trgm ON entities USING gin (folded gin_trgm_ops);
                END IF;
            END $$;
            CREATE TABLE relations (
                id            BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                source_id     BIGINT NOT NULL REFERENCES entities (id),
                target_id     BIGINT NOT NULL REFERENCES entities (id),
                relation_type TEXT NOT NULL,
                session_id    TEXT NOT NULL DEFAULT '',
                active        BOOLEAN NOT NULL DEFAULT TRUE,
                created_at    BIGINT NOT NULL,
                purged_at     BIGINT
            );
            CREATE UNIQUE INDEX relations_active_triple
                ON relations (source_id, target_id, relation_type) WHERE active;
            CREATE INDEX relations_by_source ON relations (source_id, active);
            CREATE INDEX relations_by_target ON relations (target_id, active);
        ",
    },
    Migration {
        name: "document memory",
        sql: "
            DO $$ BEGIN
                CREATE EXTENSION IF NOT EXISTS unaccent;
            EXCEPTION WHEN OTHERS THEN
                RAISE NOTICE 'unaccent not available (%): search does not fold accents', SQLERRM;
            END $$;
            CREATE TEXT SEARCH DICTIONARY hearth_english_stem (
                TEMPLATE = snowball, Language = english
            );
            CREATE TEXT SEARCH CONFIGURATION hearth_search (COPY = simple);
            DO $$ BEGIN
                IF EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'unaccent') THEN
                    ALTER TEXT SEARCH CONFIGURATION hearth_search
                        ALTER MAPPING FOR asciiword, word, numword, asciihword, hword,
                            numhword, hword_asciipart, hword_part, hword_numpart
                        WITH unaccent, hearth_english_stem;
                ELSE
                    ALTER TEXT SEARCH CONFIGURATION hearth_search
                        ALTER MAPPING FOR asciiword, word, numword, asciihword, hword,
                            numhword, hword_asciipart, hword_part, hword_numpart
                        WITH hearth_english_stem;
                END IF;
            END $$;
            CREATE TABLE doc_memory (
                seq        BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                id         TEXT NOT NULL UNIQUE,
                title      TEXT NOT NULL,
                content    TEXT NOT NULL,
                created_at BIGINT NOT NULL,
                updated_at BIGINT NOT NULL
            );
            CREATE TABLE doc_memory_fts (
                seq     BIGINT NOT NULL REFERENCES doc_memory (seq) ON DELETE CASCADE,
                chunk   INTEGER NOT NULL,
                words   TSVECTOR NOT NULL,
                chars   TSVECTOR NOT NULL,
                nwords  INTEGER NOT NULL,
                nchars  INTEGER NOT NULL,
                ntokens BIGINT NOT NULL,
                PRIMARY KEY (seq, chunk)
            );
            CREATE INDEX doc_memory_fts_words ON doc_memory_fts USING gin (words);
            CREATE INDEX doc_memory_fts_chars ON doc_memory_fts USING gin (chars);
        ",
    },
    Migration {
        name: "knowledge index",
        sql: "
            CREATE TABLE knowledge (
                seq        BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                name       TEXT NOT NULL UNIQUE,
                content    TEXT NOT NULL,
                size       BIGINT NOT NULL,
                mtime_ns   BIGINT NOT NULL,
                indexed_at BIGINT NOT NULL
            );
            CREATE TABLE knowledge_fts (
                seq     BIGINT NOT NULL REFERENCES knowledge (seq) ON DELETE CASCADE,
                chunk   INTEGER NOT NULL,
                words   TSVECTOR NOT NULL,
                chars   TSVECTOR NOT NULL,
                nwords  INTEGER NOT NULL,
                nchars  INTEGER NOT NULL,
                ntokens BIGINT NOT NULL,
                PRIMARY KEY (seq, chunk)
            );
            CREATE INDEX knowledge_fts_words ON knowledge_fts USING gin (words);
            CREATE INDEX knowledge_fts_chars ON knowledge_fts USING gin (chars);
        ",
    },
    Migration {
        name: "injected input",
        sql: "
            ALTER TABLE conversation_messages ADD COLUMN injected_by TEXT;
        ",
    },
    Migration {
        name: "shared state",
        // TextMemory (`storage::pg::text_memory`): one row per log line, `line` the
        // JSONL line exactly as the file log writes it, `day` the calendar day it was
        // written on in the log's time zone (the file it would be in), deleted by age.
        // Conversation leases (`storage::pg::leases`): which broker runs a turn of a
        // conversation, until when; `epoch` grows at every change of holder and fences
        // the writes of a broker that lost its lease. `ai.tool` cooldowns per (user,
        // tool) (`storage::pg::policies`), so a cooldown started on one broker holds on
        // every broker. Times are the server's.
        sql: "
            CREATE TABLE text_events (
                id   BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
                day  DATE NOT NULL,
                line TEXT NOT NULL
            );
            CREATE INDEX text_events_by_day ON text_events (day, id);
            CREATE TABLE conversation_leases (
                conversation BIGINT PRIMARY KEY REFERENCES conversations (id) ON DELETE CASCADE,
                holder       TEXT NOT NULL,
                epoch        BIGINT NOT NULL DEFAULT 1,
                expires      TIMESTAMPTZ NOT NULL
            );
            CREATE TABLE tool_cooldowns (
                user_id TEXT NOT NULL,
                tool    TEXT NOT NULL,
                until   TIMESTAMPTZ NOT NULL,
                PRIMARY KEY (user_id, tool)
            );
        ",
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    /// One version means one schema on both backends.
    #[test]
    fn both_backends_have_the_same_steps() {
        let names = |list: &[Migration]| list.iter().map(|m| m.name).collect::<Vec<_>>();
        assert_eq!(names(MIGRATIONS), names(MIGRATIONS_PG));
    }
}
