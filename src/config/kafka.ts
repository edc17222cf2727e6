/** Kafka's settings: brokers, TLS, SASL, the orders' topic. */
import { z } from 'zod';
import { checkTls, given, hostPorts, port, readableFile, tlsSwitch, type Issue, type TlsSetting } from './kinds';

export const kafkaFields = {
  KAFKA_HOST: z.string().min(1).default('127.0.0.1'),
  KAFKA_PORT: port(9092),
  /** Comma-separated host:port seed brokers; wins over KAFKA_HOST and KAFKA_PORT. */
  KAFKA_BROKERS: hostPorts('expected host:port[,host:port…]').optional(),
  KAFKA_TLS: tlsSwitch,
  KAFKA_TLS_CA_FILE: readableFile.optional(),
  KAFKA_TLS_CERT_FILE: readableFile.optional(),
  KAFKA_TLS_KEY_FILE: readableFile.optional(),
  KAFKA_SASL_MECHANISM: z.enum(['none', 'plain', 'scram-sha-256', 'scram-sha-512', 'oauthbearer']).default('none'),
  KAFKA_SASL_USERNAME: z.string().min(1).optional(),
  KAFKA_SASL_PASSWORD: z.string().min(1).optional(),
  /**
   * OAUTHBEARER: a CommonJS module whose export `oauthBearerProvider` returns `{ value: token }` (kafkajs'
   * contract), e.g. a wrapper around AWS's MSK IAM signer; resolved from the working directory.
   */
  KAFKA_OAUTHBEARER_MODULE: z.string().min(1).optional(),
  KAFKA_TOPIC: z
    .string()
    .regex(/^[A-Za-z0-9._-]{1,249}$/)
    .default('flash-sale-orders'),
};

type Env = z.infer<z.ZodObject<typeof kafkaFields>>;

export function kafkaTls(env: Env): TlsSetting {
  const hosts = env.KAFKA_BROKERS ? env.KAFKA_BROKERS.split(',').map((broker) => broker.replace(/:\d+$/, '')) : [env.KAFKA_HOST];
  const settings = given([
    ['KAFKA_TLS_CA_FILE', env.KAFKA_TLS_CA_FILE],
    ['KAFKA_TLS_CERT_FILE', env.KAFKA_TLS_CERT_FILE],
    ['KAFKA_TLS_KEY_FILE', env.KAFKA_TLS_KEY_FILE],
  ]);
  return { name: 'KAFKA_TLS', on: env.KAFKA_TLS, settings, hosts };
}

export function checkKafka(env: Env, issue: Issue): void {
  checkTls(kafkaTls(env), ['KAFKA_TLS_CERT_FILE', env.KAFKA_TLS_CERT_FILE, env.KAFKA_TLS_KEY_FILE], issue);
  const mechanism = env.KAFKA_SASL_MECHANISM;
  if (['plain', 'scram-sha-256', 'scram-sha-512'].includes(mechanism) && (!env.KAFKA_SASL_USERNAME || !env.KAFKA_SASL_PASSWORD)) {
    issue('KAFKA_SASL_MECHANISM', `${mechanism} needs KAFKA_SASL_USERNAME and KAFKA_SASL_PASSWORD`);
  }
  if (mechanism === 'oauthbearer' && !env.KAFKA_OAUTHBEARER_MODULE) issue('KAFKA_SASL_MECHANISM', 'oauthbearer needs KAFKA_OAUTHBEARER_MODULE');
}
