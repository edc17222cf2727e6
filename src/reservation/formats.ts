/**
 * The Redis wire formats of an accepted order, written and read here only (and by the scripts that say so): the
 * reservation value (the terms of the 202, with the unit and its shard's epoch), the start queue entry, and the
 * claim member of a buyer claimed on their home shard.
 */
import type { OrderInput } from '../order/types';

/**
 * The terms of a reservation, as the reserving scripts are given them: `itemId|userId|reservedAtMs|priceMinor|
 * paymentWindowMs` (a buyer id holds no `|`: src/order/ids.ts). The script appends `|unit|epoch` (the unit it took, its
 * shard's epoch): a reservation value.
 */
export function reservationTerms(o: OrderInput): string {
  return `${o.itemId}|${o.userId}|${o.reservedAtMs}|${o.priceMinor}|${o.paymentWindowMs}`;
}

/**
 * @returns a reservation value as a rebuild writes it: the terms, `|unit` and `|epoch`
 * @throws Error when the order holds no unit or epoch (it was never reserved)
 */
export function reservationValue(o: OrderInput): string {
  if (o.unit === undefined || o.stockEpoch === undefined) throw new Error(`order ${o.orderId} holds no unit of an epoch`);
  return `${reservationTerms(o)}|${o.unit}|${o.stockEpoch}`;
}

/**
 * @param stockShard the shard whose reservations hash held the value (the shard the unit came from)
 * @returns the order a reservation value holds
 */
export function parseReservation(saleId: number, stockShard: number, orderId: string, value: string): OrderInput {
  const [itemId, userId, reservedAtMs, priceMinor, paymentWindowMs, unit, stockEpoch] = value.split('|');
  return {
    orderId,
    saleId,
    itemId: Number(itemId),
    userId,
    reservedAtMs: Number(reservedAtMs),
    priceMinor: Number(priceMinor),
    paymentWindowMs: Number(paymentWindowMs),
    unit: Number(unit),
    stockShard,
    stockEpoch: Number(stockEpoch),
  };
}

/**
 * @returns a start queue entry's field/value list (XADD's arguments after the id) without its last value: the
 *   order id, and the field of its terms, whose value the reserving script writes (the reservation value, with
 *   the unit it took). Two fields, not one per term: every field is one more argument of every script that
 *   reserves, which the shards bench measured at about a third of a reservation's cost with six. With tracing on,
 *   a third field first: the W3C traceparent of the reservation's span (src/tracing/index.ts).
 */
export function entryFields(o: Pick<OrderInput, 'orderId'>, traceParent?: string): string[] {
  return traceParent ? ['traceparent', traceParent, 'orderId', o.orderId, 'terms'] : ['orderId', o.orderId, 'terms'];
}

/** Thrown for an entry without the fields entryFields writes: nothing can start it (the starter sets it aside). */
export class InvalidEntry extends Error {}

/**
 * @param entryId the entry's id, for the error
 * @param fields the flat field/value list Redis returns
 * @returns the order of a start queue entry, without its stock shard (the stream it came from says that)
 * @throws InvalidEntry when a field is missing or a number is not one
 */
export function parseEntryFields(saleId: number, entryId: string, fields: string[] | null): Omit<OrderInput, 'stockShard'> {
  const value = new Map<string, string>();
  for (let i = 0; fields && i + 1 < fields.length; i += 2) value.set(fields[i], fields[i + 1]);
  const orderId = value.get('orderId');
  const terms = value.get('terms');
  if (!orderId || !terms) throw new InvalidEntry(`start queue entry ${entryId} of sale ${saleId} is not an order (missing ${orderId ? 'terms' : 'orderId'})`);
  const { itemId, userId, reservedAtMs, priceMinor, paymentWindowMs, unit, stockEpoch } = parseReservation(saleId, 0, orderId, terms);
  if (!userId || [itemId, reservedAtMs, priceMinor, paymentWindowMs, unit, stockEpoch].some((n) => !Number.isSafeInteger(n))) {
    throw new InvalidEntry(`start queue entry ${entryId} of sale ${saleId} is not an order (bad terms)`);
  }
  return { orderId, saleId, itemId, userId, reservedAtMs, priceMinor, paymentWindowMs, unit, stockEpoch };
}

/** @returns the traceparent a start queue entry carries (entryFields writes it first), or undefined */
export function entryTraceParent(fields: string[] | null): string | undefined {
  return fields?.[0] === 'traceparent' ? fields[1] : undefined;
}

/** A claim member: `orderId|itemId|userId`. */
export function claimMember(o: Pick<OrderInput, 'orderId' | 'itemId' | 'userId'>): string {
  return `${o.orderId}|${o.itemId}|${o.userId}`;
}

/** @returns the order a claim member names */
export function parseClaimMember(member: string): Pick<OrderInput, 'orderId' | 'itemId' | 'userId'> {
  const [orderId, itemId, userId] = member.split('|');
  return { orderId, itemId: Number(itemId), userId };
}
