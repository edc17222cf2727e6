/**
 * What a process says when a store is out of reach: the store's name and the driver's own cause (a refused
 * connection, a certificate its CA did not sign, a wrong password), so that a failed start and /readyz say
 * which service failed and why. A URL's password is blotted out of these messages (redactUrls); we add no secret.
 */
import { connect as tlsConnect } from 'node:tls';
import { redactUrls, type Config } from '../config';
import { temporalConnection } from './connections';

/** A store the process could not reach; its message is `<service>: <cause>`. */
export class DependencyError extends Error {
  constructor(
    readonly service: 'postgres' | 'redis' | 'kafka' | 'temporal',
    cause: unknown,
  ) {
    super(`${service}: ${causeOf(cause)}`, { cause });
  }
}

/** @returns attempt's value; @throws DependencyError naming the service when it fails */
export function reach<T>(service: DependencyError['service'], attempt: Promise<T>): Promise<T> {
  return attempt.catch((err: unknown) => Promise.reject(new DependencyError(service, err)));
}

/**
 * A store a process can start without (its clients reconnect, its work waits meanwhile): a misconfiguration
 * (isMisconfiguration) fails the start, naming the store; an outage is only reported through `warn`.
 * @throws DependencyError for a misconfiguration
 */
export async function checkAtStart(service: DependencyError['service'], attempt: Promise<unknown>, warn: (line: string) => void): Promise<void> {
  try {
    await attempt;
  } catch (err) {
    if (isMisconfiguration(err)) throw new DependencyError(service, err);
    warn(`${service} not reachable at start, starting anyway: ${causeOf(err)}`);
  }
}

const MISCONFIGURED_CODE = /^28|^3D000$|CERT|SSL|TLS|SELF_SIGNED|UNABLE_TO_|HOSTNAME|ALTNAME|ERR_OSSL/;
const MISCONFIGURED_TEXT = /WRONGPASS|NOAUTH|NOPERM|certificate|authentication failed|pg_hba\.conf|does not support SSL|SSL routines/i;

/**
 * Whether an error is one no retry will mend: credentials refused (PostgreSQL's class 28, Redis' WRONGPASS,
 * Kafka's SASL failure), a certificate or TLS mismatch, a database that does not exist. Looks through causes.
 */
export function isMisconfiguration(err: unknown): boolean {
  for (let e: unknown = err, depth = 0; isErrorLike(e) && depth < 5; depth++) {
    const code = (e as { code?: unknown }).code;
    if (typeof code === 'string' && MISCONFIGURED_CODE.test(code)) return true;
    if (e.name === 'KafkaJSSASLAuthenticationError' || MISCONFIGURED_TEXT.test(e.message)) return true;
    if (e instanceof AggregateError && e.errors.some(isMisconfiguration)) return true;
    e = (e as { cause?: unknown; originalError?: unknown }).cause ?? (e as { originalError?: unknown }).originalError;
  }
  return false;
}

/** Error-shaped, whatever realm made it (a test runner's sandbox has its own Error). */
function isErrorLike(value: unknown): value is Error {
  return typeof value === 'object' && value !== null && typeof (value as { message?: unknown }).message === 'string';
}

/**
 * reach('temporal', …) with the TLS cause spelled out: Temporal's clients report a failed handshake (a CA that
 * did not sign the server's certificate, a client certificate the server refused) only as "Failed to connect
 * before the deadline", so a handshake of our own with the same settings names it.
 */
export function reachTemporal<T>(config: Config, attempt: Promise<T>): Promise<T> {
  return attempt.catch(async (err: unknown) => {
    const cause = await temporalTlsCause(config);
    return Promise.reject(new DependencyError('temporal', cause ? new Error(`${causeOf(err)} (TLS: ${cause})`) : err));
  });
}

/** @returns why a TLS handshake with the frontend fails (or is refused right after it), or undefined when TLS is off or it succeeds */
async function temporalTlsCause(config: Config, settleMs = 500): Promise<string | undefined> {
  const { tls } = temporalConnection(config);
  if (!tls) return undefined;
  return new Promise((resolve) => {
    const socket = tlsConnect({
      host: config.TEMPORAL_HOST,
      port: config.TEMPORAL_PORT,
      ca: tls.serverRootCACertificate,
      cert: tls.clientCertPair?.crt,
      key: tls.clientCertPair?.key,
      servername: tls.serverNameOverride,
      ALPNProtocols: ['h2'],
    });
    const done = (cause?: string) => {
      socket.destroy();
      resolve(cause);
    };
    // OpenSSL's own message is a long code line; its reason is the readable part ("sslv3 alert certificate expired").
    socket.once('error', (err: Error & { reason?: string }) => done(err.reason ?? err.message));
    // In TLS 1.3 the server judges the client's certificate after the handshake: its alert comes as an error.
    socket.once('secureConnect', () => setTimeout(() => done(undefined), settleMs));
    socket.resume();
    socket.setTimeout(5000, () => done('no TLS handshake within 5 s'));
  });
}

/**
 * The readable cause of a driver's error: its message, or its inner errors' (AggregateError, as node-pg and
 * undici raise for several addresses) and its code when the message is empty; a URL's password blotted out.
 */
export function causeOf(err: unknown): string {
  return redactUrls(causeText(err));
}

function causeText(err: unknown): string {
  if (err instanceof AggregateError && err.errors.length) return [...new Set(err.errors.map(causeText))].join('; ');
  if (isErrorLike(err)) {
    const code = (err as NodeJS.ErrnoException).code;
    const message = err.message || String(code ?? err.name);
    const inner = isErrorLike(err.cause) && !message.includes(err.cause.message) ? ` (${causeText(err.cause)})` : '';
    return `${message}${inner}`;
  }
  return String(err);
}
