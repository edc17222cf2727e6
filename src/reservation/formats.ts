/**
 * The Redis wire formats of an accepted order, written and read here only: the reservation value (the terms the
 * buyer was given at the 202, so the order is readable and payable before its workflow stores it), the start
 * queue entry (the order whose workflow is to be started), and the claim member (a buyer claimed on their home
 * shard while their unit is sought on another). The Lua scripts store these as they are given; release.lua alone
 * reads the first two fields of a reservation value, and says so.
 */
import type { OrderInput } from '../order/types';

/** A reservation value: `itemId|userId|reservedAtMs|priceMinor|paymentWindowMs` (a buyer id holds no `|`: src/ids.ts). */
export function reservationValue(o: OrderInput): string {
  return `${o.itemId}|${o.userId}|${o.reservedAtMs}|${o.priceMinor}|${o.paymentWindowMs}`;
}

/**
 * @param stockShard the shard whose reservations hash held the value (the shard the unit came from)
 * @returns the order a reservation value holds
 */
export function parseReservation(saleId: number, stockShard: number, orderId: string, value: string): OrderInput {
  const [itemId, userId, reservedAtMs, priceMinor, paymentWindowMs] = value.split('|');
  return {
    orderId,
    saleId,
    itemId: Number(itemId),
    userId,
    reservedAtMs: Number(reservedAtMs),
    priceMinor: Number(priceMinor),
    paymentWindowMs: Number(paymentWindowMs),
    stockShard,
  };
}

/**
 * @returns a start queue entry's field/value list (XADD's arguments after the id): the order id and its terms
 *   as a reservation value. Two fields, not one per term: every field is one more argument of every script that
 *   reserves, which the shards bench measured at about a third of a reservation's cost with six.
 */
export function entryFields(o: OrderInput): string[] {
  return ['orderId', o.orderId, 'terms', reservationValue(o)];
}

/** Thrown for an entry without the fields entryFields writes; it stays pending (nothing can start it). */
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
  const { itemId, userId, reservedAtMs, priceMinor, paymentWindowMs } = parseReservation(saleId, 0, orderId, terms);
  if (!userId || [itemId, reservedAtMs, priceMinor, paymentWindowMs].some((n) => !Number.isSafeInteger(n))) {
    throw new InvalidEntry(`start queue entry ${entryId} of sale ${saleId} is not an order (bad terms)`);
  }
  return { orderId, saleId, itemId, userId, reservedAtMs, priceMinor, paymentWindowMs };
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
