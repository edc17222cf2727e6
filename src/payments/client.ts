/**
 * The payment service's client for order workflows (docs/operations.md, "The payment service"): the `paid` signal
 * and the `pay` update, each sent with a start (signal-with-start, update-with-start), so that a payment sent
 * from the 202 on reaches its order however far the starter's drain is behind (docs/design.md, "Payments
 * before the start"). The workflow a payment starts reads the order's terms itself (OrderRef); the starter's
 * later start of the same id finds it started and changes nothing (one run per order, I4), but for ending the
 * start delay of a run a signal created (startDelay).
 * Before any start the order is looked up (internalDoorLookup: the API's internal door, GET …/orders/{id}/payment):
 * an id that names no accepted order starts nothing, and the payment carries the door's receipt, if any, so that
 * it is judged when the API saw it rather than when Temporal's intake got to it (src/order/receipt.ts).
 */
import { WorkflowExecutionAlreadyStartedError, WorkflowNotFoundError, WithStartWorkflowOperation, type Client } from '@temporalio/client';
import { saleOfOrder } from '../order/orderId';
import { parseReceipt } from '../order/receipt';
import { ReceiptBook } from './receipts';
import { isOrderId, PAYMENT_ID, paysPrice, type Order, type PaymentReceipt, type PayResult, type Payment } from '../order/types';
import { orderStartOptions } from '../workflows/client';
import { paidSignal, payUpdate, type OrderRef } from '../workflows/definitions';

/** An order as the service reads it (Orders.find), with the receipt the door stamped for the payment, if any. */
export interface LookedUp {
  order: Order;
  receipt?: PaymentReceipt;
}

/**
 * @param payment the payment about to be sent (paymentId, amount in minor units)
 * @returns the order, or undefined for an id naming no accepted order
 */
export type OrderLookup = (orderId: string, payment: Payment) => Promise<LookedUp | undefined>;

/** Where and how the client reaches the service. */
export interface PaymentClientOptions {
  /** The order workflows' task queue (TEMPORAL_TASK_QUEUE). */
  taskQueue: string;
  /** How an order is looked up before a start: internalDoorLookup, or Orders.find where the stores are at hand. */
  lookUp: OrderLookup;
  /** Deadline of each Temporal call, the update's wait for its answer included (ms). */
  callTimeoutMs: number;
}

/**
 * The lookup through the API's internal door (GET /api/flash-sales/orders/{orderId}/payment?paymentId=&amount=),
 * which stamps the payment's receipt (header Payment-Receipt) where PAYMENT_RECEIPT_SECRET is set.
 * @param internalUrl the door, e.g. http://10.0.0.5:3001 (INTERNAL_API_PORT)
 * @param token the payment service's bearer credential (PAYMENT_SERVICE_TOKEN)
 * @param timeoutMs the request's deadline (ms)
 * @returns the lookup; it throws on any answer but 200 or 404, or none (retry: payments are idempotent per paymentId)
 */
export function internalDoorLookup(internalUrl: string, token: string, timeoutMs: number): OrderLookup {
  return async (orderId, payment) => {
    // A malformed payment is looked up without it (no receipt): the workflow refuses it (INVALID_PAYMENT, a refund).
    const wellFormed = PAYMENT_ID.test(payment.paymentId) && Number.isSafeInteger(payment.amount) && payment.amount >= 0 && payment.amount < 1e15;
    const query = wellFormed ? `?${new URLSearchParams({ paymentId: payment.paymentId, amount: String(payment.amount) })}` : '';
    const res = await fetch(`${internalUrl}/api/flash-sales/orders/${orderId}/payment${query}`, { headers: { authorization: `Bearer ${token}` }, signal: AbortSignal.timeout(timeoutMs) });
    if (res.status === 404) return undefined;
    if (res.status !== 200) throw new Error(`order lookup answered ${res.status}: ${await res.text()}`);
    const receipt = parseReceipt(res.headers.get('payment-receipt'));
    return { order: (await res.json()) as Order, ...(receipt && { receipt }) };
  };
}

/** An id that names no accepted order (unknown, malformed, forged): nothing was started or stored. */
export type NotFound = { error: 'ORDER_NOT_FOUND' };

/** What became of a `paid` signal: delivered (the workflow decides it, and publishes a refund if it refuses it), or not. */
export type SignalAnswer = { signalled: true } | NotFound | { ended: PayResult };

/** The payment service's `paid` and `pay`, each with a start. Its calls throw what the lookup throws too. */
export class PaymentClient {
  private readonly receipts = new ReceiptBook();

  constructor(
    private readonly temporal: Client,
    private readonly options: PaymentClientOptions,
  ) {}

