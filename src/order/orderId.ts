/**
 * Order ids carry their sale: an RFC 9562 UUID of version 8 (custom layout) whose first 32 bits are the sale id
 * and whose 90 other free bits are random. So the sale of an order, and with it the hash tag of its Redis keys
 * ({sale:<id>}, docs/design.md Keys), is read from the id itself: an order that has no row yet is found with one
 * HGET, on whichever Redis node (Cluster slot) holds its sale.
 */
import { randomBytes } from 'node:crypto';
import { MAX_INT4 } from './ids';

/** @returns a new order id for an order of saleId (a positive INT4) */
export function newOrderId(saleId: number): string {
  const bytes = randomBytes(16);
  bytes.writeUInt32BE(saleId, 0);
  bytes[6] = (bytes[6] & 0x0f) | 0x80; // version 8
  bytes[8] = (bytes[8] & 0x3f) | 0x80; // variant 10
  const hex = bytes.toString('hex');
  return `${hex.slice(0, 8)}-${hex.slice(8, 12)}-${hex.slice(12, 16)}-${hex.slice(16, 20)}-${hex.slice(20)}`;
}

/** @returns the sale id an order id of this layout carries, undefined for any other id (checked with isOrderId first) */
export function saleOfOrder(orderId: string): number | undefined {
  if (orderId[14] !== '8') return undefined;
  const saleId = Number.parseInt(orderId.slice(0, 8), 16);
  return saleId >= 1 && saleId <= MAX_INT4 ? saleId : undefined;
}
