/** Small statistics for the demo report: percentiles (nearest rank) over latencies in ms. */

/** @returns the p-th percentile (0 < p <= 100) of values by nearest rank, or NaN for none */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1];
}

/** p50/p95/p99 and count of a list of latencies (ms), rounded to 0.1 ms. */
export function latencySummary(values: readonly number[]) {
  const sorted = [...values].sort((a, b) => a - b);
  const round = (v: number) => Math.round(v * 10) / 10;
  return { count: sorted.length, p50: round(percentile(sorted, 50)), p95: round(percentile(sorted, 95)), p99: round(percentile(sorted, 99)) };
}
