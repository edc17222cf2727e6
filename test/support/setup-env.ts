/**
 * Jest setupFiles: every suite uses the tests' own names (test/support/environment.ts), also when Jest runs a suite
 * without the global set-up (e.g. a watch re-run), and passes them on to the processes it starts.
 */
import { TEST_ENVIRONMENT } from './environment';

Object.assign(process.env, TEST_ENVIRONMENT);
