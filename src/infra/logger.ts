/**
 * Structured JSON logs (pino) on stdout; fields such as orderId, itemId and userId go in the object argument.
 * Every line's fields go through scrub (errors under `err` and `error` through safeError first), so no
 * credential reaches a log line wherever an error sits in them.
 */
import pino from 'pino';
import { redactUrls } from '../config';

export type Logger = pino.Logger;

/** How deep safeError looks into an error's properties (causes, aggregated errors, the failed command). */
const MAX_DEPTH = 6;

/**
 * pino's error serializer, less what can hold a credential: ioredis hangs the failed command on its errors
 * (`command: { name: 'auth', args: [user, password] }`, and rejects every command queued behind a failed
 * AUTH with that error), so a command's arguments are dropped wherever they sit; and a URL's password in any
 * text (a driver echoing its connection string) is blotted out.
 * @returns a plain object for the log line
 */
export function safeError(err: unknown): unknown {
  return scrub(err instanceof Error ? pino.stdSerializers.err(err) : err, 0);
}

function scrub(value: unknown, depth: number): unknown {
  if (typeof value === 'string') return redactUrls(value);
  if (typeof value !== 'object' || value === null || depth > MAX_DEPTH) return value;
  if (Array.isArray(value)) return value.map((v) => scrub(v, depth + 1));
  const out: Record<string, unknown> = {};
  for (const [key, v] of Object.entries(value)) {
    if (key === 'command' && typeof v === 'object' && v !== null) out.command = { name: (v as { name?: unknown }).name };
    else out[key] = scrub(v instanceof Error ? pino.stdSerializers.err(v) : v, depth + 1);
  }
  return out;
}

/**
 * @param level a pino level name from the configuration (LOG_LEVEL)
 * @param destination where the lines go; stdout when omitted
 */
export function createLogger(level: string, name: string, destination?: pino.DestinationStream): Logger {
  return pino(
    {
      level,
      name,
      base: { service: 'flash-sale', role: name },
      serializers: { err: safeError, error: safeError },
      formatters: { log: (fields) => scrub(fields, 0) as Record<string, unknown> },
    },
    destination,
  );
}
