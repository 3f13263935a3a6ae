//! The schema: versioned migrations (refinery), run at start under an advisory lock so two
//! servers starting at once do not race, and refused when the database is newer than this
//! build.

use tokio_postgres::Client;

use crate::{cause, StartError};

refinery::embed_migrations!("migrations");

/// The newest schema this build knows.
pub const SCHEMA_VERSION: i32 = 12;

/// Any constant: the advisory lock every starting server takes around its migrations.
const MIGRATION_LOCK: i64 = 0x6c65_6173_6568_6f6c;

/// Brings the schema up to date and returns the cluster's receipt key, made once by the
/// first server.
pub(crate) async fn prepare(client: &mut Client) -> Result<[u8; 16], StartError> {
    let schema_error = |e: tokio_postgres::Error| StartError::Schema(cause(&e));
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await
        .map_err(schema_error)?;
    let migrated = migrate(client).await;
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    migrated?;
    unlocked.map_err(schema_error)?;
    let key: [u8; 16] = rand::random();
    client
        .execute(
            "INSERT INTO leasehold_cluster (receipt_key) VALUES ($1) ON CONFLICT DO NOTHING",
            &[&key.as_slice()],
        )
        .await
        .map_err(schema_error)?;
    let row = client
        .query_one("SELECT receipt_key FROM leasehold_cluster", &[])
        .await
        .map_err(schema_error)?;
    let stored: Vec<u8> = row.get(0);
    stored
        .try_into()
        .map_err(|_| StartError::Schema("the cluster's receipt key is damaged".into()))
}

async fn migrate(client: &mut Client) -> Result<(), StartError> {
    let newest = applied_version(client).await?;
    if newest > SCHEMA_VERSION {
        return Err(StartError::Schema(format!(
            "the database's schema is version {newest}, newer than this Leasehold knows ({SCHEMA_VERSION}); upgrade Leasehold"
        )));
    }
    migrations::runner()
        .run_async(client)
        .await
        .map_err(|e| StartError::Schema(e.to_string()))?;
    Ok(())
}

/// The newest migration applied, 0 for a database Leasehold never used.
async fn applied_version(client: &Client) -> Result<i32, StartError> {
    let exists = client
        .query_one(
            "SELECT to_regclass('refinery_schema_history') IS NOT NULL",
            &[],
        )
        .await
        .map_err(|e| StartError::Schema(cause(&e)))?;
    if !exists.get::<_, bool>(0) {
        return Ok(0);
    }
    let row = client
        .query_one(
            "SELECT coalesce(max(version), 0) FROM refinery_schema_history",
            &[],
        )
        .await
        .map_err(|e| StartError::Schema(cause(&e)))?;
    Ok(row.get(0))
}
