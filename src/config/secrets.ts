/** Secrets: those that may come from a file, those never echoed, and URLs' credentials blotted out. */

/**
 * Secrets that may also come from a file, `<NAME>_FILE` (as container platforms mount them): the file's content,
 * without its final newline, is the value. Setting both is refused.
 */
export const FILE_SECRETS = [
  'PGPASSWORD',
  'REDIS_PASSWORD',
  'KAFKA_SASL_PASSWORD',
  'TEMPORAL_API_KEY',
  'JWT_SECRET',
  'JWT_PUBLIC_KEY',
  'ADMIN_TOKEN',
  'PAYMENT_SERVICE_TOKEN',
  'PAYMENT_RECEIPT_SECRET',
  'SALE_GATE_SECRET',
] as const;

/** Values never echoed in an error line: a bad one is named, not shown. */
export const SECRET_NAMES = new Set<string>(FILE_SECRETS.filter((name) => name !== 'JWT_PUBLIC_KEY'));

/**
 * The credentials in a URL (`scheme://user:password@…`) blotted out, wherever it sits in a text: what a
 * configuration error or a log line may show of a DATABASE_URL or REDIS_URL.
 */
export function redactUrls(text: string): string {
  return text.replace(/([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*):[^\s@]*@/gi, '$1:***@');
}

/**
 * @param read reads a file's text (fs.readFileSync), throwing when it cannot
 * @returns the environment with each `<SECRET>_FILE` read into `<SECRET>`, and the clashes (both set)
 */
export function withFileSecrets(env: NodeJS.ProcessEnv, read: (path: string) => string): { values: NodeJS.ProcessEnv; issues: { path: string[]; message: string }[] } {
  const values = { ...env };
  const issues: { path: string[]; message: string }[] = [];
  for (const name of FILE_SECRETS) {
    const path = env[`${name}_FILE`];
    if (!path) continue;
    if (env[name] !== undefined) {
      issues.push({ path: [`${name}_FILE`], message: `set ${name} or ${name}_FILE, not both` });
      continue;
    }
    try {
      values[name] = read(path).replace(/\r?\n$/, '');
    } catch {
      // The schema's own check of the _FILE variable names the problem.
    }
  }
  return { values, issues };
}
