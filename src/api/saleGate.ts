/**
 * The purchase gate: a value per sale, HMAC-SHA256(SALE_GATE_SECRET, "sale-gate:v1:<saleId>") cut to 132 bits,
 * that the public view hands out from the sale's start and every purchase carries (header `Sale-Gate`): a client
 * that fires on its own clock before the start learns nothing. Any process checks it without I/O. It does not keep
 * out a bot that reads the view at the start: one unit per buyer (I3) and the rate limits bound that.
 */
import { createHmac } from 'node:crypto';

/** Header that carries the gate value on a purchase (lower case, as Node gives header names). */
export const SALE_GATE_HEADER = 'sale-gate';
const MAX_CACHED = 10_000;

/** Gate values by sale id, computed once per sale and kept (at most MAX_CACHED, then afresh). */
export class SaleGates {
  private readonly values = new Map<number, string>();

  constructor(private readonly secret: string) {}

  /** @returns the gate value of the sale event (22 base64url characters) */
  of(saleId: number): string {
    let value = this.values.get(saleId);
    if (value === undefined) {
      value = createHmac('sha256', this.secret).update(`sale-gate:v1:${saleId}`).digest('base64url').slice(0, 22);
      if (this.values.size >= MAX_CACHED) this.values.clear();
      this.values.set(saleId, value);
    }
    return value;
  }

  /**
   * Plain comparison: the route asks only once the sale has started, when the value is public (the view
   * hands it to anyone), so a timing difference reveals nothing that is not already given away.
   * @returns whether the header value is the sale's gate
   */
  admits(saleId: number, header: string | string[] | undefined): boolean {
    return header === this.of(saleId);
  }
}
