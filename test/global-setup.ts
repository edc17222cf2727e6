/**
 * Jest globalSetup, once per run before any suite: prepares the tests' own database, topic and namespace
 * (test/environment.ts) on the stack that scripts/services.sh started.
 */
import { loadConfig } from '../src/config';
import { prepareEnvironment, TEST_ENVIRONMENT } from './environment';

export default async function globalSetup(): Promise<void> {
  await prepareEnvironment(loadConfig({ ...process.env, ...TEST_ENVIRONMENT }));
}
