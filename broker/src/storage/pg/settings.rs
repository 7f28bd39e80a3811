//! Settings on PostgreSQL: what `storage::settings` does on SQLite (its module docs give
//! the rules), with every plugin's keys in one table, `plugin_config`, keyed by the
//! same table names SQLite gives its `config_<plugin>` tables (so messages, `dump` and
//! `storage migrate` name the same tables). Text is compared and sorted byte-wise
//! (`COLLATE "C"`), as SQLite does, whatever the database's collation.
//!
//! Each write commits and then notifies [`SETTINGS_CHANNEL`] with the table name, so
//! the other brokers on the database re-read and tell their plugins.

use deadpool_postgres::GenericClient;
use serde_json::{Map, Value};

use super::PgDb;
use crate::storage::settings::{base_table_name, not_found, now, CORE_TABLE};
use crate::storage::{secret_by_name, ConfigDef, Scope, Secrets, StorageError, SECRET_MASK};

/// The NOTIFY channel of settings changes; the payload is the table name changed
/// (`config` or a plugin's `config_<name>`), never a value.
pub(crate) const SETTINGS_CHANNEL: &str = "hearth_settings";

/// The advisory lock plugin table names are handed out under (`hearth-settings`).
const TABLES_LOCK: i64 = 0x6865_6172_7468_7374;

/// `(SQL for one key, SQL for the keys of a prefix)` reading `table`'s values: the
/// core table, or `plugin_config` rows of that table name. `$1` = table name in both.
fn source(table: &str) -> &'static str {
    if table == CORE_TABLE {
        "(SELECT key, value FROM config WHERE $1::text IS NOT NULL)"
    } else {
        "(SELECT key, value FROM plugin_config WHERE table_name = $1)"
    }
}

async fn table_of(
    client: &impl GenericClient,
    scope: &Scope,
) -> Result<Option<String>, tokio_postgres::Error> {
    match scope {
        Scope::Core => Ok(Some(CORE_TABLE.to_string())),
        Scope::Plugin(plugin) => Ok(client
            .query_opt(
                "SELECT table_name FROM settings_tables WHERE plugin = $1",
                &[plugin],
            )
            .await?
            .map(|row| row.get(0))),
    }
}

/// The table of `scope`, registered if the plugin has none yet. Names are handed out
/// under an advisory lock, so two brokers registering plugins whose names sanitize
/// alike at the same moment still get distinct tables.
async fn table_for_write(
    tx: &deadpool_postgres::Transaction<'_>,
    scope: &Scope,
) -> Result<String, tokio_postgres::Error> {
    if let Some(table) = table_of(tx, scope).await? {
        return Ok(table);
    }
    let Scope::Plugin(plugin) = scope else {
        unreachable!("the core table always exists");
    };
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&TABLES_LOCK])
        .await?;
    if let Some(table) = table_of(tx, scope).await? {
        return Ok(table); // another broker registered it while we waited
    }
    let base = base_table_name(plugin);
    let mut table = base.clone();
    let mut n = 1;
    loop {
        let taken: bool = tx
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM settings_tables WHERE table_name = $1)",
                &[&table],
            )
            .await?
            .get(0);
        if !taken && table != CORE_TABLE {
            break;
        }
        n += 1;
        table = format!("{base}_{n}");
    }
    tx.execute(
        "INSERT INTO settings_tables (plugin, table_name) VALUES ($1, $2)",
        &[plugin, &table],
    )
    .await?;
    Ok(table)
}

fn json(pg: &PgDb, op: &str, text: &str) -> Result<Value, StorageError> {
    serde_json::from_str(text).map_err(|e| StorageError::Postgres {
        target: pg.target().to_string(),
        op: op.to_string(),
        detail: format!("a stored value is not JSON: {e}"),
    })
}

/// [`crate::storage::Settings::get`] and [`crate::storage::Settings::read`]: the value
/// of `key`, masked when secret and `secrets` says so.
pub(in crate::storage) async fn read(
    pg: &PgDb,
    scope: &Scope,
    key: &str,
    secrets: Secrets,
) -> Result<Value, StorageError> {
    let op = format!("read setting `{key}` of {scope}");
    let client = pg.client(&op).await?;
    let Some(table) = table_of(&client, scope)
        .await
        .map_err(pg.error(op.clone()))?
    else {
        return Err(not_found(scope, key.to_string()));
    };
    let sql = format!(
        "SELECT t.value, coalesce(d.secret, false) FROM {} t
         LEFT JOIN settings_defs d ON d.table_name = $1 AND d.key = t.key
         WHERE t.key = $2",
        source(&table)
    );
    let row = client
        .query_opt(&sql, &[&table, &key])
        .await
        .map_err(pg.error(op.clone()))?;
    let Some(row) = row else {
        return Err(StorageError::NotFound {
            table,
            key: key.to_string(),
        });
    };
    let defined: bool = row.get(1);
    let secret = defined || (table == CORE_TABLE && secret_by_name(key));
    if secret && secrets == Secrets::Masked {
        return Ok(Value::String(SECRET_MASK.into()));
    }
    json(pg, &op, row.get(0))
}

