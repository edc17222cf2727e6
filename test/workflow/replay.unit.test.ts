/**
 * Replays of histories recorded by an earlier orderWorkflow, against today's: a deploy must not fail the orders
 * still in flight. histories/expired-before-compensation-step.binpb is an order that expired under the workflow of
 * 356fb56^ (mocked activities, time-skipping server; the History proto as fetchHistory() returned it, encoded:
 * the SDK's historyFromJSON fails in this install, its protobufjs is another copy than @temporalio/proto's): its settleOrder
 * released the unit itself, so its history has no releaseUnit step, and today's workflow must take the same
 * path when it replays it (patched('compensation-step') in src/workflows/order.ts), not schedule one.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { temporal } from '@temporalio/proto';
import { bundleWorkflowCode, DefaultLogger, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { installTestRuntime } from '../temporalRuntime';

jest.setTimeout(60_000);

let bundle: WorkflowBundleWithSourceMap;

beforeAll(async () => {
  installTestRuntime();
  bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../../src/workflows'), logger: new DefaultLogger('WARN') });
});

/** @returns the history in the file, and the activity types of its local activity markers in order */
function recorded(file: string) {
  const history = temporal.api.history.v1.History.decode(readFileSync(join(__dirname, 'histories', file)));
  const steps = history.events.flatMap((e) => {
    const data = e.markerRecordedEventAttributes?.details?.data?.payloads?.[0]?.data;
    return data ? [JSON.parse(Buffer.from(data).toString()).activity_type as string] : [];
  });
  return { history, steps };
}

test('an order that expired before the compensation was a step replays without one', async () => {
  const { history, steps } = recorded('expired-before-compensation-step.binpb');
  expect(steps).toEqual(['placeOrder', 'settleOrder']);
  await expect(Worker.runReplayHistory({ workflowBundle: bundle }, history)).resolves.toBeUndefined();
});

test('an untraced order replays on the traced bundle: tracing switched on mid-sale fails no order in flight', async () => {
  const { history } = recorded('expired-before-compensation-step.binpb');
  const traced = await buildWorkflowBundle(true);
  await expect(Worker.runReplayHistory(traced, history)).resolves.toBeUndefined();
});
