/**
 * The campaign's source of randomness: every choice of a run is drawn from one seeded generator (pure-rand's
 * xoroshiro128+), so a seed replays the same plan — crowd, payments, faults and their moments. (The services'
 * own timing still varies: a replay is the same history of inputs and faults, not the same interleaving.)
 */
import { unsafeUniformIntDistribution, xoroshiro128plus, type RandomGenerator } from 'pure-rand';

/** One seeded generator; every draw advances it, so the same calls in the same order give the same values. */
export class Random {
  private readonly rng: RandomGenerator;

  constructor(seed: number) {
    this.rng = xoroshiro128plus(seed);
  }

  /** @returns an integer in [min, max] */
  int(min: number, max: number): number {
    return unsafeUniformIntDistribution(min, max, this.rng);
  }

  /** @returns true with probability p (0..1) */
  chance(p: number): boolean {
    return this.int(0, 999_999) < p * 1_000_000;
  }

  /** @returns one of items (non-empty), uniformly */
  pick<T>(items: readonly T[]): T {
    return items[this.int(0, items.length - 1)];
  }

  /** @returns the items in a random order (a new array) */
  shuffle<T>(items: readonly T[]): T[] {
    const out = [...items];
    for (let i = out.length - 1; i > 0; i--) {
      const j = this.int(0, i);
      [out[i], out[j]] = [out[j], out[i]];
    }
    return out;
  }
}
