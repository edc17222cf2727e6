/** The secured local stack's client settings (`scripts/services.sh up --secure`, which npm test runs). */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

const SECURE = join(__dirname, '..', '..', '.local', 'secure');

/** @returns .local/secure/secure.env as variables: TLS and credentials for each store of the secured stack */
export function secureEnv(): Record<string, string> {
  let text: string;
  try {
    text = readFileSync(join(SECURE, 'secure.env'), 'utf8');
  } catch {
    throw new Error('no .local/secure/secure.env: run `bash scripts/services.sh up --secure` first (npm test does)');
  }
  return Object.fromEntries(
    text
      .split('\n')
      .filter((line) => /^[A-Z_]+=/.test(line))
      .map((line) => [line.slice(0, line.indexOf('=')), line.slice(line.indexOf('=') + 1)]),
  );
}
