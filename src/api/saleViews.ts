/**
 * The public sale view's per-process cache, keyed by the sale id alone, so that a crowd reloading the page (or
 * busting a CDN with `?cb=…`) costs the stores a read per sale per MAX_AGE_MS: the sale's terms are read once, its
 * units left every MAX_AGE_MS; an id above the highest made, or one known unknown, drives no query of its own;
 * concurrent misses share one read. Each sale is kept rendered before and after its gate (saleGate.ts).
 */
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { LRUCache } from 'lru-cache';
import type { Pool } from 'pg';
import type { SaleClosed } from '../reservation/client';
import type { ReservationView } from '../reservation/views';
import { findSaleListing, highestSaleId, type SaleListing } from '../sale/sales';
import type { SaleGates } from './saleGate';

/** How old a cached view may be, ms. */
export const MAX_AGE_MS = 1000;
/** Least time between two reads of the highest sale id, ms: what ids above it can cost PostgreSQL. */
const ID_READ_MS = 100;
/** Items kept over all cached sales (a sale counts its items, plus one): about 0.5 KB each. */
const MAX_CACHED_ITEMS = 20_000;

/** The view as sent: its JSON without serverTime, and the weak ETag over that JSON. */
export interface Rendition {
  etag: string;
  json: string;
}

/** A sale's view as read at one moment; times in ms since the epoch. */
export interface CachedView {
  startsAtMs: number;
  endsAtMs: number;
  /** Before the start and after the end: without the gate. */
  closed: Rendition;
  /** From the start to the end: with the gate. */
  open: Rendition;
}

interface Entry {
  /** undefined: no such sale when read. */
  listing: SaleListing | undefined;
  view: CachedView | undefined;
  readAtMs: number;
}

function rendition(content: object): Rendition {
  const json = JSON.stringify(content);
  // Weak: two answers with the same content differ in serverTime only (RFC 9110 §8.8.1).
  return { etag: `W/"${createHash('sha256').update(json).digest('base64url').slice(0, 22)}"`, json };
}

export class SaleViews {
  private readonly entries = new LRUCache<number, Entry>({
    maxSize: MAX_CACHED_ITEMS,
    sizeCalculation: (entry) => 1 + (entry.listing?.items.length ?? 0),
  });
  private readonly inflight = new Map<number, Promise<CachedView | undefined>>();
  private highestId = 0;
  private idReadAtMs = -Infinity;
  private idRead: Promise<void> | undefined;

  /**
   * @param closed reads the sale's closed marks per shard (src/reservation/closing.ts), with the units left
   */
  constructor(
    private readonly pool: Pool,
    private readonly stock: Pick<ReservationView, 'stock'>,
    private readonly closed: (saleId: number) => Promise<(SaleClosed | undefined)[]>,
    private readonly gates: SaleGates,
  ) {}

  /**
   * @returns the sale's view at most MAX_AGE_MS old (plus the read it waited for), or undefined when there is no
   *   such sale. @throws pg or ioredis errors when a read was due and a store is unreachable
   */
  get(saleId: number): Promise<CachedView | undefined> {
    const entry = this.entries.get(saleId);
    if (entry && Date.now() - entry.readAtMs < MAX_AGE_MS) return Promise.resolve(entry.view);
    let pending = this.inflight.get(saleId);
    if (!pending) {
      pending = this.read(saleId, entry?.listing).finally(() => this.inflight.delete(saleId));
      this.inflight.set(saleId, pending);
    }
    return pending;
  }

  private async read(saleId: number, known: SaleListing | undefined): Promise<CachedView | undefined> {
    // Stamped at the start: what the read returns is at least this old.
    const readAtMs = Date.now();
    if (!known && !(await this.mayExist(saleId))) return undefined;
    const listing = known ?? (await findSaleListing(this.pool, saleId));
    const view = listing && (await this.render(listing));
    this.entries.set(saleId, { listing, view, readAtMs });
    return view;
  }

  /**
   * @returns false when the id is above the highest sale id, read again for it (at most every ID_READ_MS, one
   *   read shared by all who wait); a sale made during a read is seen by the next one
   */
  private async mayExist(saleId: number): Promise<boolean> {
    if (saleId <= this.highestId) return true;
    this.idRead ??= (async () => {
      const wait = this.idReadAtMs + ID_READ_MS - Date.now();
      if (wait > 0) await sleep(wait);
      this.idReadAtMs = Date.now();
      this.highestId = Math.max(this.highestId, await highestSaleId(this.pool));
    })().finally(() => {
      this.idRead = undefined;
    });
    await this.idRead;
    return saleId <= this.highestId;
  }

  private async render(listing: SaleListing): Promise<CachedView> {
    const { saleId } = listing;
    const [stock, marks] = await Promise.all([this.stock.stock(saleId, listing.items.map((i) => i.itemId)), this.closed(saleId)]);
    const content = {
      saleId,
      name: listing.name,
      // What a press hears: ENDED or PAUSED as soon as any shard says so (a control marks them all before it answers).
      state: marks.includes('ENDED') ? 'ENDED' : marks.includes('PAUSED') ? 'PAUSED' : 'OPEN',
      startsAt: listing.startsAt.toISOString(),
      endsAt: listing.endsAt.toISOString(),
      paymentWindowMs: listing.paymentWindowMs,
      // Stock not loaded reads as sold out: nothing can be bought there until it is.
      items: listing.items.map((i) => {
        const unitsLeft = Math.max(0, stock.get(i.itemId) ?? 0);
        return { itemId: i.itemId, productId: i.productId, name: i.name, priceMinor: i.priceMinor, currency: i.currency, unitsLeft, soldOut: unitsLeft === 0 };
      }),
    };
    return {
      startsAtMs: listing.startsAt.getTime(),
      endsAtMs: listing.endsAt.getTime(),
      closed: rendition(content),
      open: rendition({ ...content, gate: this.gates.of(saleId) }),
    };
  }
}
