/**
 * Benchmark results in reports/bench.jsonl, one JSON line per run with the machine it was measured on: the
 * benches append them, and the demo report reads the drain bench's latest baseline (the minimal workflow).
 */
import { appendFileSync, existsSync, mkdirSync, readFileSync } from 'node:fs';
import { cpus, loadavg } from 'node:os';
import { join } from 'node:path';

const FILE = join(__dirname, '..', '..', 'reports', 'bench.jsonl');

/** @returns the median of the values (the mean of the middle two for an even count; NaN for none) */
export function median(values: readonly number[]): number {
  const sorted = [...values].sort((a, b) => a - b);
  const mid = Math.floor(sorted.length / 2);
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}

/** Appends one benchmark's figures, with the date, Node version, CPU count and model, and load average. */
export function appendResult(bench: string, figures: object): void {
  mkdirSync(join(FILE, '..'), { recursive: true });
  const line = { bench, date: new Date().toISOString(), node: process.version, cpus: cpus().length, cpuModel: cpus()[0]?.model, loadavg1m: loadavg()[0], ...figures };
  appendFileSync(FILE, `${JSON.stringify(line)}\n`);
}

/** @returns the last line recorded for `bench`, or undefined when it never ran here (lines that do not parse are skipped) */
export function latestResult(bench: string): ({ bench: string; date: string } & Record<string, unknown>) | undefined {
  if (!existsSync(FILE)) return undefined;
  const lines = readFileSync(FILE, 'utf8').trim().split('\n').reverse();
  for (const line of lines) {
    try {
      const parsed = JSON.parse(line) as { bench?: unknown; date?: unknown };
      if (parsed.bench === bench && typeof parsed.date === 'string') return parsed as { bench: string; date: string } & Record<string, unknown>;
    } catch {
      continue;
    }
  }
  return undefined;
}
