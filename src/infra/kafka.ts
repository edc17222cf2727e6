/** The Kafka client (kafkajs) for the configured brokers, logging through our structured logger. */
import { Kafka, logLevel } from 'kafkajs';
import type { Config } from '../config';
import { kafkaConnection } from './connections';
import { createLogger } from './logger';

/** Retries of a client whose every request must get through in the end (the publisher's, see EventPublisher). */
export const UNTIL_ANSWERED = { retries: Number.MAX_SAFE_INTEGER, initialRetryTime: 300, maxRetryTime: 2000 };

/**
 * Connects to the brokers and leaves, with few retries: whether Kafka is reachable with this configuration
 * (address, TLS, SASL) at a process's start. @throws kafkajs' error (e.g. KafkaJSSASLAuthenticationError)
 */
export async function checkKafka(config: Config): Promise<void> {
  const admin = createKafka(config, 'flash-sale-start-check', { retries: 2, initialRetryTime: 200 }).admin();
  await admin.connect();
  await admin.disconnect();
}

/**
 * Kafka client for the configured broker(s).
 * @param retry kafkajs' retries of the client's requests (connecting, metadata): 8 by default
 */
export function createKafka(config: Config, clientId: string, retry: { retries: number; initialRetryTime: number; maxRetryTime?: number } = { initialRetryTime: 100, retries: 8 }): Kafka {
  const log = createLogger(config.LOG_LEVEL, clientId);
  return new Kafka({
    clientId,
    ...kafkaConnection(config),
    logLevel: logLevel.WARN,
    // kafkajs' warnings and errors as our structured logs (LOG_LEVEL), not on the console.
    logCreator:
      () =>
      ({ namespace, level, log: { message, ...fields } }) => {
        const entry = { kafkajs: namespace, ...fields };
        if (level === logLevel.ERROR) log.error(entry, message);
        else log.warn(entry, message);
      },
    retry,
  });
}
