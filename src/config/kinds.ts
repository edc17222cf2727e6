/** The kinds of value a setting holds (zod), and the checks the stores' modules share. */
import { accessSync, constants } from 'node:fs';
import { isIP } from 'node:net';
import { z } from 'zod';

export const port = (fallback: number) => z.coerce.number().int().min(1).max(65535).default(fallback);
/** A listening port: 0 asks the OS for a free one (tests, benchmarks). */
export const listenPort = (fallback: number) => z.coerce.number().int().min(0).max(65535).default(fallback);
export const positiveMs = (fallback: number) => z.coerce.number().int().positive().default(fallback);
export const count = (min: number, max: number, fallback: number) => z.coerce.number().int().min(min).max(max).default(fallback);
export const flag = (fallback: boolean) => z.stringbool().default(fallback);
/** A store's TLS switch: unset, it is on when any of the store's TLS settings is given (TlsSetting). */
export const tlsSwitch = z.stringbool().optional();
/** `host:port,host:port,…` */
export const hostPorts = (message: string) => z.string().regex(/^[^\s,:]+:\d{1,5}(,[^\s,:]+:\d{1,5})*$/, message);

export function isReadable(path: string): boolean {
  try {
    accessSync(path, constants.R_OK);
    return true;
  } catch {
    return false;
  }
}
/** A file the process must be able to read at start (a CA, a certificate, a key): its path. */
export const readableFile = z.string().min(1).refine(isReadable, { message: 'no readable file at this path' });

export function isLoopback(host: string): boolean {
  const bare = host.replace(/^\[(.*)\]$/, '$1');
  return bare === 'localhost' || bare === '::1' || (isIP(bare) === 4 && bare.startsWith('127.'));
}

/** Adds an issue to a setting: its name and what is wrong. */
export type Issue = (setting: string, message: string) => void;

/**
 * A store with a TLS switch: the switch as set (undefined when unset), the TLS settings given, and the hosts it
 * reaches. A CA, a client certificate or key, a server name only make sense over TLS, so they turn it on; with
 * the switch set to false they are a contradiction that loadConfig refuses, rather than a password sent in clear.
 */
export interface TlsSetting {
  name: string;
  on: boolean | undefined;
  settings: string[];
  hosts: string[];
}

/** @returns the names of the entries whose value is given */
export function given(entries: [string, unknown][]): string[] {
  return entries.filter(([, value]) => Boolean(value)).map(([name]) => name);
}

/** @returns whether TLS is on: as set, else when any TLS setting is given */
export const tlsOn = (tls: TlsSetting) => tls.on ?? tls.settings.length > 0;

/** The checks every store's TLS shares: no TLS setting with the switch off, a client certificate with its key. */
export function checkTls(tls: TlsSetting, cert: [name: string, cert: unknown, key: unknown], issue: Issue): void {
  if (tls.on === false && tls.settings.length) {
    issue(tls.name, `false contradicts ${tls.settings.join(', ')}: TLS settings without TLS (set ${tls.name}=true, or drop them)`);
  }
  checkPair(cert, issue);
}

/** A client certificate and its key go together. */
export function checkPair([name, cert, key]: [string, unknown, unknown], issue: Issue): void {
  if (Boolean(cert) !== Boolean(key)) issue(name, 'a client certificate and its key go together (set both or neither)');
}
