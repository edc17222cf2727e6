/**
 * Reading a Prometheus text exposition (Temporal Core's worker metrics, as the benches and the demo scrape
 * them): counters summed over their label sets, histograms merged over theirs.
 */

const NUMBER = '([0-9.e+-]+|\\+Inf)';

/** @returns the sum of counter `name` over all of its label sets (0 when absent) */
export function counter(text: string, name: string): number {
  let sum = 0;
  for (const m of text.matchAll(new RegExp(`^${name}(?:\\{[^}]*\\})? ${NUMBER}$`, 'gm'))) sum += Number(m[1]);
  return sum;
}

/**
 * @param where label values a series must have to count, e.g. { namespace: 'flash_sale' }
 * @returns counter `name` summed per value of its label `label` (series without that label are left out)
 */
export function counterBy(text: string, name: string, label: string, where: Record<string, string> = {}): Record<string, number> {
  const sums: Record<string, number> = {};
  const labelValue = (labels: string, key: string) => new RegExp(`(?:^|,)${key}="([^"]*)"`).exec(labels)?.[1];
  for (const m of text.matchAll(new RegExp(`^${name}\\{([^}]*)\\} ${NUMBER}$`, 'gm'))) {
    if (Object.entries(where).some(([key, wanted]) => labelValue(m[1], key) !== wanted)) continue;
    const value = labelValue(m[1], label);
    if (value !== undefined) sums[value] = (sums[value] ?? 0) + Number(m[2]);
  }
  return sums;
}

/** A histogram merged over its label sets: cumulative counts per upper bound (`le`, in the metric's unit). */
export interface Histogram {
  count: number;
  sum: number;
  /** [upper bound, observations at or below it], ascending; the last bound is Infinity. */
  buckets: [number, number][];
}

/** @returns histogram `name` (its _bucket, _sum and _count series) merged over all label sets */
export function histogram(text: string, name: string): Histogram {
  const byBound = new Map<number, number>();
  for (const m of text.matchAll(new RegExp(`^${name}_bucket\\{([^}]*)\\} ${NUMBER}$`, 'gm'))) {
    const le = /(?:^|,)le="([^"]+)"/.exec(m[1])?.[1];
    if (le === undefined) continue;
    const bound = le === '+Inf' ? Infinity : Number(le);
    byBound.set(bound, (byBound.get(bound) ?? 0) + Number(m[2]));
  }
  return { count: counter(text, `${name}_count`), sum: counter(text, `${name}_sum`), buckets: [...byBound].sort((a, b) => a[0] - b[0]) };
}

/** @returns the upper bound of the bucket that holds quantile q (0 < q <= 1), or NaN for an empty histogram */
export function bucketQuantile(h: Histogram, q: number): number {
  const total = h.buckets.at(-1)?.[1] ?? 0;
  if (total === 0) return Number.NaN;
  return h.buckets.find(([, n]) => n >= q * total)?.[0] ?? Infinity;
}

/**
 * @returns observations above the largest bucket bound at or below `atMost` (the finest cut the buckets allow),
 *   with that bound; { bound: 0, count: all } when no bucket is that small
 */
export function countAbove(h: Histogram, atMost: number): { bound: number; count: number } {
  const total = h.buckets.at(-1)?.[1] ?? 0;
  const [bound, atOrBelow] = [...h.buckets].reverse().find(([le]) => le <= atMost) ?? [0, 0];
  return { bound, count: total - atOrBelow };
}