/// [`crate::storage::Settings::is_secret`] for a key not secret by its name.
pub(in crate::storage) async fn is_secret(
    pg: &PgDb,
    scope: &Scope,
    key: &str,
) -> Result<bool, StorageError> {
    let op = format!("check whether `{key}` of {scope} is secret");
    let client = pg.client(&op).await?;
    let Some(table) = table_of(&client, scope)
        .await
        .map_err(pg.error(op.clone()))?
    else {
        return Ok(false);
    };
    Ok(client
        .query_opt(
            "SELECT secret FROM settings_defs WHERE table_name = $1 AND key = $2",
            &[&table, &key],
        )
        .await
        .map_err(pg.error(op))?
        .is_some_and(|row| row.get(0)))
}

/// [`crate::storage::Settings::set`]: `Some(reason)` when the key's def refuses the
/// value (nothing written).
pub(in crate::storage) async fn set(
    pg: &PgDb,
    scope: &Scope,
    key: &str,
    value: &Value,
) -> Result<Option<String>, StorageError> {
    let op = format!("write setting `{key}` of {scope}");
    let err = || pg.error(op.clone());
    let mut client = pg.client(&op).await?;
    let tx = client.transaction().await.map_err(err())?;
    let table = table_for_write(&tx, scope).await.map_err(err())?;
    if let Some(def) = def_of(pg, &tx, &table, key).await? {
        if let Err(reason) = def.check(value) {
            return Ok(Some(reason)); // dropping `tx` rolls back
        }
    }
    let text = value.to_string();
    if table == CORE_TABLE {
        tx.execute(
            "INSERT INTO config (key, value, updated_at) VALUES ($1, $2, $3)
             ON CONFLICT (key) DO UPDATE
             SET value = excluded.value, updated_at = excluded.updated_at",
            &[&key, &text, &now()],
        )
        .await
        .map_err(err())?;
    } else {
        tx.execute(
            "INSERT INTO plugin_config (table_name, key, value, updated_at) VALUES ($1, $2, $3, $4)
             ON CONFLICT (table_name, key) DO UPDATE
             SET value = excluded.value, updated_at = excluded.updated_at",
            &[&table, &key, &text, &now()],
        )
        .await
        .map_err(err())?;
    }
    notify(&tx, &table).await.map_err(err())?;
    tx.commit().await.map_err(err())?;
    Ok(None)
}

/// Tells every broker listening on [`SETTINGS_CHANNEL`] that `table` changed, when the
/// transaction commits.
async fn notify(
    tx: &deadpool_postgres::Transaction<'_>,
    table: &str,
) -> Result<(), tokio_postgres::Error> {
    tx.execute("SELECT pg_notify($1, $2)", &[&SETTINGS_CHANNEL, &table])
        .await
        .map(drop)
}

/// [`crate::storage::Settings::list`].
pub(in crate::storage) async fn list(
    pg: &PgDb,
    scope: &Scope,
    prefix: &str,
) -> Result<Vec<String>, StorageError> {
    let op = format!("list settings of {scope}");
    let client = pg.client(&op).await?;
    let Some(table) = table_of(&client, scope)
        .await
        .map_err(pg.error(op.clone()))?
    else {
        return Ok(Vec::new());
    };
    let sql = format!(
        "SELECT key FROM {} t WHERE left(key, length($2)) = $2 ORDER BY key COLLATE \"C\"",
        source(&table)
    );
    Ok(client
        .query(&sql, &[&table, &prefix])
        .await
        .map_err(pg.error(op))?
        .iter()
        .map(|row| row.get(0))
        .collect())
}

/// [`crate::storage::Settings::register_def`].
pub(in crate::storage) async fn register_def(
    pg: &PgDb,
    scope: &Scope,
    def: &ConfigDef,
) -> Result<(), StorageError> {
    let op = format!("register def `{}` of {scope}", def.key);
    let err = || pg.error(op.clone());
    let json = serde_json::to_string(def).expect("a ConfigDef serializes");
    let mut client = pg.client(&op).await?;
    let tx = client.transaction().await.map_err(err())?;
    let table = table_for_write(&tx, scope).await.map_err(err())?;
    tx.execute(
        "INSERT INTO settings_defs (table_name, key, def, secret) VALUES ($1, $2, $3, $4)
         ON CONFLICT (table_name, key) DO UPDATE SET def = excluded.def, secret = excluded.secret",
        &[&table, &def.key, &json, &def.secret],
    )
    .await
    .map_err(err())?;
    if let Some(default) = &def.default {
        let text = default.to_string();
        if table == CORE_TABLE {
            tx.execute(
                "INSERT INTO config (key, value, updated_at) VALUES ($1, $2, $3)
                 ON CONFLICT (key) DO NOTHING",
                &[&def.key, &text, &now()],
            )
            .await
            .map_err(err())?;
        } else {
            tx.execute(
                "INSERT INTO plugin_config (table_name, key, value, updated_at) VALUES ($1, $2, $3, $4)
                 ON CONFLICT (table_name, key) DO NOTHING",
                &[&table, &def.key, &text, &now()],
            )
            .await
            .map_err(err())?;
        }
    }
    notify(&tx, &table).await.map_err(err())?;
    tx.commit().await.map_err(err())
}

