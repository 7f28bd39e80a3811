//! The storage suite on both backends: [`TestDb`] is a fresh SQLite data dir or a fresh
//! database on the shared test PostgreSQL ([`crate::testing::postgres::PgCluster`]),
//! and [`on_both_backends!`] turns one `async fn(TestDb)` into a `sqlite` and a
//! `postgres` test.

use super::Db;
use crate::testing::postgres::PgCluster;

/// One test's database.
pub(crate) struct TestDb {
    kind: Kind,
}

enum Kind {
    Sqlite(tempfile::TempDir),
    Postgres(String),
}

impl TestDb {
    /// A fresh SQLite data dir.
    pub(crate) fn sqlite() -> TestDb {
        TestDb {
            kind: Kind::Sqlite(tempfile::tempdir().unwrap()),
        }
    }

    /// A fresh database on the shared test cluster; `None` (the case is skipped, with
    /// a message) when PostgreSQL is not installed outside CI.
    pub(crate) fn postgres() -> Option<TestDb> {
        let cluster = PgCluster::shared()?;
        Some(TestDb {
            kind: Kind::Postgres(cluster.database()),
        })
    }

    /// Opens (again) the database: each call is a new handle on the same data.
    pub(crate) async fn open(&self) -> Db {
        match &self.kind {
            Kind::Sqlite(dir) => Db::open(dir.path()).await.unwrap(),
            Kind::Postgres(url) => Db::postgres(url).await.unwrap(),
        }
    }
}

/// For each `name`, an `async fn name(t: TestDb)` in scope becomes the tests
/// `name::sqlite` and `name::postgres`.
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn sqlite() {
                    super::$name($crate::storage::test_db::TestDb::sqlite()).await;
                }

                #[tokio::test]
                async fn postgres() {
                    if let Some(t) = $crate::storage::test_db::TestDb::postgres() {
                        super::$name(t).await;
                    }
                }
            }
        )*
    };
}

pub(crate) use on_both_backends;
