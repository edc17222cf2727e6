/**
 * Temporal as scripts/services.sh runs it: the dev server serves stack.env's TEMPORAL_NAMESPACE (and the suites'
 * own) with the search attributes of stack.env and runs a workflow through a real Worker (in the suites' namespace); the Web UI answers; and the time-skipping test server
 * installed in .local/venv skips a 10-minute timer in well under a second of wall time.
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { Client, Connection } from '@temporalio/client';
import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';
import { temporal } from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import {
  bundleWorkflowCode,
  DefaultLogger,
  NativeConnection,
  Worker,
  type WorkflowBundleWithSourceMap,
} from '@temporalio/worker';
import { readStackEnvDefaults, stackEnv } from '../../scripts/stack-env';
import { installTestRuntime } from '../support/temporalRuntime';
import { sleepWorkflow } from './workflows/sleep';

const env = stackEnv();
const address = `127.0.0.1:${env.TEMPORAL_PORT}`;
// The suites' namespace runs this suite's workflow; the stack's own (services.sh registers it) is only read.
const namespace = env.TEMPORAL_NAMESPACE;
const stackNamespace = readStackEnvDefaults().TEMPORAL_NAMESPACE;
const TEST_SERVER = join(__dirname, '..', '..', '.local', 'venv', 'bin', 'temporal-test-server');
const TEN_MINUTES = 10 * 60 * 1000;
const OrderStatus = defineSearchAttributeKey('OrderStatus', SearchAttributeType.KEYWORD);

const logger = new DefaultLogger('ERROR'); // quiet: the SDK logs worker state changes, and warns of no activities
let bundle: WorkflowBundleWithSourceMap;
let nativeConnection: NativeConnection;
let connection: Connection;
let timeSkipping: TestWorkflowEnvironment | undefined; // created by its test only

beforeAll(async () => {
  installTestRuntime('ERROR');
  // Bundle once for both workers: webpack is the slow part of Worker.create.
  bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('./workflows/sleep'), logger });
  [nativeConnection, connection] = await Promise.all([NativeConnection.connect({ address }), Connection.connect({ address })]);
});

// Every native handle must be closed, or Jest never exits.
afterAll(async () => {
  await Promise.allSettled([nativeConnection?.close(), connection?.close(), timeSkipping?.teardown()]);
});

test('the Web UI answers HTTP 200', async () => {
  const response = await fetch(`http://127.0.0.1:${env.TEMPORAL_UI_PORT}/`);
  expect(response.status).toBe(200);
  expect(response.headers.get('content-type')).toMatch(/text\/html/);
});

test.each([stackNamespace, namespace])('namespace %s has the search attributes of stack.env', async (name) => {
  const { customAttributes } = await connection.operatorService.listSearchAttributes({ namespace: name });
  const { IndexedValueType } = temporal.api.enums.v1;
  const actual = Object.fromEntries(Object.entries(customAttributes ?? {}).map(([name, type]) => [name, IndexedValueType[type]]));
  for (const pair of env.TEMPORAL_SEARCH_ATTRIBUTES.split(/\s+/)) {
    const [attribute, type] = pair.split('=');
    // KeywordList -> INDEXED_VALUE_TYPE_KEYWORD_LIST
    const expected = `INDEXED_VALUE_TYPE_${type.replace(/([a-z])([A-Z])/g, '$1_$2').toUpperCase()}`;
    expect({ attribute, type: actual[attribute] }).toEqual({ attribute, type: expected });
  }
});

test('the dev server runs a workflow through a Worker, tagged with a search attribute', async () => {
  const taskQueue = `stack-test-${randomUUID()}`;
  const worker = await Worker.create({ connection: nativeConnection, namespace, taskQueue, workflowBundle: bundle });
  const client = new Client({ connection: connection, namespace });
  const workflowId = `stack-test-${randomUUID()}`;

  const slept = await worker.runUntil(
    client.workflow.execute(sleepWorkflow, {
      taskQueue,
      workflowId,
      args: [50],
      typedSearchAttributes: [{ key: OrderStatus, value: 'STACK_TEST' }],
    }),
  );

  expect(slept).toBeGreaterThanOrEqual(50);
  const description = await client.workflow.getHandle(workflowId).describe();
  expect(description.status.name).toBe('COMPLETED');
  expect(description.typedSearchAttributes.get(OrderStatus)).toBe('STACK_TEST');
});

test('the time-skipping test server sleeps 10 minutes of workflow time in well under a second', async () => {
  const testEnv = await TestWorkflowEnvironment.createTimeSkipping({
    server: { executable: { type: 'existing-path', path: TEST_SERVER } },
  });
  timeSkipping = testEnv;
  const taskQueue = `stack-test-${randomUUID()}`;
  const worker = await Worker.create({ connection: testEnv.nativeConnection, taskQueue, workflowBundle: bundle });

  const { slept, wallMs } = await worker.runUntil(async () => {
    const started = performance.now();
    const slept = await testEnv.client.workflow.execute(sleepWorkflow, { taskQueue, workflowId: randomUUID(), args: [TEN_MINUTES] });
    return { slept, wallMs: performance.now() - started };
  });

  expect(slept).toBeGreaterThanOrEqual(TEN_MINUTES);
  expect(wallMs).toBeLessThan(1000);
});
