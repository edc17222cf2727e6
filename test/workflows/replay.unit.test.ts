/**
 * Replays of histories recorded by today's orderWorkflow: the guard for the next change, which must not fail the
 * orders in flight at its deploy (a change of the steps fails these replays; it then needs `patched`).
 * histories/*.binpb: orders run with mocked activities on the time-skipping server (as order.unit.test.ts runs
 * them), their History proto as fetchHistory() returned it, encoded (the SDK's historyFromJSON fails in this
 * install: its protobufjs is another copy than @temporalio/proto's). expired.binpb: placed, its window passed,
 * settled EXPIRED, compensated. paid.binpb: placed, a malformed `paid` signal (its refund event), paid by `pay`.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { temporal } from '@temporalio/proto';
import { bundleWorkflowCode, DefaultLogger, Worker, type WorkflowBundleWithSourceMap } from '@temporalio/worker';
import { buildWorkflowBundle } from '../../src/worker/bundle';
import { installTestRuntime } from '../support/temporalRuntime';

jest.setTimeout(60_000);

let bundle: WorkflowBundleWithSourceMap;
let traced: Awaited<ReturnType<typeof buildWorkflowBundle>>;

beforeAll(async () => {
  installTestRuntime();
  bundle = await bundleWorkflowCode({ workflowsPath: require.resolve('../../src/workflows'), logger: new DefaultLogger('WARN') });
  traced = await buildWorkflowBundle(true);
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

test.each([
  ['expired.binpb', ['placeOrder', 'settleOrder', 'releaseUnit']],
  ['paid.binpb', ['placeOrder', 'payOrder', 'publishEvent']],
])('%s replays on today\'s workflow, untraced and traced (tracing switched on mid-sale fails no order in flight)', async (file, steps) => {
  const { history, steps: recordedSteps } = recorded(file);
  expect(recordedSteps).toEqual(steps);
  await expect(Worker.runReplayHistory({ workflowBundle: bundle }, history)).resolves.toBeUndefined();
  await expect(Worker.runReplayHistory(traced, history)).resolves.toBeUndefined();
});
