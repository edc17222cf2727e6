/**
 * The workflow bundles (webpack output of src/workflows) the worker runs: one plain, one with Temporal's
 * OpenTelemetry workflow interceptors for tracing on (src/tracing/index.ts), since a prebuilt bundle cannot take
 * interceptors at the worker's start. `npm run build` writes both once ahead of time beside the compiled worker
 * (dist/workflow-bundle.js, dist/workflow-bundle-traced.js), as Temporal recommends for production: a worker
 * then starts without webpack. Run from the TypeScript sources (tests, tsx), one is built in memory instead.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bundleWorkflowCode, DefaultLogger, type WorkerOptions } from '@temporalio/worker';

export type BundleOption = Pick<WorkerOptions, 'workflowBundle'>;

/** Where `npm run build` writes a bundle: dist/workflow-bundle(-traced).js beside dist/worker/. */
export const bundlePath = (traced: boolean) => join(__dirname, '..', traced ? 'workflow-bundle-traced.js' : 'workflow-bundle.js');

/** Temporal's workflow interceptors that open the workflow's spans and carry their context to its activities. */
const TRACING_INTERCEPTORS = require.resolve('@temporalio/interceptors-opentelemetry/lib/workflow-interceptors');

/** Bundles src/workflows in memory (with the tracing interceptors when traced); the result can be handed to several workers. */
export async function buildWorkflowBundle(traced = false): Promise<BundleOption> {
  // Webpack's report of every module only at DEBUG: a build, or a test suite, prints its warnings and errors.
  const code = await bundleWorkflowCode({
    workflowsPath: require.resolve('../workflows'),
    workflowInterceptorModules: traced ? [TRACING_INTERCEPTORS] : [],
    logger: new DefaultLogger('WARN'),
  });
  return { workflowBundle: code };
}

/** @returns the prebuilt bundle when `npm run build` wrote one, else one built now */
export async function workflowBundle(traced = false): Promise<BundleOption> {
  const path = bundlePath(traced);
  return existsSync(path) ? { workflowBundle: { codePath: path } } : buildWorkflowBundle(traced);
}

if (require.main === module) {
  Promise.all(
    [false, true].map(async (traced) => {
      const { workflowBundle: bundle } = await buildWorkflowBundle(traced);
      writeFileSync(bundlePath(traced), (bundle as { code: string }).code);
    }),
  ).catch((err: unknown) => {
    console.error(err);
    process.exit(1);
  });
}
