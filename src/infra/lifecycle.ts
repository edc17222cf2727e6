/** A service process' start and end, the same for the API, the worker, the starter and the ledger. */
import type { Logger } from './logger';
import { causeOf } from './startup';

/** Runs a process' main; a failed start prints `<role> cannot start: <cause>` and exits 1. */
export function runMain(role: string, main: () => Promise<void>): void {
  main().catch((err) => {
    console.error(`${role} cannot start: ${causeOf(err)}`);
    process.exit(1);
  });
}

/**
 * On the first SIGINT or SIGTERM (Ctrl-C reaches every process of a group; a primary passes it on too): logs
 * `saying`, runs `drain`, ends the tracer (flushing its spans), then exits 0.
 * @param drain stops taking work, lets the work in flight finish and closes the process' clients
 */
export function onShutdown(log: Logger, saying: string, drain: () => Promise<unknown>, tracing?: { shutdown(): Promise<void> }): void {
  let stopping = false;
  const stop = () => {
    if (stopping) return;
    stopping = true;
    log.info(saying);
    void drain()
      .then(() => tracing?.shutdown())
      .then(() => process.exit(0));
  };
  process.once('SIGINT', stop);
  process.once('SIGTERM', stop);
}
