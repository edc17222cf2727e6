/**
 * The test suites' own corner of the local stack, so that `npm test` never reads or writes what a user made
 * (their sales, orders, workflows, events): its own PostgreSQL database, Redis logical database, Kafka topic and
 * Temporal namespace. jest.config.js prepares it once per run and sets its names in Jest's environment
 * (test/support/global-setup.ts), and again in each suite's copy of it (test/support/setup-env.ts), so that the suites and every
 * process they start use them.
 */
import { execFile } from 'node:child_process';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { Client, Connection } from '@temporalio/client';
import { msToTs } from '@temporalio/common/lib/time';
import { temporal } from '@temporalio/proto';
import { Client as PgClient } from 'pg';
import { ensureTopic } from '../../scripts/kafka-topics';
import { stackEnv } from '../../scripts/stack-env';
import { loadConfig, type Config } from '../../src/config';
import { pgConnection, temporalConnection } from '../../src/infra/connections';
import { eventually } from './helpers';

/** The names the suites use in place of the user's (scripts/stack.env's defaults). */
export const TEST_ENVIRONMENT = {
  PGDATABASE: 'flash_sale_test',
  REDIS_DB: '1',
  KAFKA_TOPIC: 'flash-sale-orders-test',
  TEMPORAL_NAMESPACE: 'flash-sale-test',
} as const;

/**
 * Makes the stack ready for an environment (process.env-like settings: its names, its servers), idempotently: creates the PostgreSQL database (the stack's
 * role may CREATEDB) and migrates it, creates the Kafka topic with the stack's partition count, registers the
 * Temporal namespace and the search attributes of scripts/stack.env on it, and waits until a visibility query on
 * them is answered. The Redis logical database needs nothing.
 * @throws the first service's error (unreachable, refused)
 */
export async function prepareEnvironment(env: NodeJS.ProcessEnv): Promise<void> {
  const config = loadConfig(env);
  const stack = stackEnv();
  const results = await Promise.allSettled([
    createDatabase(config).then(() => migrate(env)),
    ensureTopic([`${config.KAFKA_HOST}:${config.KAFKA_PORT}`], config.KAFKA_TOPIC, Number(stack.KAFKA_TOPIC_PARTITIONS)),
    registerNamespace(config, stack.TEMPORAL_SEARCH_ATTRIBUTES),
  ]);
  const failed = results.find((r) => r.status === 'rejected');
  if (failed) throw failed.reason;
}

/**
 * `npm run migrate`'s compiled CLI (npm test builds dist/ first), as a process with the environment's
 * settings: node-pg-migrate is ES modules only, which Jest's CommonJS module runtime cannot import.
 */
async function migrate(env: NodeJS.ProcessEnv): Promise<void> {
  await promisify(execFile)(process.execPath, [join(__dirname, '..', '..', 'dist', 'cli', 'migrate.js')], { env });
}

async function createDatabase(config: Config): Promise<void> {
  const admin = new PgClient({ ...pgConnection(config), database: 'postgres' });
  await admin.connect();
  try {
    const exists = await admin.query('SELECT 1 FROM pg_database WHERE datname = $1', [config.PGDATABASE]);
    if (exists.rowCount === 0) await admin.query(`CREATE DATABASE "${config.PGDATABASE.replace(/"/g, '""')}"`);
  } catch (err) {
    // Two preparations at once (a suite and the global set-up): the other one created it.
    if ((err as { code?: string }).code !== '42P04') throw err;
  } finally {
    await admin.end();
  }
}

/** @param attributes space-separated Name=Type pairs (scripts/stack.env's TEMPORAL_SEARCH_ATTRIBUTES) */
async function registerNamespace(config: Config, attributes: string): Promise<void> {
  const connection = await Connection.connect(temporalConnection(config));
  const namespace = config.TEMPORAL_NAMESPACE;
  try {
    const service = connection.workflowService;
    const known = await service.describeNamespace({ namespace }).then(() => true, () => false);
    if (!known) {
      await service
        .registerNamespace({ namespace, workflowExecutionRetentionPeriod: msToTs('3 days') })
        .catch((err: { code?: number }) => {
          if (err.code !== 6) throw err; // ALREADY_EXISTS: registered meanwhile
        });
    }
    const wanted = Object.fromEntries(
      attributes.split(/\s+/).filter(Boolean).map((pair) => {
        const [name, type] = pair.split('=');
        const key = `INDEXED_VALUE_TYPE_${type.toUpperCase()}` as keyof typeof temporal.api.enums.v1.IndexedValueType;
        return [name, temporal.api.enums.v1.IndexedValueType[key]];
      }),
    );
    // A namespace just registered reaches the frontend's cache within seconds: until then calls on it fail.
    const listed = await eventually(() => connection.operatorService.listSearchAttributes({ namespace }));
    const missing = Object.fromEntries(Object.entries(wanted).filter(([name]) => !(name in (listed.customAttributes ?? {}))));
    if (Object.keys(missing).length) await connection.operatorService.addSearchAttributes({ namespace, searchAttributes: missing });
    const client = new Client({ connection, namespace });
    const query = attributes
      .split(/\s+/)
      .filter(Boolean)
      .map((pair) => pair.split('='))
      .map(([name, type]) => (type.toUpperCase() === 'INT' ? `${name} = 0` : `${name} = "none"`))
      .join(' AND ');
    await eventually(() => client.workflow.count(query));
  } finally {
    await connection.close();
  }
}
