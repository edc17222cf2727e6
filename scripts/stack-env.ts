/**
 * Reader for scripts/stack.env, our own `NAME=${NAME:-default}` format, so TypeScript (stack scripts, tests)
 * sees the same settings as scripts/services.sh without a dotenv dependency or a second copy of the defaults.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

export const STACK_ENV_PATH = join(__dirname, 'stack.env');

// NAME=${NAME:-default} or NAME="${NAME:-default}"; the default runs to the last `}` on the line.
const LINE = /^([A-Z][A-Z0-9_]*)="?\$\{\1:-(.*)\}"?$/;

/** The defaults written in stack.env, ignoring the environment. Throws on a line it does not understand. */
export function readStackEnvDefaults(path = STACK_ENV_PATH): Record<string, string> {
  const defaults: Record<string, string> = {};
  readFileSync(path, 'utf8')
    .split('\n')
    .map((line) => line.trim())
    .filter((line) => line !== '' && !line.startsWith('#'))
    .forEach((line) => {
      const match = LINE.exec(line);
      if (!match) throw new Error(`${path}: unexpected line ${JSON.stringify(line)}`);
      defaults[match[1]] = match[2];
    });
  return defaults;
}

/** The effective settings, as services.sh sees them: a variable set in the environment wins over its default. */
export function stackEnv(env: NodeJS.ProcessEnv = process.env): Record<string, string> {
  const defaults = readStackEnvDefaults();
  return Object.fromEntries(Object.entries(defaults).map(([name, value]) => [name, env[name] || value]));
}