  /**
   * Signals `paid` with a start. The order's workflow decides it (PAID, or a PaymentRefundRequired event), as of
   * its arrival; a run this signal creates waits for the drain's turn or the deadline (startDelay).
   * @returns signalled; ORDER_NOT_FOUND; or `ended` when the order's workflow has ended, with what this payment
   *   meets (endedAnswer: refund unless it is PAID with this paymentId)
   * @throws Temporal or network errors: send it again with the same paymentId
   */
  async signalPaid(orderId: string, payment: Payment): Promise<SignalAnswer> {
    const found = await this.lookUp(orderId, payment);
    if (!found) return { error: 'ORDER_NOT_FOUND' };
    try {
      await this.call(() =>
        this.temporal.workflow.signalWithStart('orderWorkflow', {
          ...orderStartOptions(this.options.taskQueue, found.order),
          args: [{ orderId } satisfies OrderRef],
          signal: paidSignal,
          signalArgs: [stamped(payment, found)],
          ...startDelay(found.order),
        }),
      );
      return { signalled: true };
    } catch (err) {
      if (!ended(err)) throw err;
      return { ended: await this.endedAnswer(orderId, payment) };
    }
  }

  /**
   * Sends the `pay` update with a start and waits for its answer, as the workflow (PostgreSQL) decides it.
   * @returns PAID or why not (PayResult; AMOUNT_MISMATCH too when this call started the run); ORDER_NOT_FOUND
   * @throws WorkflowUpdateFailedError for a payment the validator refuses (INVALID_PAYMENT, AMOUNT_MISMATCH);
   *   Temporal or network errors: send it again with the same paymentId
   */
  async pay(orderId: string, payment: Payment): Promise<PayResult | NotFound> {
    const found = await this.lookUp(orderId, payment);
    if (!found) return { error: 'ORDER_NOT_FOUND' };
    const startWorkflowOperation = new WithStartWorkflowOperation('orderWorkflow', {
      ...orderStartOptions(this.options.taskQueue, found.order),
      args: [{ orderId } satisfies OrderRef],
      workflowIdConflictPolicy: 'USE_EXISTING',
    });
    try {
      return await this.call(() => this.temporal.workflow.executeUpdateWithStart(payUpdate, { args: [stamped(payment, found)], startWorkflowOperation }));
    } catch (err) {
      if (!ended(err)) throw err;
      return this.endedAnswer(orderId, payment);
    }
  }

  private async endedAnswer(orderId: string, payment: Payment): Promise<PayResult> {
    const found = await this.lookUp(orderId, payment);
    if (!found) throw new Error(`order ${orderId} no longer found`);
    return endedAnswer(found.order, payment);
  }

  /** @returns the order and the payment's receipt, or undefined for an id naming no accepted order (a malformed one asks nobody) */
  private async lookUp(orderId: string, payment: Payment): Promise<LookedUp | undefined> {
    const found = isOrderId(orderId) && saleOfOrder(orderId) !== undefined ? await this.options.lookUp(orderId, payment) : undefined;
    if (!found) return undefined;
    // A retry of this payment carries its first receipt: judged when the payment was first asked for.
    const receipt = this.receipts.keep(orderId, payment, found.receipt, Date.now());
    return { order: found.order, ...(receipt && { receipt }) };
  }

  private call<T>(work: () => Promise<T>): Promise<T> {
    return this.temporal.withDeadline(Date.now() + this.options.callTimeoutMs, work);
  }
}

/**
 * The start delay of a run this signal creates: the time left in the order's payment window (ms). The payment is
 * in the run's history from now and judged when Temporal received it; the run itself waits for the starter's turn
 * (its `startNow`) or the deadline, whichever comes first, so that payments do not put the drain's work on the cores
 * while buyers press (docs/design.md, "Payments before the start"). Ignored by a run that exists.
 */
function startDelay(order: Order): { startDelay?: number } {
  const leftMs = Date.parse(order.paymentDeadline) - Date.now();
  return leftMs > 0 ? { startDelay: leftMs } : {};
}

/** The payment as sent: with the door's receipt when it stamped one (a receipt the caller set is replaced). */
function stamped(payment: Payment, found: LookedUp): Payment {
  const { paymentId, amount } = payment;
  return found.receipt ? { paymentId, amount, receipt: found.receipt } : { paymentId, amount };
}

/**
 * The id's one run has closed: a start refused (REJECT_DUPLICATE), or a running run that closed between the
 * admission of the payment and its delivery (not found). The order has ended.
 */
function ended(err: unknown): boolean {
  const closed = (e: unknown) => e instanceof WorkflowExecutionAlreadyStartedError || e instanceof WorkflowNotFoundError;
  return closed(err) || closed((err as { cause?: unknown })?.cause);
}

/**
 * What a payment meets at an order whose workflow has ended, as the workflow would have answered it (Orders.pay):
 * PAID again for the payment that paid it, else AMOUNT_MISMATCH, ORDER_CANCELLED, PAYMENT_WINDOW_CLOSED (EXPIRED,
 * or PENDING past its deadline while its unit goes back) or ORDER_NOT_PENDING (paid by another payment, REJECTED).
 */
export function endedAnswer(order: Order, payment: Payment): PayResult {
  if (!paysPrice(order, payment)) return { error: 'AMOUNT_MISMATCH' };
  if (order.status === 'PAID' && order.paymentId === payment.paymentId) return { status: 'PAID', paymentId: payment.paymentId };
  if (order.status === 'CANCELLED') return { error: 'ORDER_CANCELLED' };
  if (order.status === 'EXPIRED' || order.status === 'PENDING') return { error: 'PAYMENT_WINDOW_CLOSED' };
  return { error: 'ORDER_NOT_PENDING' };
}
