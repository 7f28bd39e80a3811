//! `hearth storage migrate --to URL` and `hearth storage check`: moving a data dir's
//! SQLite state into PostgreSQL, and checking a database (issue 18).
//!
//! # `migrate`
//! Copies everything `<data_dir>/hearth.db` holds into an empty PostgreSQL database,
//! in one transaction (a failure leaves the target as it was): conversations with their
//! messages (ids kept, so order is kept), core and plugin settings with their defs
//! (each `config_<plugin>` table's rows into `plugin_config` under its table name),
//! graph memory, DocMemory documents (re-indexed), the Knowledge folder's entries
//! (imported: on PostgreSQL the database holds them), and the TextMemory log files
//! (one row per line, each with the day of its file). The broker of the data dir must
//! be stopped (its socket must not answer), so nothing is written after the copy.
//!
//! # `import-knowledge`
//! Imports a folder of `<name>.md` files into Knowledge (on PostgreSQL the database
//! holds the entries, so hand-edited files reach it this way).
//!
//! # `check`
//! Connects to the data dir's database (SQLite, or PostgreSQL from `[storage] url` /
//! `HEARTH_STORAGE_URL` / `--storage-url`) and reports what a broker needs: schema
//! version against this build, tables, indexes and extensions, the index rows against
//! their documents; on PostgreSQL also the server version, `max_connections` against
//! the brokers' pools, and that LISTEN/NOTIFY and advisory locks work. Exit 1 when a
//! check fails.

use std::path::Path;
use std::process::ExitCode;

use anyhow::{bail, Context as _};
use tokio_postgres::binary_copy::BinaryCopyInWriter;
use tokio_postgres::types::{ToSql, Type};

use crate::storage::migrations::{MIGRATIONS, MIGRATIONS_PG};
use crate::storage::Db;

/// `hearth storage …`
#[derive(Debug, clap::Subcommand)]
pub enum StorageCommand {
    /// Copy `<data_dir>/hearth.db`, the Knowledge folder and the TextMemory log into
    /// an empty PostgreSQL database (stop the broker first). Then set `[storage] url`
    /// in hearth.toml (or start brokers with --storage-url).
    Migrate {
        /// The target, e.g. postgres://hearth@db.example.com/hearth.
        #[arg(long, value_name = "URL")]
        to: String,
        /// Empty the target's Hearth tables first instead of refusing a target that
        /// holds data.
        #[arg(long)]
        replace: bool,
    },
    /// Import a folder of Knowledge entries (`<name>.md` files) into the data dir's
    /// database: new and changed files are added, unchanged ones left; with --prune,
    /// entries no file names are removed. On PostgreSQL this is how files reach
    /// Knowledge (the database holds the entries); on SQLite the files are copied into
    /// `<data_dir>/knowledge`.
    ImportKnowledge {
        /// The folder.
        dir: std::path::PathBuf,
        /// Also remove entries that no file of the folder names.
        #[arg(long)]
        prune: bool,
    },
    /// Check the data dir's database (SQLite, or PostgreSQL when configured).
    Check {
        /// Check this PostgreSQL database instead of the configured one.
        #[arg(long, value_name = "URL")]
        storage_url: Option<String>,
        /// Print the report as JSON.
        #[arg(long)]
        json: bool,
    },
}

