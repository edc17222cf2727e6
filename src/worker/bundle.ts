/**
 * The workflow bundle (webpack output of src/workflows) the worker runs. `npm run build` writes it once ahead of
 * time beside the compiled worker (dist/workflow-bundle.js), as Temporal recommends for production: a worker
 * then starts without webpack. Run from the TypeScript sources (tests, tsx), it is built in memory instead.
 */
import { existsSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { bundleWorkflowCode, DefaultLogger, type WorkerOptions } from '@temporalio/worker';

export type BundleOption = Pick<WorkerOptions, 'workflowBundle'>;

/** Where `npm run build` writes the bundle: dist/workflow-bundle.js beside dist/worker/. */
export const BUNDLE_PATH = join(__dirname, '..', 'workflow-bundle.js');

/** Bundles src/workflows in memory; the result can be handed to several workers. */
export async function buildWorkflowBundle(): Promise<BundleOption> {
  // Webpack's report of every module only at DEBUG: a build, or a test suite, prints its warnings and errors.
  const code = await bundleWorkflowCode({ workflowsPath: require.resolve('../workflows'), logger: new DefaultLogger('WARN') });
  return { workflowBundle: code };
}

/** @returns the prebuilt bundle when `npm run build` wrote one, else one built now */
export async function workflowBundle(): Promise<BundleOption> {
  return existsSync(BUNDLE_PATH) ? { workflowBundle: { codePath: BUNDLE_PATH } } : buildWorkflowBundle();
}

if (require.main === module) {
  buildWorkflowBundle().then(
    ({ workflowBundle: bundle }) => writeFileSync(BUNDLE_PATH, (bundle as { code: string }).code),
    (err: unknown) => {
      console.error(err);
      process.exit(1);
    },
  );
}
