/**
 * A reply lost after Redis ran a script, for the suites that check the service survives it: a TCP proxy in front
 * of one node that, now and then, lets a script reach Redis and run, then closes the client's connection instead
 * of passing the reply back. (Connections dropped over and over: connectionDrops.ts.)
 */
import { createServer, connect, type AddressInfo, type Server, type Socket } from 'node:net';

/** A script call in a client's bytes (RESP): ioredis sends EVALSHA, and EVAL after NOSCRIPT. */
const SCRIPT_CALL = /\r\n(evalsha|eval)\r\n/i;

/**
 * A TCP proxy to one Redis node. Every `lossEvery`-th write carrying a script call (counted across its
 * connections) is let through, and when the node answers on that connection, the answer is dropped and both
 * sides closed: the script ran, its caller sees "Connection is closed" and cannot tell. Other bytes pass untouched.
 */
export class ReplyLosingProxy {
  /** Connections closed instead of passing a reply, so far. */
  lost = 0;
  private scripts = 0;
  private readonly sockets = new Set<Socket>();
  private readonly server: Server;

  private constructor(
    private readonly target: number,
    private readonly lossEvery: number,
  ) {
    this.server = createServer((client) => this.pipe(client));
  }

  /** @returns a proxy listening on a free loopback port, to the node at `target` */
  static async start(target: number, lossEvery: number): Promise<ReplyLosingProxy> {
    const proxy = new ReplyLosingProxy(target, lossEvery);
    await new Promise<void>((resolve) => proxy.server.listen(0, '127.0.0.1', resolve));
    return proxy;
  }

  get port(): number {
    return (this.server.address() as AddressInfo).port;
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private pipe(client: Socket): void {
    const node = connect(this.target, '127.0.0.1');
    this.sockets.add(client).add(node);
    let dropNextReply = false;
    const closeBoth = () => {
      client.destroy();
      node.destroy();
      this.sockets.delete(client);
      this.sockets.delete(node);
    };
    client.on('data', (chunk) => {
      // A chunk may carry several calls (a pipeline): counted once, their replies are lost together.
      if (!dropNextReply && SCRIPT_CALL.test(chunk.toString('latin1')) && ++this.scripts % this.lossEvery === 0) dropNextReply = true;
      node.write(chunk);
    });
    node.on('data', (chunk) => {
      if (!dropNextReply) {
        client.write(chunk);
        return;
      }
      this.lost += 1;
      closeBoth();
    });
    client.on('error', closeBoth).on('close', closeBoth);
    node.on('error', closeBoth).on('close', closeBoth);
  }
}
