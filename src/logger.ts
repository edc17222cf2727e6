/** Structured JSON logs (pino) on stdout; fields such as orderId, itemId and userId go in the object argument. */
import pino from 'pino';

export type Logger = pino.Logger;

/** @param level a pino level name from the configuration (LOG_LEVEL) */
export function createLogger(level: string, name: string): Logger {
  return pino({ level, name, base: { service: 'flash-sale', role: name } });
}
