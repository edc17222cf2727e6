/**
 * Jest globalSetup, once per run before any suite, in Jest's own process: prepares the tests' own database,
 * topic and namespace (test/support/environment.ts) on the stack that scripts/services.sh started, and puts their names
 * in that process's environment, which the suites (run in band) copy and every process they start inherits.
 */
import { prepareEnvironment, TEST_ENVIRONMENT } from './environment';

export default async function globalSetup(): Promise<void> {
  Object.assign(process.env, TEST_ENVIRONMENT);
  await prepareEnvironment(process.env);
}
