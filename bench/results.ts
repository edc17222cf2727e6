/** Appends one benchmark's figures, with the machine they were measured on, to reports/bench.jsonl. */
import { appendFileSync, mkdirSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';

export function appendResult(bench: string, figures: object): void {
  const dir = join(__dirname, '..', 'reports');
  mkdirSync(dir, { recursive: true });
  const line = { bench, date: new Date().toISOString(), node: process.version, cpus: cpus().length, cpuModel: cpus()[0]?.model, loadavg1m: loadavg()[0], ...figures };
  appendFileSync(join(dir, 'bench.jsonl'), `${JSON.stringify(line)}\n`);
}
