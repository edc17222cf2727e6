/**
 * The Temporal runtime of a suite that runs workers or native connections in its own process: the SDK's logs and
 * Core's (from WARN, such as TMPRL1104 on a slow workflow task) go to the console, which Jest captures unless
 * TEST_VERBOSE=1. Without it, the SDK and Core print their lines straight to stderr, around Jest's output.
 */
import { DefaultLogger, Runtime, type LogLevel } from '@temporalio/worker';

let installed = false;

/** Installs the runtime once per suite (Jest gives each suite its own modules); call before any worker or connection. */
export function installTestRuntime(level: LogLevel = 'WARN'): void {
  if (installed) return;
  // Through console, not DefaultLogger's own process.stderr.write, which Jest cannot capture.
  const logger = new DefaultLogger(level, ({ level: entryLevel, message, meta }) => console.error(`[${entryLevel}] ${message}`, meta ?? ''));
  Runtime.install({ logger, telemetryOptions: { logging: { filter: { core: 'WARN', other: 'ERROR' }, forward: {} } } });
  installed = true;
}