/// Runs `hearth storage …` for `data_dir`.
pub async fn run(data_dir: &Path, command: StorageCommand) -> anyhow::Result<ExitCode> {
    match command {
        StorageCommand::Migrate { to, replace } => migrate(data_dir, &to, replace).await,
        StorageCommand::Check { storage_url, json } => check(data_dir, storage_url, json).await,
        StorageCommand::ImportKnowledge { dir, prune } => {
            if !dir.is_dir() {
                bail!("{}: not a directory", dir.display());
            }
            let db = Db::open_configured(data_dir, None).await?;
            let knowledge = crate::storage::Knowledge::open(db, data_dir).await?;
            let report = knowledge.import_dir(&dir, prune).await?;
            for name in &report.added {
                println!("added    {name}");
            }
            for name in &report.updated {
                println!("updated  {name}");
            }
            for name in &report.removed {
                println!("removed  {name}");
            }
            for (file, why) in &report.skipped {
                eprintln!("skipped  {file}: {why}");
            }
            println!(
                "{} added, {} updated, {} unchanged, {} removed, {} skipped",
                report.added.len(),
                report.updated.len(),
                report.unchanged,
                report.removed.len(),
                report.skipped.len()
            );
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Tables of the PostgreSQL schema that hold data, children first (TRUNCATE order does
/// not matter with CASCADE; the copy goes parents first).
const DATA_TABLES: &[&str] = &[
    "conversation_leases",
    "conversation_messages",
    "conversations",
    "config",
    "settings_defs",
    "settings_tables",
    "plugin_config",
    "relations",
    "entities",
    "doc_memory_fts",
    "doc_memory",
    "knowledge_fts",
    "knowledge",
    "text_events",
    "tool_cooldowns",
];

async fn migrate(data_dir: &Path, url: &str, replace: bool) -> anyhow::Result<ExitCode> {
    let file = data_dir.join(crate::storage::DB_FILE);
    if !file.exists() {
        bail!(
            "no hearth.db in {} (nothing to migrate)",
            data_dir.display()
        );
    }
    let socket = data_dir.join(crate::server::SOCKET_FILE);
    if std::os::unix::net::UnixStream::connect(&socket).is_ok() {
        bail!(
            "a broker is running on {} (its socket answers); stop it first, so nothing is written after the copy",
            data_dir.display()
        );
    }
    // Brings the SQLite file to this build's schema, as a broker start would.
    drop(Db::open(data_dir).await?);
    // Only `[storage] ca` of the data dir's config is used: the source is its SQLite
    // file, whatever database its broker runs on now.
    let ca = crate::llm::config::Config::load(data_dir, &Default::default())
        .map_err(|e| anyhow::anyhow!(e))?
        .storage
        .ca;
    let target = Db::postgres_with(url, ca.as_deref()).await?;
    let pg = target.pg().expect("a PostgreSQL handle");
    let mut client = pg.client("migrate").await?;
    let tx = client
        .transaction()
        .await
        .map_err(pg.error("migrate: begin"))?;
    let mut held = Vec::new();
    for table in DATA_TABLES {
        let has: bool = tx
            .query_one(&format!("SELECT EXISTS (SELECT 1 FROM {table})"), &[])
            .await
            .map_err(pg.error(format!("migrate: look into {table}")))?
            .get(0);
        if has {
            held.push(*table);
        }
    }
    if !held.is_empty() {
        if !replace {
            bail!(
                "{}: already holds Hearth data ({}); use --replace to empty it first",
                pg.target(),
                held.join(", ")
            );
        }
        tx.batch_execute(&format!(
            "TRUNCATE {} RESTART IDENTITY CASCADE",
            DATA_TABLES.join(", ")
        ))
        .await
        .map_err(pg.error("migrate: empty the target"))?;
    }

    let src = rusqlite::Connection::open_with_flags(
        &file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .with_context(|| format!("opening {}", file.display()))?;
    // One read transaction: one snapshot of the whole file.
    src.execute_batch("BEGIN")?;
    let mut counts = Vec::new();
    for spec in COPIES {
        let n = copy_table(&src, &tx, spec)
            .await
            .with_context(|| format!("copying {}", spec.sqlite))?;
        counts.push((spec.pg, n));
    }
    let plugin_rows = copy_plugin_settings(&src, &tx).await?;
    counts.push(("plugin_config", plugin_rows));
    let docs = copy_docs(&src, &tx).await?;
    counts.push(("doc_memory", docs));
    let (lines, skipped) = copy_text_memory(&data_dir.join("memory").join("text"), &tx).await?;
    counts.push(("text_events", lines));
    if skipped > 0 {
        eprintln!(
            "TextMemory: {skipped} lines that are not events (a line cut by a crash) were left out"
        );
    }
    for (table, column) in [
        ("conversations", "id"),
        ("conversation_messages", "id"),
        ("entities", "id"),
        ("relations", "id"),
        ("doc_memory", "seq"),
    ] {
        tx.execute(
            &format!(
                "SELECT setval(pg_get_serial_sequence('{table}', '{column}'),
                               coalesce((SELECT max({column}) FROM {table}), 0) + 1, false)"
            ),
            &[],
        )
        .await
        .map_err(pg.error(format!("migrate: set the id sequence of {table}")))?;
    }
    tx.commit().await.map_err(pg.error("migrate: commit"))?;
    drop(client);
    src.execute_batch("COMMIT")?;
    // Knowledge: on PostgreSQL the database holds the entries; the folder (the truth
    // on SQLite) is imported.
    let folder = data_dir.join("knowledge");
    if folder.is_dir() {
        let knowledge = crate::storage::Knowledge::open(target.clone(), data_dir).await?;
        let report = knowledge.import_dir(&folder, false).await?;
        counts.push((
            "knowledge",
            (report.added.len() + report.updated.len() + report.unchanged) as u64,
        ));
        for (file, why) in &report.skipped {
            eprintln!("knowledge: {file} left out: {why}");
        }
    }

    for (table, n) in &counts {
        println!("{table:<24} {n:>8} rows");
    }
    println!(
        "migrated {} to {}; now set [storage] url in {} (or start brokers with --storage-url, and give `hearth settings` the same --storage-url)",
        file.display(),
        pg.target(),
        data_dir.join("hearth.toml").display()
    );
    Ok(ExitCode::SUCCESS)
}

/// How one SQLite table maps to its PostgreSQL counterpart: the same columns in the
/// same order, each with the PostgreSQL type to copy as.
struct Copy {
    sqlite: &'static str,
    pg: &'static str,
    columns: &'static [(&'static str, Col)],
}

#[derive(Clone, Copy)]
enum Col {
    Int,
    Text,
    OptText,
    OptInt,
    /// SQLite 0/1 → BOOLEAN.
    Bool,
}

const COPIES: &[Copy] = &[
    Copy {
        sqlite: "conversations",
        pg: "conversations",
        columns: &[
            ("id", Col::Int),
            ("scope", Col::Text),
            ("channel", Col::Text),
            ("subject", Col::Text),
        ],
    },
    Copy {
        sqlite: "conversation_messages",
        pg: "conversation_messages",
        columns: &[
            ("id", Col::Int),
            ("conversation", Col::Int),
            ("role", Col::Text),
            ("message", Col::Text),
            ("chars", Col::Int),
            ("created_at", Col::Int),
            ("injected_by", Col::OptText),
        ],
    },
    Copy {
        sqlite: "config",
        pg: "config",
        columns: &[
            ("key", Col::Text),
            ("value", Col::Text),
            ("updated_at", Col::Int),
        ],
    },
    Copy {
        sqlite: "settings_tables",
        pg: "settings_tables",
        columns: &[("plugin", Col::Text), ("table_name", Col::Text)],
    },
    Copy {
        sqlite: "settings_defs",
        pg: "settings_defs",
        columns: &[
            ("table_name", Col::Text),
            ("key", Col::Text),
            ("def", Col::Text),
            ("secret", Col::Bool),
        ],
    },
    Copy {
        sqlite: "entities",
        pg: "entities",
        columns: &[
            ("id", Col::Int),
            ("name", Col::Text),
            ("folded", Col::Text),
            ("type", Col::Text),
            ("mention_count", Col::Int),
            ("created_at", Col::Int),
            ("updated_at", Col::Int),
        ],
    },
    Copy {
        sqlite: "relations",
        pg: "relations",
        columns: &[
            ("id", Col::Int),
            ("source_id", Col::Int),
            ("target_id", Col::Int),
            ("relation_type", Col::Text),
            ("session_id", Col::Text),
            ("active", Col::Bool),
            ("created_at", Col::Int),
            ("purged_at", Col::OptInt),
        ],
    },
];

/// One value read from SQLite, ready for COPY.
enum Val {
    Int(i64),
    Text(String),
    OptText(Option<String>),
    OptInt(Option<i64>),
    Bool(bool),
}

impl Val {
    fn as_sql(&self) -> &(dyn ToSql + Sync) {
        match self {
            Val::Int(v) => v,
            Val::Text(v) => v,
            Val::OptText(v) => v,
            Val::OptInt(v) => v,
            Val::Bool(v) => v,
        }
    }
}

fn pg_type(c: Col) -> Type {
    match c {
        Col::Int | Col::OptInt => Type::INT8,
        Col::Text | Col::OptText => Type::TEXT,
        Col::Bool => Type::BOOL,
    }
}

fn read_val(row: &rusqlite::Row<'_>, i: usize, c: Col) -> rusqlite::Result<Val> {
    Ok(match c {
        Col::Int => Val::Int(row.get(i)?),
        Col::Text => Val::Text(row.get(i)?),
        Col::OptText => Val::OptText(row.get(i)?),
        Col::OptInt => Val::OptInt(row.get(i)?),
        Col::Bool => Val::Bool(row.get::<_, i64>(i)? != 0),
    })
}

/// COPYs `rows` into `table (columns)` in binary; returns how many.
async fn copy_in(
    tx: &deadpool_postgres::Transaction<'_>,
    table: &str,
    columns: &[(&str, Col)],
    rows: impl IntoIterator<Item = Vec<Val>>,
) -> anyhow::Result<u64> {
    let names: Vec<&str> = columns.iter().map(|(n, _)| *n).collect();
    let types: Vec<Type> = columns.iter().map(|(_, c)| pg_type(*c)).collect();
    let sink = tx
        .copy_in(&format!(
            "COPY {table} ({}) FROM STDIN (FORMAT binary)",
            names.join(", ")
        ))
        .await
        .map_err(|e| anyhow::anyhow!(crate::storage::pg::db_error(&e)))?;
    let writer = BinaryCopyInWriter::new(sink, &types);
    let mut writer = std::pin::pin!(writer);
    for row in rows {
        let refs: Vec<&(dyn ToSql + Sync)> = row.iter().map(Val::as_sql).collect();
        writer
            .as_mut()
            .write(&refs)
            .await
            .map_err(|e| anyhow::anyhow!(crate::storage::pg::db_error(&e)))?;
    }
    writer
        .finish()
        .await
        .map_err(|e| anyhow::anyhow!(crate::storage::pg::db_error(&e)))
}

async fn copy_table(
    src: &rusqlite::Connection,
    tx: &deadpool_postgres::Transaction<'_>,
    spec: &Copy,
) -> anyhow::Result<u64> {
    let names: Vec<&str> = spec.columns.iter().map(|(n, _)| *n).collect();
    let rows = read_rows(
        src,
        &format!("SELECT {} FROM {}", names.join(", "), spec.sqlite),
        spec.columns,
    )?;
    copy_in(tx, spec.pg, spec.columns, rows).await
}

fn read_rows(
    src: &rusqlite::Connection,
    sql: &str,
    columns: &[(&str, Col)],
) -> anyhow::Result<Vec<Vec<Val>>> {
    let mut stmt = src.prepare(sql)?;
    let rows = stmt.query_map([], |row| {
        columns
            .iter()
            .enumerate()
            .map(|(i, (_, c))| read_val(row, i, *c))
            .collect::<rusqlite::Result<Vec<Val>>>()
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Each plugin's `config_<name>` table into `plugin_config`.
async fn copy_plugin_settings(
    src: &rusqlite::Connection,
    tx: &deadpool_postgres::Transaction<'_>,
) -> anyhow::Result<u64> {
    let tables: Vec<String> = src
        .prepare("SELECT table_name FROM settings_tables ORDER BY table_name")?
        .query_map([], |row| row.get(0))?
        .collect::<rusqlite::Result<_>>()?;
    let mut rows = Vec::new();
    for table in tables {
        // Only names the settings module makes (`config_[a-z0-9_]+`) go into SQL text.
        let safe = table.strip_prefix("config_").is_some_and(|rest| {
            !rest.is_empty()
                && rest
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
        });
        if !safe {
            bail!("settings_tables: unsafe table name {table:?}");
        }
        let mut stmt = src.prepare(&format!("SELECT key, value, updated_at FROM \"{table}\""))?;
        let found = stmt.query_map([], |row| {
            Ok(vec![
                Val::Text(table.clone()),
                Val::Text(row.get(0)?),
                Val::Text(row.get(1)?),
                Val::Int(row.get(2)?),
            ])
        })?;
        for row in found {
            rows.push(row?);
        }
    }
    copy_in(
        tx,
        "plugin_config",
        &[
            ("table_name", Col::Text),
            ("key", Col::Text),
            ("value", Col::Text),
            ("updated_at", Col::Int),
        ],
        rows,
    )
    .await
}

/// DocMemory's documents, with their `seq` and times, indexed for PostgreSQL's search.
async fn copy_docs(
    src: &rusqlite::Connection,
    tx: &deadpool_postgres::Transaction<'_>,
) -> anyhow::Result<u64> {
    let mut stmt = src.prepare(
        "SELECT seq, id, title, content, created_at, updated_at FROM doc_memory ORDER BY seq",
    )?;
    let docs = stmt
        .query_map([], |row| {
            Ok((
                row.get::<_, i64>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, String>(2)?,
                row.get::<_, String>(3)?,
                row.get::<_, i64>(4)?,
                row.get::<_, i64>(5)?,
            ))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    for (seq, id, title, content, created, updated) in &docs {
        crate::storage::pg::docs::import(tx, (*seq, id, title, content, *created, *updated))
            .await
            .map_err(|e| anyhow::anyhow!("doc {id}: {}", crate::storage::pg::db_error(&e)))?;
    }
    Ok(docs.len() as u64)
}

/// The TextMemory log files under `dir` into `text_events`, in log order, each line
/// with the day of its file; returns (lines copied, lines left out).
async fn copy_text_memory(
    dir: &Path,
    tx: &deadpool_postgres::Transaction<'_>,
) -> anyhow::Result<(u64, u64)> {
    let files = crate::storage::text_memory_files(dir)
        .with_context(|| format!("listing {}", dir.display()))?;
    let (mut copied, mut skipped) = (0u64, 0u64);
    let mut days: Vec<String> = Vec::new();
    let mut lines: Vec<String> = Vec::new();
    async fn flush(
        tx: &deadpool_postgres::Transaction<'_>,
        days: &mut Vec<String>,
        lines: &mut Vec<String>,
    ) -> anyhow::Result<()> {
        if lines.is_empty() {
            return Ok(());
        }
        tx.execute(
            "INSERT INTO text_events (day, line)
             SELECT d::date, l FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS t (d, l, n)
             ORDER BY n",
            &[&*days, &*lines],
        )
        .await
        .map_err(|e| anyhow::anyhow!("text_events: {}", crate::storage::pg::db_error(&e)))?;
        days.clear();
        lines.clear();
        Ok(())
    }
    for (day, path) in files {
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        for line in text.split('\n').filter(|l| !l.is_empty()) {
            if serde_json::from_str::<crate::storage::TextEvent>(line).is_err() {
                skipped += 1;
                continue;
            }
            days.push(day.to_string());
            lines.push(line.to_string());
            copied += 1;
            if lines.len() >= 1000 {
                flush(tx, &mut days, &mut lines).await?;
            }
        }
    }
    flush(tx, &mut days, &mut lines).await?;
    Ok((copied, skipped))
}

/// One line of the check report.
struct Line {
    ok: bool,
    what: String,
    detail: String,
}

async fn check(data_dir: &Path, url: Option<String>, json: bool) -> anyhow::Result<ExitCode> {
    // Reads only: neither migrates a schema nor creates a database file.
    let storage = Db::configured(data_dir, url)?;
    let (backend, database, lines) = match storage
        .connection_url()
        .map_err(|e| anyhow::anyhow!(e))?
    {
        Some(url) => {
            let pg = crate::storage::pg::PgDb::open(&url, storage.ca.as_deref())?;
            let lines = check_postgres(&pg).await?;
            ("postgresql", pg.target().to_string(), lines)
        }
        None => {
            let file = data_dir.join(crate::storage::DB_FILE);
            if !file.exists() {
                anyhow::bail!(
                    "no {} in {} and no [storage] url: nothing to check (pass --storage-url, or the right --data-dir)",
                    crate::storage::DB_FILE,
                    data_dir.display()
                );
            }
            (
                "sqlite",
                file.display().to_string(),
                check_sqlite(data_dir).await?,
            )
        }
    };
    let ok = lines.iter().all(|l| l.ok);
    if json {
        let v: Vec<_> = lines
            .iter()
            .map(|l| serde_json::json!({"ok": l.ok, "check": l.what, "detail": l.detail}))
            .collect();
        println!(
            "{}",
            serde_json::json!({"backend": backend, "database": database, "ok": ok, "checks": v})
        );
    } else {
        println!("{backend} {database}");
        for l in &lines {
            println!(
                "{} {:<28} {}",
                if l.ok { "ok  " } else { "FAIL" },
                l.what,
                l.detail
            );
        }
    }
    Ok(if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

async fn check_sqlite(data_dir: &Path) -> anyhow::Result<Vec<Line>> {
    let file = data_dir.join(crate::storage::DB_FILE);
    // Read-write: FTS5's integrity-check is an INSERT command (it changes nothing).
    let conn = rusqlite::Connection::open(&file)?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    let mut lines = Vec::new();
    let version: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    lines.push(Line {
        ok: version as usize == MIGRATIONS.len(),
        what: "schema version".into(),
        detail: format!("{version} (this build: {})", MIGRATIONS.len()),
    });
    let integrity: String = conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))?;
    lines.push(Line {
        ok: integrity == "ok",
        what: "integrity_check".into(),
        detail: integrity,
    });
    for fts in ["doc_memory_fts", "knowledge_fts", "entities_fts"] {
        let outcome = conn.execute(
            &format!("INSERT INTO {fts} ({fts}) VALUES ('integrity-check')"),
            [],
        );
        let (ok, detail) = match outcome {
            Ok(_) => (true, "ok".to_string()),
            Err(e) => (false, e.to_string()),
        };
        lines.push(Line {
            ok,
            what: format!("{fts} index"),
            detail,
        });
    }
    Ok(lines)
}

async fn check_postgres(pg: &crate::storage::pg::PgDb) -> anyhow::Result<Vec<Line>> {
    let client = pg.client("connect").await?;
    let q = |sql: &'static str| {
        let client = &client;
        async move {
            client
                .query_one(sql, &[])
                .await
                .map_err(|e| anyhow::anyhow!(crate::storage::pg::db_error(&e)))
        }
    };
    let mut lines = Vec::new();
    let server: String = q("SHOW server_version").await?.get(0);
    lines.push(Line {
        ok: true,
        what: "server".into(),
        detail: format!("PostgreSQL {server}"),
    });
    let has_schema: bool = q("SELECT to_regclass('hearth_schema') IS NOT NULL")
        .await?
        .get(0);
    if !has_schema {
        lines.push(Line {
            ok: false,
            what: "schema version".into(),
            detail: format!(
                "none: no Hearth schema in this database yet (the first broker started on it, or `hearth storage migrate --to`, creates version {})",
                MIGRATIONS_PG.len()
            ),
        });
        return Ok(lines);
    }
    let version: i32 = q("SELECT version FROM hearth_schema").await?.get(0);
    lines.push(Line {
        ok: version as usize == MIGRATIONS_PG.len(),
        what: "schema version".into(),
        detail: format!("{version} (this build: {})", MIGRATIONS_PG.len()),
    });
    let mut missing = Vec::new();
    for table in DATA_TABLES
        .iter()
        .chain(["settings_tables", "hearth_schema"].iter())
    {
        let exists: bool = client
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[table])
            .await
            .map_err(|e| anyhow::anyhow!(crate::storage::pg::db_error(&e)))?
            .get(0);
        if !exists {
            missing.push(*table);
        }
    }
    lines.push(Line {
        ok: missing.is_empty(),
        what: "tables".into(),
        detail: if missing.is_empty() {
            format!("{} present", DATA_TABLES.len() + 1)
        } else {
            format!("missing: {}", missing.join(", "))
        },
    });
    let trgm: bool = q("SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'pg_trgm')")
        .await?
        .get(0);
    lines.push(Line {
        ok: true,
        what: "pg_trgm".into(),
        detail: if trgm {
            "installed (entity keyword search uses its index)".into()
        } else {
            "not installed: entity keyword search scans (CREATE EXTENSION pg_trgm as a superuser to index it)".into()
        },
    });
    for (docs, fts) in [
        ("doc_memory", "doc_memory_fts"),
        ("knowledge", "knowledge_fts"),
    ] {
        let row = client
            .query_one(
                &format!(
                    "SELECT (SELECT count(*) FROM {docs}),
                            (SELECT count(*) FROM {docs} d WHERE NOT EXISTS (SELECT 1 FROM {fts} f WHERE f.seq = d.seq))"
                ),
                &[],
            )
            .await
            .map_err(|e| anyhow::anyhow!(crate::storage::pg::db_error(&e)))?;
        let (n, unindexed): (i64, i64) = (row.get(0), row.get(1));
        lines.push(Line {
            ok: unindexed == 0,
            what: format!("{docs} index"),
            detail: format!("{n} entries, {unindexed} without index rows"),
        });
    }
    let max: String = q("SHOW max_connections").await?.get(0);
    let used: i64 = q("SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()")
        .await?
        .get(0);
    let max_n: i64 = max.parse().unwrap_or(0);
    let per_broker = crate::storage::pg::POOL_SIZE as i64 + 1;
    lines.push(Line {
        ok: max_n >= per_broker * 2,
        what: "connections".into(),
        detail: format!(
            "max_connections {max}, {used} in use on this database; each broker uses up to {per_broker} (pool {} + 1 listening)",
            crate::storage::pg::POOL_SIZE
        ),
    });
    // LISTEN/NOTIFY and advisory locks, as brokers use them: a listener of a made-up
    // broker id gets a notification sent through the pool.
    let id = format!("hearth-check-{}", std::process::id());
    let listener = pg.listen(&id).await?;
    let mut notices = listener.subscribe();
    client
        .execute("SELECT pg_notify('hearth_settings', 'hearth-check')", &[])
        .await
        .map_err(|e| anyhow::anyhow!(crate::storage::pg::db_error(&e)))?;
    let heard = tokio::time::timeout(std::time::Duration::from_secs(5), async {
        loop {
            match notices.recv().await {
                Ok(crate::storage::pg::listener::Notice::Settings(t)) if t == "hearth-check" => {
                    return true
                }
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    })
    .await
    .unwrap_or(false);
    lines.push(Line {
        ok: heard && listener.is_up(),
        what: "LISTEN/NOTIFY, locks".into(),
        detail: if heard {
            "a notification and a session advisory lock work".into()
        } else {
            "no notification arrived within 5 s: brokers would not see each other's settings changes".into()
        },
    });
    Ok(lines)
}
