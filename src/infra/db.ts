/** PostgreSQL pool and migrations (node-pg-migrate over migrations/*.sql). PostgreSQL is the source of truth. */
import { join } from 'node:path';
import { Pool, type PoolClient } from 'pg';
import type { Config } from '../config';
import { pgConnection } from './connections';

/** Creates a pool for the configured database; pool errors on idle clients are reported, not thrown. */
export function createPool(config: Config, onError: (err: Error) => void = () => undefined): Pool {
  const pool = new Pool({
    ...pgConnection(config),
    max: config.PG_POOL_MAX,
    connectionTimeoutMillis: 5000,
  });
  pool.on('error', onError);
  return pool;
}

/**
 * Applies every pending migration in migrations/; re-running applies nothing.
 * @throws the driver's error when the database is unreachable or a migration fails (the run is rolled back)
 */
export async function migrate(config: Config, log: (msg: string) => void = () => undefined): Promise<void> {
  // node-pg-migrate 8 is ESM-only: loaded on demand, so that importing this module (createPool) also works
  // where require() of ESM does not, such as Jest's CommonJS runtime.
  const { runner } = await import('node-pg-migrate');
  await runner({
    databaseUrl: pgConnection(config),
    dir: join(__dirname, '..', '..', 'migrations'),
    direction: 'up',
    migrationsTable: 'pgmigrations',
    singleTransaction: true,
    log,
  });
}

/**
 * Runs fn in a transaction: COMMIT on success, ROLLBACK on any error, so a failed statement never leaves
 * the connection in an aborted transaction (25P02) for its next user.
 */
export async function inTransaction<T>(pool: Pool, fn: (client: PoolClient) => Promise<T>): Promise<T> {
  const client = await pool.connect();
  try {
    await client.query('BEGIN');
    const result = await fn(client);
    await client.query('COMMIT');
    return result;
  } catch (err) {
    await client.query('ROLLBACK').catch(() => undefined);
    throw err;
  } finally {
    client.release();
  }
}

/** SQLSTATE classes that are business outcomes: integrity violations (23xxx) and data exceptions (22xxx). */
export function isConstraintViolation(err: unknown): boolean {
  const code = (err as { code?: unknown })?.code;
  return typeof code === 'string' && (code.startsWith('23') || code.startsWith('22'));
}
