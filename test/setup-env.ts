/** Jest setupFiles: every suite (and every process it starts) uses the tests' own names (test/environment.ts). */
import { TEST_ENVIRONMENT } from './environment';

Object.assign(process.env, TEST_ENVIRONMENT);
