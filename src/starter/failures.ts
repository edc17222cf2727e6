/** Why a workflow start failed, as the starter backs off and its metrics label it. */
import { InvalidEntry } from '../reservation/formats';

export type StartFailure = 'resource_exhausted' | 'unavailable' | 'deadline_exceeded' | 'invalid_entry' | 'other';

/**
 * @returns the back-off class of a start's error: Temporal's gRPC status, as the client reports it, or
 *   PostgreSQL unreachable (its store comes first) as UNAVAILABLE
 */
export function classify(err: unknown): StartFailure {
  if (err instanceof InvalidEntry) return 'invalid_entry';
  const text = `${(err as Error)?.name} ${(err as Error)?.message} ${String((err as { code?: unknown })?.code ?? '')}`;
  if (/RESOURCE_EXHAUSTED/.test(text)) return 'resource_exhausted';
  if (/DEADLINE_EXCEEDED/.test(text)) return 'deadline_exceeded';
  // PostgreSQL away (the order is stored before its start): a pause and a retry, as for Temporal away.
  if (/UNAVAILABLE|ECONNREFUSED|ECONNRESET|57P01|57P03|Connection terminated|timeout exceeded when trying to connect/.test(text)) return 'unavailable';
  return 'other';
}
