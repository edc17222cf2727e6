/**
 * In-memory sold-out flags, so that after an item sells out each API process answers SOLD_OUT without a
 * Redis round trip. A flag is cleared as soon as a unit comes back, whichever process or worker gave it back:
 * release.lua and repair.lua tell the item's id on the shard's restocked channel (SPUBLISH) when a unit fills an
 * empty free list, and this process listens (SSUBSCRIBE) on the channels of every sale it has flagged an item of.
 * A timer re-reads the stock of flagged items every recheckMs, one MGET per sale per tick whatever the request
 * rate: the fallback for a message lost (a subscriber reconnecting, a unit given back before the subscription
 * took, a rebuild, which publishes nothing).
 */
import type { Cluster, Redis } from 'ioredis';
import { shardKeys } from '../reservation/layout';
import type { ReservationStore } from '../reservation/store';

/** A connection in subscriber mode (src/reservation/client.ts, createSubscriber). */
export type RestockSubscriber = Pick<Redis | Cluster, 'ssubscribe' | 'sunsubscribe' | 'on' | 'off'>;

export class SoldOutFlags {
  /** itemId → saleId of items believed sold out. */
  private readonly flagged = new Map<number, number>();
  /** saleId → its shards' restocked channels, subscribed to (or being). */
  private readonly listening = new Map<number, string[]>();
  private timer: NodeJS.Timeout | undefined;
  private readonly onMessage = (_channel: string, itemId: string) => this.unflag(Number(itemId));

  /**
   * @param recheckMs period of the stock recheck (ms, SOLD_OUT_RECHECK_MS)
   * @param subscriber where restocked messages arrive (createSubscriber: channels named whole); without one, only
   *   the recheck clears flags
   * @param keyPrefix REDIS_KEY_PREFIX, which the scripts' channel names carry
   */
  constructor(
    private readonly store: ReservationStore,
    private readonly recheckMs: number,
    private readonly onError: (err: unknown) => void,
    private readonly subscriber?: RestockSubscriber,
    private readonly keyPrefix = '',
  ) {}

  has(itemId: number): boolean {
    return this.flagged.has(itemId);
  }

  /** Flags an item sold out, and listens on its sale's restocked channels if it does not yet. */
  flag(saleId: number, itemId: number): void {
    this.flagged.set(itemId, saleId);
    if (!this.subscriber || this.listening.has(saleId)) return;
    this.listening.set(saleId, []);
    void this.listen(saleId).catch((err: unknown) => {
      this.listening.delete(saleId);
      this.onError(err);
    });
  }

  /** Clears an item's flag at once: a unit came back (a cancel here, or a restocked message). */
  unflag(itemId: number): void {
    this.flagged.delete(itemId);
  }

  get size(): number {
    return this.flagged.size;
  }

  /** Starts the periodic recheck and the restocked messages; the timer does not keep the process alive. */
  start(): void {
    this.subscriber?.on('smessage', this.onMessage);
    this.timer ??= setInterval(() => void this.recheck().catch(this.onError), this.recheckMs);
    this.timer.unref();
  }

  stop(): void {
    this.subscriber?.off('smessage', this.onMessage);
    clearInterval(this.timer);
    this.timer = undefined;
  }

  /** Clears the flag of every item whose Redis stock is above zero (or no longer loaded); stops listening to sales with none flagged. */
  async recheck(): Promise<void> {
    const bySale = new Map<number, number[]>();
    for (const [itemId, saleId] of this.flagged) bySale.set(saleId, [...(bySale.get(saleId) ?? []), itemId]);
    for (const [saleId, itemIds] of bySale) {
      const stock = await this.store.view.stock(saleId, itemIds);
      for (const [itemId, left] of stock) if (left === undefined || left > 0) this.flagged.delete(itemId);
    }
    for (const saleId of this.listening.keys()) if (!this.flaggedInSale(saleId)) await this.unlisten(saleId);
  }

  /** Read now, not before the recheck's awaits: a sale flagged meanwhile keeps its channels. */
  private flaggedInSale(saleId: number): boolean {
    for (const flaggedSale of this.flagged.values()) if (flaggedSale === saleId) return true;
    return false;
  }

  private async listen(saleId: number): Promise<void> {
    const channels = (await this.store.layouts.get(saleId)).tags.map((tag) => `${this.keyPrefix}${shardKeys(tag).restocked}`);
    this.listening.set(saleId, channels);
    // One channel per call: a cluster takes several in one SSUBSCRIBE only when they share a slot.
    await Promise.all(channels.map((channel) => this.subscriber?.ssubscribe(channel)));
  }

  private async unlisten(saleId: number): Promise<void> {
    const channels = this.listening.get(saleId) ?? [];
    this.listening.delete(saleId);
    await Promise.all(channels.map((channel) => this.subscriber?.sunsubscribe(channel)));
  }
}