async fn def_of(
    pg: &PgDb,
    client: &impl GenericClient,
    table: &str,
    key: &str,
) -> Result<Option<ConfigDef>, StorageError> {
    let op = format!("read the def of `{key}` in {table}");
    let row = client
        .query_opt(
            "SELECT def FROM settings_defs WHERE table_name = $1 AND key = $2",
            &[&table, &key],
        )
        .await
        .map_err(pg.error(op.clone()))?;
    row.map(|row| {
        serde_json::from_str(row.get(0)).map_err(|e| StorageError::Postgres {
            target: pg.target().to_string(),
            op,
            detail: format!("a stored def is not a ConfigDef: {e}"),
        })
    })
    .transpose()
}

/// [`crate::storage::Settings::defs`].
pub(in crate::storage) async fn defs(
    pg: &PgDb,
    scope: &Scope,
    prefix: &str,
) -> Result<Vec<ConfigDef>, StorageError> {
    let op = format!("list defs of {scope}");
    let client = pg.client(&op).await?;
    let Some(table) = table_of(&client, scope)
        .await
        .map_err(pg.error(op.clone()))?
    else {
        return Ok(Vec::new());
    };
    let rows = client
        .query(
            "SELECT def FROM settings_defs
             WHERE table_name = $1 AND left(key, length($2)) = $2
             ORDER BY key COLLATE \"C\"",
            &[&table, &prefix],
        )
        .await
        .map_err(pg.error(op.clone()))?;
    rows.iter()
        .map(|row| {
            serde_json::from_str(row.get(0)).map_err(|e| StorageError::Postgres {
                target: pg.target().to_string(),
                op: op.clone(),
                detail: format!("a stored def is not a ConfigDef: {e}"),
            })
        })
        .collect()
}

/// [`crate::storage::Settings::dump`]: one snapshot (a REPEATABLE READ transaction).
pub(in crate::storage) async fn dump(pg: &PgDb) -> Result<Value, StorageError> {
    let op = "dump settings";
    let err = || pg.error(op);
    let mut client = pg.client(op).await?;
    let tx = client
        .build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await
        .map_err(err())?;
    let core = dump_table(pg, &tx, CORE_TABLE).await?;
    let mut plugins = Map::new();
    for (plugin, table) in registered_tables(&tx).await.map_err(err())? {
        plugins.insert(plugin, Value::Object(dump_table(pg, &tx, &table).await?));
    }
    tx.commit().await.map_err(err())?;
    let mut dump = Map::new();
    dump.insert("core".into(), Value::Object(core));
    dump.insert("plugins".into(), Value::Object(plugins));
    Ok(Value::Object(dump))
}

async fn dump_table(
    pg: &PgDb,
    client: &impl GenericClient,
    table: &str,
) -> Result<Map<String, Value>, StorageError> {
    let op = format!("dump {table}");
    let sql = format!(
        "SELECT t.key, t.value, coalesce(d.secret, false) FROM {} t
         LEFT JOIN settings_defs d ON d.table_name = $1 AND d.key = t.key
         ORDER BY t.key COLLATE \"C\"",
        source(table)
    );
    let rows = client
        .query(&sql, &[&table])
        .await
        .map_err(pg.error(op.clone()))?;
    rows.iter()
        .map(|row| {
            let key: String = row.get(0);
            let secret: bool = row.get(2);
            let value = if secret || (table == CORE_TABLE && secret_by_name(&key)) {
                Value::String(SECRET_MASK.into())
            } else {
                json(pg, &op, row.get(1))?
            };
            Ok((key, value))
        })
        .collect()
}

async fn registered_tables(
    client: &impl GenericClient,
) -> Result<Vec<(String, String)>, tokio_postgres::Error> {
    Ok(client
        .query(
            "SELECT plugin, table_name FROM settings_tables ORDER BY plugin COLLATE \"C\"",
            &[],
        )
        .await?
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect())
}

/// [`crate::storage::Settings::plugins`].
pub(in crate::storage) async fn plugins(pg: &PgDb) -> Result<Vec<String>, StorageError> {
    let op = "list plugins with settings";
    let client = pg.client(op).await?;
    Ok(registered_tables(&client)
        .await
        .map_err(pg.error(op))?
        .into_iter()
        .map(|(plugin, _)| plugin)
        .collect())
}

/// [`crate::storage::Settings::table_name`].
pub(in crate::storage) async fn table_name(
    pg: &PgDb,
    scope: &Scope,
) -> Result<Option<String>, StorageError> {
    let op = format!("find the settings table of {scope}");
    let client = pg.client(&op).await?;
    table_of(&client, scope).await.map_err(pg.error(op))
}
